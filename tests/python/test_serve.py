"""`foundry serve` with real clients: the `openai` npm package (completions, chat, streaming with
usage), curl for the error cases, and 16 parallel greedy streams each equal to the same request
run alone and to `foundry generate --temperature 0` on the same prompt ids. The model is the
reference Llama of test_pretrained.py with a character tokenizer and a chat template."""
import concurrent.futures
import json
import os
import shutil
import subprocess
import time
import urllib.request

import pytest
import torch

import lm_eval_ref as ref
import test_pretrained as tp

pytestmark = tp.pytestmark
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NPM_DIR = os.path.join(ROOT, "build", "npm-openai")
CHARS = [chr(c) for c in range(32, 127)] + ["\n"]
CFG = dict(tp.LLAMA, vocab_size=3 + len(CHARS), max_position_embeddings=256)
TEMPLATE = ("{{ bos_token }}{% for m in messages %}[{{ m['role'] }}]: {{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}[assistant]: {% endif %}")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    d = tmp_path_factory.mktemp("serve") / "tiny-llama"
    ref.write_char_model(d, CFG, CHARS, 21)
    (d / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<s>", "eos_token": "</s>", "chat_template": TEMPLATE}))
    return d


class Server:
    def __init__(self, folder, *args):
        self.p = subprocess.Popen([tp.FOUNDRY, "serve", "--model", str(folder), "--port", "0", *args],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.p.stdout.readline()
        assert line.startswith("listening on http://"), (line, self.p.stderr.read() if self.p.poll() is not None else "")
        self.url = line.split()[-1]

    def close(self):
        self.p.terminate()
        try:
            self.p.wait(10)
        except subprocess.TimeoutExpired:
            self.p.kill()


@pytest.fixture(scope="module")
def server(folder):
    s = Server(folder, "--parallel", "8", "--served-model-name", "tiny")
    yield s
    s.close()


def post(url, body, headers=None, raw=None):
    data = raw if raw is not None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def generate_ids(folder, ids, n):
    out = subprocess.run([tp.FOUNDRY, "generate", "--model", str(folder), "--input-ids", ",".join(map(str, ids)),
                          "--max-new-tokens", str(n), "--temperature", "0", "--print-ids"],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def encode(text):
    return [CHARS.index(c) + 3 for c in text]


def test_greedy_completion_equals_foundry_generate(folder, server):
    ids = [1] + encode("Once upon a time")
    status, body = post(server.url + "/v1/completions", {"model": "tiny", "prompt": ids, "max_tokens": 12, "temperature": 0})
    assert status == 200, body
    r = json.loads(body)
    want = generate_ids(folder, ids, 12)
    assert r["choices"][0]["text"] == "".join(CHARS[i - 3] for i in want if i >= 3)
    assert r["usage"] == {"prompt_tokens": len(ids), "completion_tokens": len(want), "total_tokens": len(ids) + len(want),
                          "prompt_tokens_details": {"cached_tokens": 0}}
    assert r["object"] == "text_completion" and r["model"] == "tiny" and r["id"].startswith("cmpl-")
    # A string prompt is tokenized with the tokenizer's special tokens, as generate --prompt does.
    status, body = post(server.url + "/v1/completions", {"prompt": "Once upon a time", "max_tokens": 12, "temperature": 0})
    out = subprocess.run([tp.FOUNDRY, "generate", "--model", str(folder), "--prompt", "Once upon a time",
                          "--max-new-tokens", "12", "--temperature", "0", "--print-ids"],
                         capture_output=True, text=True, check=True).stdout
    want = json.loads(out.strip().splitlines()[-1])
    assert json.loads(body)["choices"][0]["text"] == "".join(CHARS[i - 3] for i in want if i >= 3)


def npm_openai():
    if not shutil.which("npm") or not shutil.which("node"):
        pytest.skip("npm / node not available")
    if not os.path.exists(os.path.join(NPM_DIR, "node_modules", "openai")):
        os.makedirs(NPM_DIR, exist_ok=True)
        p = subprocess.run(["npm", "install", "--silent", "--no-audit", "--no-fund", "--prefix", NPM_DIR, "openai@4"],
                           capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            pytest.skip("could not install the openai npm package: " + p.stderr[-300:])
    return NPM_DIR


CLIENT = r"""
const OpenAI = require(process.argv[2] + '/node_modules/openai');
const client = new OpenAI({ baseURL: process.argv[3] + '/v1', apiKey: 'k' });
(async () => {
  const out = {};
  const c = await client.completions.create({ model: 'tiny', prompt: 'The sea', max_tokens: 10, temperature: 0,
                                              logprobs: 2, echo: true });
  out.completion = c;
  const chat = await client.chat.completions.create({ model: 'tiny', messages: [{ role: 'system', content: 'Be brief.' },
    { role: 'user', content: 'Hello there' }], max_tokens: 9, temperature: 0 });
  out.chat = chat;
  const stream = await client.chat.completions.create({ model: 'tiny', messages: [{ role: 'system', content: 'Be brief.' },
    { role: 'user', content: 'Hello there' }], max_tokens: 9, temperature: 0, stream: true,
    stream_options: { include_usage: true } });
  out.chunks = [];
  for await (const chunk of stream) out.chunks.push(chunk);
  const two = await client.completions.create({ model: 'tiny', prompt: ['abc', 'xyz'], max_tokens: 5, temperature: 0.8,
                                                seed: 3, n: 2, stop: ['q'] });
  out.two = two;
  try { await client.chat.completions.create({ model: 'other', messages: [{ role: 'user', content: 'x' }] }); }
  catch (e) { out.error = { status: e.status, error: e.error }; }
  console.log(JSON.stringify(out));
})().catch(e => { console.error(e); process.exit(1); });
"""


def test_openai_npm_client(folder, server, tmp_path):
    npm = npm_openai()
    script = tmp_path / "client.js"
    script.write_text(CLIENT)
    p = subprocess.run(["node", str(script), npm, server.url], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    c = out["completion"]["choices"][0]
    want = generate_ids(folder, encode("The sea"), 10)  # this tokenizer adds no BOS
    assert c["text"] == "The sea" + "".join(CHARS[i - 3] for i in want if i >= 3)  # echo
    assert len(c["logprobs"]["tokens"]) == 10 and all(len(t) == 2 for t in c["logprobs"]["top_logprobs"])
    assert all(lp <= 0 for lp in c["logprobs"]["token_logprobs"])
    # Chat: rendered with the folder's template, then greedy.
    prompt = "<s>[system]: Be brief.\n[user]: Hello there\n[assistant]: "
    want = generate_ids(folder, [1] + encode(prompt[3:]), 9)
    text = "".join(CHARS[i - 3] for i in want if i >= 3)
    msg = out["chat"]["choices"][0]
    assert msg["message"] == {"role": "assistant", "content": text} and out["chat"]["object"] == "chat.completion"
    # Streaming: the deltas add up to the same text; a last chunk carries the usage.
    chunks = out["chunks"]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    streamed = "".join(ch["choices"][0]["delta"].get("content", "") for ch in chunks if ch["choices"])
    assert streamed == text
    assert [ch["choices"][0]["finish_reason"] for ch in chunks if ch["choices"]][-1] == msg["finish_reason"]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == len(want)
    assert out["chat"]["usage"]["prompt_tokens"] == len([1] + encode(prompt[3:]))
    # Two prompts x n=2, sampled with a seed, cut at a stop string.
    assert len(out["two"]["choices"]) == 4 and all("q" not in ch["text"] for ch in out["two"]["choices"])
    assert out["error"]["status"] == 400 and out["error"]["error"]["code"] == "model_not_found"


def test_sixteen_parallel_streams_equal_each_request_alone(folder, server):
    prompts = [f"Request number {i}: " + "abcdefgh"[: i % 8] for i in range(16)]

    def stream(prompt):
        req = urllib.request.Request(server.url + "/v1/completions", data=json.dumps(
            {"prompt": prompt, "max_tokens": 20, "temperature": 0, "stream": True}).encode(),
            headers={"Content-Type": "application/json"})
        text = ""
        with urllib.request.urlopen(req, timeout=120) as r:
            for line in r:
                line = line.decode().strip()
                if line.startswith("data: ") and line != "data: [DONE]":
                    text += json.loads(line[6:])["choices"][0]["text"]
        return text

    with concurrent.futures.ThreadPoolExecutor(16) as ex:
        together = list(ex.map(stream, prompts))
    for prompt, text in zip(prompts, together):
        alone = json.loads(post(server.url + "/v1/completions", {"prompt": prompt, "max_tokens": 20, "temperature": 0})[1])
        assert text == alone["choices"][0]["text"]
        want = generate_ids(folder, encode(prompt), 20)
        assert text == "".join(CHARS[i - 3] for i in want if i >= 3)
    metrics = urllib.request.urlopen(server.url + "/metrics").read().decode()
    assert "foundry_generated_tokens_total" in metrics and "foundry_kv_cache_usage_ratio" in metrics
    # All KV blocks but the prefix cache's are back.
    values = dict(line.split() for line in metrics.splitlines() if line and not line.startswith("#"))
    assert values["foundry_requests_running"] == "0"
    assert values["foundry_kv_cache_blocks_used"] == values["foundry_kv_cache_blocks_cached"]


def curl(*args):
    p = subprocess.run(["curl", "-s", "-w", "\n%{http_code}", *args], capture_output=True, text=True, timeout=60)
    body, code = p.stdout.rsplit("\n", 1)
    return int(code), body


@pytest.mark.skipif(not shutil.which("curl"), reason="curl not available")
def test_errors_have_openai_shape(folder, server, tmp_path):
    s = Server(folder, "--api-key", "sekret", "--max-body", "2000")
    try:
        code, body = curl(s.url + "/v1/models")
        assert code == 401 and json.loads(body)["error"]["code"] == "invalid_api_key"
        auth = ["-H", "Authorization: Bearer sekret", "-H", "Content-Type: application/json"]
        code, body = curl(*auth, s.url + "/v1/models")
        assert code == 200 and json.loads(body)["data"][0]["id"] == "tiny-llama"
        code, body = curl(*auth, "-d", json.dumps({"prompt": "x" * 5000}), s.url + "/v1/completions")
        assert code == 413 and "error" in json.loads(body)
    finally:
        s.close()
    cases = [
        ("{bad json", "not valid JSON", None),
        (json.dumps({"prompt": 3}), "'prompt' must be", "prompt"),
        (json.dumps({"prompt": "a", "max_tokens": "5"}), "'max_tokens' must be an integer", "max_tokens"),
        (json.dumps({"prompt": "a", "temperature": 3}), "'temperature' must be between", "temperature"),
        (json.dumps({"prompt": "a", "model": "gpt-4"}), "does not exist", "model"),
        (json.dumps({"prompt": "a" * 400}), "maximum context length is 256", "prompt"),
        (json.dumps({"prompt": [1, 5000]}), "outside the vocabulary", "prompt"),
        (json.dumps({"prompt": "a", "stop": [1]}), "'stop' must be", "stop"),
    ]
    for data, message, param in cases:
        code, body = curl("-H", "Content-Type: application/json", "-d", data, server.url + "/v1/completions")
        err = json.loads(body)["error"]
        assert code == 400 and message in err["message"] and err["param"] == param, (data, body)
        assert set(err) == {"message", "type", "param", "code"}
    code, body = curl("-H", "Content-Type: application/json", "-d", json.dumps({"messages": [{"content": "x"}]}),
                      server.url + "/v1/chat/completions")
    assert code == 400 and "role" in json.loads(body)["error"]["message"]
    code, body = curl(server.url + "/v1/nothing")
    assert code == 404 and "error" in json.loads(body)
    # Endpoints of llama.cpp's server.
    code, body = curl("-d", json.dumps({"messages": [{"role": "user", "content": "Hi"}]}), server.url + "/apply-template")
    assert json.loads(body) == {"prompt": "<s>[user]: Hi\n[assistant]: "}
    code, body = curl("-d", json.dumps({"content": "Hi"}), server.url + "/tokenize")
    assert json.loads(body) == {"tokens": encode("Hi")}
    code, body = curl("-d", json.dumps({"tokens": encode("Hi")}), server.url + "/detokenize")
    assert json.loads(body) == {"content": "Hi"}
    assert curl(server.url + "/health") == (200, '{"status":"ok"}')
    # A port past 65535 is refused (99999 was taken modulo 2^16 and reported as listening on :99999).
    for cmd in (["serve", "--model", str(folder)], ["dashboard"]):
        p = subprocess.run([tp.FOUNDRY, *cmd, "--port", "99999"], capture_output=True, text=True, timeout=60)
        assert p.returncode == 1 and "--port: Value 99999 not in range 0 to 65535" in p.stderr, (cmd, p.stderr)
    # So are a negative context, queue or timeout (the server started, or named the wrong settings).
    for flag, value, message in [("--ctx-size", "-5", "--ctx-size must be 0"), ("--max-queue", "-1", "--max-queue must be 0"),
                                 ("--timeout", "-3", "--timeout must be a positive"),
                                 ("--timeout", "nan", "--timeout must be a positive")]:
        p = subprocess.run([tp.FOUNDRY, "serve", "--model", str(folder), "--port", "0", flag, value], capture_output=True,
                           text=True, timeout=60)
        assert p.returncode == 1 and message in p.stderr, (flag, value, p.stderr)


def test_disconnected_stream_frees_its_blocks(folder, server):
    import http.client
    host, port = server.url[len("http://"):].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    conn.request("POST", "/v1/completions", json.dumps({"prompt": "abandon", "max_tokens": 200, "ignore_eos": True,
                                                        "stream": True, "temperature": 0}),
                 {"Content-Type": "application/json"})
    r = conn.getresponse()
    r.fp.readline()
    conn.sock.close()  # the client goes away mid-stream
    deadline = time.time() + 20
    while time.time() < deadline:
        values = dict(line.split() for line in urllib.request.urlopen(server.url + "/metrics").read().decode().splitlines()
                      if line and not line.startswith("#"))
        if values["foundry_requests_running"] == "0":
            break
        time.sleep(0.1)
    assert values["foundry_requests_running"] == "0"
    assert values["foundry_kv_cache_blocks_used"] == values["foundry_kv_cache_blocks_cached"]


def test_embeddings_are_the_mean_final_hidden_state(folder, server):
    """The LM head is linear, so (unit embedding) @ lm_head^T points where the mean of the logits
    over the tokens points: checked against the PyTorch reference forward."""
    w = tp.llama_weights(CFG, torch.Generator().manual_seed(21))
    texts = ["Hello there", "A much longer input about the sea and the sky"]
    status, body = post(server.url + "/v1/embeddings", {"model": "tiny", "input": texts})
    assert status == 200, body
    r = json.loads(body)
    assert r["object"] == "list" and r["usage"]["prompt_tokens"] == sum(len(t) for t in texts)
    for text, item in zip(texts, r["data"]):
        emb = torch.tensor(item["embedding"], dtype=torch.float64)
        assert emb.shape == (CFG["hidden_size"],) and abs(float(emb.norm()) - 1) < 1e-5
        ids = torch.tensor([encode(text)])
        with torch.no_grad():
            logits = tp.llama_forward(CFG, w, ids, torch.ones_like(ids))[0].double().mean(0)
        direction = emb @ w["lm_head.weight"].double().T
        assert torch.allclose(direction / direction.norm(), logits / logits.norm(), atol=1e-4)
    status, body = post(server.url + "/v1/embeddings", {"input": "Hello there", "encoding_format": "base64"})
    import base64
    import struct
    raw = base64.b64decode(json.loads(body)["data"][0]["embedding"])
    assert list(struct.unpack(f"<{len(raw) // 4}f", raw)) == pytest.approx(r["data"][0]["embedding"], abs=1e-7)
    status, body = post(server.url + "/v1/embeddings", {"input": 7})
    assert status == 400 and json.loads(body)["error"]["param"] == "input"


def greedy_chat_answer(folder, messages, n):
    prompt = subprocess.run([tp.FOUNDRY, "template", "--model", str(folder), "--messages", "/dev/stdin"],
                            input=json.dumps(messages), capture_output=True, text=True, check=True).stdout
    ids = [1] + encode(prompt[3:]) if prompt.startswith("<s>") else encode(prompt)
    want = generate_ids(folder, ids, n)
    return "".join(CHARS[i - 3] for i in want if i >= 3)


def test_foundry_chat_keeps_history_and_obeys_commands(folder):
    script = "Hello there\nHow are you?\n/system Be brief.\nHi again\n/reset\nHello there\n/exit\n"
    p = subprocess.run([tp.FOUNDRY, "chat", "--model", str(folder), "--temperature", "0", "--max-new-tokens", "8"],
                       input=script, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    a1 = greedy_chat_answer(folder, [{"role": "user", "content": "Hello there"}], 8)
    a2 = greedy_chat_answer(folder, [{"role": "user", "content": "Hello there"}, {"role": "assistant", "content": a1},
                                     {"role": "user", "content": "How are you?"}], 8)
    sys = {"role": "system", "content": "Be brief."}
    a3 = greedy_chat_answer(folder, [sys, {"role": "user", "content": "Hi again"}], 8)
    a4 = greedy_chat_answer(folder, [sys, {"role": "user", "content": "Hello there"}], 8)
    assert lines == [a1, a2, "(new system message; conversation reset)", a3, "(conversation reset)", a4], p.stdout


def test_foundry_chat_reads_ill_formed_utf8_as_replacement_characters(folder):
    # A line that is not UTF-8 ended the session with the JSON library's own error (type_error.316).
    script = b"\xff\xfe abc\nHello there\n/exit\n"
    p = subprocess.run([tp.FOUNDRY, "chat", "--model", str(folder), "--temperature", "0", "--max-new-tokens", "8"],
                       input=script, capture_output=True, timeout=120)
    assert p.returncode == 0 and b"json.exception" not in p.stderr, p.stderr
    # The same session typed with U+FFFD itself answers the same.
    typed = subprocess.run([tp.FOUNDRY, "chat", "--model", str(folder), "--temperature", "0", "--max-new-tokens", "8"],
                           input="\ufffd\ufffd abc\nHello there\n/exit\n".encode("utf-8"), capture_output=True,
                           timeout=120)
    assert typed.returncode == 0, typed.stderr
    assert len(p.stdout.splitlines()) == 2 and p.stdout == typed.stdout


def test_ctrl_c_stops_the_answer_not_the_chat(tmp_path):
    import signal
    # A context of 8192 positions: an answer takes seconds, so Ctrl-C lands in the middle of it.
    cfg = dict(CFG, max_position_embeddings=8192)
    cfg.pop("eos_token_id")  # no end-of-text: the answer runs until Ctrl-C
    folder = tmp_path / "long"
    ref.write_char_model(folder, cfg, CHARS, 21)
    p = subprocess.Popen([tp.FOUNDRY, "chat", "--model", str(folder), "--temperature", "0.9", "--max-new-tokens", "8000"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdin.write(b"Tell me a long story\n")
    p.stdin.flush()
    first = p.stdout.read(1)  # the answer has started streaming
    assert first
    p.send_signal(signal.SIGINT)
    out = first
    import select
    deadline = time.time() + 60
    while b"[stopped]" not in out:
        assert time.time() < deadline, out[-200:]
        if select.select([p.stdout], [], [], 1)[0]:
            chunk = p.stdout.read1(4096)
            assert chunk, p.stderr.read()
            out += chunk
    # The program is still there: it takes the next command and exits cleanly.
    p.stdin.write(b"/exit\n")
    p.stdin.close()
    assert p.wait(60) == 0


SCHEMA = {"type": "object",
          "properties": {"name": {"type": "string", "maxLength": 8}, "age": {"type": "integer"},
                         "ok": {"type": "boolean"}, "score": {"type": "number"},
                         "tags": {"type": "array", "items": {"enum": ["red", "green", 3]}, "maxItems": 3},
                         "pet": {"type": ["object", "null"], "properties": {"kind": {"const": "cat"}},
                                 "required": ["kind"]}},
          "required": ["name", "age", "ok", "tags", "pet"]}


def check_schema(v):
    assert isinstance(v, dict) and set(v) <= set(SCHEMA["properties"]) and set(SCHEMA["required"]) <= set(v)
    assert isinstance(v["name"], str) and len(v["name"]) <= 8
    assert isinstance(v["age"], int) and isinstance(v["ok"], bool)
    assert "score" not in v or isinstance(v["score"], (int, float))
    assert isinstance(v["tags"], list) and len(v["tags"]) <= 3 and all(t in ("red", "green", 3) for t in v["tags"])
    assert v["pet"] is None or v["pet"] == {"kind": "cat"}


def test_response_format_constrains_the_output(server):
    for seed in range(4):
        body = {"messages": [{"role": "user", "content": "Describe a person as JSON"}], "max_tokens": 400,
                "temperature": 1.0, "seed": seed,
                "response_format": {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA}}}
        status, text = post(server.url + "/v1/chat/completions", body)
        assert status == 200, text
        choice = json.loads(text)["choices"][0]
        assert choice["finish_reason"] == "stop", choice
        check_schema(json.loads(choice["message"]["content"]))
    status, text = post(server.url + "/v1/chat/completions",
                        {"messages": [{"role": "user", "content": "x"}], "max_tokens": 400, "temperature": 0,
                         "response_format": {"type": "json_object"}})
    choice = json.loads(text)["choices"][0]
    content = choice["message"]["content"]
    assert content.lstrip().startswith("{")
    if choice["finish_reason"] == "stop":
        assert isinstance(json.loads(content), dict)
    status, text = post(server.url + "/v1/chat/completions",
                        {"messages": [{"role": "user", "content": "x"}],
                         "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": {"anyOf": []}}}})
    err = json.loads(text)["error"]
    assert status == 400 and "anyOf" in err["message"] and err["param"] == "response_format"
    # Bounds no value meets were a 500 "no token satisfies the constraint" after generation began.
    for schema, words in [({"type": "string", "minLength": 10, "maxLength": 2}, "minLength 10 above maxLength 2"),
                          ({"type": "array", "minItems": 3, "maxItems": 1}, "minItems 3 above maxItems 1")]:
        status, text = post(server.url + "/v1/chat/completions",
                            {"messages": [{"role": "user", "content": "x"}], "max_tokens": 8,
                             "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": schema}}})
        err = json.loads(text)["error"]
        assert status == 400 and words in err["message"] and err["param"] == "response_format", text
    # OpenAI's null content (an assistant turn that only called tools) renders as empty text.
    status, text = post(server.url + "/v1/chat/completions",
                        {"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": None},
                                      {"role": "user"}], "max_tokens": 2, "temperature": 0})
    assert status == 200, text


def test_deeply_nested_requests_are_refused_not_fatal(server):
    """A 200 KB body of 100 000 nested arrays (or a schema deeper than 128 levels, or a schema's bad field)
    is a 400 naming it; the server keeps serving. nlohmann::json copies and dumps a value with a
    recursion per level (100 000 levels overflow an 8 MB stack), and the schema reader recursed per
    level too (tests/unit/json_schema_test.cpp: 100 000 levels crashed it)."""
    deep = "[" * 100000 + "]" * 100000
    status, text = post(server.url + "/v1/chat/completions", None,
                        raw=('{"messages": [{"role": "user", "content": %s}]}' % deep).encode())
    err = json.loads(text)["error"]
    assert status == 400 and "nests 100003 levels deep; at most 128" in err["message"], text
    schema = {}
    for _ in range(70):
        schema = {"type": "object", "properties": {"a": schema}}
    status, text = post(server.url + "/v1/chat/completions",
                        {"messages": [{"role": "user", "content": "x"}], "max_tokens": 2,
                         "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": schema}}})
    assert status == 400 and "at most 128" in json.loads(text)["error"]["message"], text
    bad = {"type": "object", "properties": {"a": {}}, "required": [1]}
    status, text = post(server.url + "/v1/chat/completions",
                        {"messages": [{"role": "user", "content": "x"}], "max_tokens": 2,
                         "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": bad}}})
    err = json.loads(text)["error"]
    assert status == 400 and "required must list property names" in err["message"] and err["param"] == "response_format"
    status, text = post(server.url + "/v1/chat/completions",
                        {"messages": [{"role": "user", "content": "x"}], "max_tokens": 2, "temperature": 0})
    assert status == 200, text


def test_kv_cache_format_and_adapterless_flags(folder):
    """--kv-cache f16 stores the paged blocks in f16: greedy output equals `foundry generate
    --kv-cache f16` on the same prompt ids (through prefill gathers and streaming decode)."""
    s = Server(folder, "--kv-cache", "f16", "--parallel", "2", "--ctx-size", "128", "--block-size", "8")
    try:
        ids = [1] + encode("Paged blocks in half precision")
        status, body = post(s.url + "/v1/completions", {"prompt": ids, "max_tokens": 20, "temperature": 0})
        assert status == 200, body
        out = subprocess.run([tp.FOUNDRY, "generate", "--model", str(folder), "--input-ids", ",".join(map(str, ids)),
                              "--max-new-tokens", "20", "--temperature", "0", "--kv-cache", "f16", "--print-ids"],
                             capture_output=True, text=True, check=True).stdout
        want = json.loads(out.strip().splitlines()[-1])
        assert json.loads(body)["choices"][0]["text"] == "".join(CHARS[i - 3] for i in want if i >= 3)
        models = json.loads(urllib.request.urlopen(s.url + "/v1/models").read())
        assert models["data"][0]["max_model_len"] == 128
        status, body = post(s.url + "/v1/completions", {"prompt": "x" * 200})
        assert status == 400 and "maximum context length is 128" in json.loads(body)["error"]["message"]
    finally:
        s.close()
