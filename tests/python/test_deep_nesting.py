"""Deeply nested input is an error naming it, never a crash. Each file below nests 100 000 levels in a
few hundred KB. With the previous build (ASan) a tokenizer.json's pipeline, a model folder's
config.json, every chat-template case but the growing value, and the eval task's YAML ended in a
stack overflow (a recursion per level while parsing, copying, dumping or evaluating); the JSONL line
and the --inputs file were refused by their readers already, and are checked here so that they stay
refused. JSON from outside is measured before it is parsed (foundry/io/json_depth.h: at most 128
levels, serde_json's limit; HF's tokenizers refuses a tokenizer.json 128 levels deep); templates (including a
value a loop keeps wrapping) and YAML count their own levels. The HTTP side is in test_serve.py.
"""
import json
import os

import pytest

import test_pretrained as tp

pytestmark = tp.pytestmark

D = 100000
DEEP = "[" * D + "]" * D


def fails_with(args, message):
    p = tp.run(*args, check=False)
    assert p.returncode == 1 and message in p.stderr, (args, p.returncode, p.stderr[-300:])
    assert p.stderr.startswith("foundry: error: "), p.stderr[:300]


def test_tokenizer_json(tmp_path):
    nested = '{"type": "Sequence", "normalizers": [' * D + '{"type": "Lowercase"}' + "]}" * D
    path = tmp_path / "tokenizer.json"
    path.write_text('{"version": "1.0", "normalizer": %s, "model": {"type": "BPE", "vocab": {}, "merges": []}}' % nested)
    fails_with(["tokenize", "--tokenizer", str(path), "--text", "hi"],
               "tokenizer.json: JSON nested 200002 levels deep; at most 128 are accepted")


def test_model_config_and_forward_inputs(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text('{"architectures": ["LlamaForCausalLM"], "rope_scaling": %s}' % DEEP)
    fails_with(["info", "--model", str(folder)], "config.json: JSON nested 100001 levels deep")
    cfg, make_weights, _ = tp.CASES["llama"]
    import torch
    tp.write_folder(str(folder), cfg, make_weights(cfg, torch.Generator().manual_seed(1)))
    inputs = tmp_path / "in.json"
    inputs.write_text('{"input_ids": [[1, 2]], "attention_mask": %s}' % DEEP)
    fails_with(["forward", "--model", str(folder), "--inputs", str(inputs), "--out", str(tmp_path / "o.npy")],
               "JSON nested 100001 levels deep")


def test_jsonl_lines(tmp_path):
    lines = tmp_path / "lines.jsonl"
    lines.write_text('"ok"\n{"text": %s}\n' % DEEP)
    tok = tmp_path / "tokenizer.json"
    tok.write_text(json.dumps({"version": "1.0", "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}}))
    fails_with(["tokenize", "--tokenizer", str(tok), "--input", str(lines)], "input line 2: JSON nested 100001")


TEMPLATES = [
    ("{{ " + "(" * D + "1" + ")" * D + " }}", "expression nests deeper than 256 levels"),
    ("{% if true %}" * D + "x" + "{% endif %}" * D, "blocks nest deeper than 256 levels"),
    ("{{ " + "1 + " * D + "1 }}", "expression's tree is more than 512 levels tall"),
    ("{{ x" + "|string" * D + " }}", "expression's tree is more than 512 levels tall"),
    ("{{ " + "not " * D + "1 }}", "expression nests deeper than 256 levels"),
    ("{{ " + "[" * D + "]" * D + " }}", "expression nests deeper than 256 levels"),
    ("{% set ns = namespace(x=1) %}{% for i in range(300) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x }}",
     "{% set ns %} would keep a value nested deeper than 256 levels"),
]


@pytest.mark.parametrize("template, message", TEMPLATES, ids=["parens", "blocks", "sum", "filters", "not", "lists",
                                                                 "growing-value"])
def test_chat_templates(tmp_path, template, message):
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": template}))
    messages = tmp_path / "messages.json"
    messages.write_text(json.dumps([{"role": "user", "content": "hi"}]))
    fails_with(["template", "--model", str(tmp_path), "--messages", str(messages)], message)


def test_ordinary_templates_still_render(tmp_path):
    # Well inside the bounds: 100 nested parentheses, 50 nested blocks, a 200-term sum, a kept value 100 deep.
    template = ("{{ " + "(" * 100 + "1" + ")" * 100 + " }}|" + "{% if true %}" * 50 + "b" + "{% endif %}" * 50 +
                "|{{ " + "1 + " * 199 + "1 }}|{% set ns = namespace(x=1) %}{% for i in range(99) %}"
                "{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x|length }}|{{ messages[0]['content'] }}")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": template}))
    messages = tmp_path / "messages.json"
    messages.write_text(json.dumps([{"role": "user", "content": "hi"}]))
    assert tp.run("template", "--model", str(tmp_path), "--messages", str(messages)).stdout == "1|b|200|1|hi"
    content = []
    for _ in range(198):
        content = [content]
    messages.write_text(json.dumps([{"role": "user", "content": content}]))  # 199 levels, in messages: 201
    fails_with(["template", "--model", str(tmp_path), "--messages", str(messages)], "JSON nested 201 levels deep")


def test_eval_task_yaml(tmp_path):
    task = tmp_path / "task.yaml"
    task.write_text("task: deep\ndataset_path: " + DEEP + "\n")
    fails_with(["eval", "--model", str(tmp_path), "--tasks", str(task)],
               "line 2: sequences and mappings nest deeper than 128 levels")
