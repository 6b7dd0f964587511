// Training checkpoints: one folder per step, written atomically, with keep-last-K pruning.
//
//   <root>/step-<N>/
//     checkpoint.json          {"format": "foundry.checkpoint", "version": 1, "step": N,
//                               "components": {"model": {"tensors": "model.safetensors",
//                                   "num_tensors": 12, "bytes": 4242, "state": {...}}, ...}}
//     model.safetensors        tensor state of each component that has tensors
//     optimizer.safetensors
//
// A checkpoint is a map from component name ("model", "optimizer", "scheduler", "rng", "data",
// ...) to tensors plus a JSON document of scalar state (step counters, RNG seed/offset, the data
// loader's position...). The trainer decides what goes in; this layer only stores it.
//
// Crash safety: a checkpoint is written into `<root>/.tmp-step-<N>-<pid>-<k>/`, every file and the
// folder are fsync'ed, and only then is the folder renamed to `step-<N>` (and the root fsync'ed).
// Pruning renames a folder to `.trash-...` before deleting it. So a `step-<N>` folder is always
// complete, and a crash at any point leaves at most a hidden temporary folder, which
// latest_checkpoint ignores and the next save (or clean_checkpoint_temps) removes.
// One process writes to a root at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "foundry/core/tensor.h"

namespace foundry::io {

/// One component's state: tensors (stored in `<component>.safetensors`) and scalar state as a
/// JSON text (stored inside checkpoint.json; empty means none).
struct CheckpointComponent {
  std::map<std::string, Tensor> tensors;
  std::string json;
};
using CheckpointState = std::map<std::string, CheckpointComponent>;

/// `<root>/step-<step>`.
std::string checkpoint_dir(const std::string& root, int64_t step);

/// Writes `state` as `<root>/step-<step>/` atomically (replacing an existing checkpoint of that
/// step) and returns its path. With keep_last > 0, older checkpoints beyond the newest
/// `keep_last` are removed afterwards. Leftover temporary folders of dead writers are removed
/// first. Component names must be plain file-name stems ([A-Za-z0-9_.-], not starting with '.');
/// each json must be empty or valid JSON (ValueError otherwise).
std::string save_checkpoint(const std::string& root, int64_t step, const CheckpointState& state, int keep_last = 0);

/// Steps of the complete checkpoints under root, ascending (empty when root does not exist).
/// Only folders named step-<N> that hold a checkpoint.json count.
std::vector<int64_t> list_checkpoints(const std::string& root);
/// The newest complete checkpoint's step.
std::optional<int64_t> latest_checkpoint(const std::string& root);
/// Folders named step-<N> under root that hold no checkpoint.json (a save that did not finish, or
/// one emptied by hand): list_checkpoints skips them; a resume says so (resume_note).
std::vector<std::string> incomplete_checkpoints(const std::string& root);
/// Prints to stderr, for a resume from `root`, which step-<N> folders were skipped as incomplete.
void resume_note(const std::string& root, const char* who);

/// Loads `<root>/step-<step>`. Tensors are read-only views over the mapped safetensors files
/// (clone() or copy_ into parameters). Throws IOError naming the file and the problem for a
/// missing step, a missing/corrupt checkpoint.json, a missing or truncated tensor file, or a
/// malformed safetensors file.
CheckpointState load_checkpoint(const std::string& root, int64_t step);
/// Loads a checkpoint folder given by path; stores its step in *step when not null.
CheckpointState load_checkpoint_dir(const std::string& dir, int64_t* step = nullptr);

/// Removes all but the newest `keep_last` checkpoints (keep_last <= 0 keeps all). Returns how
/// many were removed.
int prune_checkpoints(const std::string& root, int keep_last);
/// Removes temporary and trash folders left by interrupted saves (those of live processes other
/// than this one are kept). Returns how many were removed.
int clean_checkpoint_temps(const std::string& root);

/// The same operations bound to one root and a keep-last-K policy.
class CheckpointManager {
 public:
  explicit CheckpointManager(std::string root, int keep_last = 0) : root_(std::move(root)), keep_last_(keep_last) {}
  std::string save(int64_t step, const CheckpointState& state) const {
    return save_checkpoint(root_, step, state, keep_last_);
  }
  std::optional<int64_t> latest() const { return latest_checkpoint(root_); }
  std::vector<int64_t> steps() const { return list_checkpoints(root_); }
  CheckpointState load(int64_t step) const { return load_checkpoint(root_, step); }
  /// The newest checkpoint and its step, or nullopt when there is none (a fresh run).
  std::optional<std::pair<int64_t, CheckpointState>> load_latest() const;
  const std::string& root() const { return root_; }
  int keep_last() const { return keep_last_; }

 private:
  std::string root_;
  int keep_last_;
};

namespace detail {
/// Testing only: called with a stage name ("file:<name>", "synced", "renamed") while a checkpoint
/// is saved, so a test can kill the process at that point and check what survives.
extern std::function<void(const std::string& stage)> checkpoint_fault_hook;
}  // namespace detail

}  // namespace foundry::io
