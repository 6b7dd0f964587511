// lm-evaluation-harness task files run natively: the subset of lm-eval v0.4's YAML task config that
// people write (local JSONL/JSON/CSV data, Jinja templates, few-shot contexts drawn as the harness
// draws them, its metrics, filters and aggregations), giving results.json shaped like lm-eval's.
// docs/evaluation.md lists the keys.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace foundry::eval {

class RequestEngine;
struct TaskConfig;

struct TaskRunOptions {
  int64_t num_fewshot = -1;        ///< -1: the task's num_fewshot; a task that sets 0 keeps 0 (as lm-eval)
  uint64_t fewshot_seed = 1234;    ///< random.Random(seed) draws the few-shot examples
  double limit = -1;               ///< first N documents; a fraction < 1 takes ceil(N * limit); -1: all
  int64_t bootstrap_iters = 100000;
  bool log_samples = false;
};

/// A parsed, validated task with its documents loaded.
class Task {
 public:
  /// Reads `yaml_path` (and the files it includes); unknown keys, unsupported values, template
  /// syntax errors and missing data files are ValueErrors naming the file and the key.
  static std::unique_ptr<Task> load(const std::string& yaml_path);
  ~Task();
  const std::string& name() const;
  const TaskConfig& config() const { return *config_; }

 private:
  Task();
  std::unique_ptr<TaskConfig> config_;
  friend struct TaskRunner;
};

struct TaskOutput {
  std::string results_json;  ///< lm-eval's results.json object
  std::map<std::string, std::vector<std::string>> samples;  ///< task name -> JSON lines (with log_samples)
  std::string table;         ///< the results as a Markdown table, as lm-eval prints them
};

/// Builds every task's requests, answers them with `engine`, scores, filters and aggregates.
/// `model_args` is written to results.json's config.
TaskOutput evaluate_tasks(RequestEngine& engine, const std::vector<std::unique_ptr<Task>>& tasks,
                          const TaskRunOptions& options, const std::string& model_args);

}  // namespace foundry::eval
