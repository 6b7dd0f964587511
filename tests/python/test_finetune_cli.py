"""`foundry finetune` / `foundry merge` and the adapter options of generate, forward and perplexity,
on a small Llama with a byte-level BPE and a ChatML chat template made here. The data formats are
checked against the tokenizer and jinja2 (what transformers renders chat templates with)."""
import json
import os
import subprocess
import tempfile

import numpy as np
import pytest

foundry = pytest.importorskip("foundry")
if not hasattr(foundry, "finetune"):
    pytest.skip("foundry is not built", allow_module_level=True)

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
CLI = os.path.join(ROOT, "build", "bin", "foundry")
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def run(*args, check=True, track_dir=None):
    args = list(args)
    if args and args[0] == "finetune" and "--no-track" not in args:  # keep runs out of the working directory
        args += ["--track-dir", track_dir or os.path.join(tempfile.gettempdir(), "foundry_finetune_test_runs")]
    r = subprocess.run([CLI, *map(str, args)], capture_output=True, text=True)
    if check and r.returncode != 0:
        raise AssertionError(f"foundry {' '.join(map(str, args))} failed:\n{r.stdout}\n{r.stderr}")
    return r


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    d = tmp_path_factory.mktemp("ft")
    corpus = d / "corpus.txt"
    corpus.write_text(open(os.path.join(ROOT, "examples", "data", "tinyshakespeare.txt")).read()[:60000])
    tok = foundry.train_bpe([str(corpus)], vocab_size=320, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    folder = d / "base"
    foundry.manual_seed(0)
    model = foundry.models.create(dict(model_type="llama", vocab_size=320, hidden_size=64, intermediate_size=128,
                                       num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                       max_position_embeddings=128, eos_token_id=0))
    model.save_pretrained(str(folder))
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": CHATML, "eos_token": "<|im_end|>",
                                                              "bos_token": None}))
    return folder, tok


def write_jsonl(path, rows):
    with open(path, "w") as f:
        for r in rows:
            f.write((r if isinstance(r, str) else json.dumps(r)) + "\n")
    return str(path)


QA = [{"prompt": f"Q: what is {a} and {b}?\nA:", "completion": f" {a} and {b} make {a + b}."}
      for a in range(1, 6) for b in range(1, 5)]


def ids(tok, text, special=True):
    return list(tok.encode(text, add_special_tokens=special).ids)


def test_formats_and_loss_masks(base, tmp_path):
    folder, tok = base
    messages = [{"role": "system", "content": "Be kind."}, {"role": "user", "content": "Hello"},
                {"role": "assistant", "content": "Good morrow!"}, {"role": "user", "content": "Bye"},
                {"role": "assistant", "content": "Farewell."}]
    path = write_jsonl(tmp_path / "d.jsonl", [
        {"text": "To be, or not to be"},
        {"prompt": "Q: who?\nA:", "completion": " Romeo."},
        {"messages": messages},
        {"input_ids": [5, 6, 7, 8], "labels": [-100, -100, 7, 8]},
    ])
    ex = foundry.finetune.load_jsonl(path, str(folder))
    assert len(ex) == 4
    text_ids = ids(tok, "To be, or not to be") + [0]
    assert ex[0] == (text_ids, text_ids)
    p, c = ids(tok, "Q: who?\nA:"), ids(tok, " Romeo.", False) + [0]
    assert ex[1] == (p + c, [-100] * len(p) + c)
    # The conversation renders as jinja2 renders it; the loss reads the assistant turns only.
    from test_chat_template import jinja_render
    full = jinja_render(CHATML, messages=messages, add_generation_prompt=False)
    got_ids, labels = ex[2]
    assert tok.decode(got_ids, skip_special_tokens=False) == full
    learned = [t for t, l in zip(got_ids, labels) if l != -100]
    assert [l for l in labels if l != -100] == learned
    assert tok.decode(learned, skip_special_tokens=False) == "Good morrow!<|im_end|>\nFarewell.<|im_end|>\n"
    assert ex[3] == ([5, 6, 7, 8], [-100, -100, 7, 8])


@pytest.mark.parametrize("line,message", [
    ("{not json", "d.jsonl:2: not a JSON object"),
    ('{"question": "x"}', "d.jsonl:2: unknown format"),
    ('{"input_ids": [1, 99999]}', "outside the model's vocabulary"),
    ('{"prompt": 3, "completion": "x"}', "'prompt' must be a string"),
    ('{"messages": [{"role": "user"}]}', "'role' and 'content'"),
])
def test_bad_lines_name_file_and_line(base, tmp_path, line, message):
    folder, _ = base
    path = write_jsonl(tmp_path / "d.jsonl", [{"text": "fine"}, line])
    with pytest.raises(Exception, match=message):
        foundry.finetune.load_jsonl(path, str(folder))
    r = run("finetune", "--model", folder, "--data", path, "--out", tmp_path / "o", "--steps", 1, check=False)
    assert r.returncode != 0 and ("d.jsonl:2" in r.stderr or message in r.stderr), r.stderr


def test_cli_trains_only_the_adapter_and_writes_peft_files(base, tmp_path):
    folder, _ = base
    data = write_jsonl(tmp_path / "qa.jsonl", QA)
    out = tmp_path / "adapter"
    r = run("finetune", "--model", folder, "--data", data, "--out", out, "--steps", 30, "--lr", 5e-3, "--batch-size", 4,
            "--lora-r", 8, "--lora-alpha", 16, "--target-modules", "q_proj,k_proj,v_proj,o_proj", "--warmup", 2,
            "--schedule", "linear", "--eval-fraction", 0.2, "--seed", 3, "--no-progress",
            track_dir=tmp_path / "tracking")
    assert "trainable parameters" in r.stdout
    conf = json.load(open(out / "adapter_config.json"))
    assert conf["peft_type"] == "LORA" and sorted(conf["target_modules"]) == ["k_proj", "o_proj", "q_proj", "v_proj"]
    assert conf["r"] == 8 and conf["lora_alpha"] == 16
    st = foundry.load_file(str(out / "adapter_model.safetensors"))
    assert len(st) == 2 * 4 * 2 and all(".lora_A.weight" in k or ".lora_B.weight" in k for k in st)
    rows = [json.loads(line) for line in open(out / "metrics.jsonl")]
    losses = [row["loss"] for row in rows if "loss" in row]
    evals = [row["eval_loss"] for row in rows if "eval_loss" in row]
    assert len(losses) == 30 and all("step" in row for row in rows)
    assert evals[-1] < evals[0] and np.mean(losses[-5:]) < np.mean(losses[:5])
    assert os.path.isdir(out / "checkpoints")
    # The run is recorded (docs/tracking.md): the same losses, the evaluations, the adapter file.
    api = foundry.track.Api(tmp_path / "tracking")
    [tracked] = api.runs()
    assert tracked["project"] == "finetune" and tracked["name"] == "adapter" and tracked["status"] == "finished"
    assert tracked["config"]["lora_r"] == 8 and tracked["config"]["schedule"] == "linear"
    assert [v for _, _, v in api.scalars(tracked["id"], "loss")] == pytest.approx(losses)
    assert [v for _, _, v in api.scalars(tracked["id"], "eval_loss")] == pytest.approx(evals)
    assert tracked["summary"]["steps"] == 30
    assert [a["type"] for a in api.run(tracked["id"])["artifacts"]] == ["adapter"]


def test_resume_is_bit_exact(base, tmp_path):
    folder, _ = base
    data = write_jsonl(tmp_path / "qa.jsonl", QA)
    opts = dict(model=str(folder), data=data, steps=6, checkpoint_every=3, schedule="constant", lora_dropout=0.2,
                batch_size=3, lr=1e-2, seed=5, progress=False, eval_fraction=0.1)
    whole = foundry.finetune.run(out=str(tmp_path / "whole"), **opts)
    part = foundry.finetune.run(out=str(tmp_path / "resumed"), stop_after=3, **opts)
    assert part["steps"] == 3 and not os.path.exists(tmp_path / "resumed" / "adapter_model.safetensors")
    rest = foundry.finetune.run(out=str(tmp_path / "resumed"), resume=True, **opts)
    assert rest["resumed_from"] == 3 and rest["steps"] == 6
    assert part["losses"] + rest["losses"] == whole["losses"]
    a = foundry.load_file(str(tmp_path / "whole" / "adapter_model.safetensors"))
    b = foundry.load_file(str(tmp_path / "resumed" / "adapter_model.safetensors"))
    assert sorted(a) == sorted(b)
    for k in a:
        assert np.array_equal(a[k].numpy(), b[k].numpy()), k


@pytest.mark.parametrize("fmt", ["nf4", "int8", "q4_0"])
def test_qlora_trains_over_a_quantized_base(base, tmp_path, fmt):
    folder, _ = base
    data = write_jsonl(tmp_path / "qa.jsonl", QA)
    r = foundry.finetune.run(model=str(folder), data=data, out=str(tmp_path / fmt), steps=12, lr=1e-2, quantize=fmt,
                             batch_size=4, progress=False, gradient_checkpointing=True)
    assert r["quantized_layers"] == 2 * 7  # every projection of both layers (64 / 128 wide: whole blocks)
    assert np.mean(r["losses"][-3:]) < np.mean(r["losses"][:3])


def test_adapter_options_of_generate_forward_perplexity_and_merge(base, tmp_path):
    folder, _ = base
    data = write_jsonl(tmp_path / "qa.jsonl", QA)
    adapter = tmp_path / "adapter"
    run("finetune", "--model", folder, "--data", data, "--out", adapter, "--steps", 10, "--lr", 1e-2,
        "--target-modules", "all-linear", "--no-progress")
    inputs = tmp_path / "in.json"
    inputs.write_text(json.dumps({"input_ids": [[5, 9, 20, 31, 7]]}))
    outs = {}
    for name, extra in {"base": [], "lora": ["--adapter", adapter], "merged_at_load": ["--adapter", adapter, "--merge"]}.items():
        run("forward", "--model", folder, "--inputs", inputs, "--out", tmp_path / f"{name}.npy", *extra)
        outs[name] = np.load(tmp_path / f"{name}.npy")
    merged = tmp_path / "merged"
    # Never written over its own inputs (the base folder was rewritten in place).
    base_bytes = (folder / "model.safetensors").read_bytes()
    for out, which in ((folder, "--model"), (adapter, "--adapter")):
        p = run("merge", "--model", folder, "--adapter", adapter, "--out", str(out) + "/", check=False)
        assert p.returncode == 1 and f"is the {which} folder" in p.stderr, p.stderr
    assert (folder / "model.safetensors").read_bytes() == base_bytes
    run("merge", "--model", folder, "--adapter", adapter, "--out", merged)
    assert os.path.exists(merged / "tokenizer.json") and os.path.exists(merged / "config.json")
    run("forward", "--model", merged, "--inputs", inputs, "--out", tmp_path / "merged.npy")
    outs["merged_folder"] = np.load(tmp_path / "merged.npy")
    assert np.abs(outs["lora"] - outs["base"]).max() > 1e-3
    assert np.abs(outs["merged_at_load"] - outs["lora"]).max() < 1e-4
    assert np.abs(outs["merged_folder"] - outs["lora"]).max() < 1e-4
    g = run("generate", "--model", folder, "--adapter", adapter, "--prompt", "Q: what is 2 and 3?\nA:",
            "--max-new-tokens", 8)
    assert g.stdout.strip()
    text = tmp_path / "t.txt"
    text.write_text("Q: what is 1 and 1?\nA: 1 and 1 make 2.\n" * 20)
    p1 = run("perplexity", "--model", folder, "--data", text, "--context", 32).stdout
    p2 = run("perplexity", "--model", folder, "--adapter", adapter, "--data", text, "--context", 32).stdout
    assert float(p2.split()[1]) < float(p1.split()[1])
    run("convert", "--model", merged, "--to", tmp_path / "merged.gguf", "--type", "f32")
    assert os.path.getsize(tmp_path / "merged.gguf") > 0
    # A GGUF base cannot take a merge (its weights are the file's read-only mapping): said so.
    p = run("merge", "--model", tmp_path / "merged.gguf", "--adapter", adapter, "--out", tmp_path / "m2", check=False)
    assert p.returncode == 1 and "is a GGUF file; load the adapter without --merge" in p.stderr, p.stderr


def test_refusals(base, tmp_path):
    folder, _ = base
    data = write_jsonl(tmp_path / "qa.jsonl", QA)
    r = run("finetune", "--model", folder, "--data", data, "--out", tmp_path / "o", "--steps", 1,
            "--target-modules", "c_attn", check=False)
    assert r.returncode != 0 and "not found in the base model" in r.stderr
    r = run("finetune", "--model", folder, "--data", data, "--out", tmp_path / "o", "--steps", 1, "--quantize",
            "q9_9", check=False)
    assert r.returncode != 0 and "q9_9" in r.stderr
    r = run("generate", "--model", folder, "--adapter", tmp_path / "nowhere", "--input-ids", "1,2", check=False)
    assert r.returncode != 0 and "adapter_config.json" in r.stderr
    # Negative intervals and clip norms were taken as "off" (or as no warmup) without a word.
    for flag, value in [("--warmup", -3), ("--eval-every", -2), ("--checkpoint-every", -1), ("--grad-clip", -1)]:
        r = run("finetune", "--model", folder, "--data", data, "--out", tmp_path / "o", "--steps", 1, flag, value,
                check=False)
        assert r.returncode == 1 and "must be 0" in r.stderr and flag in r.stderr, (flag, r.stderr)
    # Counts below 1 were ignored (a full epoch ran), and NaN / infinite rates trained NaN adapters.
    for flag, value, words in [("--steps", 0, "--steps"), ("--steps", -1, "--steps"), ("--epochs", -1, "--epochs"),
                               ("--lr", "inf", "--lr must be positive and finite"),
                               ("--lora-alpha", "nan", "--lora-alpha must be positive and finite")]:
        extra = [] if flag in ("--steps", "--epochs") else ["--steps", 1]
        r = run("finetune", "--model", folder, "--data", data, "--out", tmp_path / "o", *extra, flag, value,
                check=False)
        assert r.returncode == 1 and words in r.stderr, (flag, value, r.stderr)
    r = run("finetune", "--model", folder, "--data", data, "--out", tmp_path / "o", "--steps", 3, "--lr", 1e30,
            "--no-progress", check=False)
    assert r.returncode == 1 and "training diverged" in r.stderr, r.stderr
    assert not (tmp_path / "o" / "adapter_model.safetensors").exists()


def test_epochs_accumulation_bf16_and_the_other_flags(base, tmp_path):
    """--epochs with --grad-accum sets the step count (ceil(epochs x batches per epoch / accum));
    bf16 autocast, rsLoRA, weight decay, a constant schedule and checkpointing train too."""
    folder, _ = base
    data = write_jsonl(tmp_path / "qa.jsonl", QA)  # 20 examples
    eval_data = write_jsonl(tmp_path / "eval.jsonl", QA[:4])
    out = tmp_path / "o"
    run("finetune", "--model", folder, "--data", data, "--eval-data", eval_data, "--out", out, "--epochs", 2,
        "--batch-size", 4, "--grad-accum", 2, "--precision", "bfloat16", "--use-rslora", "--lora-r", 4,
        "--lora-alpha", 8, "--lora-dropout", 0.1, "--weight-decay", 0.01, "--schedule", "constant", "--warmup", 1,
        "--gradient-checkpointing", "--seq-len", 32, "--lr", 5e-3, "--seed", 9, "--no-progress")
    rows = [json.loads(line) for line in open(out / "metrics.jsonl")]
    steps = [r for r in rows if "loss" in r]
    assert len(steps) == 5  # 20 examples / 4 = 5 batches per epoch; 2 epochs = 10 micro-batches / 2
    assert steps[0]["lr"] == 0.0 and all(r["lr"] == 5e-3 for r in steps[1:])  # warmup 1, then constant
    conf = json.load(open(out / "adapter_config.json"))
    assert conf["use_rslora"] is True and conf["r"] == 4 and conf["lora_dropout"] == 0.1
    evals = [r["eval_loss"] for r in rows if "eval_loss" in r]
    assert len(evals) == 2 and all(np.isfinite(evals))
