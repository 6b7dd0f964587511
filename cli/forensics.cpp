// Model forensics from forward passes (docs/forensics.md):
//   foundry fingerprint   the loss of every model on every dataset, z-scored profiles, clusters
//   foundry membership    membership-inference scores per document, AUC, dataset inference
//   foundry attribute     least squares of eval scores on dataset presence across models
//   foundry memorization  sampled continuations whose low-loss spans occur verbatim in a corpus
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "foundry/core/error.h"
#include "foundry/eval/forensics.h"
#include "foundry/eval/requests.h"
#include "foundry/io/atomic_file.h"
#include "foundry/models/generate.h"
#include "foundry/models/tokenizer_files.h"
#include "foundry/text/tokenizer.h"
#include "foundry/io/json_depth.h"

namespace foundry::cli {

namespace {

using nlohmann::ordered_json;
namespace fs = std::filesystem;



// Documents of a dataset file: JSON Lines with a "text" field (and, when `labels` is given, an
// optional "label": 1 member / 0 non-member on every line or none), or plain text split at blank
// lines. Empty documents are skipped.
std::vector<std::string> read_documents(const std::string& path, std::vector<int>* labels = nullptr) {
  const std::string text = io::read_file(path);
  std::vector<std::string> docs;
  if (fs::path(path).extension() == ".jsonl") {
    std::istringstream in(text);
    std::string line;
    size_t lines = 0;
    for (size_t n = 1; std::getline(in, line); ++n) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      io::check_json_depth(line, "dataset '" + path + "' line " + std::to_string(n));
      auto j = ordered_json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.is_object() || !j.contains("text") || !j["text"].is_string())
        raise<ValueError>("dataset '{}' line {}: needs a JSON object with a string \"text\"", path, n);
      if (j["text"].get<std::string>().empty()) continue;
      docs.push_back(j["text"].get<std::string>());
      ++lines;
      if (labels && j.contains("label")) {
        if (!j["label"].is_number_integer() || (j["label"] != 0 && j["label"] != 1))
          raise<ValueError>("dataset '{}' line {}: \"label\" must be 1 (member) or 0 (non-member)", path, n);
        labels->push_back(j["label"].get<int>());
      }
    }
    if (labels && !labels->empty() && labels->size() != lines)
      raise<ValueError>("dataset '{}': give \"label\" on every line or on none", path);
  } else {
    size_t start = 0;
    while (start < text.size()) {
      size_t end = text.find("\n\n", start);
      if (end == std::string::npos) end = text.size();
      std::string doc = text.substr(start, end - start);
      if (doc.find_first_not_of(" \t\r\n") != std::string::npos) docs.push_back(doc);
      start = end + 2;
    }
  }
  if (docs.empty()) raise<ValueError>("dataset '{}' has no non-empty document", path);
  return docs;
}

struct LoadedModel {
  std::string dir;
  std::shared_ptr<models::CausalLM> model;
  std::unique_ptr<text::Tokenizer> tokenizer;
  std::unique_ptr<eval::RequestEngine> engine;
};

LoadedModel load(const std::string& dir, int64_t batch_size, const std::string& quantize = "") {
  LoadedModel m;
  m.dir = dir;
  ChatModel loaded = load_chat_model(dir, quantize, "", "forensics (which reads text)");
  m.model = loaded.model;
  m.tokenizer = std::move(loaded.tokenizer);
  m.engine = std::make_unique<eval::RequestEngine>(*m.model, m.tokenizer.get());
  m.engine->set_batch_size(batch_size);
  return m;
}

std::string model_name(const std::string& dir) {
  fs::path p(dir);
  if (p.filename().empty()) p = p.parent_path();
  return p.filename().string();
}

void add_fingerprint(CLI::App& app) {
  auto* cmd = app.add_subcommand("fingerprint", "Loss of every model on every dataset, z-scored profiles, models clustered");
  struct Options {
    std::string models, datasets, out, quantize;
    int64_t max_tokens = 20000, batch_size = 8;
  };
  auto o = std::make_shared<Options>();
  cmd->add_option("--models", o->models, "model folders, comma-separated")->required();
  cmd->add_option("--datasets", o->datasets, "datasets: .jsonl with \"text\", or text files (documents split at blank lines)")->required();
  cmd->add_option("--max-tokens", o->max_tokens, "documents per dataset until any model has read this many tokens (default 20000)");
  cmd->add_option("--out", o->out, "output folder: matrix.csv, matrix.json, fingerprint.png")->required();
  cmd->add_option("--batch-size", o->batch_size, "windows per forward (default 8)");
  cmd->add_option("--quantize", o->quantize, "weight format of the products (q8_0, ...)");
  add_threads_option(cmd);
  cmd->callback([o] {
    const std::vector<std::string> dirs = split_list(o->models), sets = split_list(o->datasets);
    if (dirs.empty() || sets.empty()) raise<ValueError>("fingerprint: give --models and --datasets");
    if (o->max_tokens < 1) raise<ValueError>("fingerprint: --max-tokens must be positive");
    std::vector<std::vector<std::string>> docs;
    for (const std::string& s : sets) docs.push_back(read_documents(s));
    // Every model stays loaded (weights memory-mapped) while the datasets are probed.
    std::vector<LoadedModel> models;
    for (const std::string& d : dirs) models.push_back(load(d, o->batch_size, o->quantize));
    const size_t M = models.size(), D = sets.size();
    std::vector<std::vector<double>> bpb(M, std::vector<double>(D)), npt(M, std::vector<double>(D));
    std::vector<std::vector<int64_t>> tokens(M, std::vector<int64_t>(D));
    std::vector<int64_t> bytes(D), n_docs(D);
    for (size_t d = 0; d < D; ++d) {
      // The same documents for every model: in order, while no model's tokenizer exceeds the budget.
      std::vector<std::vector<eval::Ids>> ids(M);
      std::vector<int64_t> used(M, 0);
      for (const std::string& doc : docs[d]) {
        std::vector<eval::Ids> enc;
        bool over = false;
        for (size_t m = 0; m < M; ++m) {
          enc.push_back(models[m].engine->encode(doc));
          over = over || used[m] + int64_t(enc.back().size()) > o->max_tokens;
        }
        if (over && n_docs[d] > 0) break;
        for (size_t m = 0; m < M; ++m) used[m] += int64_t(enc[m].size()), ids[m].push_back(std::move(enc[m]));
        bytes[d] += int64_t(doc.size());
        ++n_docs[d];
      }
      for (size_t m = 0; m < M; ++m) {
        double ll = 0;
        for (const auto& r : models[m].engine->loglikelihood_rolling(ids[m])) ll += r.loglikelihood;
        tokens[m][d] = used[m];
        npt[m][d] = -ll / double(used[m]);
        bpb[m][d] = -ll / double(bytes[d]) / std::log(2.0);
      }
    }
    const auto z = eval::zscore_columns(bpb);
    const eval::Linkage link = eval::average_linkage(z);
    std::vector<std::string> names, set_names;
    for (const auto& d : dirs) names.push_back(model_name(d));
    for (const auto& s : sets) set_names.push_back(fs::path(s).filename().string());
    fs::create_directories(o->out);
    std::string csv = "model";
    for (const auto& s : set_names) csv += "," + s;
    csv += "\n";
    for (size_t m = 0; m < M; ++m) {
      csv += names[m];
      for (size_t d = 0; d < D; ++d) csv += fmt::format(",{:.6f}", bpb[m][d]);
      csv += "\n";
    }
    io::write_file_atomic((fs::path(o->out) / "matrix.csv").string(), csv);
    ordered_json dist = ordered_json::array();
    for (size_t a = 0; a < M; ++a) {
      ordered_json row = ordered_json::array();
      for (size_t b = 0; b < M; ++b) row.push_back(eval::cosine_distance(z[a], z[b]));
      dist.push_back(row);
    }
    ordered_json j = {{"models", names},
                      {"model_dirs", dirs},
                      {"datasets", set_names},
                      {"dataset_files", sets},
                      {"documents", n_docs},
                      {"bytes", bytes},
                      {"tokens", tokens},
                      {"nats_per_token", npt},
                      {"bits_per_byte", bpb},
                      {"zscores", z},
                      {"cosine_distances", dist},
                      {"linkage", link.merges},
                      {"order", link.order}};
    io::write_file_atomic((fs::path(o->out) / "matrix.json").string(), j.dump(2) + "\n");
    io::write_file_atomic((fs::path(o->out) / "fingerprint.png").string(), eval::fingerprint_png(z, link));
    // The table: models in dendrogram order, bits per byte per dataset.
    std::printf("%-24s", "model");
    for (const auto& s : set_names) std::printf(" %14.14s", s.c_str());
    std::printf("\n");
    for (size_t i : link.order) {
      std::printf("%-24.24s", names[i].c_str());
      for (size_t d = 0; d < D; ++d) std::printf(" %8.4f (%+.1f)", bpb[i][d], z[i][d]);
      std::printf("\n");
    }
  });
}

// ---- membership inference -------------------------------------------------------------------------

void add_membership(CLI::App& app) {
  auto* cmd = app.add_subcommand("membership", "Membership-inference scores per document; dataset inference against unseen text");
  struct Options {
    std::string model, reference, documents, unseen, out, quantize;
    double k = 0.2;
    int64_t batch_size = 8;
  };
  auto o = std::make_shared<Options>();
  cmd->add_option("--model", o->model, "the model under suspicion")->required();
  cmd->add_option("--documents", o->documents,
                  "suspect documents: .jsonl with \"text\" (and optionally \"label\": 1 member / 0 non-member), or a text file")
      ->required();
  cmd->add_option("--reference", o->reference, "a reference model for the loss ratio");
  cmd->add_option("--unseen", o->unseen, "documents known to be unseen: dataset inference by Welch's t-test");
  cmd->add_option("--k", o->k, "fraction of lowest-scoring tokens for Min-K% and Min-K%++ (default 0.2)");
  cmd->add_option("--out", o->out, "output folder: scores.jsonl, summary.json")->required();
  cmd->add_option("--batch-size", o->batch_size, "windows per forward (default 8)");
  cmd->add_option("--quantize", o->quantize, "weight format of the products");
  add_threads_option(cmd);
  cmd->callback([o] {
    std::vector<int> labels;
    const std::vector<std::string> docs = read_documents(o->documents, &labels);
    const std::vector<std::string> unseen = o->unseen.empty() ? std::vector<std::string>{} : read_documents(o->unseen);
    LoadedModel target = load(o->model, o->batch_size, o->quantize);
    std::optional<LoadedModel> reference;
    if (!o->reference.empty()) reference = load(o->reference, o->batch_size, o->quantize);
    auto score_all = [&](const std::vector<std::string>& texts) {
      std::vector<eval::Ids> ids, ref_ids;
      for (const auto& t : texts) {
        ids.push_back(target.engine->encode(t));
        if (ids.back().empty()) raise<ValueError>("membership: a document encodes to no tokens");
        if (reference) ref_ids.push_back(reference->engine->encode(t));
      }
      const auto ts = target.engine->token_scores(ids);
      std::vector<eval::TokenScores> rs;
      if (reference) rs = reference->engine->token_scores(ref_ids);
      std::vector<eval::MembershipScores> out;
      for (size_t i = 0; i < texts.size(); ++i)
        out.push_back(eval::membership_scores(ts[i], texts[i], o->k, reference ? &rs[i] : nullptr));
      return out;
    };
    const auto scores = score_all(docs);
    const auto unseen_scores = unseen.empty() ? std::vector<eval::MembershipScores>{} : score_all(unseen);
    using Field = double eval::MembershipScores::*;
    std::vector<std::pair<std::string, Field>> fields = {{"neg_loss", &eval::MembershipScores::neg_loss},
                                                         {"zlib", &eval::MembershipScores::zlib},
                                                         {"min_k", &eval::MembershipScores::min_k},
                                                         {"min_k_plus_plus", &eval::MembershipScores::min_k_plus_plus}};
    if (reference) fields.emplace_back("reference_ratio", &eval::MembershipScores::reference_ratio);
    std::string lines;
    for (size_t i = 0; i < scores.size(); ++i) {
      ordered_json j = {{"index", i}, {"loss", scores[i].loss}};
      for (const auto& [name, f] : fields) j[name] = scores[i].*f;
      if (!labels.empty()) j["label"] = labels[i];
      lines += j.dump() + "\n";
    }
    fs::create_directories(o->out);
    io::write_file_atomic((fs::path(o->out) / "scores.jsonl").string(), lines);
    ordered_json summary = {{"model", o->model}, {"documents", docs.size()}, {"k", o->k}};
    if (reference) summary["reference"] = o->reference;
    if (!labels.empty()) {
      ordered_json auc = ordered_json::object();
      for (const auto& [name, f] : fields) {
        std::vector<double> pos, neg;
        for (size_t i = 0; i < scores.size(); ++i) (labels[i] ? pos : neg).push_back(scores[i].*f);
        if (pos.empty() || neg.empty()) raise<ValueError>("membership: labels need both members (1) and non-members (0)");
        auc[name] = eval::roc_auc(pos, neg);
        std::printf("AUC %-16s %.4f\n", name.c_str(), auc[name].get<double>());
      }
      summary["auc"] = auc;
    }
    if (!unseen_scores.empty()) {
      ordered_json tests = ordered_json::object();
      for (const auto& [name, f] : fields) {
        std::vector<double> a, b;
        for (const auto& s : scores) a.push_back(s.*f);
        for (const auto& s : unseen_scores) b.push_back(s.*f);
        const auto w = eval::welch_t_test(a, b);
        tests[name] = {{"t", w.t}, {"df", w.df}, {"p_value", w.p_value}};
        std::printf("dataset inference %-16s t = %.3f  p = %.3g\n", name.c_str(), w.t, w.p_value);
      }
      summary["unseen_documents"] = unseen.size();
      summary["dataset_inference"] = tests;
    }
    io::write_file_atomic((fs::path(o->out) / "summary.json").string(), summary.dump(2) + "\n");
  });
}

// ---- attribution ---------------------------------------------------------------------------------

// A CSV of numbers with a "model" column: model -> {column -> value}, columns in order.
std::pair<std::vector<std::string>, std::map<std::string, std::vector<double>>> read_table(const std::string& path) {
  std::istringstream in(io::read_file(path));
  std::string line;
  std::vector<std::string> header;
  std::map<std::string, std::vector<double>> rows;
  for (size_t n = 1; std::getline(in, line); ++n) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    std::vector<std::string> cells = split_list(line + ",");
    if (header.empty()) {
      if (cells.empty() || cells[0] != "model") raise<ValueError>("'{}': the first column must be \"model\"", path);
      header.assign(cells.begin() + 1, cells.end());
      continue;
    }
    if (cells.size() != header.size() + 1) raise<ValueError>("'{}' line {}: {} cells, the header has {}", path, n, cells.size(), header.size() + 1);
    std::vector<double> v;
    for (size_t i = 1; i < cells.size(); ++i) {
      size_t used = 0;
      double x = 0;
      try {
        x = std::stod(cells[i], &used);
      } catch (...) {
        used = 0;
      }
      if (used != cells[i].size()) raise<ValueError>("'{}' line {}: '{}' is not a number", path, n, cells[i]);
      v.push_back(x);
    }
    rows[cells[0]] = v;
  }
  if (header.empty() || rows.empty()) raise<ValueError>("'{}' has no rows", path);
  return {header, rows};
}

void add_attribute(CLI::App& app) {
  auto* cmd = app.add_subcommand("attribute", "Rank which training data moved which capability: least squares across models");
  struct Options {
    std::string presence, results, scores, out;
  };
  auto o = std::make_shared<Options>();
  cmd->add_option("--presence", o->presence,
                  "dataset presence per model: a CSV (model, then one column per dataset) or a fingerprint's matrix.json "
                  "(presence inferred as minus the z-scored loss)")
      ->required();
  cmd->add_option("--results", o->results, "eval results per model: MODEL=results.json,... (foundry eval --tasks --output)");
  cmd->add_option("--scores", o->scores, "or a CSV of scores: model, then one column per capability");
  cmd->add_option("--out", o->out, "attribution JSON")->required();
  cmd->callback([o] {
    std::vector<std::string> datasets;
    std::map<std::string, std::vector<double>> presence;
    if (fs::path(o->presence).extension() == ".json") {
      const std::string text = io::read_file(o->presence);
      io::check_json_depth(text, "presence '" + o->presence + "'");
      auto j = ordered_json::parse(text, nullptr, false);
      if (j.is_discarded() || !j.contains("models") || !j.contains("zscores") || !j.contains("datasets"))
        raise<ValueError>("presence '{}': not a fingerprint matrix.json (models, datasets, zscores)", o->presence);
      datasets = j["datasets"].get<std::vector<std::string>>();
      const auto names = j["models"].get<std::vector<std::string>>();
      for (size_t m = 0; m < names.size(); ++m) {
        std::vector<double> row;
        for (double v : j["zscores"][m].get<std::vector<double>>()) row.push_back(-v);  // lower loss: more present
        presence[names[m]] = row;
      }
    } else {
      std::tie(datasets, presence) = read_table(o->presence);
    }
    std::vector<std::string> capabilities;
    std::map<std::string, std::map<std::string, double>> score;  // model -> capability -> value
    if (!o->scores.empty()) {
      auto [cols, rows] = read_table(o->scores);
      capabilities = cols;
      for (auto& [m, v] : rows)
        for (size_t i = 0; i < cols.size(); ++i) score[m][cols[i]] = v[i];
    }
    for (const std::string& item : split_list(o->results)) {
      const size_t eq = item.find('=');
      if (eq == std::string::npos) raise<ValueError>("attribute: --results entries are MODEL=results.json, got '{}'", item);
      const std::string m = item.substr(0, eq), path = item.substr(eq + 1);
      const std::string text = io::read_file(path);
      io::check_json_depth(text, "results '" + path + "'");
      auto j = ordered_json::parse(text, nullptr, false);
      if (j.is_discarded() || !j.contains("results") || !j["results"].is_object())
        raise<ValueError>("results '{}': not an lm-eval results.json", path);
      for (auto t = j["results"].begin(); t != j["results"].end(); ++t)
        for (auto k = t->begin(); k != t->end(); ++k) {
          if (!k->is_number() || k.key().find("_stderr,") != std::string::npos) continue;
          const std::string cap = t.key() + "/" + k.key();
          if (std::find(capabilities.begin(), capabilities.end(), cap) == capabilities.end()) capabilities.push_back(cap);
          score[m][cap] = k->get<double>();
        }
    }
    if (capabilities.empty()) raise<ValueError>("attribute: give --results or --scores");
    ordered_json out = {{"datasets", datasets}, {"capabilities", ordered_json::object()}};
    for (const std::string& cap : capabilities) {
      std::vector<std::vector<double>> x;
      std::vector<double> y;
      std::vector<std::string> used;
      for (const auto& [m, row] : presence)
        if (score.count(m) && score[m].count(cap)) x.push_back(row), y.push_back(score[m][cap]), used.push_back(m);
      if (x.size() < 2) raise<ValueError>("attribute: '{}' is known for {} model(s) with presence; need 2 or more", cap, x.size());
      const std::vector<double> coef = eval::least_squares(x, y);
      double ss_res = 0, ss_tot = 0, ym = 0;
      for (double v : y) ym += v / double(y.size());
      for (size_t i = 0; i < x.size(); ++i) {
        double pred = coef[0];
        for (size_t d = 0; d < datasets.size(); ++d) pred += coef[d + 1] * x[i][d];
        ss_res += (y[i] - pred) * (y[i] - pred);
        ss_tot += (y[i] - ym) * (y[i] - ym);
      }
      std::vector<size_t> rank(datasets.size());
      std::iota(rank.begin(), rank.end(), 0);
      std::stable_sort(rank.begin(), rank.end(), [&](size_t a, size_t b) { return coef[a + 1] > coef[b + 1]; });
      ordered_json weights = ordered_json::object(), ranking = ordered_json::array();
      for (size_t d = 0; d < datasets.size(); ++d) weights[datasets[d]] = coef[d + 1];
      for (size_t d : rank) ranking.push_back(datasets[d]);
      out["capabilities"][cap] = {{"models", used}, {"intercept", coef[0]}, {"weights", weights}, {"ranking", ranking},
                                  {"r2", ss_tot > 0 ? 1 - ss_res / ss_tot : 1.0}};
      std::printf("%s: %s\n", cap.c_str(), ranking.dump().c_str());
    }
    io::write_file_atomic(o->out, out.dump(2) + "\n");
  });
}

// ---- memorization sweep -------------------------------------------------------------------------

void add_memorization(CLI::App& app) {
  auto* cmd = app.add_subcommand("memorization", "Sample continuations; report low-loss spans found verbatim in a corpus");
  struct Options {
    std::string model, corpus, prompts, out, quantize;
    int64_t samples = 32, max_new_tokens = 64, top_k = 40, window = 16, min_chars = 32, batch_size = 8;
    double temperature = 1.0, max_loss = 0.25;
    uint64_t seed = 0;
  };
  auto o = std::make_shared<Options>();
  cmd->add_option("--model", o->model, "model folder")->required();
  cmd->add_option("--corpus", o->corpus, "the corpus to search for verbatim copies (text)")->required();
  cmd->add_option("--prompts", o->prompts, "prompts, one per line, used in turn (default: the model's prefix token alone)");
  cmd->add_option("--samples", o->samples, "continuations to sample (default 32)");
  cmd->add_option("--max-new-tokens", o->max_new_tokens, "tokens per continuation (default 64)");
  cmd->add_option("--temperature", o->temperature, "sampling temperature (default 1.0; 0: greedy)")
      ->check(sampling_temperature());
  cmd->add_option("--top-k", o->top_k, "top-k sampling (default 40; 0: off)");
  cmd->add_option("--seed", o->seed, "sampling seed (default 0)")
      ->check(count_or_zero("seed", "seed 0"));
  cmd->add_option("--window", o->window, "tokens per window whose mean loss is tested (default 16)");
  cmd->add_option("--max-loss", o->max_loss,
                  "a window is abnormally predictable at or below this mean loss in nats per token (default 0.25: text the "
                  "model has all but memorized; typical text costs 1-4)")
      ->check(finite_number("takes a mean loss in nats per token, finite and 0 or more", 0, /*min_allowed=*/true));
  cmd->add_option("--min-chars", o->min_chars, "report verbatim matches of at least this many bytes (default 32)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--out", o->out, "report JSON")->required();
  cmd->add_option("--quantize", o->quantize, "weight format of the products");
  add_threads_option(cmd);
  cmd->callback([o] {
    if (o->samples < 1 || o->max_new_tokens < 1 || o->window < 1) raise<ValueError>("memorization: --samples, --max-new-tokens and --window must be positive");
    const eval::SuffixArray corpus(io::read_file(o->corpus));
    if (corpus.text().empty()) raise<ValueError>("memorization: the corpus '{}' is empty", o->corpus);
    std::vector<std::string> prompts;
    if (!o->prompts.empty()) {
      std::istringstream in(io::read_file(o->prompts));
      for (std::string line; std::getline(in, line);)
        if (!line.empty()) prompts.push_back(line);
      if (prompts.empty()) raise<ValueError>("memorization: '{}' has no prompt", o->prompts);
    }
    LoadedModel m = load(o->model, o->batch_size, o->quantize);
    struct Sample {
      eval::Ids prompt, generated;
    };
    std::vector<Sample> samples;
    for (int64_t i = 0; i < o->samples; ++i) {
      Sample s;
      s.prompt = prompts.empty() ? eval::Ids{m.engine->prefix_token()} : m.engine->encode(prompts[size_t(i) % prompts.size()]);
      if (s.prompt.empty()) s.prompt = {m.engine->prefix_token()};
      // Continuations stop at the model's positions (prompt + new tokens <= max length).
      const int64_t room = m.engine->max_length() - int64_t(s.prompt.size());
      if (room < 1) raise<ValueError>("memorization: prompt {} fills the model's {} positions", i, m.engine->max_length());
      models::GenerationConfig g;
      g.max_new_tokens = std::min(o->max_new_tokens, room);
      g.do_sample = o->temperature > 0;
      g.temperature = o->temperature > 0 ? o->temperature : 1.0;
      g.top_k = o->top_k;
      g.seed = o->seed + uint64_t(i);
      g.ignore_eos = true;
      s.generated = models::generate(*m.model, {s.prompt}, g).tokens.front();
      samples.push_back(std::move(s));
    }
    // Per-token losses of the generated tokens, given their prompts.
    std::vector<eval::Ids> full;
    for (const auto& s : samples) {
      eval::Ids f = s.prompt;
      f.insert(f.end(), s.generated.begin(), s.generated.end());
      full.push_back(f);
    }
    const auto scores = m.engine->token_scores(full);
    std::vector<double> all_losses;
    for (size_t i = 0; i < samples.size(); ++i)
      for (size_t t = samples[i].prompt.size(); t < full[i].size(); ++t) all_losses.push_back(-scores[i].logprob[t]);
    std::vector<double> sorted = all_losses;
    std::sort(sorted.begin(), sorted.end());
    const double median = sorted.empty() ? 0 : sorted[sorted.size() / 2];
    const double threshold = o->max_loss;
    struct Found {
      std::string text;
      size_t offset = 0;
      double mean_loss = 0;
      std::vector<size_t> samples;
    };
    std::map<size_t, Found> found;  // by corpus offset: one report per memorized passage
    int64_t flagged_spans = 0;
    for (size_t i = 0; i < samples.size(); ++i) {
      const size_t p = samples[i].prompt.size(), n = full[i].size();
      const int64_t w = std::min<int64_t>(o->window, int64_t(n - p));
      if (w < 1) continue;
      // Windows of low mean loss, merged into spans of generated tokens.
      std::vector<bool> low(n, false);
      for (size_t s = p; s + size_t(w) <= n; ++s) {
        double sum = 0;
        for (size_t t = s; t < s + size_t(w); ++t) sum -= scores[i].logprob[t];
        if (sum / double(w) <= threshold)
          for (size_t t = s; t < s + size_t(w); ++t) low[t] = true;
      }
      for (size_t t = p; t < n;) {
        if (!low[t]) {
          ++t;
          continue;
        }
        size_t e = t;
        double loss = 0;
        while (e < n && low[e]) loss -= scores[i].logprob[e], ++e;
        ++flagged_spans;
        const eval::Ids span(full[i].begin() + std::ptrdiff_t(t), full[i].begin() + std::ptrdiff_t(e));
        const std::string text = m.tokenizer->decode(std::vector<uint32_t>(span.begin(), span.end()));
        // The longest piece of the span that the corpus holds verbatim.
        size_t best_len = 0, best_at = 0, best_start = 0;
        for (size_t st = 0; st < text.size() && text.size() - st > best_len; ++st) {
          const auto [len, at] = corpus.longest_prefix_match(std::string_view(text).substr(st));
          if (len > best_len) best_len = len, best_at = at, best_start = st;
        }
        if (best_len >= size_t(o->min_chars)) {
          Found& f = found[best_at];
          if (best_len > f.text.size()) f.text = text.substr(best_start, best_len), f.offset = best_at;
          f.mean_loss = loss / double(e - t);
          if (std::find(f.samples.begin(), f.samples.end(), i) == f.samples.end()) f.samples.push_back(i);
        }
        t = e;
      }
    }
    // Deduplicate passages that overlap in the corpus (the same lines reached from different starts).
    std::vector<Found> passages;
    for (auto& [at, f] : found) {
      if (!passages.empty() && at < passages.back().offset + passages.back().text.size()) {
        Found& prev = passages.back();
        const size_t end = std::max(prev.offset + prev.text.size(), at + f.text.size());
        prev.text = corpus.text().substr(prev.offset, end - prev.offset);
        for (size_t s : f.samples)
          if (std::find(prev.samples.begin(), prev.samples.end(), s) == prev.samples.end()) prev.samples.push_back(s);
        continue;
      }
      passages.push_back(f);
    }
    ordered_json list = ordered_json::array();
    for (const Found& f : passages) {
      const size_t line = size_t(std::count(corpus.text().begin(), corpus.text().begin() + std::ptrdiff_t(f.offset), '\n')) + 1;
      list.push_back({{"text", f.text},
                      {"corpus_offset", f.offset},
                      {"corpus_line", line},
                      {"length", f.text.size()},
                      {"occurrences", corpus.count(f.text)},
                      {"mean_loss", f.mean_loss},
                      {"samples", f.samples}});
    }
    ordered_json report = {{"model", o->model},
                           {"corpus", o->corpus},
                           {"samples", samples.size()},
                           {"median_token_loss", median},
                           {"loss_threshold", threshold},
                           {"flagged_spans", flagged_spans},
                           {"memorized", list}};
    io::write_file_atomic(o->out, report.dump(2) + "\n");
    std::printf("%zu samples, %lld low-loss spans, %zu memorized passages (threshold %.3f nats, median %.3f)\n",
                samples.size(), (long long)flagged_spans, passages.size(), threshold, median);
  });
}

}  // namespace

void add_forensics_commands(CLI::App& app) {
  add_fingerprint(app);
  add_membership(app);
  add_attribute(app);
  add_memorization(app);
}

}  // namespace foundry::cli
