"""The benchmark scripts' own arithmetic: bench/quant_decode's bytes-per-token count (the tied
output matrix once; a tied folder stores no lm_head.weight, so it really runs tied), and the peak
RSS the PyTorch-side scripts report (their own, not their parent's)."""
import importlib.util
import os
import resource
import subprocess

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, path))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_quant_decode_counts_the_tied_output_once():
    qd = load("bench/quant_decode/run.py", "quant_decode_bench")
    shapes = qd.infer.shapes(qd.LLAMA_TIED)
    assert "lm_head.weight" not in shapes  # the folder is tied for real
    C, F, L, V = 768, 2048, 12, 32000
    per_layer = 4 * C * C + 3 * C * F
    assert qd.matrix_weights(qd.LLAMA_TIED) == L * per_layer + V * C  # 109.5M, not 134.1M
    untied = dict(qd.LLAMA_TIED, tie_word_embeddings=False)
    assert "lm_head.weight" in qd.infer.shapes(untied)
    assert qd.matrix_weights(untied) == L * per_layer + V * C  # the embedding is read a row at a time


def test_decode_profile_classes_the_step_symbols():
    dp = load("bench/decode_profile/run.py", "decode_profile_bench")
    want = {
        "foundry::quant::(anonymous namespace)::vnni_rows<foundry::quant::(anonymous namespace)::Q4_0Step>": "products",
        "foundry::kernels::(anonymous namespace)::dot4_bf16_rows": "products",
        "foundry::quant::N_AVX3::QuantizeRowQ8_0Rounding<true>": "products",
        "foundry::quant::N_AVX3::QuantizeRowQ8_0Rounding<false>": "load",  # weights quantized at load
        "foundry::quant::(anonymous namespace)::quantize_q4_0": "load",
        "clear_page_erms": "load",
        "foundry::kernels::N_AVX3::Tile<(foundry::kernels::KVRowType)1>": "attention",
        "foundry::kernels::N_AVX3::ConvertF32ToF16": "attention",  # the KV cache's row stores
        "foundry::kernels::N_AVX3::RmsNormRowsImpl<float>": "small kernels",
        "foundry::models::choose_token": "small kernels",
        "foundry::parallel_for": "pool",
        "malloc": "overhead",
        "foundry::ops::(anonymous namespace)::coerce": "overhead",
    }
    for sym, cls in want.items():
        assert dp.classify(sym) == cls, (sym, dp.classify(sym), cls)


def test_peak_rss_is_the_childs_own_not_its_parents():
    # A child started while this process holds 300 MB: Linux's ru_maxrss starts at the parent's
    # resident size on exec (what made bench/quant_decode report llama-bench at 706 MB); VmHWM,
    # which tools/program.py's peak_rss_mb reads, is the child's own.
    held = bytearray(300 << 20)
    for i in range(0, len(held), 4096):
        held[i] = 1
    probe = "import sys; sys.path.insert(0, sys.argv[1]); import program; print(program.peak_rss_mb())"
    out = subprocess.run(["/usr/bin/python3", "-c", probe, os.path.join(ROOT, "tools")], capture_output=True,
                         text=True, check=True).stdout
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 > 300
    assert float(out) < 100, out
    del held
