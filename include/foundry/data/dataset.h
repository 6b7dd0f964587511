// Datasets and loading for training: text and JSONL sources (streamed line by line, so files larger
// than memory work), character/byte/tokenizer encoders, token-shard preparation, language-model
// window batches, and a prefetching loader whose position can be saved and restored.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "foundry/core/error.h"
#include "foundry/core/rng.h"
#include "foundry/core/tensor.h"
#include "foundry/data/token_shard.h"

namespace foundry::data {

/// Calls fn(line) for every line of a text file (without the newline), reading in blocks.
void for_each_line(const std::string& path, const std::function<void(std::string_view)>& fn);
/// Calls fn(text) with `field` (dotted path, e.g. "meta.text") of every JSONL record; records
/// without it are skipped, malformed lines raise IOError with the line number.
void for_each_jsonl(const std::string& path, const std::string& field, const std::function<void(const std::string&)>& fn);

/// Turns text into token ids and back. Kinds: "byte" (ids are bytes, vocab 256), "char" (one id
/// per distinct UTF-8 character of a corpus, sorted), or a tokenizer file any
/// foundry::text::Tokenizer loads.
class TextEncoder {
 public:
  static TextEncoder bytes();
  static TextEncoder chars_of(const std::string& corpus);
  static TextEncoder from_tokenizer_file(const std::string& path);
  /// Restores an encoder from its description (describe()), e.g. from a prepared dataset's meta.json.
  static TextEncoder from_description(const std::string& json);

  std::vector<uint32_t> encode(std::string_view text) const;
  std::string decode(const std::vector<uint32_t>& ids) const;
  int64_t vocab_size() const;
  /// JSON with the kind and what is needed to rebuild it.
  std::string describe() const;
  const std::string& kind() const;

  TextEncoder();
  ~TextEncoder();
  TextEncoder(TextEncoder&&) noexcept;
  TextEncoder& operator=(TextEncoder&&) noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct PreparedDataset {
  std::string train_path, val_path, meta_path;
  int64_t train_tokens = 0, val_tokens = 0, vocab_size = 0;
};

/// Encodes a text or JSONL file (field given) and writes train.bin / val.bin token shards plus
/// meta.json (encoder description) into out_dir; the last val_fraction of the tokens is the
/// validation split.
PreparedDataset prepare_dataset(const std::string& input, const std::string& out_dir, const TextEncoder& encoder,
                                double val_fraction = 0.1, const std::string& jsonl_field = "");

/// Language-model batches: B random windows of T + 1 tokens from a shard range; x = first T,
/// y = last T (int64 [B, T]). Batch k depends only on (seed, k), so a run resumed at batch k sees
/// exactly the batches it would have seen.
class LMBatches {
 public:
  LMBatches(std::shared_ptr<const TokenShard> shard, int64_t batch, int64_t block, uint64_t seed, int64_t begin = 0,
            int64_t end = -1);
  std::pair<Tensor, Tensor> get(int64_t index) const;
  /// Sequential, non-overlapping windows covering the range (for evaluation); count() of them.
  std::pair<Tensor, Tensor> sequential(int64_t index) const;
  int64_t sequential_count() const;
  int64_t batch_size() const { return batch_; }
  int64_t block_size() const { return block_; }

 private:
  std::shared_ptr<const TokenShard> shard_;
  int64_t batch_, block_, begin_, end_;
  uint64_t seed_;
};

/// A loader over an index -> batch function, with a background thread that prepares the next
/// `prefetch` batches. position() is the index of the next batch next() returns; seek() moves
/// it (resuming a run).
template <typename Batch>
class Prefetcher {
 public:
  Prefetcher(std::function<Batch(int64_t)> make, int64_t prefetch = 2, int64_t start = 0)
      : make_(std::move(make)), depth_(std::max<int64_t>(prefetch, 1)), next_(start), produce_(start) {
    worker_ = std::thread([this] { run(); });
  }
  ~Prefetcher() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  Batch next() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return !queue_.empty() || error_; });
    if (error_) std::rethrow_exception(error_);
    Batch b = std::move(queue_.front().second);
    queue_.pop_front();
    ++next_;
    cv_.notify_all();
    return b;
  }
  int64_t position() const {
    std::lock_guard<std::mutex> lock(mu_);
    return next_;
  }
  void seek(int64_t index) {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.clear();
    next_ = produce_ = index;
    ++epoch_;
    cv_.notify_all();
  }

 private:
  void run() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      if (int64_t(queue_.size()) >= depth_ || error_) {
        cv_.wait(lock);
        continue;
      }
      int64_t index = produce_++;
      uint64_t epoch = epoch_;
      lock.unlock();
      std::optional<Batch> b;
      std::exception_ptr err;
      try {
        b = make_(index);
      } catch (...) {
        err = std::current_exception();
      }
      lock.lock();
      if (epoch != epoch_) continue;  // a seek() happened meanwhile: drop the stale batch
      if (err) error_ = err;
      else queue_.emplace_back(index, std::move(*b));
      cv_.notify_all();
    }
  }

  std::function<Batch(int64_t)> make_;
  int64_t depth_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<int64_t, Batch>> queue_;
  int64_t next_, produce_;
  uint64_t epoch_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  std::thread worker_;
};

/// A map-style loader: batches of `batch_size` items of a dataset (size + get(i)), shuffled each
/// epoch with a seeded permutation (deterministic), collated into a batch, and prefetched on a
/// background thread. Batch k of the whole run (over epochs) depends only on (seed, k), so
/// position() is all a checkpoint needs to resume.
template <typename Item, typename Batch>
class DataLoader {
 public:
  struct Options {
    int64_t batch_size = 1;
    bool shuffle = true;
    bool drop_last = false;
    uint64_t seed = 0;
    int64_t prefetch = 2;
  };
  DataLoader(int64_t size, std::function<Item(int64_t)> get, std::function<Batch(std::vector<Item>)> collate,
             Options options, int64_t start = 0)
      : size_(size), get_(std::move(get)), collate_(std::move(collate)), opt_(options),
        prefetcher_([this](int64_t k) { return make(k); }, options.prefetch, start) {
    FOUNDRY_CHECK_AS(ValueError, opt_.batch_size > 0, "DataLoader: batch_size must be positive");
    FOUNDRY_CHECK_AS(ValueError, batches_per_epoch() > 0, "DataLoader: {} items make no batch of {} (drop_last={})",
                     size_, opt_.batch_size, opt_.drop_last);
  }
  /// Batches in one pass over the data.
  int64_t batches_per_epoch() const {
    return opt_.drop_last ? size_ / opt_.batch_size : (size_ + opt_.batch_size - 1) / opt_.batch_size;
  }
  Batch next() { return prefetcher_.next(); }
  int64_t position() const { return prefetcher_.position(); }
  void seek(int64_t batch) { prefetcher_.seek(batch); }

 private:
  Batch make(int64_t k) {
    int64_t epoch = k / batches_per_epoch(), b = k % batches_per_epoch();
    std::vector<Item> items;
    for (int64_t j = b * opt_.batch_size; j < std::min(size_, (b + 1) * opt_.batch_size); ++j)
      items.push_back(get_(opt_.shuffle ? permuted(epoch, j) : j));
    return collate_(std::move(items));
  }
  // Position j of epoch e's permutation, without materialising it: a seeded Fisher-Yates table
  // per epoch, cached.
  int64_t permuted(int64_t epoch, int64_t j) {
    std::lock_guard<std::mutex> lock(perm_mu_);
    if (epoch != perm_epoch_) {
      perm_.resize(size_t(size_));
      for (int64_t i = 0; i < size_; ++i) perm_[size_t(i)] = i;
      for (int64_t i = size_ - 1; i > 0; --i) {
        auto r = philox4x32(uint64_t(i), uint64_t(epoch), opt_.seed);
        uint64_t bits = (uint64_t(r[0]) << 32) | r[1];
        std::swap(perm_[size_t(i)], perm_[size_t(bits % uint64_t(i + 1))]);
      }
      perm_epoch_ = epoch;
    }
    return perm_[size_t(j)];
  }

  int64_t size_;
  std::function<Item(int64_t)> get_;
  std::function<Batch(std::vector<Item>)> collate_;
  Options opt_;
  std::mutex perm_mu_;
  std::vector<int64_t> perm_;
  int64_t perm_epoch_ = -1;
  Prefetcher<Batch> prefetcher_;  // last: its thread starts after everything above exists
};

}  // namespace foundry::data
