// Training checkpoints: round trip, keep-last-K, crash safety (a writer killed at each stage of a
// save), and clear errors for corrupt or missing files.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "foundry/core/rng.h"
#include "foundry/io/checkpoint.h"
#include "foundry/io/safetensors.h"
#include "foundry/ops/ops.h"

using namespace foundry;
using namespace foundry::io;
namespace fs = std::filesystem;

namespace {

std::string tmproot(const std::string& name) {
  std::string d = ::testing::TempDir() + "/foundry_ckpt_" + name;
  fs::remove_all(d);
  return d;
}

std::string bytes_of(const Tensor& t) {
  Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), size_t(c.nbytes()));
}

// Deterministic for a step, so a test can rebuild what a checkpoint should hold.
CheckpointState sample_state(int64_t step) {
  Generator gen(uint64_t(step) + 1);
  CheckpointState s;
  s["model"].tensors = {{"wte.weight", randn({8, 4}, {}, &gen)},
                        {"h.0.ln_1.weight", ones({4}, DType::BFloat16)},
                        {"h.0.attn.c_attn.weight", randn({4, 12}, {}, &gen).t()}};  // non-contiguous
  s["optimizer"].tensors = {{"state.0.exp_avg", randn({8, 4}, {}, &gen)}, {"state.0.step", full({}, step, DType::Int64)}};
  s["optimizer"].json = R"({"param_groups":[{"lr":0.001,"betas":[0.9,0.95],"weight_decay":0.1}]})";
  s["scheduler"].json = R"({"last_epoch":)" + std::to_string(step) + "}";
  s["rng"].json = R"({"seed":18446744073709551615,"offset":12345})";
  s["data"].json = R"({"epoch":0,"position":)" + std::to_string(step * 64) + "}";
  s["trainer"].json = R"({"step":)" + std::to_string(step) + "}";
  return s;
}

void expect_same(const CheckpointState& a, const CheckpointState& b) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, ca] : a) {
    const CheckpointComponent& cb = b.at(name);
    EXPECT_EQ(ca.json.empty(), cb.json.empty()) << name;
    if (!ca.json.empty()) {
      EXPECT_EQ(nlohmann::json::parse(ca.json), nlohmann::json::parse(cb.json)) << name;
    }
    ASSERT_EQ(ca.tensors.size(), cb.tensors.size()) << name;
    for (const auto& [tn, t] : ca.tensors) {
      const Tensor& u = cb.tensors.at(tn);
      EXPECT_EQ(u.dtype(), t.dtype()) << tn;
      EXPECT_EQ(u.sizes().vec(), t.sizes().vec()) << tn;
      EXPECT_EQ(bytes_of(u), bytes_of(t)) << tn;  // bit-exact
    }
  }
}

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

void expect_io_error(const std::function<void()>& fn, const char* fragment) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected " << fragment;
  } catch (const IOError& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

// Runs a save in a child process that dies (_exit) when the save reaches `stage`.
void crash_at(const std::string& root, int64_t step, const std::string& at) {
  CheckpointState s = sample_state(step);
  // Make every tensor contiguous first: the child must not start OpenMP work after fork().
  for (auto& [name, c] : s)
    for (auto& [tn, t] : c.tensors) t = t.contiguous();
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    foundry::io::detail::checkpoint_fault_hook = [at](const std::string& stage) {
      if (stage == at) ::_exit(42);
    };
    try {
      save_checkpoint(root, step, s, 0);
    } catch (...) {
      ::_exit(1);
    }
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 42) << "the child did not reach stage " << at;
}

}  // namespace

TEST(Checkpoint, RoundTripIsBitExact) {
  std::string root = tmproot("roundtrip");
  CheckpointState s = sample_state(100);
  std::string dir = save_checkpoint(root, 100, s);
  EXPECT_EQ(dir, root + "/step-100");
  EXPECT_EQ(entries(dir), (std::vector<std::string>{"checkpoint.json", "model.safetensors", "optimizer.safetensors"}));
  EXPECT_EQ(latest_checkpoint(root), std::optional<int64_t>(100));
  expect_same(s, load_checkpoint(root, 100));
  int64_t step = -1;
  expect_same(s, load_checkpoint_dir(dir, &step));
  EXPECT_EQ(step, 100);
  // The model file is an ordinary safetensors file with {"format": "pt"}, loadable on its own.
  SafetensorsContents m = load_safetensors(dir + "/model.safetensors");
  EXPECT_EQ(m.metadata.at("format"), "pt");
  EXPECT_EQ(m.tensors.size(), 3u);
  // uint64 seeds survive exactly.
  auto rng = nlohmann::json::parse(load_checkpoint(root, 100).at("rng").json);
  EXPECT_EQ(rng["seed"].get<uint64_t>(), 18446744073709551615ull);
}

TEST(Checkpoint, KeepLastKAndLatest) {
  std::string root = tmproot("keep");
  EXPECT_EQ(latest_checkpoint(root), std::nullopt);
  EXPECT_TRUE(list_checkpoints(root).empty());
  CheckpointManager mgr(root, 2);
  EXPECT_EQ(mgr.load_latest(), std::nullopt);
  for (int64_t step : {10, 20, 30, 40, 50}) mgr.save(step, sample_state(step));
  EXPECT_EQ(mgr.steps(), (std::vector<int64_t>{40, 50}));
  EXPECT_EQ(entries(root), (std::vector<std::string>{"step-40", "step-50"}));
  auto latest = mgr.load_latest();
  ASSERT_TRUE(latest);
  EXPECT_EQ(latest->first, 50);
  expect_same(sample_state(50), latest->second);
  // Steps sort numerically, not as text.
  mgr.save(100, sample_state(100));
  EXPECT_EQ(mgr.latest(), std::optional<int64_t>(100));
  EXPECT_EQ(mgr.steps(), (std::vector<int64_t>{50, 100}));
  // keep_last = 0 keeps everything; prune_checkpoints trims on demand.
  save_checkpoint(root, 200, sample_state(200), 0);
  save_checkpoint(root, 300, sample_state(300), 0);
  EXPECT_EQ(list_checkpoints(root).size(), 4u);
  EXPECT_EQ(prune_checkpoints(root, 1), 3);
  EXPECT_EQ(list_checkpoints(root), (std::vector<int64_t>{300}));
}

TEST(Checkpoint, LoadedTensorsOutlivePruning) {
  std::string root = tmproot("outlive");
  save_checkpoint(root, 1, sample_state(1));
  CheckpointState s = load_checkpoint(root, 1);
  save_checkpoint(root, 2, sample_state(2), /*keep_last=*/1);
  EXPECT_FALSE(fs::exists(root + "/step-1"));
  expect_same(sample_state(1), s);  // the mapping keeps the deleted file's bytes
}

TEST(Checkpoint, SavingTheSameStepReplacesIt) {
  std::string root = tmproot("replace");
  save_checkpoint(root, 5, sample_state(5));
  CheckpointState other = sample_state(6);
  other.erase("optimizer");
  save_checkpoint(root, 5, other);
  expect_same(other, load_checkpoint(root, 5));
  EXPECT_EQ(entries(root), (std::vector<std::string>{"step-5"}));
  EXPECT_EQ(entries(root + "/step-5"), (std::vector<std::string>{"checkpoint.json", "model.safetensors"}));
}

TEST(Checkpoint, CrashMidWriteNeverLeavesAHalfCheckpoint) {
  std::string root = tmproot("crash");
  save_checkpoint(root, 1, sample_state(1));
  for (const char* stage : {"file:model.safetensors", "file:optimizer.safetensors", "file:checkpoint.json", "synced"}) {
    crash_at(root, 2, stage);
    // The interrupted save left only a hidden temporary folder; step 2 does not exist.
    EXPECT_EQ(latest_checkpoint(root), std::optional<int64_t>(1)) << stage;
    std::vector<std::string> names = entries(root);
    ASSERT_EQ(names.size(), 2u) << stage;
    EXPECT_EQ(names[0].rfind(".tmp-step-2-", 0), 0u) << names[0];
    EXPECT_EQ(names[1], "step-1");
    expect_io_error([&] { load_checkpoint(root, 2); }, "no checkpoint for step 2");
    expect_same(sample_state(1), load_checkpoint(root, 1));
    // The next save (or clean_checkpoint_temps) removes the leftover.
    EXPECT_EQ(clean_checkpoint_temps(root), 1);
    EXPECT_EQ(entries(root), (std::vector<std::string>{"step-1"}));
  }
  // A leftover is also cleaned by the next save itself.
  crash_at(root, 2, "file:checkpoint.json");
  save_checkpoint(root, 3, sample_state(3));
  EXPECT_EQ(entries(root), (std::vector<std::string>{"step-1", "step-3"}));
  // Killed right after the rename: the checkpoint is complete.
  crash_at(root, 4, "renamed");
  EXPECT_EQ(latest_checkpoint(root), std::optional<int64_t>(4));
  expect_same(sample_state(4), load_checkpoint(root, 4));
}

TEST(Checkpoint, CorruptOrMissingFilesGiveClearErrors) {
  std::string root = tmproot("corrupt");
  auto fresh = [&](int64_t step) { return save_checkpoint(root, step, sample_state(step)); };
  std::string dir = fresh(1);
  fs::remove(dir + "/optimizer.safetensors");
  expect_io_error([&] { load_checkpoint(root, 1); }, "optimizer.safetensors' is missing");

  dir = fresh(2);
  fs::resize_file(dir + "/model.safetensors", fs::file_size(dir + "/model.safetensors") - 3);
  expect_io_error([&] { load_checkpoint(root, 2); }, "(truncated or replaced)");

  dir = fresh(3);
  {
    // Same size, broken header: the safetensors reader names the file and the rule.
    std::fstream f(dir + "/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(8);
    f.write("[", 1);
  }
  expect_io_error([&] { load_checkpoint(root, 3); }, "model.safetensors: header is not valid JSON");

  dir = fresh(4);
  std::ofstream(dir + "/checkpoint.json") << "{\"format\": \"foundry.checkpoint\", ";
  expect_io_error([&] { load_checkpoint(root, 4); }, "checkpoint.json: not valid JSON");

  dir = fresh(5);
  std::ofstream(dir + "/checkpoint.json") << R"({"format": "foundry.checkpoint", "version": 99, "step": 5, "components": {}})";
  expect_io_error([&] { load_checkpoint(root, 5); }, "newer than this Foundry reads");

  dir = fresh(6);
  std::ofstream(dir + "/checkpoint.json") << R"({"format": "foundry.checkpoint", "version": 1, "step": 7, "components": {}})";
  expect_io_error([&] { load_checkpoint(root, 6); }, "records step 7");

  // A step folder without its manifest is not a checkpoint: latest() skips it, load explains.
  dir = fresh(7);
  fs::remove(dir + "/checkpoint.json");
  EXPECT_EQ(latest_checkpoint(root), std::optional<int64_t>(6));
  expect_io_error([&] { load_checkpoint(root, 7); }, "checkpoint.json is missing");
  expect_io_error([&] { load_checkpoint(root, 99); }, "available steps: 1, 2, 3, 4, 5, 6");
  expect_io_error([&] { load_checkpoint_dir(root + "/nowhere"); }, "does not exist");
}

TEST(Checkpoint, InvalidInputIsRejectedBeforeWriting) {
  std::string root = tmproot("invalid");
  CheckpointState s;
  s["model"].json = "{not json";
  EXPECT_THROW(save_checkpoint(root, 1, s), ValueError);
  CheckpointState t;
  t["../evil"].json = "{}";
  EXPECT_THROW(save_checkpoint(root, 1, t), ValueError);
  CheckpointState u;
  u[".hidden"].json = "1";
  EXPECT_THROW(save_checkpoint(root, 1, u), ValueError);
  EXPECT_THROW(save_checkpoint(root, -1, sample_state(1)), ValueError);
  EXPECT_FALSE(fs::exists(root));
  // Folders and files that are not checkpoints are ignored.
  fs::create_directories(root + "/step-08");
  fs::create_directories(root + "/step-x");
  fs::create_directories(root + "/notes");
  std::ofstream(root + "/step-9") << "a file";
  EXPECT_TRUE(list_checkpoints(root).empty());
  // An empty state is a valid checkpoint (only the manifest).
  save_checkpoint(root, 0, {});
  EXPECT_EQ(latest_checkpoint(root), std::optional<int64_t>(0));
  EXPECT_TRUE(load_checkpoint(root, 0).empty());
}
