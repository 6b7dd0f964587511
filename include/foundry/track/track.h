// Experiment tracking with wandb's names: init a run, log scalars, histograms, text, images and
// artifacts, finish. Everything lands in one SQLite database per directory (<dir>/foundry.db, WAL;
// schema in docs/tracking.md) through a background writer that commits every flush interval, so
// logging from the training loop costs microseconds and a killed process loses at most the last
// interval. TensorBoard event files are written alongside (<dir>/tb/<run name>/).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace foundry {
class Tensor;
}

namespace foundry::track {

struct InitOptions {
  std::string project = "default";
  std::string name;              ///< "" = "run-<id>"
  std::string config_json = "{}";  ///< a JSON object (hyperparameters)
  std::vector<std::string> tags;
  std::string dir = "runs";      ///< the directory holding foundry.db
  std::string resume;            ///< a run id to continue (status goes back to running)
  std::string notes;
  double flush_interval = 1.0;   ///< seconds between commits of the background writer
  double system_interval = 10.0; ///< seconds between system metrics (cpu %, RSS); 0 = off
  bool tensorboard = true;       ///< also write TensorBoard event files
};

/// A histogram in TensorBoard's HistogramProto shape: bucket i counts values in
/// (bucket_limits[i-1], bucket_limits[i]] (the first bucket starts at min).
struct Histogram {
  double min = 0, max = 0, num = 0, sum = 0, sum_squares = 0;
  std::vector<double> bucket_limits, bucket_counts;
};
/// `bins` equal-width buckets between the finite min and max of `values`; NaN and inf are counted
/// in `num` but not bucketed (TensorBoard's convention is to drop them; we keep the count honest).
Histogram make_histogram(const float* values, size_t n, int bins = 64);

class Run {
 public:
  /// Finishes the run if finish() was not called: exit code 1 (failed) when destroyed while an
  /// exception unwinds the stack, else 0.
  ~Run();
  Run(const Run&) = delete;
  Run& operator=(const Run&) = delete;

  const std::string& id() const;
  const std::string& name() const;
  const std::string& project() const;
  const std::string& dir() const;

  /// Buffered: returns after queueing (a background thread commits). Non-finite values are kept.
  void log(const std::map<std::string, double>& values, std::optional<int64_t> step = std::nullopt);
  void log_histogram(const std::string& key, const Tensor& values, std::optional<int64_t> step = std::nullopt,
                     int bins = 64);
  void log_histogram(const std::string& key, const std::vector<float>& values,
                     std::optional<int64_t> step = std::nullopt, int bins = 64);
  void log_text(const std::string& key, const std::string& text, std::optional<int64_t> step = std::nullopt);
  /// PNG bytes (checked: signature and IHDR), stored as given.
  void log_image_png(const std::string& key, std::string png, std::optional<int64_t> step = std::nullopt);
  /// An 8-bit image, height x width x channels (1 gray, 3 RGB, 4 RGBA), row-major; encoded as PNG.
  void log_image(const std::string& key, const uint8_t* pixels, int64_t height, int64_t width, int channels,
                 std::optional<int64_t> step = std::nullopt);
  /// Sets summary[key] to a JSON value ("1.62", "\"text\"", ...); written with the next flush.
  void set_summary(const std::string& key, const std::string& json_value);
  void set_summary(const std::string& key, double value);
  /// The summary as a JSON object.
  std::string summary_json() const;
  /// Copies the file into the content-addressed store (<dir>/artifacts/sha256/..., deduplicated)
  /// and records it for this run; returns its sha256.
  std::string log_artifact(const std::string& path, const std::string& type = "file", const std::string& name = "");
  /// Adds tokens processed since the last call; the system thread logs system/tokens_per_sec.
  void add_tokens(int64_t n);

  /// Commits everything queued so far (blocking).
  void flush();
  /// Flushes, records the exit code and status (0 = finished, else failed) and stops the threads.
  void finish(int exit_code = 0);
  bool finished() const;

  struct Impl;

 private:
  friend std::unique_ptr<Run> init(const InitOptions&);
  explicit Run(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// Starts (or resumes) a run. Throws ValueError for an unknown resume id, IOError for a database
/// that cannot be opened or is not a Foundry tracking database (never overwritten).
std::unique_ptr<Run> init(const InitOptions& options);

/// init() for a run that belongs to an output folder (a training run's out_dir): with `resume`, the
/// run whose id `id_file` records is continued when this tracking directory holds it (else a new
/// run starts); the run's id is then written to `id_file`.
std::unique_ptr<Run> init_for_folder(InitOptions options, const std::string& id_file, bool resume);

}  // namespace foundry::track
