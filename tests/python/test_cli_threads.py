"""`--threads N` on the foundry commands that compute (the pool they run on, the same tokens whatever
the count), and command-line mistakes reported as errors: one `foundry: error:` line naming the
subcommand whose --help explains it, exit status 1 (CLI11's own codes were 106 and up).
"""
import json
import os
import subprocess

import pytest
import torch

import test_pretrained as tp

pytestmark = tp.pytestmark


def tiny_llama(tmp_path):
    cfg, make_weights, _ = tp.CASES["llama"]
    folder = str(tmp_path / "m")
    tp.write_folder(folder, cfg, make_weights(cfg, torch.Generator().manual_seed(11)))
    return folder


def generate(folder, *extra, env=None):
    p = subprocess.run([tp.FOUNDRY, "generate", "--model", folder, "--input-ids", "3,4,5", "--max-new-tokens", "6",
                        "--ignore-eos", "--print-ids", *extra], capture_output=True, text=True, env=env)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1]), p.stderr


def test_generate_runs_on_the_threads_asked(tmp_path):
    folder = tiny_llama(tmp_path)
    one, err_one = generate(folder, "--threads", "1")
    two, err_two = generate(folder, "--threads", "2")
    assert "tokens generated on 1 thread\n" in err_one, err_one
    assert "tokens generated on 2 threads\n" in err_two, err_two
    assert one == two and len(one) == 6
    # Without the option: OMP_NUM_THREADS when set (0 asks for the default as well).
    env = dict(os.environ, OMP_NUM_THREADS="1")
    assert generate(folder, env=env)[1].endswith("on 1 thread\n")
    assert generate(folder, "--threads", "0", env=env)[1].endswith("on 1 thread\n")


def test_forward_takes_threads_and_gives_the_same_logits(tmp_path):
    folder = tiny_llama(tmp_path)
    inputs = tmp_path / "in.json"
    inputs.write_text(json.dumps({"input_ids": [[1, 2, 3, 4], [5, 6, 7, 8]]}))
    outs = []
    for threads in ("1", "2"):
        out = tmp_path / f"logits{threads}.npy"
        tp.run("forward", "--model", folder, "--inputs", str(inputs), "--out", str(out), "--threads", threads)
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]


@pytest.mark.parametrize("args, words", [
    ([], "A subcommand is required (see `foundry --help`)"),
    (["generate", "--model", "m", "--input-ids", "1", "--threads", "two"],
     "--threads: takes a thread count, 0 or more (0: all cores), not 'two' (see `foundry generate --help`)"),
    (["tokenize", "--tokenizer", "t.json", "--threads", "-1"], "not '-1' (see `foundry tokenize --help`)"),
    (["train", "--config", "x.toml", "--threads", "1.5"], "not '1.5' (see `foundry train --help`)"),
    (["forward", "--model", "m", "--inputs", "in.json"], "--out is required (see `foundry forward --help`)"),
    (["demo", "--bogus"], "--bogus (see `foundry demo --help`)"),
    (["runs", "show"], "RUN is required (see `foundry runs show --help`)"),
    (["perplexity", "--model", "m", "--data", __file__, "--max-tokens", "-1"],
     "--max-tokens: takes a token count, 0 or more (0: all), not '-1' (see `foundry perplexity --help`)"),
])
def test_command_line_mistakes_are_errors(args, words):
    p = tp.run(*args, check=False)
    assert p.returncode == 1, (args, p.returncode, p.stderr)
    assert p.stderr.startswith("foundry: error: ") and words in p.stderr, p.stderr
    assert p.stderr.count("\n") == 1, p.stderr


def test_help_still_exits_zero():
    for args in ([], ["generate"], ["runs", "show"]):
        p = tp.run(*args, "--help")
        assert "Usage" in p.stdout and "--help" in p.stdout
