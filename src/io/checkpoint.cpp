#include "foundry/io/checkpoint.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <filesystem>
#include <mutex>
#include <set>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "foundry/io/atomic_file.h"
#include "foundry/io/safetensors.h"
#include "foundry/io/json_depth.h"

namespace foundry::io {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

namespace detail {
std::function<void(const std::string& stage)> checkpoint_fault_hook;
}  // namespace detail

namespace {

constexpr const char* kFormat = "foundry.checkpoint";
constexpr int kVersion = 1;
constexpr const char* kManifest = "checkpoint.json";

std::atomic<uint64_t> counter{0};
std::mutex in_progress_mu;
std::set<std::string> in_progress;  // temporary folders this process is writing right now

void stage(const std::string& s) {
  if (detail::checkpoint_fault_hook) detail::checkpoint_fault_hook(s);
}

bool valid_component(const std::string& name) {
  if (name.empty() || name[0] == '.' || name.size() > 200) return false;
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.'; });
}

// "step-<N>" with N in canonical decimal form.
std::optional<int64_t> parse_step_name(const std::string& name) {
  if (name.size() < 6 || name.compare(0, 5, "step-") != 0) return std::nullopt;
  const char* b = name.data() + 5;
  const char* e = name.data() + name.size();
  if (e - b > 1 && *b == '0') return std::nullopt;
  int64_t v = 0;
  auto [p, ec] = std::from_chars(b, e, v);
  if (ec != std::errc() || p != e || v < 0) return std::nullopt;
  return v;
}

// ".tmp-step-<N>-<pid>-<k>" / ".trash-step-<N>-<pid>-<k>" -> pid.
std::optional<long> leftover_pid(const std::string& name) {
  if (name.rfind(".tmp-step-", 0) != 0 && name.rfind(".trash-step-", 0) != 0) return std::nullopt;
  size_t last = name.rfind('-');
  if (last == std::string::npos || last == 0) return -1;
  size_t prev = name.rfind('-', last - 1);
  if (prev == std::string::npos) return -1;
  long pid = -1;
  auto [p, ec] = std::from_chars(name.data() + prev + 1, name.data() + last, pid);
  if (ec != std::errc() || p != name.data() + last) return -1;
  return pid;
}

bool process_alive(long pid) {
  if (pid <= 0) return false;
  return ::kill(pid_t(pid), 0) == 0 || errno == EPERM;
}

std::string leftover_name(const char* kind, int64_t step) {
  return fmt::format(".{}-step-{}-{}-{}", kind, step, ::getpid(), counter.fetch_add(1));
}

void remove_tree(const fs::path& p) {
  std::error_code ec;
  fs::remove_all(p, ec);
  if (ec) raise<IOError>("cannot remove '{}': {}", p.string(), ec.message());
}

// Renames a folder out of the way (so no reader sees it half-deleted), then deletes it.
void retire(const std::string& root, const fs::path& dir, int64_t step) {
  fs::path trash = fs::path(root) / leftover_name("trash", step);
  std::error_code ec;
  fs::rename(dir, trash, ec);
  if (ec) raise<IOError>("cannot move '{}' aside for removal: {}", dir.string(), ec.message());
  fsync_dir(root);
  remove_tree(trash);
}

}  // namespace

std::string checkpoint_dir(const std::string& root, int64_t step) { return (fs::path(root) / fmt::format("step-{}", step)).string(); }

int clean_checkpoint_temps(const std::string& root) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return 0;
  int removed = 0;
  std::vector<fs::path> victims;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    std::string name = entry.path().filename().string();
    std::optional<long> pid = leftover_pid(name);
    if (!pid) continue;
    if (*pid == long(::getpid())) {
      std::lock_guard<std::mutex> lock(in_progress_mu);
      if (in_progress.count(entry.path().string())) continue;
    } else if (process_alive(*pid)) {
      continue;
    }
    victims.push_back(entry.path());
  }
  for (const fs::path& v : victims) {
    remove_tree(v);
    ++removed;
  }
  return removed;
}

std::vector<int64_t> list_checkpoints(const std::string& root) {
  std::vector<int64_t> steps;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return steps;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    std::optional<int64_t> step = parse_step_name(entry.path().filename().string());
    if (!step || !entry.is_directory(ec)) continue;
    if (!fs::is_regular_file(entry.path() / kManifest, ec)) continue;
    steps.push_back(*step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

std::vector<std::string> incomplete_checkpoints(const std::string& root) {
  std::vector<std::string> out;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return out;
  for (const auto& entry : fs::directory_iterator(root, ec))
    if (parse_step_name(entry.path().filename().string()) &&
        !(entry.is_directory(ec) && fs::is_regular_file(entry.path() / kManifest, ec)))
      out.push_back(entry.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

void resume_note(const std::string& root, const char* who) {
  for (const std::string& dir : incomplete_checkpoints(root))
    std::fprintf(stderr, "%s: skipping %s: not a complete checkpoint (no %s; a save that did not finish?)\n", who,
                 dir.c_str(), kManifest);
}

std::optional<int64_t> latest_checkpoint(const std::string& root) {
  std::vector<int64_t> steps = list_checkpoints(root);
  if (steps.empty()) return std::nullopt;
  return steps.back();
}

int prune_checkpoints(const std::string& root, int keep_last) {
  if (keep_last <= 0) return 0;
  std::vector<int64_t> steps = list_checkpoints(root);
  int removed = 0;
  for (size_t i = 0; i + size_t(keep_last) < steps.size(); ++i) {
    retire(root, checkpoint_dir(root, steps[i]), steps[i]);
    ++removed;
  }
  return removed;
}

std::string save_checkpoint(const std::string& root, int64_t step, const CheckpointState& state, int keep_last) {
  if (step < 0) raise<ValueError>("save_checkpoint: step must be >= 0, got {}", step);
  // Validate everything before touching the disk.
  ojson components = ojson::object();
  std::map<std::string, ojson> states;
  for (const auto& [name, comp] : state) {
    if (!valid_component(name))
      raise<ValueError>("save_checkpoint: component name '{}' must be a plain name of letters, digits, '_', '-' and '.', "
                        "not starting with '.'",
                        name);
    if (comp.json.empty()) {
      states[name] = nullptr;
    } else {
      try {
        states[name] = ojson::parse(comp.json);
      } catch (const ojson::exception& e) {
        raise<ValueError>("save_checkpoint: component '{}': json is not valid JSON: {}", name, e.what());
      }
    }
  }

  std::error_code ec;
  bool created = fs::create_directories(root, ec);
  if (ec) raise<IOError>("cannot create checkpoint root '{}': {}", root, ec.message());
  if (created) {
    fs::path abs = fs::absolute(root).lexically_normal();
    if (!abs.has_filename()) abs = abs.parent_path();
    fsync_dir(abs.parent_path().string());
  }
  clean_checkpoint_temps(root);

  fs::path tmp = fs::path(root) / leftover_name("tmp", step);
  {
    std::lock_guard<std::mutex> lock(in_progress_mu);
    in_progress.insert(tmp.string());
  }
  struct Unmark {
    std::string p;
    ~Unmark() {
      std::lock_guard<std::mutex> lock(in_progress_mu);
      in_progress.erase(p);
    }
  } unmark{tmp.string()};
  try {
    fs::create_directory(tmp, ec);
    if (ec) raise<IOError>("cannot create '{}': {}", tmp.string(), ec.message());
    for (const auto& [name, comp] : state) {
      ojson c = ojson::object();
      if (comp.tensors.empty()) {
        c["tensors"] = nullptr;
        c["num_tensors"] = 0;
        c["bytes"] = 0;
      } else {
        std::string file = name + ".safetensors";
        fs::path p = tmp / file;
        save_safetensors(p.string(), comp.tensors, {{"format", "pt"}});
        c["tensors"] = file;
        c["num_tensors"] = comp.tensors.size();
        c["bytes"] = fs::file_size(p);
        stage("file:" + file);
      }
      c["state"] = states[name];
      components[name] = std::move(c);
    }
    ojson manifest = {{"format", kFormat}, {"version", kVersion}, {"step", step}, {"components", components}};
    write_file_atomic((tmp / kManifest).string(), manifest.dump(1) + "\n");
    stage(std::string("file:") + kManifest);
    fsync_dir(tmp.string());
    stage("synced");

    fs::path final_dir = checkpoint_dir(root, step);
    fs::path old;
    if (fs::exists(final_dir, ec)) {
      old = fs::path(root) / leftover_name("trash", step);
      fs::rename(final_dir, old, ec);
      if (ec) raise<IOError>("cannot move the old '{}' aside: {}", final_dir.string(), ec.message());
    }
    fs::rename(tmp, final_dir, ec);
    if (ec) raise<IOError>("cannot rename '{}' to '{}': {}", tmp.string(), final_dir.string(), ec.message());
    fsync_dir(root);
    stage("renamed");
    if (!old.empty()) remove_tree(old);
  } catch (...) {
    std::error_code ignore;
    fs::remove_all(tmp, ignore);
    throw;
  }
  prune_checkpoints(root, keep_last);
  return checkpoint_dir(root, step);
}

CheckpointState load_checkpoint_dir(const std::string& dir, int64_t* step_out) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) raise<IOError>("'{}' is not a checkpoint folder (it does not exist)", dir);
  fs::path manifest_path = fs::path(dir) / kManifest;
  if (!fs::exists(manifest_path, ec))
    raise<IOError>("'{}' is not a complete checkpoint: {} is missing", dir, kManifest);
  std::string where = manifest_path.string();
  ojson m;
  const std::string manifest = read_file(where);
  check_json_depth(manifest, where);
  try {
    m = ojson::parse(manifest);
  } catch (const ojson::exception& e) {
    raise<IOError>("{}: not valid JSON ({}); the checkpoint is corrupt", where, e.what());
  }
  auto field = [&](const ojson& obj, const char* key, const std::string& ctx) -> const ojson& {
    if (!obj.is_object() || !obj.contains(key)) raise<IOError>("{}: {} has no \"{}\"; the checkpoint is corrupt", where, ctx, key);
    return obj.at(key);
  };
  if (!m.is_object() || !m.contains("format") || m["format"] != kFormat)
    raise<IOError>("{}: not a Foundry checkpoint manifest (format is not \"{}\")", where, kFormat);
  const ojson& version = field(m, "version", "the manifest");
  if (!version.is_number_integer() || version.get<int64_t>() > kVersion)
    raise<IOError>("{}: checkpoint format version {} is newer than this Foundry reads ({})", where, version.dump(), kVersion);
  const ojson& step = field(m, "step", "the manifest");
  if (!step.is_number_integer()) raise<IOError>("{}: \"step\" must be an integer, got {}", where, step.dump());
  if (step_out) *step_out = step.get<int64_t>();
  const ojson& comps = field(m, "components", "the manifest");
  if (!comps.is_object()) raise<IOError>("{}: \"components\" must be an object", where);

  CheckpointState out;
  for (const auto& [name, c] : comps.items()) {
    std::string ctx = "component '" + name + "'";
    if (!valid_component(name)) raise<IOError>("{}: invalid {}", where, ctx);
    CheckpointComponent comp;
    const ojson& tensors = field(c, "tensors", ctx);
    if (!tensors.is_null()) {
      if (!tensors.is_string() || tensors.get<std::string>() != name + ".safetensors")
        raise<IOError>("{}: {} names tensor file {}, expected \"{}.safetensors\"", where, ctx, tensors.dump(), name);
      fs::path file = fs::path(dir) / tensors.get<std::string>();
      if (!fs::is_regular_file(file, ec))
        raise<IOError>("{}: {}: tensor file '{}' is missing; the checkpoint is incomplete", where, ctx, file.string());
      const ojson& bytes = field(c, "bytes", ctx);
      uint64_t size = fs::file_size(file, ec);
      if (!bytes.is_number_unsigned() || bytes.get<uint64_t>() != size)
        raise<IOError>("{}: {}: '{}' has {} bytes but the manifest records {} (truncated or replaced)", where, ctx,
                       file.string(), size, bytes.dump());
      SafetensorsFile f = SafetensorsFile::open(file.string());
      const ojson& count = field(c, "num_tensors", ctx);
      if (!count.is_number_unsigned() || count.get<uint64_t>() != f.size())
        raise<IOError>("{}: {}: '{}' holds {} tensors but the manifest records {}", where, ctx, file.string(), f.size(),
                       count.dump());
      comp.tensors = f.load_all();
    }
    const ojson& st = field(c, "state", ctx);
    if (!st.is_null()) comp.json = st.dump();
    out.emplace(name, std::move(comp));
  }
  return out;
}

CheckpointState load_checkpoint(const std::string& root, int64_t step) {
  std::string dir = checkpoint_dir(root, step);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    std::vector<int64_t> steps = list_checkpoints(root);
    raise<IOError>("no checkpoint for step {} under '{}' (available steps: {})", step, root,
                   steps.empty() ? std::string("none") : fmt::format("{}", fmt::join(steps, ", ")));
  }
  int64_t recorded = -1;
  CheckpointState s = load_checkpoint_dir(dir, &recorded);
  if (recorded != step)
    raise<IOError>("{}/{}: records step {} but the folder is for step {}", dir, kManifest, recorded, step);
  return s;
}

std::optional<std::pair<int64_t, CheckpointState>> CheckpointManager::load_latest() const {
  std::optional<int64_t> step = latest();
  if (!step) return std::nullopt;
  return std::make_pair(*step, load(*step));
}

}  // namespace foundry::io
