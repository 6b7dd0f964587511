#include "foundry/core/leak_report.h"

#include <cxxabi.h>
#include <execinfo.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "foundry/core/tensor.h"

namespace foundry::debug {

namespace {

constexpr int kMaxFrames = 16;

struct Site {
  void* frames[kMaxFrames];
  int depth = 0;
};

struct Registry {
  std::mutex mu;
  std::unordered_map<const TensorImpl*, Site> live;
};

// Never destroyed: tensors may die during static destruction, after any destructor of ours ran.
Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

bool initial_setting() {
  const char* env = std::getenv("FOUNDRY_LEAK_REPORT");
  if (env && *env) return std::strcmp(env, "0") != 0;
#ifdef NDEBUG
  return false;
#else
  return true;
#endif
}

std::atomic<bool> g_ever_registered{false};  // keeps destruction lock-free in runs that never track
std::once_flag g_atexit_once;

void report_at_exit() {
  std::string r = live_tensors_report();
  if (r.empty()) return;
  std::fputs("foundry: leak report: tensors still alive at exit (FOUNDRY_LEAK_REPORT=0 silences this)\n", stderr);
  std::fputs(r.c_str(), stderr);
}

// "lib.so(_ZN7foundry5zerosE...+0x1c) [0x7f..]" -> "foundry::zeros(...)+0x1c (lib.so)".
std::string pretty_frame(const char* raw) {
  std::string s(raw);
  size_t open = s.find('('), plus = s.find('+', open == std::string::npos ? 0 : open), close = s.find(')', open);
  if (open == std::string::npos || close == std::string::npos) return s;
  std::string object = s.substr(0, open);
  size_t slash = object.rfind('/');
  if (slash != std::string::npos) object = object.substr(slash + 1);
  std::string mangled = s.substr(open + 1, (plus < close ? plus : close) - open - 1);
  std::string offset = plus < close ? s.substr(plus, close - plus) : "";
  if (mangled.empty()) return object + offset;
  int status = 0;
  char* demangled = abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status);
  std::string name = status == 0 && demangled ? demangled : mangled;
  std::free(demangled);
  if (name.size() > 160) name = name.substr(0, 157) + "...";
  return name + offset + " (" + object + ")";
}

}  // namespace

namespace detail {
std::atomic<bool> tracking{initial_setting()};
}

void set_tensor_tracking(bool on) { detail::tracking.store(on, std::memory_order_relaxed); }

int64_t live_tensor_count() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  return int64_t(r.live.size());
}

namespace detail {

void on_tensor_created(const TensorImpl* t) {
  if (!tensor_tracking_enabled()) return;
  std::call_once(g_atexit_once, [] { std::atexit(report_at_exit); });
  Site site;
  site.depth = ::backtrace(site.frames, kMaxFrames);
  g_ever_registered.store(true, std::memory_order_relaxed);
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  r.live[t] = site;
}

void on_tensor_destroyed(const TensorImpl* t) {
  if (!g_ever_registered.load(std::memory_order_relaxed)) return;
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  if (!r.live.empty()) r.live.erase(t);
}

}  // namespace detail

std::string live_tensors_report(size_t max_groups, size_t max_frames) {
  struct Group {
    int64_t count = 0, bytes = 0;
    const Site* site = nullptr;
    std::string what;
  };
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  if (r.live.empty()) return "";
  std::map<std::string, Group> groups;  // key: dtype + shape + frame addresses
  int64_t total_bytes = 0;
  for (auto& [t, site] : r.live) {
    std::string what = std::string(dtype_name(t->dtype)) + " [";
    for (size_t i = 0; i < t->sizes.size(); ++i) what += (i ? ", " : "") + std::to_string(t->sizes[i]);
    what += "]";
    std::string key = what;
    for (int i = 0; i < site.depth; ++i) {
      key += '|';
      key += std::to_string(reinterpret_cast<uintptr_t>(site.frames[i]));
    }
    Group& g = groups[key];
    g.count += 1;
    int64_t bytes = t->numel * itemsize(t->dtype);
    g.bytes += bytes;
    total_bytes += bytes;
    g.site = &site;
    g.what = what;
  }
  std::vector<const Group*> order;
  for (auto& [k, g] : groups) order.push_back(&g);
  std::sort(order.begin(), order.end(), [](const Group* a, const Group* b) {
    return a->bytes != b->bytes ? a->bytes > b->bytes : a->count > b->count;
  });
  std::string out = "foundry: " + std::to_string(r.live.size()) + " live tensor(s), " + std::to_string(total_bytes) +
                    " bytes of elements\n";
  for (size_t gi = 0; gi < order.size() && gi < max_groups; ++gi) {
    const Group& g = *order[gi];
    out += "  " + std::to_string(g.count) + " x " + g.what + " (" + std::to_string(g.bytes) + " bytes), created at:\n";
    char** names = ::backtrace_symbols(g.site->frames, g.site->depth);
    size_t shown = 0;
    for (int i = 0; i < g.site->depth && shown < max_frames; ++i) {
      std::string f = names ? pretty_frame(names[i]) : "?";
      // The registration itself, the TensorImpl constructor, the op registry's dispatch (its
      // std::function and unnamed kernel lambdas inside libfoundry) and a sanitizer's backtrace
      // interceptor say nothing about the leak; the op the caller named and the caller do.
      if (f.find("foundry::debug::") != std::string::npos || f.find("TensorImpl::TensorImpl") != std::string::npos ||
          f.find("make_ref<foundry::TensorImpl") != std::string::npos || f.rfind("backtrace+", 0) == 0 ||
          f.find("std::function<") != std::string::npos || f.find("foundry::ops::call") != std::string::npos ||
          f.rfind("libfoundry.so+0x", 0) == 0)
        continue;
      out += "      #" + std::to_string(shown++) + " " + f + "\n";
    }
    std::free(names);
  }
  if (order.size() > max_groups) out += "  ... and " + std::to_string(order.size() - max_groups) + " more group(s)\n";
  return out;
}

}  // namespace foundry::debug
