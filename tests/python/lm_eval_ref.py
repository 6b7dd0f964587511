"""A transcription of lm-evaluation-harness v0.4 for Foundry's parity tests, running on the PyTorch
reference Llama of test_pretrained.py with a character-level tokenizer.

Request level (lm_eval/models/huggingface.py: _loglikelihood_tokens, loglikelihood_rolling,
_encode_pair, generate_until; lm_eval/utils.py: get_rolling_token_windows, make_disjoint_window):
`Harness`. Task level (lm_eval/api/task.py ConfigurableTask, api/samplers.py, api/metrics.py,
filters/extraction.py, evaluator_utils.py): `run_task`, with jinja2 and random.Random as lm-eval
uses them, so the contexts, the few-shot draws and the bootstrap stderr are the harness's."""
import ast
import json
import math
import os
import random
import re
import string

import jinja2
import numpy as np
import torch
import torch.nn.functional as F
import yaml

import test_pretrained as tp


class Harness:
    """HFLM's request semantics; prefix token bos, max_length max_position_embeddings."""

    def __init__(self, cfg, w, chars):
        self.cfg, self.w, self.chars = cfg, w, chars
        self.max_len, self.prefix = cfg["max_position_embeddings"], cfg["bos_token_id"]

    def write_tokenizer(self, folder):
        """<unk> 0, <s> 1 (bos), </s> 2 (eos), then one token per character."""
        vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{c: i + 3 for i, c in enumerate(self.chars)}}
        tok = {"version": "1.0", "truncation": None, "padding": None,
               "added_tokens": [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                                 "normalized": False, "special": True}
                                for t, i in (("<unk>", 0), ("<s>", 1), ("</s>", 2))],
               "normalizer": None, "pre_tokenizer": None, "post_processor": None, "decoder": {"type": "Fuse"},
               "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                         "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                         "merges": []}}
        (folder / "tokenizer.json").write_text(json.dumps(tok))

    def encode(self, text):
        return [self.chars.index(c) + 3 for c in text]

    def decode(self, ids):
        return "".join(self.chars[i - 3] if i >= 3 else "" for i in ids)

    def logits(self, ids):
        t = torch.tensor([ids])
        with torch.no_grad():
            return tp.llama_forward(self.cfg, self.w, t, torch.ones_like(t))[0]

    def loglikelihood_tokens(self, context_enc, continuation_enc):
        inp = (context_enc + continuation_enc)[-(self.max_len + 1):][:-1]
        contlen, inplen = len(continuation_enc), len(inp)
        logits = F.log_softmax(self.logits(inp).float(), dim=-1)[inplen - contlen:inplen]
        greedy = logits.argmax(dim=-1)
        cont = torch.tensor(continuation_enc)
        return float(torch.gather(logits, 1, cont.unsqueeze(-1)).squeeze(-1).sum()), bool((greedy == cont).all())

    def loglikelihood(self, context_enc, continuation_enc):
        return self.loglikelihood_tokens(context_enc or [self.prefix], continuation_enc)

    def rolling(self, tokens):
        windows = map(make_disjoint_window, get_rolling_token_windows(tokens, self.prefix, self.max_len, 1))
        return sum(self.loglikelihood_tokens(a, b)[0] for a, b in windows)

    def encode_pair(self, context, continuation):
        n_spaces = len(context) - len(context.rstrip())
        if n_spaces > 0:
            continuation = context[-n_spaces:] + continuation
            context = context[:-n_spaces]
        whole_enc, context_enc = self.encode(context + continuation), self.encode(context)
        return context_enc, whole_enc[len(context_enc):]

    def generate_until(self, context, until, max_gen_toks):
        until = list(until) + ["</s>"]
        ids = self.encode(context)[-(self.max_len - max_gen_toks):]
        out = []
        for _ in range(max_gen_toks):
            nxt = int(self.logits(ids + out)[-1].argmax())
            out.append(nxt)
            if nxt == self.cfg["eos_token_id"] or any(u in self.decode(out) for u in until):
                break
        s = self.decode(out)
        for term in until:
            if term:
                s = s.split(term)[0]
        return s


def write_char_model(folder, cfg, chars, seed):
    """A reference Llama folder (random weights from `seed`) with the character tokenizer; its Harness."""
    w = tp.llama_weights(cfg, torch.Generator().manual_seed(seed))
    tp.write_folder(str(folder), cfg, w)
    h = Harness(cfg, w, chars)
    h.write_tokenizer(folder)
    return h


def get_rolling_token_windows(token_list, prefix_token, max_seq_len, context_len):
    pred_len = max_seq_len - context_len + 1
    predicted = 0
    first_seq_len = min(max_seq_len, len(token_list))
    yield [prefix_token] + token_list[: first_seq_len - 1], token_list[:first_seq_len]
    predicted += first_seq_len
    while predicted < len(token_list):
        window_pred_len = min(len(token_list) - predicted, pred_len)
        window_end = predicted + window_pred_len
        yield token_list[window_end - max_seq_len - 1: window_end - 1], token_list[window_end - window_pred_len: window_end]
        predicted += window_pred_len


def make_disjoint_window(pair):
    a, b = pair
    return a[: len(a) - (len(b) - 1)], b


# ---- the task level ----------------------------------------------------------------------------

def _regex_replace(s, pattern, repl, count=0):
    return re.sub(pattern, repl, s, count=count)


ENV = jinja2.Environment(loader=jinja2.BaseLoader(), undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
ENV.filters["regex_replace"] = _regex_replace


def load_config(path):
    with open(path) as f:
        cfg = yaml.full_load(f)
    if "include" in cfg:
        base = load_config(os.path.join(os.path.dirname(path), cfg.pop("include")))
        base.update(cfg)
        cfg = base
    return cfg


def _rows(path):
    if path.endswith(".csv"):
        import csv
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
        for col in rows[0]:  # pandas' inference
            for cast in (int, float):
                try:
                    vals = [cast(r[col]) for r in rows]
                except ValueError:
                    continue
                for r, v in zip(rows, vals):
                    r[col] = v
                break
        return rows
    return [json.loads(line) for line in open(path) if line.strip()]


def split_docs(cfg, yaml_dir, split):
    path = os.path.join(yaml_dir, cfg["dataset_path"])
    if os.path.isdir(path):
        for ext in (".jsonl", ".json", ".csv"):
            if os.path.exists(os.path.join(path, split + ext)):
                return _rows(os.path.join(path, split + ext))
        raise FileNotFoundError(split)
    rows = _rows(path)
    return [r for r in rows if r.get("split") == split] if any("split" in r for r in rows) else rows


class Task:
    """ConfigurableTask's doc_to_* resolution, few-shot context and requests."""

    def __init__(self, path, seed=1234, num_fewshot=None):
        self.cfg = load_config(path)
        c = self.cfg
        d = os.path.dirname(path)
        self.output_type = c.get("output_type", "generate_until")
        self.target_delimiter = c.get("target_delimiter", " ")
        self.fewshot_delimiter = c.get("fewshot_delimiter", "\n\n")
        self.eval_docs = split_docs(c, d, c["test_split"] if c.get("test_split") else c["validation_split"])
        src = c.get("fewshot_split") or c.get("training_split") or c.get("validation_split") or c.get("test_split")
        self.fewshot_docs = split_docs(c, d, src)
        self.rnd = random.Random(seed)
        k = c.get("num_fewshot") or 0
        if num_fewshot is not None and c.get("num_fewshot") != 0:
            k = num_fewshot
        self.k = k
        gk = c.get("generation_kwargs") or {}
        self.until = gk.get("until", [self.fewshot_delimiter])
        self.max_gen_toks = gk.get("max_gen_toks", 256)
        self.features = set(self.eval_docs[0])

    def _apply(self, spec, doc):
        return ENV.from_string(spec).render(**doc)

    def _resolve(self, key, doc):
        """A field name, an int / list literal, or a template (digits become an index when there
        are choices)."""
        spec = self.cfg.get(key)
        if isinstance(spec, (int, list)):
            return spec
        if spec in self.features:
            return doc[spec]
        text = self._apply(spec, doc)
        if text.isdigit() and self.cfg.get("doc_to_choice") is not None:
            return ast.literal_eval(text)
        return text

    def doc_to_text(self, doc):
        return self._resolve("doc_to_text", doc)

    def doc_to_target(self, doc):
        value = self._resolve("doc_to_target", doc)
        if isinstance(value, str) and len(value) >= 2 and value[0] == "[" and value[-1] == "]":
            try:
                return ast.literal_eval(value)
            except (SyntaxError, ValueError):
                return value
        return value

    def doc_to_choice(self, doc):
        spec = self.cfg.get("doc_to_choice")
        if isinstance(spec, list):
            return spec
        if isinstance(spec, dict):
            return list(spec.values())
        if spec in self.features:
            return doc[spec]
        return ast.literal_eval(self._apply(spec, doc))

    def fewshot_context(self, doc):
        c = self.cfg
        ctx = self._apply(c["description"], doc) if c.get("description") else ""
        if self.k > 0:
            n = self.k + 1 if c.get("fewshot_split") == c.get("test_split") else self.k
            drawn = self.rnd.sample(self.fewshot_docs, n)
            for ex in [x for x in drawn if x != doc][: self.k]:
                text, tgt = self.doc_to_text(ex), self.doc_to_target(ex)
                has_choice = c.get("doc_to_choice") is not None
                ctx += text if (not has_choice or isinstance(text, str)) else self.doc_to_choice(ex)[text]
                if tgt != "":
                    ctx += self.target_delimiter
                    ctx += (str(tgt[0]) if isinstance(tgt, list) else tgt if (not has_choice or isinstance(tgt, str))
                            else str(self.doc_to_choice(ex)[tgt]))
                    ctx += self.fewshot_delimiter
        return ctx


def regex_filter(resp, pattern="#### (\\-?[0-9\\.\\,]+)", group_select=0, fallback="[invalid]"):
    match = re.compile(pattern).findall(resp)
    if match:
        match = match[group_select]
        if isinstance(match, tuple):
            match = [m for m in match if m]
            match = match[0] if match else fallback
        return match.strip()
    return fallback


def exact_match(pred, ref, ignore_case=False, ignore_punctuation=False, ignore_numbers=False, regexes_to_ignore=()):
    for s in regexes_to_ignore:
        pred, ref = re.sub(s, "", pred), re.sub(s, "", ref)
    if ignore_case:
        pred, ref = pred.lower(), ref.lower()
    if ignore_punctuation:
        table = str.maketrans("", "", string.punctuation)
        pred, ref = pred.translate(table), ref.translate(table)
    if ignore_numbers:
        table = str.maketrans("", "", string.digits)
        pred, ref = pred.translate(table), ref.translate(table)
    return float(pred == ref)


def sample_stddev(arr):
    mu = sum(arr) / len(arr)
    return math.sqrt(sum((x - mu) ** 2 for x in arr) / (len(arr) - 1))


def bootstrap_stderr(f, xs, iters):
    res = []
    chunk = min(1000, iters)
    for i in range(iters // chunk):
        rnd = random.Random()
        rnd.seed(i)
        res.extend(f(rnd.choices(xs, k=len(xs))) for _ in range(chunk))
    return sample_stddev(res)


def _mean(xs):
    return sum(xs) / len(xs)


AGGREGATIONS = {
    "mean": _mean,
    "perplexity": lambda lls: math.exp(-_mean(lls)),
    "weighted_perplexity": lambda items: math.exp(-sum(a for a, _ in items) / sum(b for _, b in items)),
    "bits_per_byte": lambda items: -sum(a for a, _ in items) / sum(b for _, b in items) / math.log(2),
}


def _f1(items):
    from sklearn.metrics import f1_score
    golds, preds = zip(*items)
    return float(np.max(f1_score(golds, preds)))


def _mcc(items):
    from sklearn.metrics import matthews_corrcoef
    golds, preds = zip(*items)
    return float(matthews_corrcoef(golds, preds))


AGGREGATIONS.update({"f1": _f1, "matthews_corrcoef": _mcc})
DEFAULT_AGG = {"acc": "mean", "acc_norm": "mean", "exact_match": "mean", "perplexity": "perplexity",
               "word_perplexity": "weighted_perplexity", "byte_perplexity": "weighted_perplexity",
               "bits_per_byte": "bits_per_byte", "f1": "f1", "mcc": "matthews_corrcoef"}
DEFAULT_METRICS = {"multiple_choice": ["acc", "acc_norm"], "loglikelihood": ["perplexity", "acc"],
                   "loglikelihood_rolling": ["word_perplexity", "byte_perplexity", "bits_per_byte"],
                   "generate_until": ["exact_match"]}
BOOTSTRAPPED = {"perplexity", "f1", "matthews_corrcoef"}


def evaluate(path, h, limit=None, seed=1234, num_fewshot=None, bootstrap_iters=100000):
    """lm-eval's evaluate() for one task file: {"metric,filter": value, "metric_stderr,filter": ...}
    and the requests' arguments per document."""
    t = Task(path, seed, num_fewshot)
    docs = t.eval_docs[:limit] if limit else t.eval_docs
    metrics = t.cfg.get("metric_list") or [{"metric": m} for m in DEFAULT_METRICS[t.output_type]]
    filters = t.cfg.get("filter_list") or [{"name": "none", "filter": [{"function": "take_first"}]}]
    per_doc, arguments = [], []
    for doc in docs:
        ctx = t.fewshot_context(doc)
        if t.output_type == "loglikelihood_rolling":
            text = t.doc_to_target(doc)
            ll = h.rolling(h.encode(text))
            arguments.append([(text,)])
            per_doc.append({"word_perplexity": (ll, len(re.split(r"\s+", text))),
                            "byte_perplexity": (ll, len(text.encode("utf-8"))),
                            "bits_per_byte": (ll, len(text.encode("utf-8")))})
            continue
        text = t.doc_to_text(doc)
        if t.output_type == "multiple_choice":
            choices = t.doc_to_choice(doc)
            if isinstance(text, int):  # multiple_input
                cont = t.target_delimiter + t.doc_to_target(doc)
                args = [(ctx + ch, cont) for ch in choices]
                gold = text
            else:
                args = [(ctx + text, t.target_delimiter + ch) for ch in choices]
                gold = t.doc_to_target(doc)
                if isinstance(gold, str):
                    gold = choices.index(gold) if gold in choices else -100
            arguments.append(args)
            res = [h.loglikelihood(*h.encode_pair(a, b)) for a, b in args]
            lls = np.array([r[0] for r in res])
            pred = int(np.argmax(lls))
            pred_norm = int(np.argmax(lls / np.array([float(len(ch)) for ch in choices])))
            per_doc.append({"acc": float(pred == gold), "acc_norm": float(pred_norm == gold),
                            "exact_match": int(res[gold][1]), "f1": (gold, pred), "mcc": (gold, pred)})
        elif t.output_type == "loglikelihood":
            target = t.doc_to_target(doc)
            arguments.append([(ctx + text, target)])
            ll, greedy = h.loglikelihood(*h.encode_pair(ctx + text, target))
            per_doc.append({"perplexity": ll, "acc": int(greedy)})
        else:
            arguments.append([(ctx + text,)])
            resp = h.generate_until(ctx + text, t.until, t.max_gen_toks)
            gold = t.doc_to_target(doc)
            scored = {}
            for ens in filters:
                out = resp
                for step in ens["filter"]:
                    if step["function"] == "regex":
                        kw = {k: step[k] for k in ("group_select", "fallback") if k in step}
                        out = regex_filter(out, step.get("regex_pattern", "#### (\\-?[0-9\\.\\,]+)"), **kw)
                for m in metrics:
                    opts = {k: v for k, v in m.items() if k not in ("metric", "aggregation", "higher_is_better")}
                    scored[(m["metric"], ens["name"])] = exact_match(out, str(gold), **opts)
            per_doc.append(scored)
    results = {}
    for ens in filters:
        for m in metrics:
            name = m["metric"]
            items = [d[(name, ens["name"])] if (name, ens["name"]) in d else d[name] for d in per_doc]
            agg = m.get("aggregation", DEFAULT_AGG[name])
            results[f"{name},{ens['name']}"] = AGGREGATIONS[agg](items)
            if len(items) <= 1:
                se = "N/A"
            elif agg == "mean":
                se = sample_stddev(items) / math.sqrt(len(items))
            elif agg in BOOTSTRAPPED:
                se = bootstrap_stderr(AGGREGATIONS[agg], items, bootstrap_iters)
            else:
                se = "N/A"
            results[f"{name}_stderr,{ens['name']}"] = se
    return results, arguments
