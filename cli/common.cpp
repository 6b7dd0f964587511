// Helpers the subcommands share (commands.h).
#include <cmath>
#include <cstdlib>
#include <charconv>
#include <sstream>
#include <system_error>

#include "commands.h"
#include "foundry/core/parallel.h"
#include "foundry/models/gguf.h"
#include "foundry/models/tokenizer_files.h"
#include "foundry/peft/lora.h"

namespace foundry::cli {

std::shared_ptr<models::CausalLM> load_model(const std::string& dir, const models::LoadOptions& options,
                                             const std::string& adapter, bool merge) {
  if (adapter.empty() && merge) raise<ValueError>("--merge merges an adapter: give --adapter DIR too");
  if (adapter.empty()) return models::load_pretrained(dir, options);
  if (!merge) {
    std::shared_ptr<models::CausalLM> model = models::load_pretrained(dir, options);
    peft::PeftModel::from_pretrained(model, adapter);  // the LoRA layers stay in the model's tree
    return model;
  }
  // Merging writes into the weights: a GGUF file's are its read-only mapping (or quantized blocks).
  if (models::is_gguf_file(dir))
    raise<ValueError>("merging an adapter needs a Hugging Face folder of float weights, and '{}' is a GGUF file; "
                      "load the adapter without --merge, or merge into the folder the GGUF was converted from", dir);
  models::LoadOptions float_options = options;
  float_options.quantize.clear();
  std::shared_ptr<models::CausalLM> model = models::load_pretrained(dir, float_options);
  if (model->has_adopted_quantized_weights())
    raise<ValueError>("merging an adapter needs float weights, and '{}' holds quantized ones; load the adapter "
                      "without --merge", dir);
  model = peft::PeftModel::from_pretrained(model, adapter)->merge_and_unload();
  if (!options.quantize.empty()) {
    model->set_weight_quantization(options.quantize);
    model->freeze_if_quantized();
  }
  return model;
}

ChatModel load_chat_model(const std::string& dir, const std::string& quantize, const std::string& adapter,
                          const char* command) {
  ChatModel m;
  models::LoadOptions lo;
  lo.quantize = quantize;
  m.model = load_model(dir, lo, adapter);
  m.tokenizer = models::folder_tokenizer(dir);
  if (!m.tokenizer)
    raise<ValueError>("{}: '{}' has no tokenizer (tokenizer.json, tokenizer.model or vocab.json + merges.txt)", command, dir);
  if (!models::is_gguf_file(dir)) {
    const models::TokenizerSettings s = models::folder_tokenizer_settings(dir);
    m.chat_template = s.chat_template.value_or("");
    m.bos_token = s.bos_token;
    m.eos_token = s.eos_token;
  }
  return m;
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

CLI::Validator count_or_zero(const std::string& what, const std::string& zero_means) {
  return CLI::Validator(
      [what, zero_means](std::string& v) -> std::string {
        int64_t n = -1;
        const auto [end, err] = std::from_chars(v.data(), v.data() + v.size(), n);
        if (err != std::errc() || end != v.data() + v.size() || n < 0)
          return "takes a " + what + ", 0 or more (0: " + zero_means + "), not '" + v + "'";
        return "";
      },
      "N");
}

CLI::Validator thread_count() { return count_or_zero("thread count", "all cores"); }

CLI::Validator finite_number(const std::string& rule, double min, bool min_allowed, bool integer, double max) {
  return CLI::Validator(
      [=](std::string& v) -> std::string {
        char* end = nullptr;
        const double x = std::strtod(v.c_str(), &end);
        const bool ok = !v.empty() && *end == '\0' && std::isfinite(x) && (x > min || (min_allowed && x == min)) &&
                        x <= max && (!integer || x == std::floor(x));
        return ok ? std::string() : rule + ", got '" + v + "'";
      },
      integer ? "N" : "X");
}

CLI::Validator non_empty(const std::string& option, const std::string& absent_means) {
  return CLI::Validator(
      [=](std::string& v) -> std::string {
        return v.empty() ? option + " is empty: give it, or leave the option out for " + absent_means : "";
      },
      "");
}

CLI::Validator sampling_temperature() {
  return finite_number("takes a temperature, finite and 0 or more (0: greedy)", 0, /*min_allowed=*/true);
}

void add_threads_option(CLI::App* cmd) {
  cmd->add_option_function<int>(
         "--threads", [](const int& n) { if (n > 0) set_num_threads(n); },
         "threads (default: all cores, or OMP_NUM_THREADS when set)")
      ->check(thread_count());
}

}  // namespace foundry::cli
