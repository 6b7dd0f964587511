// safetensors files (https://github.com/huggingface/safetensors): read through a memory map with
// zero-copy tensors, written in the exact layout of upstream's serializer, and sharded
// checkpoints with a `model.safetensors.index.json`.
//
// Layout: 8-byte little-endian header length N, N bytes of UTF-8 JSON (padded with spaces to a
// multiple of 8 by writers), then the raw little-endian, row-major tensor bytes. Reading applies
// upstream's validation (docs/formats.md lists every rule); any violation throws IOError
// "<file>: <rule>", naming the tensor where there is one. Nothing in a file can crash the reader.
//
//   auto w = foundry::io::load_safetensors("model.safetensors");
//   Tensor wte = w.tensors.at("transformer.wte.weight");      // view over the mapping
//   foundry::io::save_safetensors("out.safetensors", {{"w", wte}}, {{"format", "pt"}});
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "foundry/core/tensor.h"

namespace foundry::io {

/// One tensor's header entry.
struct SafetensorsTensorInfo {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  ///< byte range inside the data section (after the header)
};

/// An opened safetensors file: the validated header plus the mapping. Tensors are made on demand
/// (get), so opening a large checkpoint costs only the header parse. Copies are cheap handles.
class SafetensorsFile {
 public:
  SafetensorsFile() = default;
  /// Maps `path` read-only and validates the header. Throws IOError naming the file and the rule.
  static SafetensorsFile open(const std::string& path, bool copy_on_write = false);
  /// Parses an in-memory file image (copied into an owned buffer). `what` names it in errors.
  static SafetensorsFile from_bytes(const std::string& bytes, const std::string& what = "<safetensors bytes>");

  bool is_open() const { return bool(impl_); }
  const std::string& path() const;
  /// Tensor names in file (data offset) order.
  std::vector<std::string> names() const;
  size_t size() const;
  bool contains(const std::string& name) const;
  /// Throws ValueError when there is no such tensor.
  const SafetensorsTensorInfo& info(const std::string& name) const;
  /// The tensor as a read-only view over the mapping: zero copy when its data offset is a
  /// multiple of its item size (always so for files written by upstream or Foundry); otherwise a
  /// copy. In-place writes into a view raise; clone() gives a writable tensor.
  Tensor get(const std::string& name) const;
  /// Every tensor, by name.
  std::map<std::string, Tensor> load_all() const;
  /// The `__metadata__` string map (empty when the file has none).
  const std::map<std::string, std::string>& metadata() const;
  bool has_metadata() const;
  /// File offset of the data section (8 + header length).
  uint64_t data_offset() const;

  struct Impl;  // implementation detail

 private:
  std::shared_ptr<const Impl> impl_;
};

/// A whole file: tensors (views over the mapping, which stays alive as long as any tensor or
/// `file` does), metadata, and the file for lazy access.
struct SafetensorsContents {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> metadata;
  SafetensorsFile file;
};

/// Loads a safetensors file. `copy` gives writable tensors in owned memory instead of read-only
/// views over the mapping.
SafetensorsContents load_safetensors(const std::string& path, bool copy = false);

/// The bytes of a safetensors file, exactly as upstream's `serialize` lays them out: tensors
/// sorted by dtype (upstream's alignment order, descending) then by name, `__metadata__` first
/// when `metadata` is not empty, the JSON padded with spaces to a multiple of 8. Tensors may be
/// non-contiguous (written row-major). Throws ValueError for the reserved name `__metadata__`,
/// non-UTF-8 names or metadata, and headers over the 100,000,000-byte limit.
std::string serialize_safetensors(const std::map<std::string, Tensor>& tensors,
                                  const std::map<std::string, std::string>& metadata = {});
/// Writes serialize_safetensors' bytes to `path` atomically (temporary file, fsync, rename,
/// folder fsync), streaming tensor by tensor. Tensors sharing storage are written twice.
void save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

/// A checkpoint split over several safetensors files, as Hugging Face writes them: a
/// `<prefix>.safetensors.index.json` ({"metadata": {"total_size": N}, "weight_map": {name: file}})
/// next to `<prefix>-00001-of-0000K.safetensors` shards. Shards are opened (mapped) on first use.
/// Thread-safe.
class ShardedSafetensors {
 public:
  ShardedSafetensors() = default;
  /// `path`: an index file, or a folder holding `model.safetensors.index.json` or a single
  /// `model.safetensors` (then treated as one shard). Throws IOError for a malformed index or a
  /// shard name that leaves the folder.
  /// copy_on_write: tensors are writable private pages over the files (see map_file_storage).
  static ShardedSafetensors open(const std::string& path, bool copy_on_write = false);

  /// Tensor names, sorted.
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const;
  /// The shard file (name inside the folder) that holds `name`.
  const std::string& shard_of(const std::string& name) const;
  /// Distinct shard files in index order.
  std::vector<std::string> shard_files() const;
  /// Opens the shard if needed; throws IOError when the shard is missing, malformed, or does not
  /// hold the tensor the index says it does.
  Tensor get(const std::string& name) const;
  std::map<std::string, Tensor> load_all() const;
  /// metadata.total_size of the index (-1 when absent).
  int64_t total_size() const;
  /// The index's "metadata" object as JSON text ("{}" when absent).
  const std::string& metadata_json() const;
  const std::string& folder() const;

  struct Impl;  // implementation detail

 private:
  std::shared_ptr<Impl> impl_;
};

/// Writes `tensors` into `dir` as shards of at most `max_shard_bytes` of tensor data each
/// (huggingface_hub's greedy split: a tensor larger than the limit gets a shard of its own), each
/// with `metadata`, plus the index. When everything fits in one shard it writes a single
/// `<prefix>.safetensors` and no index, as transformers does. Stale shards of an earlier save
/// with the same prefix are removed. Returns the file names written (index last).
/// The default metadata {"format": "pt"} is what transformers requires of safetensors weights.
std::vector<std::string> save_safetensors_sharded(const std::string& dir, const std::map<std::string, Tensor>& tensors,
                                                  uint64_t max_shard_bytes,
                                                  const std::map<std::string, std::string>& metadata = {{"format", "pt"}},
                                                  const std::string& prefix = "model");

}  // namespace foundry::io
