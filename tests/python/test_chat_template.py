"""Chat templates rendered by Foundry's Jinja subset against jinja2 itself, configured as
transformers' apply_chat_template configures it (trim_blocks, lstrip_blocks, raise_exception,
tojson with Python's separators): real templates from the shared tokenizer folders and the
published templates of the model families Foundry loads."""
import glob
import json
import os
import subprocess
import sys

import pytest

foundry = pytest.importorskip("foundry")
if not hasattr(foundry, "models"):
    pytest.skip("foundry is not built", allow_module_level=True)
jinja2 = pytest.importorskip("jinja2")
from jinja2.sandbox import ImmutableSandboxedEnvironment  # noqa: E402

SHARED = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "data", "tokenizers")


def jinja_render(source, **context):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env.from_string(source).render(**context)


TEMPLATES = {
    "chatml_qwen2": (
        "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
        "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
        "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"),
    "llama2": (
        "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
        "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
        "{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
        "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
        "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
        "{% if loop.index0 == 0 and system_message != false %}"
        "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
        "{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}"
        "{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
        "{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}"),
    "mistral": (
        "{{ bos_token }}{% for message in messages %}"
        "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
        "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
        "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
        "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}"
        "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}"),
    "gemma": (
        "{{ bos_token }}{% if messages[0]['role'] == 'system' %}"
        "{{ raise_exception('System role not supported') }}{% endif %}{% for message in messages %}"
        "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
        "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
        "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}"
        "{% set role = message['role'] %}{% endif %}"
        "{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}"
        "{% if add_generation_prompt %}{{'<start_of_turn>model\\n'}}{% endif %}"),
    "zephyr_multiline": (
        "{% for message in messages %}\n{% if message['role'] == 'user' %}\n"
        "{{ '<|user|>\\n' + message['content'] + eos_token }}\n{% elif message['role'] == 'system' %}\n"
        "{{ '<|system|>\\n' + message['content'] + eos_token }}\n{% elif message['role'] == 'assistant' %}\n"
        "{{ '<|assistant|>\\n'  + message['content'] + eos_token }}\n{% endif %}\n"
        "{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}"),
    "namespace_and_filters": (
        "{%- set ns = namespace(found=false, n=0) -%}\n"
        "{%- for m in messages if m.role != 'system' -%}\n"
        "  {%- set ns.n = ns.n + 1 -%}\n"
        "  {%- if m['content'] is string and 'secret' in m.content %}{% set ns.found = true %}{% endif -%}\n"
        "{%- endfor -%}\n"
        "n={{ ns.n }} found={{ ns.found }} roles={{ messages | map(attribute='role') | join(',') }}\n"
        "{{ messages[-1] | tojson }} {{ messages | length }} {{ (messages | first).role | upper }}\n"
        "{% for k, v in {'a': 1, 'b': [1, 2]}.items() %}{{ k }}={{ v }};{% endfor %}\n"
        "{{ 'x' if messages | selectattr('role', 'equalto', 'user') | list | length > 1 else 'y' }}"
        " {{ undefined_thing | default('dflt') }} {{ 7 // 2 }} {{ 7 % 3 }} {{ 2 ** 3 }} {{ 'a,b'.split(',') }}"),
}

CONVERSATIONS = [
    [{"role": "user", "content": "Hello there"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": " What is 2+2? "},
     {"role": "assistant", "content": "4"}, {"role": "user", "content": "And 3+3, it's a secret?"}],
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"}],
]


def shared_templates():
    out = {}
    for path in sorted(glob.glob(os.path.join(SHARED, "*", "tokenizer_config.json"))):
        t = json.load(open(path)).get("chat_template")
        if isinstance(t, str):
            out[os.path.basename(os.path.dirname(path))] = t
    return out


def cases():
    all_templates = dict(TEMPLATES, **shared_templates())
    return [(name, i) for name in all_templates for i in range(len(CONVERSATIONS))], all_templates


CASES, ALL = cases()


@pytest.mark.parametrize("name,conversation", CASES)
@pytest.mark.parametrize("add_generation_prompt", [False, True])
def test_renders_as_jinja2(name, conversation, add_generation_prompt):
    source, messages = ALL[name], CONVERSATIONS[conversation]
    context = dict(messages=messages, add_generation_prompt=add_generation_prompt, bos_token="<s>", eos_token="</s>")
    try:
        want = jinja_render(source, **context)
    except jinja2.exceptions.TemplateError as e:
        with pytest.raises(Exception, match=str(e)[:20].replace("(", ".").replace(")", ".")):
            foundry.models.ChatTemplate(source).render(**context)
        return
    assert foundry.models.ChatTemplate(source).render(**context) == want
    assert foundry.models.ChatTemplate(source).apply(messages, add_generation_prompt, "<s>", "</s>") == want


@pytest.mark.parametrize("source,message", [
    ("{% for x in y %}", "endfor"),
    ("{{ x | no_such_filter }}", "no_such_filter"),
    ("{% macro m() %}{% endmacro %}", "macro"),
    ("{{ 'unterminated }}", "unterminated"),
])
def test_unsupported_or_malformed_templates_fail_clearly(source, message):
    with pytest.raises(Exception, match=message):
        foundry.models.ChatTemplate(source).render(y=[1], x=1)


FOUNDRY_CLI = os.path.join(os.path.dirname(os.path.abspath(foundry.__file__)), "..", "..", "bin", "foundry")


@pytest.mark.skipif(not os.path.exists(FOUNDRY_CLI), reason="foundry CLI not built")
def test_template_command_renders_the_folders_template_or_chatml(tmp_path):
    messages = tmp_path / "messages.json"
    messages.write_text(json.dumps(CONVERSATIONS[1]))
    folder = tmp_path / "model"
    folder.mkdir()
    config = {"chat_template": TEMPLATES["llama2"], "bos_token": "<s>", "eos_token": {"content": "</s>"}}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    for extra, prompt in (([], True), (["--no-generation-prompt"], False)):
        p = subprocess.run([FOUNDRY_CLI, "template", "--model", str(folder), "--messages", str(messages), *extra],
                           capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
        assert p.stdout == jinja_render(TEMPLATES["llama2"], messages=CONVERSATIONS[1], add_generation_prompt=prompt,
                                        bos_token="<s>", eos_token="</s>")
    # No template: ChatML, with a warning.
    bare = tmp_path / "bare"
    bare.mkdir()
    p = subprocess.run([FOUNDRY_CLI, "template", "--model", str(bare), "--messages", str(messages)],
                       capture_output=True, text=True)
    assert p.returncode == 0 and "no chat_template" in p.stderr and "ChatML" in p.stderr
    chatml = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
              "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
    assert p.stdout == jinja_render(chatml, messages=CONVERSATIONS[1], add_generation_prompt=True)
    assert p.stdout.endswith("<|im_start|>assistant\n") and "<|im_start|>system\nBe brief.<|im_end|>\n" in p.stdout
    # Tools reach the template; bad files are clear errors.
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps([{"name": "get_weather"}]))
    config["chat_template"] = "{% for t in tools %}[{{ t.name }}]{% endfor %}{{ messages | length }}"
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    p = subprocess.run([FOUNDRY_CLI, "template", "--model", str(folder), "--messages", str(messages), "--tools",
                        str(tools)], capture_output=True, text=True)
    assert p.stdout == "[get_weather]4", p.stderr
    # tojson keeps the files' key order, as transformers does (json.dumps, sort_keys=False): a tool's
    # "name" before "description" before "parameters" (the CLI read them in sorted order before).
    tool = {"name": "get_weather", "description": "Weather", "parameters": {"type": "object", "properties": {
        "zip": {"type": "string"}, "city": {"type": "string"}}, "required": ["city"]}}
    tools.write_text(json.dumps([tool]))
    config["chat_template"] = "{{ tools[0] | tojson }}|{{ tools[0] | tojson(indent=2) }}|{{ messages[0] | tojson }}"
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    messages.write_text(json.dumps([{"role": "user", "content": "hi"}]))
    p = subprocess.run([FOUNDRY_CLI, "template", "--model", str(folder), "--messages", str(messages), "--tools",
                        str(tools)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert p.stdout == jinja_render(config["chat_template"], tools=[tool], messages=[{"role": "user", "content": "hi"}])
    messages.write_text("{not json")
    p = subprocess.run([FOUNDRY_CLI, "template", "--model", str(folder), "--messages", str(messages)],
                       capture_output=True, text=True)
    assert p.returncode == 1 and "not valid JSON" in p.stderr


def test_one_render_is_bounded_as_a_sandbox_bounds_it():
    """A template comes with a model folder: range() stops where jinja2's sandbox stops it (MAX_RANGE
    = 100000, the environment transformers renders in), and what one render makes is capped, so a
    template that grows a string or a list without end, or nests loops over large ranges, is an
    error within seconds (`'x' * 10**12` asks for a terabyte, nested loops over range(100000) for
    10^10 steps)."""
    import time
    ok = "{{ range(100000) | length }}|{{ range(10, 0, -3) | list }}|{{ 'ab' * 3 }}"
    assert foundry.models.ChatTemplate(ok).render() == jinja_render(ok) == "100000|[10, 7, 4, 1]|ababab"
    with pytest.raises(OverflowError, match="Range too big"):
        jinja_render("{{ range(100001) | length }}")
    with pytest.raises(ValueError, match="range too big: the sandbox blocks ranges larger than 100000"):
        foundry.models.ChatTemplate("{{ range(100001) | length }}").render()
    made = "made more than 67108864 bytes, items and loop steps"
    for source in ["{{ ('x' * 1000000000000) | length }}",
                   "{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = ns.x + [i] %}{% endfor %}",
                   "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"]:
        start = time.monotonic()
        with pytest.raises(ValueError, match=made):
            foundry.models.ChatTemplate(source).render()
        assert time.monotonic() - start < 30, source
    with pytest.raises(ValueError, match="tojson indent above 1000"):
        foundry.models.ChatTemplate("{{ [1] | tojson(indent=100000000000) }}").render()


def test_number_filters_and_literals_as_jinja2():
    """int and float take what Python's int() / float() take, else the filter's default (0, 0.0);
    a literal past 64 bits is refused (CPython would make a big int) instead of escaping as
    std::out_of_range (fuzz_chat_template's first find)."""
    source = ("{{ ' 2.5 ' | float }}|{{ '2.5x' | float }}|{{ 'abc' | float }}|{{ '1e999' | float }}|{{ 7 | float }}|"
              "{{ '12' | int }}|{{ 'x' | int }}|{{ 3.9 | int }}|{{ -3.9 | int }}|{{ true | int }}|{{ 1.5e3 }}|{{ 2E-2 }}|"
              "{{ 1e2 }}")
    assert foundry.models.ChatTemplate(source).render() == jinja_render(source)
    with pytest.raises(ValueError, match="integer literal 99999999999999999999 is beyond 64 bits"):
        foundry.models.ChatTemplate("{{ 99999999999999999999 }}")
    with pytest.raises(ValueError, match="is beyond 64 bits"):
        foundry.models.ChatTemplate("{{ 1e300 | int }}").render()


def test_range_takes_integers_and_long_spans_as_jinja2():
    """range()'s length is computed without overflow (range(-9e18, 9e18) overflowed int64 and ran on
    without end) and its arguments are integers, as in Python (range(1e300) was cast to an integer)."""
    big = 9000000000000000000
    ok = (f"{{{{ range(5, -6, -4) | list }}}}|{{{{ range(9223372036854775800, 9223372036854775807, 3) | list }}}}|"
          f"{{{{ range(-{big}, {big}, 1000000000000000) | length }}}}|{{{{ range(true, 3) | list }}}}")
    assert foundry.models.ChatTemplate(ok).render() == jinja_render(ok)
    with pytest.raises(OverflowError):
        jinja_render(f"{{{{ range(-{big}, {big}) | length }}}}")
    with pytest.raises(ValueError, match="range too big"):
        foundry.models.ChatTemplate(f"{{{{ range(-{big}, {big}) | length }}}}").render()
    for arg in ("2.0", "1e300"):
        with pytest.raises(TypeError):
            jinja_render("{{ range(%s) | list }}" % arg)
        with pytest.raises(ValueError, match="range\\(\\) takes integers"):
            foundry.models.ChatTemplate("{{ range(%s) | list }}" % arg).render()


def test_long_chains_render_as_far_as_jinja2_renders_them():
    """A chain of `+`, `~`, `and` or `|` is one tree level a link. jinja2 renders a 490-term sum and
    327 chained filters (beyond, Python's recursion limit: RecursionError); a tree up to 512 levels
    tall renders here, a taller one is refused by name instead of overflowing the stack."""
    sources = ["{{ " + "1 + " * 489 + "1 }}", "{{ 'x'" + "|string" * 327 + " }}",
               "{{ 'a'" + " ~ 'b'" * 400 + " }}", "{{ true" + " and true" * 450 + " }}"]
    # jinja2 in a fresh interpreter: under pytest's own frames it runs out of recursion sooner.
    script = ("import json, sys\nfrom jinja2.sandbox import ImmutableSandboxedEnvironment as E\n"
              "print(json.dumps([E().from_string(s).render() for s in json.load(sys.stdin)]))")
    p = subprocess.run([sys.executable, "-c", script], input=json.dumps(sources), capture_output=True, text=True,
                       check=True)
    for source, expected in zip(sources, json.loads(p.stdout)):
        assert foundry.models.ChatTemplate(source).render() == expected, source[:40]
    assert foundry.models.ChatTemplate("{{ " + "1 + " * 511 + "1 }}").render() == "512"
    for source in ["{{ " + "1 + " * 512 + "1 }}", "{{ 'x'" + "|string" * 512 + " }}"]:
        with pytest.raises(ValueError, match="expression's tree is more than 512 levels tall"):
            foundry.models.ChatTemplate(source)
