// A tracked run: the caller's thread only appends to a queue; a writer thread commits the queue to
// SQLite (and the TensorBoard file) every flush interval and refreshes the run's heartbeat; a
// system thread samples CPU %, RSS and tokens/s.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <exception>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "foundry/core/error.h"
#include "foundry/core/tensor.h"
#include "foundry/io/atomic_file.h"
#include "foundry/track/store.h"
#include "track/png.h"
#include "track/tb_events.h"
#include "track/util.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace foundry::track {

Histogram make_histogram(const float* values, size_t n, int bins) {
  if (bins < 1) raise<ValueError>("histogram: bins must be at least 1, got {}", bins);
  Histogram h;
  h.num = double(n);
  double lo = INFINITY, hi = -INFINITY;
  for (size_t i = 0; i < n; ++i) {
    double v = values[i];
    if (!std::isfinite(v)) continue;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
    h.sum += v;
    h.sum_squares += v * v;
  }
  if (lo > hi) {  // nothing finite
    h.min = h.max = 0;
    return h;
  }
  h.min = lo;
  h.max = hi;
  if (lo == hi) {
    h.bucket_limits = {hi};
    h.bucket_counts = {0};
    for (size_t i = 0; i < n; ++i)
      if (std::isfinite(values[i])) h.bucket_counts[0] += 1;
    return h;
  }
  double width = (hi - lo) / bins;
  h.bucket_limits.resize(size_t(bins));
  h.bucket_counts.assign(size_t(bins), 0);
  for (int b = 0; b < bins; ++b) h.bucket_limits[size_t(b)] = lo + width * (b + 1);
  h.bucket_limits.back() = hi;
  for (size_t i = 0; i < n; ++i) {
    double v = values[i];
    if (!std::isfinite(v)) continue;
    int b = int(std::ceil((v - lo) / width)) - 1;  // (limit[b-1], limit[b]]
    h.bucket_counts[size_t(std::clamp(b, 0, bins - 1))] += 1;
  }
  return h;
}

namespace {

struct Record {
  enum Kind { Scalar, Histo, Text, Image } kind;
  std::string key;
  int64_t step;
  double wall_time;
  double value = 0;
  Histogram histogram;
  std::string text;  // text, or PNG bytes
  int64_t height = 0, width = 0;
  int channels = 0;
};

double process_cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + 1e-6 * double(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

double rss_mb() {
  std::ifstream f("/proc/self/statm");
  long pages = 0, resident = 0;
  f >> pages >> resident;
  return double(resident) * double(::sysconf(_SC_PAGESIZE)) / (1024.0 * 1024.0);
}

}  // namespace

struct Run::Impl {
  InitOptions opt;
  Store store;
  RunRecord rec;
  std::unique_ptr<TbEventWriter> tb;

  std::mutex mu;
  std::condition_variable wake, flushed_cv;
  std::vector<Record> queue;
  json summary = json::object();
  bool summary_dirty = false;
  uint64_t flush_requested = 0, flush_done = 0;
  bool stopping = false, finished = false;
  int64_t next_step = 0, last_step = 0;
  std::atomic<int64_t> tokens{0};
  std::string writer_error;  // reported once on stderr
  std::thread writer, system;
  std::mutex store_mu;  // the Store is used by the writer and by log_artifact

  int64_t take_step(std::optional<int64_t> step, bool advance) {
    std::lock_guard<std::mutex> lk(mu);
    int64_t s = step ? *step : (advance ? next_step : last_step);
    last_step = s;
    if (advance || step) next_step = std::max(next_step, s + 1);
    return s;
  }

  void push(Record r) {
    std::lock_guard<std::mutex> lk(mu);
    if (finished) raise<ValueError>("run {} is finished; start a new run or resume it to log more", rec.id);
    queue.push_back(std::move(r));
  }

  void commit(std::vector<Record>& batch, const json* new_summary) {
    std::lock_guard<std::mutex> lk(store_mu);
    store.transaction([&] {
      for (auto& r : batch) {
        switch (r.kind) {
          case Record::Scalar: store.insert_scalar(rec.id, r.key, {r.step, r.wall_time, r.value}); break;
          case Record::Histo: store.insert_histogram(rec.id, r.key, {r.step, r.wall_time, r.histogram}); break;
          case Record::Text: store.insert_text(rec.id, r.key, {r.step, r.wall_time, r.text}); break;
          case Record::Image:
            store.insert_image(rec.id, r.key, {0, r.step, r.wall_time, r.width, r.height, r.text});
            break;
        }
      }
      if (new_summary) rec.summary_json = new_summary->dump();
      rec.updated_at = unix_now();
      store.update_run(rec);
    });
    if (tb) {
      for (auto& r : batch) {
        switch (r.kind) {
          case Record::Scalar: tb->scalar(r.key, r.step, r.wall_time, r.value); break;
          case Record::Histo: tb->histogram(r.key, r.step, r.wall_time, r.histogram); break;
          case Record::Text: tb->text(r.key, r.step, r.wall_time, r.text); break;
          case Record::Image: tb->image(r.key, r.step, r.wall_time, r.text, r.height, r.width, r.channels); break;
        }
      }
      tb->flush();
    }
  }

  void writer_loop() {
    auto interval = std::chrono::duration<double>(std::max(0.01, opt.flush_interval));
    std::unique_lock<std::mutex> lk(mu);
    for (;;) {
      wake.wait_for(lk, interval, [&] { return stopping || flush_requested > flush_done; });
      std::vector<Record> batch;
      batch.swap(queue);
      json new_summary;
      bool with_summary = summary_dirty;
      if (with_summary) new_summary = summary;
      summary_dirty = false;
      uint64_t generation = flush_requested;
      bool last = stopping;
      lk.unlock();
      try {
        commit(batch, with_summary ? &new_summary : nullptr);
      } catch (const std::exception& e) {
        lk.lock();  // keep the points for the next attempt
        queue.insert(queue.begin(), std::make_move_iterator(batch.begin()), std::make_move_iterator(batch.end()));
        if (with_summary) summary_dirty = true;
        if (writer_error.empty()) {
          writer_error = e.what();
          std::fprintf(stderr, "foundry.track: cannot write to %s (will retry): %s\n", store.db_path().c_str(), e.what());
        }
        lk.unlock();
        if (last) {
          lk.lock();
          flush_done = generation;
          flushed_cv.notify_all();
          return;
        }
      }
      lk.lock();
      flush_done = generation;
      flushed_cv.notify_all();
      if (last) return;
    }
  }

  void system_loop() {
    double t0 = unix_now(), cpu0 = process_cpu_seconds();
    int64_t tok0 = tokens.load();
    std::unique_lock<std::mutex> lk(mu);
    while (!stopping) {
      wake.wait_for(lk, std::chrono::duration<double>(opt.system_interval), [&] { return stopping; });
      if (stopping) break;
      double t = unix_now(), cpu = process_cpu_seconds();
      int64_t tok = tokens.load();
      double dt = std::max(1e-9, t - t0);
      int64_t step = last_step;
      queue.push_back({Record::Scalar, "system/cpu_percent", step, t, 100.0 * (cpu - cpu0) / dt});
      queue.push_back({Record::Scalar, "system/rss_mb", step, t, rss_mb()});
      if (tok > tok0 || tok > 0) queue.push_back({Record::Scalar, "system/tokens_per_sec", step, t, double(tok - tok0) / dt});
      t0 = t, cpu0 = cpu, tok0 = tok;
    }
  }

  void stop_threads() {
    {
      std::lock_guard<std::mutex> lk(mu);
      stopping = true;
      ++flush_requested;
    }
    wake.notify_all();
    if (system.joinable()) system.join();
    if (writer.joinable()) writer.join();
  }
};

Run::Run(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Run::~Run() {
  try {
    if (!finished()) finish(std::uncaught_exceptions() > 0 ? 1 : 0);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "foundry.track: finishing run %s failed: %s\n", impl_->rec.id.c_str(), e.what());
  }
}

const std::string& Run::id() const { return impl_->rec.id; }
const std::string& Run::name() const { return impl_->rec.name; }
const std::string& Run::project() const { return impl_->rec.project; }
const std::string& Run::dir() const { return impl_->opt.dir; }

void Run::log(const std::map<std::string, double>& values, std::optional<int64_t> step) {
  int64_t s = impl_->take_step(step, true);
  double t = unix_now();
  std::lock_guard<std::mutex> lk(impl_->mu);
  if (impl_->finished) raise<ValueError>("run {} is finished; start a new run or resume it to log more", impl_->rec.id);
  for (auto& [k, v] : values) {
    if (k.empty()) raise<ValueError>("log: empty metric name");
    impl_->queue.push_back({Record::Scalar, k, s, t, v});
  }
}

void Run::log_histogram(const std::string& key, const std::vector<float>& values, std::optional<int64_t> step,
                        int bins) {
  Record r{Record::Histo, key, impl_->take_step(step, false), unix_now()};
  r.histogram = make_histogram(values.data(), values.size(), bins);
  impl_->push(std::move(r));
}

void Run::log_histogram(const std::string& key, const Tensor& values, std::optional<int64_t> step, int bins) {
  Tensor f = values.detach().to(DType::Float32).contiguous();
  Record r{Record::Histo, key, impl_->take_step(step, false), unix_now()};
  r.histogram = make_histogram(f.data<float>(), size_t(f.numel()), bins);
  impl_->push(std::move(r));
}

void Run::log_text(const std::string& key, const std::string& text, std::optional<int64_t> step) {
  Record r{Record::Text, key, impl_->take_step(step, false), unix_now()};
  r.text = text;
  impl_->push(std::move(r));
}

void Run::log_image_png(const std::string& key, std::string png, std::optional<int64_t> step) {
  Record r{Record::Image, key, 0, unix_now()};
  std::string error;
  if (!png_size(png, &r.height, &r.width, &r.channels, &error)) raise<ValueError>("log_image '{}': {}", key, error);
  r.step = impl_->take_step(step, false);
  r.text = std::move(png);
  impl_->push(std::move(r));
}

void Run::log_image(const std::string& key, const uint8_t* pixels, int64_t height, int64_t width, int channels,
                    std::optional<int64_t> step) {
  log_image_png(key, encode_png(pixels, height, width, channels), step);
}

void Run::set_summary(const std::string& key, const std::string& json_value) {
  json v = json::parse(json_value, nullptr, false);
  if (v.is_discarded()) raise<ValueError>("summary['{}']: not a JSON value: {}", key, json_value);
  std::lock_guard<std::mutex> lk(impl_->mu);
  impl_->summary[key] = std::move(v);
  impl_->summary_dirty = true;
}

void Run::set_summary(const std::string& key, double value) { set_summary(key, json_number(value).dump()); }

std::string Run::summary_json() const {
  std::lock_guard<std::mutex> lk(impl_->mu);
  return impl_->summary.dump();
}

std::string Run::log_artifact(const std::string& path, const std::string& type, const std::string& name) {
  if (!fs::is_regular_file(path)) raise<IOError>("log_artifact: '{}' is not a file", path);
  std::lock_guard<std::mutex> lk(impl_->store_mu);
  auto [sha, size] = impl_->store.store_blob(path);
  impl_->store.insert_artifact(impl_->rec.id, {name.empty() ? fs::path(path).filename().string() : name, type, sha,
                                               size, unix_now()});
  return sha;
}

void Run::add_tokens(int64_t n) { impl_->tokens.fetch_add(n, std::memory_order_relaxed); }

void Run::flush() {
  std::unique_lock<std::mutex> lk(impl_->mu);
  if (impl_->finished) return;
  uint64_t want = ++impl_->flush_requested;
  impl_->wake.notify_all();
  impl_->flushed_cv.wait(lk, [&] { return impl_->flush_done >= want; });
  if (!impl_->queue.empty() && !impl_->writer_error.empty())
    raise<IOError>("tracking database '{}': {}", impl_->store.db_path(), impl_->writer_error);
}

bool Run::finished() const {
  std::lock_guard<std::mutex> lk(impl_->mu);
  return impl_->finished;
}

void Run::finish(int exit_code) {
  if (finished()) return;
  impl_->stop_threads();
  std::vector<Record> rest;  // left only when the writer could not commit: one last try, loudly
  {
    std::lock_guard<std::mutex> lk(impl_->mu);
    impl_->finished = true;
    rest.swap(impl_->queue);
  }
  if (!rest.empty()) impl_->commit(rest, nullptr);
  std::lock_guard<std::mutex> lk(impl_->store_mu);
  RunRecord& r = impl_->rec;
  double now = unix_now();
  r.status = exit_code == 0 ? "finished" : "failed";
  r.exit_code = exit_code;
  r.finished_at = now;
  r.updated_at = now;
  r.summary_json = impl_->summary.dump();
  impl_->store.transaction([&] { impl_->store.update_run(r); });
  if (impl_->tb) {
    impl_->tb->hparams_end(exit_code == 0 ? 1 : 2, now);  // STATUS_SUCCESS 1, STATUS_FAILURE 2
    impl_->tb->flush();
  }
}

std::unique_ptr<Run> init(const InitOptions& options) {
  auto impl = std::make_unique<Run::Impl>();
  impl->opt = options;
  if (options.flush_interval <= 0) raise<ValueError>("track.init: flush_interval must be positive");
  json config = json::parse(options.config_json, nullptr, false);
  if (config.is_discarded() || !config.is_object())
    raise<ValueError>("track.init: config must be a JSON object, got: {}", options.config_json.substr(0, 200));
  impl->store = Store::open(options.dir, /*create=*/true);
  RunRecord& r = impl->rec;
  double now = unix_now();
  if (!options.resume.empty()) {
    auto found = impl->store.find_run(options.resume);
    if (!found) raise<ValueError>("track.init: cannot resume: unknown run ID '{}' in '{}'", options.resume,
                                  impl->store.db_path());
    r = *found;
    if (!options.project.empty() && options.project != "default") r.project = options.project;
    if (!options.name.empty()) r.name = options.name;
    if (!config.empty()) r.config_json = config.dump();
    if (!options.tags.empty()) r.tags_json = json(options.tags).dump();
    impl->summary = json::parse(r.summary_json, nullptr, false);
    if (!impl->summary.is_object()) impl->summary = json::object();
    // Steps continue after the last logged one.
    if (auto last = impl->store.max_step(r.id)) impl->next_step = std::max<int64_t>(0, *last + 1);
  } else {
    r.id = random_id(8);
    r.project = options.project.empty() ? "default" : options.project;
    r.name = options.name.empty() ? "run-" + r.id : options.name;
    r.created_at = now;
    r.config_json = config.dump();
    r.tags_json = json(options.tags).dump();
    r.notes = options.notes;
  }
  r.status = "running";
  r.updated_at = now;
  r.finished_at.reset();
  r.exit_code.reset();
  r.host = host_name();
  r.pid = ::getpid();
  impl->store.transaction([&] {
    if (options.resume.empty()) impl->store.insert_run(r);
    else impl->store.update_run(r);
  });
  if (options.tensorboard) {
    std::string folder = r.name;
    for (auto& other : impl->store.runs())
      if (other.id != r.id && other.name == r.name) folder = r.name + "-" + r.id;  // keep runs apart in TensorBoard
    for (char& c : folder)
      if (c == '/' || c == '\\' || c == '\0') c = '_';
    impl->tb = std::make_unique<TbEventWriter>((fs::path(options.dir) / "tb" / folder).string());
    impl->tb->hparams_start(r.config_json, now);
    impl->tb->flush();
  }
  Run::Impl* raw = impl.get();
  raw->writer = std::thread([raw] { raw->writer_loop(); });
  if (options.system_interval > 0) raw->system = std::thread([raw] { raw->system_loop(); });
  return std::unique_ptr<Run>(new Run(std::move(impl)));
}

std::unique_ptr<Run> init_for_folder(InitOptions options, const std::string& id_file, bool resume) {
  std::string recorded;
  if (resume) std::ifstream(id_file) >> recorded;
  if (!recorded.empty() && Store::open(options.dir, /*create=*/true).find_run(recorded)) options.resume = recorded;
  std::unique_ptr<Run> run = init(options);
  fs::path folder = fs::path(id_file).parent_path();
  if (!folder.empty()) fs::create_directories(folder);
  io::write_file_atomic(id_file, run->id() + "\n");
  return run;
}

}  // namespace foundry::track
