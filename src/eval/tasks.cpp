// Running lm-eval tasks: few-shot contexts, requests per output_type, the harness's
// process_results, filters, aggregations and stderr, and results.json / samples / the table.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <limits>
#include <set>

#include <fmt/format.h>
#include <utf8proc.h>

#include "eval/python_str.h"
#include "eval/task_config.h"
#include "foundry/core/error.h"
#include "foundry/eval/metrics.h"
#include "foundry/eval/requests.h"
#include "foundry/text/py_float.h"
#include "foundry/text/pyre.h"
#include "track/sha256.h"

namespace foundry::eval {

namespace {

// ---- per-document items and the metrics computed from them ---------------------------------------

// What one document contributes to one metric: a number, a (value, weight) pair, a (gold, pred)
// pair, or texts for corpus-level BLEU/chrF.
struct Item {
  double x = 0, y = 0;
  std::vector<std::string> refs;
  std::string hyp;
};

enum class ItemKind { Scalar, Pair, Texts };

struct MetricInfo {
  ItemKind kind;
  std::string default_aggregation;
};

const std::map<std::string, MetricInfo>& metric_registry() {
  static const std::map<std::string, MetricInfo> r = {
      {"acc", {ItemKind::Scalar, "mean"}},          {"acc_norm", {ItemKind::Scalar, "mean"}},
      {"exact_match", {ItemKind::Scalar, "mean"}},  {"perplexity", {ItemKind::Scalar, "perplexity"}},
      {"word_perplexity", {ItemKind::Pair, "weighted_perplexity"}},
      {"byte_perplexity", {ItemKind::Pair, "weighted_perplexity"}},
      {"bits_per_byte", {ItemKind::Pair, "bits_per_byte"}},
      {"f1", {ItemKind::Pair, "f1"}},               {"mcc", {ItemKind::Pair, "matthews_corrcoef"}},
      {"pearsonr", {ItemKind::Pair, "pearsonr"}},   {"spearmanr", {ItemKind::Pair, "spearmanr"}},
      {"squad_em", {ItemKind::Scalar, "mean"}},     {"squad_f1", {ItemKind::Scalar, "mean"}},
      {"bleu", {ItemKind::Texts, "bleu"}},          {"chrf", {ItemKind::Texts, "chrf"}},
      {"rouge1", {ItemKind::Scalar, "mean"}},       {"rouge2", {ItemKind::Scalar, "mean"}},
      {"rougeL", {ItemKind::Scalar, "mean"}},       {"rougeLsum", {ItemKind::Scalar, "mean"}},
  };
  return r;
}

const std::map<std::string, ItemKind>& aggregation_kinds() {
  static const std::map<std::string, ItemKind> r = {
      {"mean", ItemKind::Scalar},           {"median", ItemKind::Scalar},   {"perplexity", ItemKind::Scalar},
      {"weighted_perplexity", ItemKind::Pair}, {"bits_per_byte", ItemKind::Pair}, {"f1", ItemKind::Pair},
      {"matthews_corrcoef", ItemKind::Pair}, {"pearsonr", ItemKind::Pair},   {"spearmanr", ItemKind::Pair},
      {"bleu", ItemKind::Texts},            {"chrf", ItemKind::Texts}};
  return r;
}

// Which metrics each output type computes (lm-eval's process_results), and its defaults.
const std::map<std::string, std::set<std::string>>& metrics_by_type() {
  static const std::map<std::string, std::set<std::string>> r = {
      {"multiple_choice", {"acc", "acc_norm", "exact_match", "f1", "mcc", "pearsonr", "spearmanr"}},
      {"loglikelihood", {"perplexity", "acc"}},
      {"loglikelihood_rolling", {"word_perplexity", "byte_perplexity", "bits_per_byte"}},
      {"generate_until", {"exact_match", "squad_em", "squad_f1", "bleu", "chrf", "rouge1", "rouge2", "rougeL", "rougeLsum"}}};
  return r;
}

std::vector<MetricSpec> default_metrics(const std::string& type) {
  std::vector<std::string> names = type == "multiple_choice"         ? std::vector<std::string>{"acc", "acc_norm"}
                                   : type == "loglikelihood"         ? std::vector<std::string>{"perplexity", "acc"}
                                   : type == "loglikelihood_rolling" ? std::vector<std::string>{"word_perplexity", "byte_perplexity", "bits_per_byte"}
                                                                     : std::vector<std::string>{"exact_match"};
  std::vector<MetricSpec> out;
  for (const std::string& n : names) {
    MetricSpec m;
    m.metric = n;
    m.higher_is_better = !(n.find("perplexity") != std::string::npos || n == "bits_per_byte");
    out.push_back(m);
  }
  return out;
}

double aggregate(const std::string& agg, const std::vector<Item>& items) {
  std::vector<double> xs, ys;
  std::vector<std::pair<double, double>> pairs;
  for (const Item& it : items) xs.push_back(it.x), ys.push_back(it.y), pairs.emplace_back(it.x, it.y);
  auto ints = [](const std::vector<double>& v) { return std::vector<int64_t>(v.begin(), v.end()); };
  if (agg == "mean") return mean(xs);
  if (agg == "median") return xs[xs.size() / 2];  // lm-eval's median does not sort
  if (agg == "perplexity") return perplexity(xs);
  if (agg == "weighted_perplexity") return weighted_perplexity(pairs);
  if (agg == "bits_per_byte") return bits_per_byte(pairs);
  if (agg == "f1") return f1_score(ints(xs), ints(ys), "binary");
  if (agg == "matthews_corrcoef") return matthews_corrcoef(ints(xs), ints(ys));
  if (agg == "pearsonr") return pearsonr(xs, ys);
  if (agg == "spearmanr") return spearmanr(xs, ys);
  std::vector<std::string> hyps;
  std::vector<std::vector<std::string>> refs;
  for (const Item& it : items) hyps.push_back(it.hyp), refs.push_back(it.refs);
  if (agg == "bleu") return bleu(hyps, refs).score;
  if (agg == "chrf") return chrf(hyps, refs);
  raise<ValueError>("unknown aggregation '{}'", agg);
}

// lm-eval's stderr_for_metric: mean by formula, a few by bootstrap, the rest none (NaN).
double stderr_of(const std::string& agg, const std::vector<Item>& items, int64_t bootstrap_iters) {
  if (items.size() <= 1 || bootstrap_iters <= 0) return std::numeric_limits<double>::quiet_NaN();
  if (agg == "mean") {
    std::vector<double> xs;
    for (const Item& it : items) xs.push_back(it.x);
    return mean_stderr(xs);
  }
  static const std::set<std::string> kBootstrapped = {"median", "matthews_corrcoef", "f1", "perplexity", "bleu", "chrf",
                                                      "pearsonr", "spearmanr"};
  if (!kBootstrapped.count(agg)) return std::numeric_limits<double>::quiet_NaN();
  const int64_t iters = agg == "bleu" || agg == "chrf" ? std::min<int64_t>(bootstrap_iters, 100) : bootstrap_iters;
  std::vector<Item> sample(items.size());
  return bootstrap_stderr(items.size(), iters, [&](const std::vector<size_t>& draw) {
    for (size_t i = 0; i < draw.size(); ++i) sample[i] = items[draw[i]];
    return aggregate(agg, sample);
  });
}

// ---- text helpers ---------------------------------------------------------------------------------


std::string py_upper(const std::string& s) {  // str.upper() of each code point (python_str.h has lower())
  std::string out;
  utf8proc_int32_t cp;
  for (size_t i = 0; i < s.size();) {
    const utf8proc_ssize_t n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + i), utf8proc_ssize_t(s.size() - i), &cp);
    if (n <= 0) {
      out += s[i++];
      continue;
    }
    const utf8proc_int32_t m = utf8proc_toupper(cp);
    utf8proc_uint8_t buf[4];
    out.append(reinterpret_cast<char*>(buf), size_t(utf8proc_encode_char(m, buf)));
    i += size_t(n);
  }
  return out;
}

// HF evaluate's exact_match with lm-eval's options, for one prediction and reference.
double exact_match(std::string pred, std::string ref, const ojson& opt) {
  if (opt.contains("regexes_to_ignore")) {
    const ojson& rx = opt["regexes_to_ignore"];
    for (const ojson& r : rx.is_array() ? rx : ojson::array({rx})) {
      const text::PyRegex re(python_str(r));
      pred = re.sub(pred, ""), ref = re.sub(ref, "");
    }
  }
  auto flag = [&](const char* k) { return opt.contains(k) && opt[k].is_boolean() && opt[k].get<bool>(); };
  if (flag("ignore_case")) pred = py::lower(pred), ref = py::lower(ref);
  auto drop = [](bool (*unwanted)(char), std::string& a, std::string& b) {
    for (std::string* s : {&a, &b}) s->erase(std::remove_if(s->begin(), s->end(), unwanted), s->end());
  };
  if (flag("ignore_punctuation")) drop(py::is_punctuation, pred, ref);
  if (flag("ignore_numbers")) drop([](char c) { return c >= '0' && c <= '9'; }, pred, ref);
  return pred == ref ? 1.0 : 0.0;
}

std::string apply_filters(std::string resp, const FilterEnsemble& ens) {
  for (const FilterStep& s : ens.steps) {
    if (s.function == "take_first") continue;  // one response per request
    if (s.function == "lowercase") resp = py::lower(resp);
    else if (s.function == "uppercase") resp = py_upper(resp);
    else if (s.function == "remove_whitespace") resp = !resp.empty() && resp[0] == ' ' ? resp.substr(1) : resp;
    else if (s.function == "regex") {
      // lm-eval's RegexFilter: findall, pick group_select, first non-empty group, strip.
      const text::PyRegex re(s.regex_pattern);
      auto found = re.findall(resp);
      const int64_t n = int64_t(found.size());
      const int64_t k = s.group_select < 0 ? n + s.group_select : s.group_select;
      if (found.empty() || k < 0 || k >= n) {
        resp = s.fallback;
        continue;
      }
      std::string m;
      for (const std::string& g : found[size_t(k)])
        if (!g.empty()) {
          m = g;
          break;
        }
      if (m.empty() && found[size_t(k)].size() > 1) {
        resp = s.fallback;
        continue;
      }
      const size_t b = m.find_first_not_of(" \t\n\r\f\v"), e = m.find_last_not_of(" \t\n\r\f\v");
      resp = b == std::string::npos ? "" : m.substr(b, e - b + 1);
    }
  }
  return resp;
}

size_t python_split_count(const std::string& s) {  // len(re.split(r"\s+", s))
  static const text::PyRegex ws("\\s+");
  return ws.finditer(s).size() + 1;
}

std::string sha(const std::string& s) { return track::sha256_hex(s); }

ojson nan_to_null(double v) { return std::isnan(v) ? ojson(nullptr) : ojson(v); }

}  // namespace

// ---- the runner ----------------------------------------------------------------------------------

struct TaskRunner {
  RequestEngine& engine;
  const TaskRunOptions& opt;

  struct Doc {
    size_t id;
    const ojson* doc;
    std::string context;               // few-shot examples + the doc's text
    std::vector<std::string> choices;  // multiple_choice
    bool multiple_input = false;
    ojson target;                      // doc_to_target (or doc_to_text for multiple_input)
    std::vector<std::pair<std::string, std::string>> ll_args;  // (context, continuation) per request
    size_t first_request = 0;
    std::string rolling_text;
    std::string generation;
  };

  int64_t effective_fewshot(const TaskConfig& c) const {
    if (opt.num_fewshot < 0) return c.num_fewshot;
    if (c.num_fewshot_set && c.num_fewshot == 0) {
      std::fprintf(stderr, "eval: %s sets num_fewshot: 0 in its file, so --num-fewshot is ignored for it (as lm-eval)\n",
                   c.name.c_str());
      return 0;
    }
    return opt.num_fewshot;
  }

  std::string fewshot_context(const TaskConfig& c, const ojson& doc, int64_t k, PyRandom& rnd) const {
    std::string ctx = c.render_description(doc);
    if (k == 0) return ctx;
    if (c.fewshot_docs.empty()) raise<ValueError>("task file {}: num_fewshot {} but the task has no few-shot documents", c.file, k);
    const size_t n = size_t(c.fewshot_split == c.test_split ? k + 1 : k);
    if (n > c.fewshot_docs.size())
      raise<ValueError>("task file {}: {} few-shot examples asked but the few-shot split has {} documents", c.file, k,
                        c.fewshot_docs.size());
    std::vector<size_t> drawn;
    if (c.sampler == "first_n") {
      for (size_t i = 0; i < n; ++i) drawn.push_back(i);
    } else {
      drawn = rnd.sample(c.fewshot_docs.size(), n);
    }
    int64_t used = 0;
    for (size_t idx : drawn) {
      const ojson& ex = c.fewshot_docs[idx];
      if (ex == doc) continue;
      if (used++ == k) break;
      const ojson text = c.text(ex, true);
      const ojson target = c.target(ex, true);
      const bool has_choice = c.doc_to_choice.set();
      ctx += !has_choice || text.is_string() ? python_str(text) : c.choices(ex, true).at(size_t(text.get<int64_t>()));
      const std::string tstr = target.is_string() ? target.get<std::string>() : "";
      if (target.is_string() && tstr.empty()) continue;
      ctx += c.target_delimiter;
      if (target.is_array()) ctx += python_str(target.at(0));
      else if (!has_choice || target.is_string()) ctx += python_str(target);
      else ctx += c.choices(ex, true).at(size_t(target.get<int64_t>()));
      ctx += c.fewshot_delimiter;
    }
    return ctx;
  }

  ojson run(const TaskConfig& c, std::vector<std::string>* samples, ojson& n_samples, int64_t& n_shot) {
    const int64_t k = effective_fewshot(c);
    n_shot = k;
    size_t n_docs = c.eval_docs.size();
    if (opt.limit >= 0) n_docs = std::min(n_docs, opt.limit < 1.0 ? size_t(std::ceil(double(n_docs) * opt.limit)) : size_t(opt.limit));
    n_samples = {{"original", c.eval_docs.size()}, {"effective", n_docs}};
    PyRandom rnd(opt.fewshot_seed);
    std::vector<Doc> docs;
    std::vector<LoglikelihoodRequest> ll;
    std::vector<GenerateRequest> gens;
    std::vector<Ids> rolling;
    for (size_t i = 0; i < n_docs; ++i) {
      const ojson& doc = c.eval_docs[i];
      Doc d{i, &doc, {}, {}, false, {}, {}, 0, {}, {}};
      const std::string prefix = fewshot_context(c, doc, k, rnd);
      if (c.output_type == "loglikelihood_rolling") {
        d.target = c.target(doc);
        d.rolling_text = python_str(d.target);
        rolling.push_back(engine.encode(d.rolling_text));
      } else {
        const ojson text = c.text(doc);
        if (c.output_type == "multiple_choice") {
          d.choices = c.choices(doc);
          if (d.choices.empty())
            raise<ValueError>("task file {}: document {} has no choices (doc_to_choice gave an empty list)", c.file, i);
          d.multiple_input = text.is_number_integer();
          d.target = d.multiple_input ? text : c.target(doc);
          d.first_request = ll.size();
          if (d.multiple_input) {
            const std::string cont = c.target_delimiter + python_str(c.target(doc));
            for (const std::string& ch : d.choices) d.ll_args.emplace_back(prefix + ch, cont);
            d.context = prefix;
          } else {
            d.context = prefix + python_str(text);
            for (const std::string& ch : d.choices) d.ll_args.emplace_back(d.context, c.target_delimiter + ch);
          }
        } else {
          d.context = prefix + (text.is_number_integer() && c.doc_to_choice.set() ? c.choices(doc).at(size_t(text.get<int64_t>()))
                                                                                  : python_str(text));
          d.target = c.target(doc);
          if (c.output_type == "loglikelihood") {
            d.first_request = ll.size();
            d.ll_args.emplace_back(d.context, python_str(d.target));
          } else {
            d.first_request = gens.size();
            gens.push_back({d.context, c.until, c.max_gen_toks});
          }
        }
        for (const auto& [ctx, cont] : d.ll_args) ll.push_back(engine.encode_pair(ctx, cont));
      }
      docs.push_back(std::move(d));
    }
    const auto ll_res = engine.loglikelihood(ll);
    const auto roll_res = engine.loglikelihood_rolling(rolling);
    const auto gen_res = engine.generate_until(gens);

    const std::vector<MetricSpec> metrics = c.metrics.empty() ? default_metrics(c.output_type) : c.metrics;
    for (const MetricSpec& m : metrics) {
      if (m.metric == "acc_mutual_info")
        raise<ValueError>("task file {}: metric acc_mutual_info is not supported (lm-eval's own pairing of its requests is "
                          "inconsistent)", c.file);
      if (!metrics_by_type().at(c.output_type).count(m.metric))
        raise<ValueError>("task file {}: metric '{}' is not computed for output_type {} (it has: {})", c.file, m.metric,
                          c.output_type, fmt::format("{}", fmt::join(metrics_by_type().at(c.output_type), ", ")));
      const std::string agg = m.aggregation.empty() ? metric_registry().at(m.metric).default_aggregation : m.aggregation;
      auto ak = aggregation_kinds().find(agg);
      if (ak == aggregation_kinds().end()) raise<ValueError>("task file {}: metric {}: unknown aggregation '{}'", c.file, m.metric, agg);
      if (ak->second != metric_registry().at(m.metric).kind)
        raise<ValueError>("task file {}: metric {} cannot be aggregated with '{}'", c.file, m.metric, agg);
    }
    warn_of_golds_outside_choices(c, docs, metrics);
    std::vector<FilterEnsemble> filters = c.filters;
    if (filters.empty()) filters.push_back({"none", {{"take_first"}}});

    ojson result = ojson::object();
    result["alias"] = c.alias;
    for (const FilterEnsemble& ens : filters) {
      std::map<std::string, std::vector<Item>> items;
      std::vector<ojson> sample_values(docs.size(), ojson::object());
      std::vector<std::string> filtered(docs.size());
      for (size_t di = 0; di < docs.size(); ++di) {
        const Doc& d = docs[di];
        for (const MetricSpec& m : metrics) {
          Item it = score(c, d, m, ll_res, roll_res, gen_res, ens, filtered[di]);
          ojson logged = metric_registry().at(m.metric).kind == ItemKind::Scalar ? ojson(it.x)
                         : metric_registry().at(m.metric).kind == ItemKind::Pair ? ojson::array({it.x, it.y})
                                                                                  : ojson::array({it.refs, it.hyp});
          sample_values[di][m.metric] = logged;
          items[m.metric].push_back(std::move(it));
        }
      }
      for (const MetricSpec& m : metrics) {
        const std::string agg = m.aggregation.empty() ? metric_registry().at(m.metric).default_aggregation : m.aggregation;
        const double v = aggregate(agg, items[m.metric]);
        const double se = stderr_of(agg, items[m.metric], opt.bootstrap_iters);
        result[m.metric + "," + ens.name] = nan_to_null(v);
        result[m.metric + "_stderr," + ens.name] = std::isnan(se) ? ojson("N/A") : ojson(se);
      }
      if (samples) log_samples(c, docs, metrics, ens, ll_res, roll_res, gen_res, filtered, sample_values, *samples);
    }
    return result;
  }

  // A multiple-choice document's gold: an index, a choice string, or a list of either (several
  // correct choices); -100 (lm-eval's marker, never a hit) for one outside the choices.
  static std::vector<int64_t> gold_indices(const Doc& d) {
    auto gold_index = [&](const ojson& g) -> int64_t {
      if (g.is_number_integer())
        return g.get<int64_t>() >= 0 && size_t(g.get<int64_t>()) < d.choices.size() ? g.get<int64_t>() : -100;
      auto f = std::find(d.choices.begin(), d.choices.end(), python_str(g));
      return f == d.choices.end() ? -100 : int64_t(f - d.choices.begin());
    };
    std::vector<int64_t> golds;
    if (d.target.is_array()) for (const ojson& g : d.target) golds.push_back(gold_index(g));
    else golds.push_back(gold_index(d.target));
    return golds;
  }

  // Gold labels outside their choices are scored as wrong, as lm-eval does, and said once per
  // task, as lm-eval warns: such a task otherwise reads as a model that never gets it right.
  static void warn_of_golds_outside_choices(const TaskConfig& c, const std::vector<Doc>& docs,
                                            const std::vector<MetricSpec>& metrics) {
    if (c.output_type != "multiple_choice" ||
        std::all_of(metrics.begin(), metrics.end(), [](const MetricSpec& m) {
          return m.metric == "pearsonr" || m.metric == "spearmanr";  // numeric targets, not choices
        }))
      return;
    const Doc* first = nullptr;
    size_t count = 0;
    for (const Doc& d : docs) {
      const std::vector<int64_t> golds = gold_indices(d);
      if (std::find(golds.begin(), golds.end(), -100) == golds.end()) continue;
      if (!first) first = &d;
      ++count;
    }
    if (first)
      std::fprintf(stderr, "warning: task file %s: the gold label %s is not one of the document's %zu choices (%zu of "
                           "%zu documents so; scored as wrong, as lm-eval does)\n",
                   c.file.c_str(), first->target.dump().c_str(), first->choices.size(), count, docs.size());
  }

  Item score(const TaskConfig& c, const Doc& d, const MetricSpec& m, const std::vector<LoglikelihoodResult>& ll_res,
             const std::vector<RollingResult>& roll_res, const std::vector<std::string>& gen_res, const FilterEnsemble& ens,
             std::string& filtered) const {
    Item it;
    const std::string& name = m.metric;
    if (c.output_type == "loglikelihood") {
      const auto& r = ll_res[d.first_request];
      it.x = name == "perplexity" ? r.loglikelihood : double(r.is_greedy);
      return it;
    }
    if (c.output_type == "loglikelihood_rolling") {
      const auto& r = roll_res[d.id];
      it.x = r.loglikelihood;
      it.y = name == "word_perplexity" ? double(python_split_count(d.rolling_text)) : double(d.rolling_text.size());
      return it;
    }
    if (c.output_type == "multiple_choice") {
      const size_t n = d.choices.size();
      std::vector<double> lls(n);
      std::vector<bool> greedy(n);
      for (size_t i = 0; i < n; ++i) lls[i] = ll_res[d.first_request + i].loglikelihood, greedy[i] = ll_res[d.first_request + i].is_greedy;
      size_t pred = 0, pred_norm = 0;
      for (size_t i = 1; i < n; ++i) {
        if (lls[i] > lls[pred]) pred = i;
        if (lls[i] / double(py::decode(d.choices[i]).size()) > lls[pred_norm] / double(py::decode(d.choices[pred_norm]).size())) pred_norm = i;
      }
      if (name == "pearsonr" || name == "spearmanr") {  // regression targets: gold value vs the chosen choice's value
        auto num = [&](const ojson& v) {
          if (v.is_number()) return v.get<double>();
          auto lit = python_literal(python_str(v));
          if (!lit || !lit->is_number())
            raise<ValueError>("task file {}: {} needs numeric targets and choices, got '{}'", c.file, name, python_str(v));
          return lit->get<double>();
        };
        it.x = num(d.target);
        it.y = num(ojson(d.choices[pred]));
        return it;
      }
      const std::vector<int64_t> golds = gold_indices(d);
      auto hit = [&](size_t p) { return std::find(golds.begin(), golds.end(), int64_t(p)) != golds.end(); };
      if (name == "acc") it.x = hit(pred);
      else if (name == "acc_norm") it.x = hit(pred_norm);
      else if (name == "exact_match") {
        it.x = 0;
        for (int64_t g : golds) if (g >= 0 && greedy[size_t(g)]) it.x = 1;
      } else {  // f1, mcc: (gold, pred)
        it.x = double(golds[0]);
        it.y = double(pred);
      }
      return it;
    }
    // generate_until
    filtered = apply_filters(gen_res[d.first_request], ens);
    std::vector<std::string> golds;
    ojson gold = d.target;
    if (c.doc_to_choice.set() && gold.is_number_integer()) gold = ojson(d.choices.empty() ? c.choices(*d.doc).at(size_t(gold.get<int64_t>())) : d.choices.at(size_t(gold.get<int64_t>())));
    if (gold.is_array()) for (const ojson& g : gold) golds.push_back(python_str(g));
    else golds.push_back(python_str(gold));
    if (name == "exact_match") {
      it.x = 0;
      for (const std::string& g : golds) it.x = std::max(it.x, exact_match(filtered, g, m.options));
    } else if (name == "squad_em") it.x = squad_em(filtered, golds);
    else if (name == "squad_f1") it.x = squad_f1(filtered, golds);
    else if (name == "bleu" || name == "chrf") it.refs = golds, it.hyp = filtered;
    else {
      const bool stem = m.options.contains("use_stemmer") && m.options["use_stemmer"].is_boolean() && m.options["use_stemmer"].get<bool>();
      double best = 0;
      for (const std::string& g : golds) best = std::max(best, rouge_pair(filtered, g, stem).at(name).fmeasure);
      it.x = best;
    }
    return it;
  }

  void log_samples(const TaskConfig& c, const std::vector<Doc>& docs, const std::vector<MetricSpec>& metrics,
                   const FilterEnsemble& ens, const std::vector<LoglikelihoodResult>& ll_res,
                   const std::vector<RollingResult>& roll_res, const std::vector<std::string>& gen_res,
                   const std::vector<std::string>& filtered, const std::vector<ojson>& values,
                   std::vector<std::string>& out) const {
    auto pybool = [](bool b) { return std::string(b ? "True" : "False"); };
    for (size_t di = 0; di < docs.size(); ++di) {
      const Doc& d = docs[di];
      ojson s = ojson::object();
      s["doc_id"] = d.id;
      s["doc"] = *d.doc;
      s["target"] = python_str(d.target);
      ojson args = ojson::object(), resps = ojson::array(), fresps = ojson::array();
      std::string prompt;
      if (c.output_type == "loglikelihood_rolling") {
        args["gen_args_0"] = {{"arg_0", d.rolling_text}};
        const std::string v = text::py_float(roll_res[d.id].loglikelihood);
        resps.push_back(ojson::array({v}));
        fresps.push_back(v);
        prompt = d.rolling_text;
      } else if (c.output_type == "generate_until") {
        args["gen_args_0"] = {{"arg_0", d.context}, {"arg_1", {{"until", c.until}, {"max_gen_toks", c.max_gen_toks}}}};
        resps.push_back(ojson::array({gen_res[d.first_request]}));
        fresps.push_back(filtered[di]);
        prompt = d.context;
      } else {
        for (size_t r = 0; r < d.ll_args.size(); ++r) {
          args["gen_args_" + std::to_string(r)] = {{"arg_0", d.ll_args[r].first}, {"arg_1", d.ll_args[r].second}};
          const auto& res = ll_res[d.first_request + r];
          const ojson pair = ojson::array({text::py_float(res.loglikelihood), pybool(res.is_greedy)});
          resps.push_back(ojson::array({pair}));
          fresps.push_back(pair);
        }
        prompt = d.ll_args.empty() ? "" : d.ll_args[0].first;
      }
      s["arguments"] = args;
      s["resps"] = resps;
      s["filtered_resps"] = fresps;
      s["filter"] = ens.name;
      ojson names = ojson::array();
      for (const MetricSpec& m : metrics) names.push_back(m.metric);
      s["metrics"] = names;
      s["doc_hash"] = sha(d.doc->dump(2, ' ', false, ojson::error_handler_t::replace));
      s["prompt_hash"] = sha(prompt);
      s["target_hash"] = sha(python_str(d.target));
      for (auto it = values[di].begin(); it != values[di].end(); ++it) s[it.key()] = *it;
      out.push_back(s.dump(-1, ' ', false, ojson::error_handler_t::replace));
    }
  }
};


TaskOutput evaluate_tasks(RequestEngine& engine, const std::vector<std::unique_ptr<Task>>& tasks,
                          const TaskRunOptions& options, const std::string& model_args) {
  const auto start = std::chrono::steady_clock::now();
  // Each of these was taken as "the default" or as an empty run without a word.
  FOUNDRY_CHECK_AS(ValueError, options.num_fewshot >= -1, "eval: num_fewshot must be 0 or more, got {}",
                   options.num_fewshot);
  FOUNDRY_CHECK_AS(ValueError, options.limit == -1 || options.limit > 0,
                   "eval: limit must be a positive number of documents or fraction, got {}", options.limit);
  FOUNDRY_CHECK_AS(ValueError, options.bootstrap_iters >= 0, "eval: bootstrap_iters must be 0 (none) or more, got {}",
                   options.bootstrap_iters);
  std::set<std::string> names;
  for (const auto& t : tasks)
    if (!names.insert(t->name()).second) raise<ValueError>("eval: two tasks are named '{}'", t->name());
  TaskRunner runner{engine, options};
  TaskOutput out;
  ojson results = ojson::object(), configs = ojson::object(), versions = ojson::object(), n_shot = ojson::object(),
        higher = ojson::object(), n_samples = ojson::object(), subtasks = ojson::object();
  std::map<std::string, ojson> by_name;
  for (const auto& t : tasks) {
    const TaskConfig& c = t->config();
    ojson ns;
    int64_t k = 0;
    std::vector<std::string>* samples = options.log_samples ? &out.samples[c.name] : nullptr;
    by_name[c.name] = runner.run(c, samples, ns, k);
    n_samples[c.name] = ns;
    ojson cfg = c.raw;
    cfg["task"] = c.name;
    cfg["output_type"] = c.output_type;
    cfg["target_delimiter"] = c.target_delimiter;
    cfg["fewshot_delimiter"] = c.fewshot_delimiter;
    cfg["num_fewshot"] = k;
    configs[c.name] = cfg;
    versions[c.name] = c.version;
    n_shot[c.name] = k;
    ojson hib = ojson::object();
    for (const MetricSpec& m : c.metrics.empty() ? default_metrics(c.output_type) : c.metrics) hib[m.metric] = m.higher_is_better;
    higher[c.name] = hib;
  }
  for (auto& [name, r] : by_name) results[name] = r;  // lm-eval sorts tasks by name
  for (auto it = tasks.rbegin(); it != tasks.rend(); ++it) subtasks[(*it)->name()] = ojson::array();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ojson doc = {{"results", results},
               {"group_subtasks", subtasks},
               {"configs", configs},
               {"versions", versions},
               {"n-shot", n_shot},
               {"higher_is_better", higher},
               {"n-samples", n_samples},
               {"config",
                {{"model", "foundry"},
                 {"model_args", model_args},
                 {"batch_size", engine.batch_size()},
                 {"max_length", engine.max_length()},
                 {"limit", options.limit < 0 ? ojson(nullptr) : ojson(options.limit)},
                 {"bootstrap_iters", options.bootstrap_iters},
                 {"fewshot_seed", options.fewshot_seed}}},
               {"date", double(std::time(nullptr))},
               {"total_evaluation_time_seconds", fmt::format("{}", seconds)}};
  out.results_json = doc.dump(2, ' ', false, ojson::error_handler_t::replace);

  // lm-eval's table: | Tasks | Version | Filter | n-shot | Metric | | Value | | Stderr |
  std::string table = "|Tasks|Version|Filter|n-shot|Metric| |Value| |Stderr|\n|-----|------:|------|-----:|------|---|----:|---|-----:|\n";
  for (auto& [name, r] : by_name) {
    for (auto it = r.begin(); it != r.end(); ++it) {
      const std::string& key = it.key();
      if (key == "alias" || key.find("_stderr,") != std::string::npos) continue;
      const size_t comma = key.find(',');
      const std::string metric = key.substr(0, comma), filter = key.substr(comma + 1);
      const ojson& se = r[metric + "_stderr," + filter];
      const bool hib = higher[name].value(metric, true);
      table += fmt::format("|{}|{}|{}|{}|{}|{}|{}|±|{}|\n", name, python_str(versions[name]), filter, python_str(n_shot[name]),
                           metric, hib ? "↑" : "↓", it->is_null() ? "nan" : fmt::format("{:.4f}", it->get<double>()),
                           se.is_string() ? se.get<std::string>() : fmt::format("{:.4f}", se.get<double>()));
    }
  }
  out.table = table;
  return out;
}

}  // namespace foundry::eval
