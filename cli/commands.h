// Subcommands of the `foundry` program; each file registers one with CLI11.
#pragma once

#include <cmath>

#include <CLI/CLI.hpp>

#include <memory>
#include <string>
#include <vector>

#include "foundry/models/pretrained.h"
#include "foundry/text/tokenizer.h"

namespace foundry::cli {

void add_ops_command(CLI::App& app);
void add_demo_command(CLI::App& app);
void add_tokenize_command(CLI::App& app);
void add_train_command(CLI::App& app);
void add_prepare_command(CLI::App& app);
void add_generate_commands(CLI::App& app);  ///< generate, forward, info, convert, quantize, perplexity
void add_finetune_commands(CLI::App& app);  ///< finetune, merge
void add_eval_command(CLI::App& app);        ///< eval (lm-evaluation-harness tasks and requests)
void add_forensics_commands(CLI::App& app);  ///< fingerprint, membership, attribute, memorization
void add_serve_command(CLI::App& app);       ///< serve (OpenAI-compatible HTTP server)
void add_chat_command(CLI::App& app);        ///< chat (interactive terminal chat)
void add_embed_command(CLI::App& app);       ///< embed (sentence embeddings of encoder models)
void add_template_command(CLI::App& app);    ///< template (chat templates)
void add_runs_commands(CLI::App& app);      ///< runs list|show|compare|export|gc|sync, dashboard

/// The model of `dir` with the LoRA adapter in `adapter` ("": none): its layers wrapped
/// (unmerged), or merged into the float weights at load when `merge` (then quantized if asked).
std::shared_ptr<models::CausalLM> load_model(const std::string& dir, const models::LoadOptions& options,
                                             const std::string& adapter = "", bool merge = false);

/// `--threads N` on cmd: the size of the thread pool the command runs on, set as the command line is
/// parsed (absent or 0: every core this process may use, or OMP_NUM_THREADS when set).
void add_threads_option(CLI::App* cmd);

/// The check of a --threads value: an integer, 0 or more.
CLI::Validator thread_count();
/// The check of a count (`what`, e.g. "token count") where 0 has a meaning (`zero_means`, e.g.
/// "all"): an integer, 0 or more.
CLI::Validator count_or_zero(const std::string& what, const std::string& zero_means);

/// The check of a finite number above `min` (or equal to it when `min_allowed`), at most `max`, and
/// whole when `integer`; otherwise the error is `rule` and the value given.
CLI::Validator finite_number(const std::string& rule, double min, bool min_allowed, bool integer = false,
                             double max = HUGE_VAL);
/// The check of a text option that must not be empty when given (an unset shell variable, say);
/// `absent_means` says what leaving the option out does.
CLI::Validator non_empty(const std::string& option, const std::string& absent_means);
/// The check of a sampling temperature: finite, 0 (greedy) or more (NaN and -1 became greedy unseen).
CLI::Validator sampling_temperature();

/// The non-empty items of a comma-separated list ("a,b,,c" -> a, b, c).
std::vector<std::string> split_list(const std::string& s);

/// A model with the tokenizer and chat-template settings of its folder (GGUF: the file's tokenizer,
/// no template); `command` names the caller in the error for a folder without a tokenizer.
struct ChatModel {
  std::shared_ptr<models::CausalLM> model;
  std::unique_ptr<text::Tokenizer> tokenizer;
  std::string chat_template, bos_token, eos_token;  ///< chat_template "": the folder has none
};
ChatModel load_chat_model(const std::string& dir, const std::string& quantize, const std::string& adapter,
                          const char* command);

}  // namespace foundry::cli
