// foundry eval --requests: lm-evaluation-harness requests (loglikelihood, loglikelihood_rolling,
// generate_until) answered with the harness's semantics, one JSON line per request in input order
// (docs/evaluation.md).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "foundry/core/error.h"
#include "foundry/core/parallel.h"
#include "foundry/eval/requests.h"
#include "foundry/io/atomic_file.h"
#include "foundry/models/tokenizer_files.h"
#include "foundry/text/tokenizer.h"

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

}  // namespace

void add_eval_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("eval", "Evaluate a model: lm-evaluation-harness requests (--requests)");
  struct Options {
    std::string model, requests, out, quantize;
    int64_t max_length = 0, batch_size = 8;
    int threads = 0;
  };
  auto o = std::make_shared<Options>();
  cmd->add_option("--model", o->model, "Hugging Face model folder (or GGUF file)")->required();
  cmd->add_option("--requests", o->requests,
                  "JSON Lines of requests: {\"request_type\": \"loglikelihood\" | \"loglikelihood_rolling\" | "
                  "\"generate_until\", ...}")
      ->required();
  cmd->add_option("--out", o->out, "results, one JSON line per request in input order")->required();
  cmd->add_option("--max-length", o->max_length, "context window (default: the model's maximum positions)");
  cmd->add_option("--batch-size", o->batch_size, "requests per forward for those that share no context (default 8)");
  cmd->add_option("--quantize", o->quantize, "weight format of the products (q8_0, q4_K, nf4, ...)");
  cmd->add_option("--threads", o->threads, "threads (default: all cores)");
  cmd->callback([o] {
    if (o->threads > 0) set_num_threads(o->threads);
    std::ifstream in(o->requests, std::ios::binary);
    if (!in) raise<IOError>("eval: cannot open requests file '{}'", o->requests);
    std::vector<json> lines;
    std::string line;
    while (std::getline(in, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.find_first_not_of(" \t") == std::string::npos) continue;
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
