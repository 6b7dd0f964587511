"""`foundry train` for any architecture: a fresh model of each of the twelve decoder architectures from HF config
keys in the TOML [model] table, continued training of a pretrained folder (init_from), the --export
folder (config.json, model.safetensors with transformers' names, tokenizer files) loading back in
Foundry with the trained weights, and clear refusals (GGUF or quantized init_from, GPT-2-only keys
on another architecture).
"""
import json
import os

import numpy as np
import pytest
import torch

import test_pretrained as tp


pytestmark = tp.pytestmark

TEXT = "the quick brown fox jumps over the lazy dog. " * 200 + "pack my box with five dozen liquor jugs. " * 200


def write_run(tmp_path, model_toml, steps=30, tokenizer="byte", sample_tokens=8):
    data = tmp_path / "corpus.txt"
    data.write_text(TEXT)
    cfg = tmp_path / "run.toml"
    cfg.write_text(f"""
[data]
path = "{data}"
tokenizer = "{tokenizer}"
val_fraction = 0.1

[model]
{model_toml}

[train]
batch_size = 4
max_steps = {steps}
lr = 3e-3
min_lr = 3e-4
warmup_steps = 5
out_dir = "{tmp_path / 'run'}"
progress = false
log_every = 1

[eval]
every = 1000
batches = 2
checkpoint_every = 0

[sample]
tokens = {sample_tokens}
prompt = "the"

[track]
dir = "{tmp_path / 'tracking'}"
""")
    return str(cfg)


def losses(tmp_path):
    rows = [json.loads(line) for line in open(tmp_path / "run" / "metrics.jsonl")]
    return [r["loss"] for r in rows if "loss" in r]


FRESH = {
    "llama": 'architecture = "llama"\nblock_size = 16\nhidden_size = 32\nintermediate_size = 64\n'
             'num_hidden_layers = 2\nnum_attention_heads = 4\nnum_key_value_heads = 2\nmax_position_embeddings = 64',
    "mistral": 'architecture = "mistral"\nblock_size = 16\nhidden_size = 32\nintermediate_size = 48\n'
               'num_hidden_layers = 2\nnum_attention_heads = 4\nnum_key_value_heads = 1\nsliding_window = 8',
    "qwen2": 'architecture = "Qwen2ForCausalLM"\nblock_size = 16\nhidden_size = 32\nintermediate_size = 48\n'
             'num_hidden_layers = 1\nnum_attention_heads = 2\ntie_word_embeddings = true',
    "gpt_neox": 'architecture = "gpt_neox"\nblock_size = 16\nhidden_size = 32\nintermediate_size = 64\n'
                'num_hidden_layers = 2\nnum_attention_heads = 4\nrotary_pct = 0.5',
    "gpt2": 'architecture = "gpt2"\nblock_size = 16\nn_embd = 32\nn_layer = 2\nn_head = 4',
    "gemma": 'architecture = "gemma"\nblock_size = 16\nhidden_size = 32\nintermediate_size = 64\n'
             'num_hidden_layers = 2\nnum_attention_heads = 4\nnum_key_value_heads = 1\nhead_dim = 8',
    "mixtral": 'architecture = "mixtral"\nblock_size = 16\nhidden_size = 32\nintermediate_size = 48\n'
               'num_hidden_layers = 2\nnum_attention_heads = 4\nnum_key_value_heads = 2\nnum_local_experts = 4\n'
               'num_experts_per_tok = 2',
    "qwen2_moe": 'architecture = "qwen2_moe"\nblock_size = 16\nhidden_size = 32\nintermediate_size = 48\n'
                 'num_hidden_layers = 2\nnum_attention_heads = 4\nnum_experts = 4\nnum_experts_per_tok = 2\n'
                 'moe_intermediate_size = 24\nshared_expert_intermediate_size = 32',
    "phi": 'architecture = "phi"\nblock_size = 16\nhidden_size = 32\nintermediate_size = 64\n'
           'num_hidden_layers = 2\nnum_attention_heads = 4\npartial_rotary_factor = 0.5',
    "falcon": 'architecture = "falcon"\nblock_size = 16\nhidden_size = 32\nnum_hidden_layers = 2\n'
              'num_attention_heads = 4\nnew_decoder_architecture = true\nnum_kv_heads = 2',
    "bloom": 'architecture = "bloom"\nblock_size = 16\nhidden_size = 32\nn_layer = 2\nn_head = 4',
    "opt": 'architecture = "opt"\nblock_size = 16\nhidden_size = 32\nffn_dim = 64\nnum_hidden_layers = 2\n'
           'num_attention_heads = 4\nmax_position_embeddings = 64\ndropout = 0.0',
    "rwkv": 'architecture = "rwkv"\nblock_size = 16\nhidden_size = 32\nnum_hidden_layers = 2\nintermediate_size = 64',
    "mamba": 'architecture = "mamba"\nblock_size = 16\nhidden_size = 32\nnum_hidden_layers = 2\nstate_size = 8',
    "jamba": 'architecture = "jamba"\nblock_size = 16\nhidden_size = 32\nintermediate_size = 48\n'
             'num_hidden_layers = 2\nnum_attention_heads = 4\nnum_key_value_heads = 2\nnum_experts = 2\n'
             'attn_layer_period = 2\nattn_layer_offset = 1\nmamba_d_state = 8',
}


@pytest.mark.parametrize("name", sorted(FRESH))
def test_fresh_architecture_trains_and_exports(tmp_path, name):
    import foundry
    out = tmp_path / "export"
    p = tp.run("train", "--config", write_run(tmp_path, FRESH[name]), "--export", str(out))
    arch = json.load(open(out / "config.json"))["architectures"][0]
    assert f"model: {arch}" in p.stdout
    ls = losses(tmp_path)
    assert len(ls) == 30 and np.mean(ls[-5:]) < np.mean(ls[:5]) - 0.5, ls
    cfg = json.load(open(out / "config.json"))
    assert cfg["model_type"] == name and cfg["vocab_size"] == 256
    model = foundry.models.from_pretrained(str(out))
    names = {n for n, _ in model.named_parameters()}
    stored = set(foundry.load_file(str(out / "model.safetensors")).keys())
    assert stored == names  # transformers' names, tied tensors once
    # The export holds the trained weights: the final checkpoint's validation loss is reproduced.
    ids = torch.tensor([list(TEXT[:17].encode())])
    with foundry.no_grad():
        logits = model(foundry.tensor(ids[:, :-1].tolist())).logits
    loss = torch.nn.functional.cross_entropy(torch.from_numpy(logits.numpy()[0]), ids[0, 1:])
    assert loss.item() < 4.2  # well below log(256) = 5.5 of an untrained model
    g = tp.run("generate", "--model", str(out), "--input-ids", "116,104,101", "--max-new-tokens", "4",
               "--temperature", "0", "--ignore-eos", "--print-ids")
    assert len(json.loads(g.stdout.strip().splitlines()[-1])) == 4


@pytest.mark.parametrize("arch", ["bert", "roberta"])
def test_encoder_trains_as_a_masked_lm_and_exports(tmp_path, arch):
    """architecture = "bert" / "roberta": a fresh *ForMaskedLM trained on 15% masked tokens (80/10/10);
    the export loads back as an encoder whose masked-LM loss on the corpus is far below chance."""
    import foundry
    out = tmp_path / "export"
    model_toml = (f'architecture = "{arch}"\nblock_size = 16\nhidden_size = 32\nintermediate_size = 64\n'
                  'num_hidden_layers = 2\nnum_attention_heads = 4\nhidden_dropout_prob = 0.0\n'
                  'attention_probs_dropout_prob = 0.0')
    p = tp.run("train", "--config", write_run(tmp_path, model_toml, steps=60, sample_tokens=0), "--export", str(out))
    cfg = json.load(open(out / "config.json"))
    assert cfg["architectures"] == [("Roberta" if arch == "roberta" else "Bert") + "ForMaskedLM"]
    assert cfg["vocab_size"] == 258 and cfg["pad_token_id"] == 257  # [MASK] = 256, padding = 257
    assert f"model: {cfg['architectures'][0]}" in p.stdout
    ls = losses(tmp_path)
    assert len(ls) == 60 and np.mean(ls[-5:]) < np.mean(ls[:5]) - 1.0, ls
    model = foundry.models.from_pretrained(str(out))
    assert model.head == "masked_lm"
    ids = torch.tensor([list(TEXT[:16].encode())])
    labels = torch.full_like(ids, -100)
    inputs = ids.clone()
    for i in (3, 9, 14):
        labels[0, i], inputs[0, i] = ids[0, i], 256
    with foundry.no_grad():
        loss = model(foundry.tensor(inputs.tolist()), labels=foundry.tensor(labels.tolist())).loss.item()
    assert loss < 4.0  # log(258) = 5.55 untrained


def test_t5_trains_with_span_corruption_and_exports(tmp_path):
    """architecture = "t5": span corruption (sentinels, EOS) through seq2seq(); the export is a
    T5ForConditionalGeneration folder whose ids sit past the tokenizer's, and it fills sentinels."""
    import foundry
    out = tmp_path / "export"
    model_toml = ('architecture = "t5"\nblock_size = 32\nd_model = 32\nd_kv = 8\nd_ff = 64\nnum_layers = 2\n'
                  'num_heads = 4\nfeed_forward_proj = "gated-gelu"\ntie_word_embeddings = false\n'
                  'dropout_rate = 0.0\nextra_ids = 8')
    p = tp.run("train", "--config", write_run(tmp_path, model_toml, steps=60, sample_tokens=0), "--export", str(out))
    cfg = json.load(open(out / "config.json"))
    assert cfg["architectures"] == ["T5ForConditionalGeneration"] and "model: T5ForConditionalGeneration" in p.stdout
    assert (cfg["vocab_size"], cfg["pad_token_id"], cfg["eos_token_id"], cfg["decoder_start_token_id"]) == (266, 256, 257, 256)
    ls = losses(tmp_path)
    assert len(ls) == 60 and np.mean(ls[-5:]) < np.mean(ls[:5]) - 1.0, ls
    model = foundry.models.from_pretrained(str(out))
    assert type(model).__name__ == "Seq2SeqModel" and model.decoder_start_token_id == 256
    prompt = list(b"the quick brown ") + [265] + list(b" jumps over")  # <extra_id_0> = 265
    g = tp.run("generate", "--model", str(out), "--input-ids", ",".join(map(str, prompt)), "--max-new-tokens", "8",
               "--temperature", "0", "--print-ids")
    filled = json.loads(g.stdout.strip().splitlines()[-1])
    assert 1 <= len(filled) <= 8 and all(0 <= t < 266 for t in filled)


def test_init_from_continues_a_pretrained_folder(tmp_path):
    import foundry
    cfg = dict(tp.LLAMA, vocab_size=260)
    w = tp.llama_weights(cfg, torch.Generator().manual_seed(3))
    folder = tmp_path / "base"
    tp.write_folder(str(folder), cfg, w)
    (folder / "tokenizer_config.json").write_text("{}")
    original = (folder / "model.safetensors").read_bytes()
    out = tmp_path / "export"
    tp.run("train", "--config", write_run(tmp_path, f'init_from = "{folder}"\nblock_size = 16', steps=20, sample_tokens=0), "--export",
           str(out))
    ls = losses(tmp_path)
    assert ls[-1] < ls[0]
    # First step's loss is the pretrained model's: the weights were loaded, not initialised.
    assert ls[0] > 5.0  # random pretrained weights predict bytes badly
    assert json.load(open(out / "config.json"))["architectures"] == ["LlamaForCausalLM"]
    assert (out / "tokenizer_config.json").exists()  # the folder's tokenizer files travel with it
    trained = foundry.load_file(str(out / "model.safetensors"))
    assert set(trained) == set(w)
    moved = [k for k in w if not np.array_equal(trained[k].numpy(), w[k].numpy())]
    assert len(moved) == len(w)
    # Training wrote private copies of the mapped pages: the pretrained file is untouched.
    assert (folder / "model.safetensors").read_bytes() == original


def test_init_from_gguf_and_quantized_folders_are_refused(tmp_path):
    cfg = dict(tp.LLAMA, vocab_size=260)
    folder = tmp_path / "base"
    tp.write_folder(str(folder), cfg, tp.llama_weights(cfg, torch.Generator().manual_seed(3)))
    gguf = tmp_path / "m.gguf"
    tp.run("convert", "--model", str(folder), "--to", str(gguf), "--type", "q8_0")
    p = tp.run("train", "--config", write_run(tmp_path, f'init_from = "{gguf}"\nblock_size = 16'), check=False)
    assert p.returncode != 0 and "GGUF" in p.stderr
    q = tmp_path / "q"
    tp.run("quantize", "--model", str(folder), "--out", str(q), "--type", "int8")
    p = tp.run("train", "--config", write_run(tmp_path, f'init_from = "{q}"\nblock_size = 16'), check=False)
    assert p.returncode != 0 and "quantized" in p.stderr


def test_gpt2_keys_on_another_architecture_say_what_to_change(tmp_path):
    p = tp.run("train", "--config", write_run(tmp_path, FRESH["llama"] + "\ndropout = 0.1"), check=False)
    assert p.returncode != 0 and "attention_dropout" in p.stderr
    p = tp.run("train", "--config", write_run(tmp_path, 'architecture = "nope"'), check=False)
    assert p.returncode != 0 and "unknown architecture 'nope'" in p.stderr and "llama" in p.stderr
    p = tp.run("train", "--config", write_run(tmp_path, 'architecture = "llama"\nhidden_size = 32'), check=False)
    assert p.returncode != 0 and "missing 'num_hidden_layers'" in p.stderr  # a missing HF key is named


def test_block_size_longer_than_the_positions_is_refused(tmp_path):
    p = tp.run("train", "--config", write_run(tmp_path, FRESH["llama"].replace("block_size = 16", "block_size = 128")),
               check=False)
    assert p.returncode != 0 and "block_size 128" in p.stderr


@pytest.mark.parametrize("flag,value,allowed", [
    ("--precision", "bf16", '"float32" or "bfloat16"'),
    ("--precision", "fp16", '"float32" or "bfloat16"'),
])
def test_enumerated_options_from_the_command_line_are_checked(tmp_path, flag, value, allowed):
    """An unknown value is refused (it used to train in float32 silently), naming the allowed ones."""
    p = tp.run("train", "--config", write_run(tmp_path, FRESH["llama"], steps=2), flag, value, check=False)
    assert p.returncode != 0 and allowed in p.stderr and value in p.stderr
    assert not os.path.exists(tmp_path / "run" / "metrics.jsonl")


PHI2_TOKENIZER = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "data", "tokenizers", "phi-2",
                              "tokenizer.json")


@pytest.mark.skipif(not os.path.exists(PHI2_TOKENIZER), reason="../shared/data (Phi-2's tokenizer.json) is absent")
def test_export_carries_the_tokenizer_the_data_used(tmp_path):
    """[data] tokenizer = a tokenizer.json: the exported folder holds that file, and generates from text."""
    out = tmp_path / "export"
    model_toml = ('architecture = "llama"\nblock_size = 16\nhidden_size = 32\nintermediate_size = 64\n'
                  'num_hidden_layers = 1\nnum_attention_heads = 4')
    tp.run("train", "--config", write_run(tmp_path, model_toml, steps=5, tokenizer=PHI2_TOKENIZER, sample_tokens=0),
           "--export", str(out))
    assert (out / "tokenizer.json").read_bytes() == open(PHI2_TOKENIZER, "rb").read()
    assert json.load(open(out / "config.json"))["vocab_size"] >= 50257
    g = tp.run("generate", "--model", str(out), "--prompt", "To be, or not", "--max-new-tokens", "3",
               "--temperature", "0", "--ignore-eos")
    # The prompt went through the exported BPE ("To", " be", ",", " or", " not"), not bytes (13).
    assert "prefill: 5 tokens" in g.stderr and g.stdout.strip()


def test_prepared_data_follows_the_config(tmp_path):
    """<out_dir>/data is prepared again when data.path, the split or the tokenizer changed (it was
    reused whatever the config said, training on the old corpus without a word)."""
    model_toml = 'architecture = "gpt2"\nblock_size = 16\nn_embd = 16\nn_layer = 1\nn_head = 2'
    cfg = write_run(tmp_path, model_toml, steps=2, sample_tokens=0)
    tp.run("train", "--config", cfg)
    meta = json.load(open(tmp_path / "run" / "data" / "meta.json"))
    assert meta["source"].endswith("corpus.txt") and meta["kind"] == "byte"
    other = tmp_path / "other.txt"
    other.write_text("zyx wvu " * 500)

    def edit(old, new):
        text = open(cfg).read()
        assert old in text
        with open(cfg, "w") as f:
            f.write(text.replace(old, new))

    edit(str(tmp_path / "corpus.txt"), str(other))
    p = tp.run("train", "--config", cfg)
    assert "preparing it again" in p.stderr and "not data.path" in p.stderr
    meta = json.load(open(tmp_path / "run" / "data" / "meta.json"))
    assert meta["source"] == str(other) and meta["train_tokens"] + meta["val_tokens"] == len("zyx wvu " * 500) + 1
    p = tp.run("train", "--config", cfg)  # unchanged: kept
    assert "preparing it again" not in p.stderr
    edit('tokenizer = "byte"', 'tokenizer = "char"')
    p = tp.run("train", "--config", cfg)
    assert "with the byte tokenizer, not 'char'" in p.stderr
    assert json.load(open(tmp_path / "run" / "data" / "meta.json"))["kind"] == "char"
    edit(str(other), str(tmp_path / "missing.txt"))
    p = tp.run("train", "--config", cfg, check=False)
    assert p.returncode == 1 and "missing.txt" in p.stderr


def test_char_tokenizer_names_the_first_byte_that_is_not_utf8(tmp_path):
    src = tmp_path / "latin1.txt"
    src.write_bytes("hello caf\u00e9 world\n".encode("utf-8") + "na\u00efve\n".encode("latin-1"))
    out = tmp_path / "prepared"
    p = tp.run("prepare", "--input", str(src), "--out", str(out), "--tokenizer", "char", check=False)
    offset = len("hello caf\u00e9 world\nna".encode("utf-8"))
    assert p.returncode == 1 and f"ill-formed byte 0xEF at offset {offset}" in p.stderr, p.stderr
    assert not out.exists()  # nothing half-written
    assert tp.run("prepare", "--input", str(src), "--out", str(out), "--tokenizer", "byte").returncode == 0


def test_a_diverging_run_stops_with_an_error_before_saving(tmp_path):
    """lr = 1e30 trained on to NaN weights, exported them and exited 0."""
    model_toml = 'architecture = "gpt2"\nblock_size = 16\nn_embd = 16\nn_layer = 1\nn_head = 2'
    cfg = write_run(tmp_path, model_toml, steps=6, sample_tokens=0)
    text = open(cfg).read().replace("lr = 3e-3", "lr = 1e30").replace("min_lr = 3e-4", "min_lr = 0")
    with open(cfg, "w") as f:
        f.write(text)
    p = tp.run("train", "--config", cfg, "--export", str(tmp_path / "export"), check=False)
    assert p.returncode == 1 and "training diverged" in p.stderr and "stopped before the update" in p.stderr, p.stderr
    assert not (tmp_path / "export").exists()
    for flag in (["--max-steps", "0"], ["--max-steps", "-1"]):
        p = tp.run("train", "--config", cfg, *flag, check=False)
        assert p.returncode == 1 and "--max-steps" in p.stderr, p.stderr
    with open(cfg, "w") as f:
        f.write(text.replace("lr = 1e30", "lr = inf"))
    p = tp.run("train", "--config", cfg, check=False)
    assert p.returncode == 1 and "lr and min_lr must be finite" in p.stderr, p.stderr


def test_resume_names_checkpoint_folders_it_skips(tmp_path):
    """A step folder without checkpoint.json (a save that did not finish) is skipped, as before, but said."""
    model_toml = 'architecture = "gpt2"\nblock_size = 16\nn_embd = 16\nn_layer = 1\nn_head = 2'
    cfg = write_run(tmp_path, model_toml, steps=2, sample_tokens=0)
    partial = tmp_path / "run" / "checkpoints" / "step-7"
    partial.mkdir(parents=True)
    (partial / "model.safetensors").write_bytes(b"")
    p = tp.run("train", "--config", cfg)
    assert f"skipping {partial}: not a complete checkpoint (no checkpoint.json" in p.stderr, p.stderr
    assert "resumed" not in p.stdout


def test_prepared_data_with_a_relative_tokenizer_path_is_kept(tmp_path, monkeypatch):
    """The recipe compares a tokenizer file by its absolute path, as meta.json records it."""
    if not os.path.exists(PHI2_TOKENIZER):
        pytest.skip("needs ../shared/data (Phi-2's tokenizer.json)")
    import shutil
    shutil.copy(PHI2_TOKENIZER, tmp_path / "tok.json")
    monkeypatch.chdir(tmp_path)
    model_toml = ('architecture = "llama"\nblock_size = 16\nhidden_size = 32\nintermediate_size = 64\n'
                  'num_hidden_layers = 1\nnum_attention_heads = 4')
    cfg = write_run(tmp_path, model_toml, steps=1, tokenizer="tok.json", sample_tokens=0)
    tp.run("train", "--config", cfg)
    p = tp.run("train", "--config", cfg)
    assert "preparing it again" not in p.stderr, p.stderr
