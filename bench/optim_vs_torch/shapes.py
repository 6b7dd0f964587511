"""GPT-2 124M parameter shapes (HF names), shared by both sides of bench/optim_vs_torch."""
import sys as _sys  # noqa: E402
if __name__ == "__main__":  # --help, and a one-line error instead of a traceback (FOUNDRY_TRACEBACK=1 keeps it)
    if any(a in ("-h", "--help") for a in _sys.argv[1:]):
        print(__doc__.strip())
        _sys.exit(0)
    if not __import__("os").environ.get("FOUNDRY_TRACEBACK"):
        _sys.excepthook = lambda kind, err, tb: _sys.exit("%s: error: %s: %s" % (_sys.argv[0], kind.__name__, err))


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
