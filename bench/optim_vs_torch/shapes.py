"""GPT-2 124M parameter shapes (HF names), shared by both sides of bench/optim_vs_torch."""
import os as _os, sys as _sys  # noqa: E401,E402  (program.start: --help and one-line errors)
_sys.path.insert(0, _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "..", "..", "tools"))
__import__("program").start(__doc__, __name__)


def gpt2_124m_shapes(n_layer=12, d=768, vocab=50257, ctx=1024):
    shapes = [("wte.weight", [vocab, d]), ("wpe.weight", [ctx, d])]
    for i in range(n_layer):
        p = "h.%d." % i
        shapes += [(p + "ln_1.weight", [d]), (p + "ln_1.bias", [d]),
                   (p + "attn.c_attn.weight", [d, 3 * d]), (p + "attn.c_attn.bias", [3 * d]),
                   (p + "attn.c_proj.weight", [d, d]), (p + "attn.c_proj.bias", [d]),
                   (p + "ln_2.weight", [d]), (p + "ln_2.bias", [d]),
                   (p + "mlp.c_fc.weight", [d, 4 * d]), (p + "mlp.c_fc.bias", [4 * d]),
                   (p + "mlp.c_proj.weight", [4 * d, d]), (p + "mlp.c_proj.bias", [d])]
    return shapes + [("ln_f.weight", [d]), ("ln_f.bias", [d])]


if __name__ == "__main__":
    s = gpt2_124m_shapes()
    n = 0
    for _, shape in s:
        k = 1
        for x in shape:
            k *= x
        n += k
    print(len(s), "tensors,", n, "floats")
