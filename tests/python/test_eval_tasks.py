"""`foundry eval --tasks` on the shipped task files (tasks/) with small made-up data, against a
transcription of lm-evaluation-harness v0.4's task pipeline (lm_eval_ref: jinja2 with lm-eval's
environment, random.Random few-shot draws, process_results, filters, aggregations and the
deterministic bootstrap) running on the PyTorch reference Llama."""
import json
import os
import shutil
import subprocess

import pytest

import lm_eval_ref as ref
import test_pretrained as tp

pytestmark = tp.pytestmark

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHARS = [chr(c) for c in range(32, 127)] + ["\n"]
CFG = dict(tp.LLAMA, vocab_size=3 + len(CHARS), max_position_embeddings=512)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("eval_tasks")
    folder = tmp / "model"
    return folder, ref.write_char_model(folder, CFG, CHARS, 3)


def jsonl(path, rows):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)


def make_data(root):
    d = os.path.join(root, "data")
    hs = lambda i, label: {"activity_label": "Baking cookies", "ctx_a": f"A woman [header] mixes dough {i}.",
                           "ctx_b": "SHE puts it in the oven", "label": str(label),
                           "endings": [f" [title] then it bakes {i}.", "she eats  it.", "[step] it burns", "it rains"]}
    jsonl(f"{d}/hellaswag/train.jsonl", [hs(i, i % 4) for i in range(3)])
    jsonl(f"{d}/hellaswag/validation.jsonl", [hs(i + 10, (i + 1) % 4) for i in range(4)])
    arc = lambda i: {"id": f"q{i}", "question": f"Which is bigger, {i} or {i + 1}?", "answerKey": "B" if i % 2 else "A",
                     "choices": {"text": [str(i + i % 2), str(i + 1 - i % 2), "neither"], "label": ["A", "B", "C"]}}
    for split, start in (("train", 0), ("validation", 20), ("test", 40)):
        jsonl(f"{d}/arc_easy/{split}.jsonl", [arc(start + i) for i in range(5)])
    pq = lambda i: {"goal": f"Open jar {i}", "sol1": "twist the lid", "sol2": "hit it hard", "label": i % 2}
    jsonl(f"{d}/piqa/train.jsonl", [pq(i) for i in range(3)])
    jsonl(f"{d}/piqa/validation.jsonl", [pq(i) for i in range(3, 7)])
    wg = lambda i: {"sentence": f"The cup fell off the table {i} because _ was unstable.", "option1": "the cup",
                    "option2": "the table", "answer": "2" if i % 2 else "1"}
    jsonl(f"{d}/winogrande/train.jsonl", [wg(i) for i in range(3)])
    jsonl(f"{d}/winogrande/validation.jsonl", [wg(i) for i in range(3, 6)])
    jsonl(f"{d}/lambada_openai/test.jsonl", [{"text": t} for t in
                                             ["the cat sat on the mat", "she opened the door and saw the sea",
                                              "he ran to the store"]])
    jsonl(f"{d}/wikitext/test.jsonl", [{"page": " = Title = \n\nThe first line of it.\n Second  line here .\n"},
                                       {"page": "Short page."}])
    gs = lambda i: {"question": f"What is {i} plus {i}?", "answer": f"{i} plus {i} is {2 * i}.\n#### {2 * i}"}
    jsonl(f"{d}/gsm8k/train.jsonl", [gs(i) for i in range(6)])
    jsonl(f"{d}/gsm8k/test.jsonl", [gs(i) for i in range(10, 12)])
    for task, text in (("sst2", "a fine film"), ("cola", "the cat sat")):
        for split, n in (("train", 3), ("validation", 6)):
            jsonl(f"{d}/glue/{task}/{split}.jsonl", [{"sentence": f"{text} {i}", "label": i % 2} for i in range(n)])
    for split, n in (("train", 3), ("validation", 6)):
        jsonl(f"{d}/glue/mrpc/{split}.jsonl", [{"sentence1": f"it is {i}", "sentence2": f"it was {i}", "label": (i // 2) % 2}
                                              for i in range(n)])
        jsonl(f"{d}/glue/stsb/{split}.jsonl", [{"sentence1": f"a dog {i}", "sentence2": "a cat", "label": 0.4 * i + 0.1}
                                              for i in range(n)])


SIMPLE = [("hellaswag.yaml", None, None), ("arc_easy.yaml", 2, None), ("piqa.yaml", 1, None), ("winogrande.yaml", 2, None),
          ("lambada_openai.yaml", None, None), ("wikitext.yaml", None, None), ("glue/sst2.yaml", 1, None),
          ("glue/mrpc.yaml", None, None), ("glue/cola.yaml", None, None), ("gsm8k.yaml", 2, 2)]


def run_tasks(model_dir, files, tmp, *extra):
    out = os.path.join(tmp, "out", "results.json")
    p = subprocess.run([tp.FOUNDRY, "eval", "--model", str(model_dir), "--tasks", ",".join(files), "--output", out,
                        "--log-samples", *extra], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return json.load(open(out)), os.path.dirname(out), p


@pytest.mark.parametrize("name,num_fewshot,limit", SIMPLE, ids=[s[0] for s in SIMPLE])
def test_task_equals_the_harness(model, tmp_path, name, num_fewshot, limit):
    folder, h = model
    tasks = tmp_path / "tasks"
    shutil.copytree(os.path.join(REPO, "tasks"), tasks)
    make_data(str(tasks))
    path = str(tasks / name)
    extra = []
    if num_fewshot is not None:
        extra += ["--num-fewshot", str(num_fewshot), "--fewshot-seed", "7"]
    if limit is not None:
        extra += ["--limit", str(limit)]
    got, out_dir, _ = run_tasks(folder, [path], str(tmp_path), *extra, "--bootstrap-iters", "2000")
    want, arguments = ref.evaluate(path, h, limit=limit, seed=7 if num_fewshot is not None else 1234,
                                   num_fewshot=num_fewshot, bootstrap_iters=2000)
    task = ref.load_config(path)["task"]
    res = got["results"][task]
    assert res["alias"] == task
    for key, value in want.items():
        if value == "N/A":
            assert res[key] == "N/A", key
        else:
            assert res[key] == pytest.approx(value, rel=1e-4, abs=1e-4), (key, res[key], value)
    assert set(res) == set(want) | {"alias"}
    # The prompts are the harness's, character for character (few-shot draws included).
    samples = [json.loads(line) for line in open(os.path.join(out_dir, f"samples_{task}.jsonl"))]
    filters = {s["filter"] for s in samples}
    for s in samples:
        args = [tuple(a.values()) for a in s["arguments"].values()]
        want_args = arguments[s["doc_id"]]
        assert [a[: len(w)] if len(w) == 2 else a[:1] for a, w in zip(args, want_args)] == want_args
    assert len(samples) == len(arguments) * len(filters)
    assert got["n-shot"][task] == (num_fewshot if num_fewshot is not None and ref.load_config(path).get("num_fewshot") != 0
                                   else ref.load_config(path).get("num_fewshot") or 0)
    n = len(ref.Task(path).eval_docs)
    assert got["n-samples"][task] == {"original": n, "effective": min(limit or n, n)}
    assert task in got["configs"] and task in got["versions"] and task in got["higher_is_better"]


def test_stsb_squad_and_summarization_metrics(model, tmp_path):
    """Foundry's own task shapes: STS-B correlations (SciPy), SQuAD EM/F1 and ROUGE over greedy
    generations (the reference generation scored by the metrics tested in test_eval_metrics)."""
    stats = pytest.importorskip("scipy.stats")
    folder, h = model
    tasks = tmp_path / "tasks"
    shutil.copytree(os.path.join(REPO, "tasks"), tasks)
    make_data(str(tasks))
    sq = lambda i: {"title": "Towers", "context": f"The tower {i} is in Paris.", "question": f"Where is tower {i}?",
                    "answers": {"text": ["Paris", "in Paris"], "answer_start": [14, 11]}}
    jsonl(str(tasks / "data/squad/train.jsonl"), [sq(i) for i in range(2)])
    jsonl(str(tasks / "data/squad/validation.jsonl"), [sq(i) for i in range(2, 5)])
    sm = lambda i: {"document": f"Rain fell on day {i}. The river rose.", "summary": f"The river rose after rain {i}."}
    jsonl(str(tasks / "data/summarization/validation.jsonl"), [sm(i) for i in range(3)])
    jsonl(str(tasks / "data/summarization/train.jsonl"), [sm(9)])
    files = [str(tasks / "glue/stsb.yaml"), str(tasks / "squad.yaml"), str(tasks / "summarization.yaml")]
    got, out_dir, p = run_tasks(folder, files, str(tmp_path), "--limit", "3")
    assert "|stsb|" in p.stdout and "pearsonr" in p.stdout
    st = ref.Task(files[0])
    golds, preds = [], []
    for doc in st.eval_docs[:3]:
        ctx = st.doc_to_text(doc)
        lls = [h.loglikelihood(*h.encode_pair(ctx, " " + c))[0] for c in st.doc_to_choice(doc)]
        golds.append(doc["label"])
        preds.append(float(st.doc_to_choice(doc)[int(max(range(len(lls)), key=lambda i: lls[i]))]))
    r = got["results"]["stsb"]
    if len(set(preds)) > 1:
        assert r["pearsonr,none"] == pytest.approx(stats.pearsonr(golds, preds)[0], rel=1e-6)
        assert r["spearmanr,none"] == pytest.approx(stats.spearmanr(golds, preds)[0], rel=1e-6)
    else:
        assert r["pearsonr,none"] is None  # constant predictions: undefined, as SciPy's NaN
    sq_task = ref.Task(files[1])
    gens = [h.generate_until(sq_task.doc_to_text(d), sq_task.until, sq_task.max_gen_toks) for d in sq_task.eval_docs[:3]]
    golds = [d["answers"]["text"] for d in sq_task.eval_docs[:3]]
    assert got["results"]["squad"]["squad_em,none"] == pytest.approx(
        sum(foundry_eval().squad_em(g, gs) for g, gs in zip(gens, golds)) / 3)
    assert got["results"]["squad"]["squad_f1,none"] == pytest.approx(
        sum(foundry_eval().squad_f1(g, gs) for g, gs in zip(gens, golds)) / 3)
    sm_task = ref.Task(files[2])
    gens = [h.generate_until(sm_task.doc_to_text(d), sm_task.until, sm_task.max_gen_toks) for d in sm_task.eval_docs]
    want = foundry_eval().rouge(gens, [d["summary"] for d in sm_task.eval_docs], use_stemmer=True)
    for k, v in want.items():
        assert got["results"]["summarization"][k + ",none"] == pytest.approx(v, abs=1e-12)
    samples = [json.loads(line) for line in open(os.path.join(out_dir, "samples_squad.jsonl"))]
    want_gens = [h.generate_until(sq_task.doc_to_text(d), sq_task.until, sq_task.max_gen_toks) for d in sq_task.eval_docs[:3]]
    assert [s["resps"][0][0] for s in samples] == want_gens == [s["filtered_resps"][0] for s in samples]
    assert [s["target"] for s in samples] == [str(g) for g in golds]


def foundry_eval():
    import foundry
    return foundry.eval


BAD = [
    ("task: t\ndataset_path: d.jsonl\noutput_type: multiple_choice\ndoc_to_text: q\ndoc_to_target: 0\n"
     "doc_to_choice: '{{ [] }}'\n", "document 0 has no choices"),
    ("task: t\ndataset_path: d.jsonl\noutput_type: multiple_choice\ndoc_to_text: q\ndoc_to_target: 0\n"
     "doc_to_choice: [a, b]\nshuffle: true\n", "'shuffle': unknown key"),
    ("task: t\ndataset_path: d.jsonl\ndoc_to_text: '{{ nope }}'\ndoc_to_target: a\n", "'doc_to_text': template: 'nope' is undefined"),
    ("task: t\ndataset_path: d.jsonl\ndoc_to_text: '{% if q %}'\ndoc_to_target: a\n", "'doc_to_text': template: missing {% endif %}"),
    ("task: t\ndataset_path: missing.jsonl\ndoc_to_text: q\ndoc_to_target: a\n", "no such data file"),
    ("task: t\ndataset_path: d.jsonl\nprocess_docs: !function utils.process_docs\ndoc_to_text: q\ndoc_to_target: a\n",
     "'process_docs'"),
    ("task: t\ndataset_path: d.jsonl\ndoc_to_text: !function utils.text\ndoc_to_target: a\n", "YAML tag !function"),
    ("task: t\ndataset_path: d.jsonl\noutput_type: classify\ndoc_to_text: q\ndoc_to_target: a\n", "'output_type'"),
    ("task: t\ndataset_path: d.jsonl\ndoc_to_text: q\ndoc_to_target: a\nmetric_list:\n  - metric: bleurt\n",
     "metric 'bleurt' is not computed for output_type generate_until"),
    ("task: t\ndataset_path: d.jsonl\ndoc_to_text: q\ndoc_to_target: a\nfilter_list:\n  - name: x\n    filter:\n"
     "      - function: regex\n        regex_pattern: '(unclosed'\n", "regex_pattern"),
    ("task: t\n  bad: [indent\n", "YAML error at line"),
    ("- just\n- a list\n", "must be a YAML mapping"),
]


@pytest.mark.parametrize("text,message", BAD, ids=range(len(BAD)))
def test_bad_task_files_fail_naming_the_file_and_key(model, tmp_path, text, message):
    folder, _ = model
    jsonl(str(tmp_path / "d.jsonl"), [{"q": "is it?", "a": "yes"}])
    task = tmp_path / "bad.yaml"
    task.write_text(text)
    p = subprocess.run([tp.FOUNDRY, "eval", "--model", str(folder), "--tasks", str(task), "--output",
                        str(tmp_path / "r.json")], capture_output=True, text=True)
    assert p.returncode == 1 and message in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert str(task) in p.stderr, p.stderr
    assert not (tmp_path / "r.json").exists()


def test_bad_data_and_a_model_without_a_tokenizer(model, tmp_path):
    folder, _ = model
    (tmp_path / "d.jsonl").write_text('{"q": "a"}\nnot json\n')
    task = tmp_path / "t.yaml"
    task.write_text("task: t\ndataset_path: d.jsonl\ndoc_to_text: q\ndoc_to_target: q\n")
    p = subprocess.run([tp.FOUNDRY, "eval", "--model", str(folder), "--tasks", str(task)], capture_output=True, text=True)
    assert p.returncode == 1 and "d.jsonl' line 2 is not a JSON object" in p.stderr, p.stderr
    (tmp_path / "d.jsonl").write_text('{"q": "a"}\n')
    bare = tmp_path / "bare"
    shutil.copytree(folder, bare)
    os.remove(bare / "tokenizer.json")
    p = subprocess.run([tp.FOUNDRY, "eval", "--model", str(bare), "--tasks", str(task)], capture_output=True, text=True)
    assert p.returncode == 1 and "no tokenizer" in p.stderr, p.stderr
    # Options out of range were taken as the default (or as an empty run) without a word.
    for flag, value, message in [("--num-fewshot", "-3", "num_fewshot must be 0 or more"),
                                 ("--num-fewshot", "-1", "num_fewshot must be 0 or more"),  # -1 was "unset"
                                 ("--limit", "-1", "limit must be a positive number"),
                                 ("--limit", "-2", "limit must be a positive number"),
                                 ("--limit", "nan", "limit must be a positive number"),
                                 ("--bootstrap-iters", "-5", "bootstrap_iters must be 0 (none) or more"),
                                 ("--max-length", "-4", "max_length must be 0 (the model's positions) or more")]:
        p = subprocess.run([tp.FOUNDRY, "eval", "--model", str(folder), "--tasks", str(task), flag, value],
                           capture_output=True, text=True)
        assert p.returncode == 1 and message in p.stderr, (flag, value, p.stderr)


def test_gold_labels_outside_the_choices_are_said(model, tmp_path):
    # Scored as wrong as lm-eval does, but no longer without a word (the task read as a model at 0%).
    folder, _ = model
    jsonl(str(tmp_path / "d.jsonl"), [{"q": "is it?", "a": "yes"}, {"q": "or not?", "a": "no"}])
    task = tmp_path / "t.yaml"
    task.write_text("task: t\ndataset_path: d.jsonl\noutput_type: multiple_choice\ndoc_to_text: '{{q}}'\n"
                    "doc_to_target: 7\ndoc_to_choice: [yes, no]\n")
    p = subprocess.run([tp.FOUNDRY, "eval", "--model", str(folder), "--tasks", str(task), "--bootstrap-iters", "0"],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "the gold label 7 is not one of the document's 2 choices" in p.stderr, p.stderr
