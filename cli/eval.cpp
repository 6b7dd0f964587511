// foundry eval: lm-evaluation-harness requests (--requests: loglikelihood, loglikelihood_rolling,
// generate_until answered with the harness's semantics, one JSON line per request in input order)
// or whole lm-eval task files (--tasks: results.json shaped like lm-eval's). docs/evaluation.md.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "foundry/core/error.h"
#include "foundry/eval/requests.h"
#include "foundry/eval/tasks.h"
#include "foundry/io/atomic_file.h"
#include "foundry/models/tokenizer_files.h"
#include "foundry/text/tokenizer.h"
#include "foundry/io/json_depth.h"

namespace foundry::cli {

namespace {

using nlohmann::json;

eval::Ids ids_field(const json& j, const char* name, size_t line) {
  const json& v = j.at(name);
  if (!v.is_array()) raise<ValueError>("requests line {}: \"{}\" must be a list of token ids", line, name);
  eval::Ids out;
  for (const json& x : v) {
    if (!x.is_number_integer()) raise<ValueError>("requests line {}: \"{}\" holds a non-integer {}", line, name, x.dump());
    out.push_back(x.get<int64_t>());
  }
  return out;
}

std::string string_field(const json& j, const char* name, size_t line) {
  if (!j.contains(name) || !j[name].is_string())
    raise<ValueError>("requests line {}: needs a string \"{}\"", line, name);
  return j[name].get<std::string>();
}

template <class Options>
void run_tasks(const Options& o) {
  if (o.log_samples && o.output.empty()) raise<ValueError>("eval: --log-samples writes beside --output; give --output results.json");
  // Every task file is read and checked before the model loads: a bad key fails in a second.
  std::vector<std::unique_ptr<eval::Task>> tasks;
  for (const std::string& file : split_list(o.tasks)) tasks.push_back(eval::Task::load(file));
  if (tasks.empty()) raise<ValueError>("eval: --tasks names no task file");
  models::LoadOptions lo;
  lo.quantize = o.quantize;
  std::shared_ptr<models::CausalLM> model = load_model(o.model, lo);
  std::unique_ptr<text::Tokenizer> tok = models::folder_tokenizer(o.model);
  if (!tok) raise<ValueError>("eval: task files hold text, and the model '{}' has no tokenizer", o.model);
  eval::RequestEngine engine(*model, tok.get(), o.max_length);
  engine.set_batch_size(o.batch_size);
  eval::TaskRunOptions ro;
  ro.num_fewshot = o.num_fewshot;
  ro.fewshot_seed = o.fewshot_seed;
  ro.limit = o.limit;
  ro.bootstrap_iters = o.bootstrap_iters;
  ro.log_samples = o.log_samples;
  const auto t0 = std::chrono::steady_clock::now();
  eval::TaskOutput res = eval::evaluate_tasks(engine, tasks, ro, "pretrained=" + o.model);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fputs(res.table.c_str(), stdout);
  if (!o.output.empty()) {
    const std::filesystem::path dir = std::filesystem::path(o.output).parent_path();
    if (!dir.empty()) std::filesystem::create_directories(dir);
    io::write_file_atomic(o.output, res.results_json + "\n");
    for (const auto& [task, lines] : res.samples) {
      std::string text;
      for (const std::string& l : lines) text += l + "\n";
      io::write_file_atomic((dir / ("samples_" + task + ".jsonl")).string(), text);
    }
  }
  std::fprintf(stderr, "eval: %zu task(s) with %lld forwards; shared contexts saved %lld tokens; evaluated in %.3f s\n",
               tasks.size(), (long long)engine.forwards(), (long long)engine.shared_prefix_tokens_saved(), secs);
}

}  // namespace

void add_eval_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("eval", "Evaluate a model: lm-evaluation-harness task files (--tasks) or requests (--requests)");
  struct Options {
    std::string model, requests, out, quantize, tasks, output;
    int64_t max_length = 0, batch_size = 8, num_fewshot = -1, bootstrap_iters = 100000;
    uint64_t fewshot_seed = 1234;
    double limit = -1;
    bool log_samples = false;
  };
  auto o = std::make_shared<Options>();
  cmd->add_option("--model", o->model, "Hugging Face model folder (or GGUF file)")->required();
  auto* requests = cmd->add_option("--requests", o->requests,
                                   "JSON Lines of requests: {\"request_type\": \"loglikelihood\" | "
                                   "\"loglikelihood_rolling\" | \"generate_until\", ...}");
  auto* out = cmd->add_option("--out", o->out, "with --requests: results, one JSON line per request in input order");
  auto* tasks = cmd->add_option("--tasks", o->tasks, "lm-eval task files (YAML), comma-separated");
  requests->excludes(tasks);
  out->needs(requests);
  cmd->add_option("--num-fewshot", o->num_fewshot, "few-shot examples per document (default: each task's num_fewshot)")
      ->needs(tasks)
      ->check(finite_number("num_fewshot must be 0 or more", 0, /*min_allowed=*/true, /*integer=*/true));
  cmd->add_option("--fewshot-seed", o->fewshot_seed, "seed of the few-shot draws (default 1234, as lm-eval)")->needs(tasks);
  cmd->add_option("--limit", o->limit, "evaluate the first N documents of each task (a fraction < 1: that share)")
      ->needs(tasks)
      ->check(finite_number("limit must be a positive number (documents, or a share below 1)", 0, /*min_allowed=*/false));
  cmd->add_option("--output", o->output, "results.json path (lm-eval's shape)")->needs(tasks);
  cmd->add_flag("--log-samples", o->log_samples, "write samples_<task>.jsonl beside --output")->needs(tasks);
  cmd->add_option("--bootstrap-iters", o->bootstrap_iters, "bootstrap resamples for stderr (default 100000; 0: none)")->needs(tasks);
  cmd->add_option("--max-length", o->max_length, "context window (default: the model's maximum positions)");
  cmd->add_option("--batch-size", o->batch_size, "requests per forward for those that share no context (default 8)");
  cmd->add_option("--quantize", o->quantize, "weight format of the products (q8_0, q4_K, nf4, ...)");
  add_threads_option(cmd);
  cmd->callback([o] {
    if (o->requests.empty() && o->tasks.empty()) raise<ValueError>("eval: give --tasks T1.yaml,... or --requests REQ.jsonl --out RES.jsonl");
    if (!o->requests.empty() && o->out.empty()) raise<ValueError>("eval: --requests needs --out");
    if (!o->tasks.empty()) return run_tasks(*o);
    std::ifstream in(o->requests, std::ios::binary);
    if (!in) raise<IOError>("eval: cannot open requests file '{}'", o->requests);
    std::vector<json> lines;
    std::string line;
    while (std::getline(in, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.find_first_not_of(" \t") == std::string::npos) continue;
      io::check_json_depth(line, "requests line " + std::to_string(lines.size() + 1));
      json j = json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.is_object())
        raise<ValueError>("requests line {}: not a JSON object", lines.size() + 1);
      lines.push_back(std::move(j));
    }
    models::LoadOptions lo;
    lo.quantize = o->quantize;
    std::shared_ptr<models::CausalLM> model = load_model(o->model, lo);
    std::unique_ptr<text::Tokenizer> tok = models::folder_tokenizer(o->model);
    eval::RequestEngine engine(*model, tok.get(), o->max_length);
    engine.set_batch_size(o->batch_size);

    // Parse everything first (errors name the line before any work), then answer each kind in one
    // call so requests sharing a context share its forward.
    std::vector<json> results(lines.size());
    std::vector<eval::LoglikelihoodRequest> ll;
    std::vector<size_t> ll_at, rolling_at, gen_at;
    std::vector<eval::Ids> rolling;
    std::vector<eval::GenerateRequest> gens;
    for (size_t i = 0; i < lines.size(); ++i) {
      const json& j = lines[i];
      const size_t n = i + 1;
      std::string type = j.contains("request_type") && j["request_type"].is_string() ? j["request_type"].get<std::string>() : "";
      if (type == "loglikelihood") {
        if (j.contains("context_ids") || j.contains("continuation_ids")) {
          if (!j.contains("context_ids") || !j.contains("continuation_ids"))
            raise<ValueError>("requests line {}: give both \"context_ids\" and \"continuation_ids\"", n);
          ll.push_back({ids_field(j, "context_ids", n), ids_field(j, "continuation_ids", n)});
        } else {
          ll.push_back(engine.encode_pair(string_field(j, "context", n), string_field(j, "continuation", n)));
        }
        ll_at.push_back(i);
      } else if (type == "loglikelihood_rolling") {
        rolling.push_back(j.contains("ids") ? ids_field(j, "ids", n) : engine.encode(string_field(j, "text", n)));
        rolling_at.push_back(i);
      } else if (type == "generate_until") {
        eval::GenerateRequest g;
        g.context = string_field(j, "context", n);
        if (j.contains("until")) {
          const json& u = j["until"];
          if (u.is_string()) g.until = {u.get<std::string>()};
          else if (u.is_array() && std::all_of(u.begin(), u.end(), [](const json& x) { return x.is_string(); }))
            g.until = u.get<std::vector<std::string>>();
          else raise<ValueError>("requests line {}: \"until\" must be a string or a list of strings", n);
        }
        if (j.contains("max_gen_toks")) {
          if (!j["max_gen_toks"].is_number_integer() || j["max_gen_toks"].get<int64_t>() < 1)
            raise<ValueError>("requests line {}: \"max_gen_toks\" must be a positive integer", n);
          g.max_gen_toks = j["max_gen_toks"].get<int64_t>();
        }
        gens.push_back(std::move(g));
        gen_at.push_back(i);
      } else {
        raise<ValueError>("requests line {}: request_type must be loglikelihood, loglikelihood_rolling or "
                          "generate_until, got '{}'",
                          n, type);
      }
    }
    const auto t_eval = std::chrono::steady_clock::now();
    auto ll_res = engine.loglikelihood(ll);
    for (size_t k = 0; k < ll_res.size(); ++k)
      results[ll_at[k]] = {{"loglikelihood", ll_res[k].loglikelihood}, {"is_greedy", ll_res[k].is_greedy}};
    auto roll_res = engine.loglikelihood_rolling(rolling);
    for (size_t k = 0; k < roll_res.size(); ++k)
      results[rolling_at[k]] = {{"loglikelihood", roll_res[k].loglikelihood}, {"n_tokens", roll_res[k].n_tokens}};
    auto gen_res = engine.generate_until(gens);
    for (size_t k = 0; k < gen_res.size(); ++k) results[gen_at[k]] = {{"text", gen_res[k]}};

    const double eval_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_eval).count();
    std::string text;
    for (const json& r : results) text += r.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
    io::write_file_atomic(o->out, text);
    std::fprintf(stderr, "eval: %zu requests (%zu loglikelihood, %zu rolling, %zu generate) with %lld forwards; "
                 "shared contexts saved %lld tokens; answered in %.3f s\n",
                 lines.size(), ll.size(), rolling.size(), gens.size(), (long long)engine.forwards(),
                 (long long)engine.shared_prefix_tokens_saved(), eval_s);
  });
}

}  // namespace foundry::cli
