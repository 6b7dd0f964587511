// JSON views and text reports of runs (dashboard API, `foundry runs list|show|compare`).
#include <algorithm>
#include <cmath>
#include <ctime>
#include <map>
#include <set>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "foundry/track/tools.h"
#include "foundry/train/progress.h"
#include "track/util.h"

using nlohmann::json;

namespace foundry::track {

namespace {

json parse_or(const std::string& s, json fallback) {
  json j = json::parse(s, nullptr, false);
  return j.is_discarded() ? fallback : j;
}

json optional_number(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }

// A JSON object's leaves as text, by dotted key.
std::map<std::string, std::string> flat_text(const std::string& object_json) {
  std::map<std::string, std::string> out;
  for (auto& [k, v] : flatten_json(json::parse(object_json, nullptr, false))) out[k] = json_leaf_text(v);
  return out;
}

std::string format_time(double unix_seconds) {
  std::time_t t = std::time_t(unix_seconds);
  std::tm tm{};
  ::localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

std::string format_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return fmt::format("{:.6g}", v);
}

double duration_of(const RunRecord& r) { return (r.finished_at ? *r.finished_at : r.updated_at) - r.created_at; }

struct KeyStats {
  int64_t points = 0, last_step = 0;
  double last = NAN, min = INFINITY, max = -INFINITY;
};
KeyStats stats_of(const std::vector<ScalarPoint>& pts) {
  KeyStats s;
  s.points = int64_t(pts.size());
  for (auto& p : pts) {
    if (!std::isnan(p.value)) {
      s.min = std::min(s.min, p.value);
      s.max = std::max(s.max, p.value);
    }
  }
  if (!pts.empty()) {
    s.last = pts.back().value;
    s.last_step = pts.back().step;
  }
  return s;
}

}  // namespace

std::string run_json(Store& store, const RunRecord& r, bool detail) {
  json j = {{"id", r.id},
            {"project", r.project},
            {"name", r.name},
            {"status", r.status},
            {"created_at", r.created_at},
            {"updated_at", r.updated_at},
            {"finished_at", optional_number(r.finished_at)},
            {"exit_code", r.exit_code ? json(*r.exit_code) : json(nullptr)},
            {"host", r.host},
            {"pid", r.pid},
            {"tags", parse_or(r.tags_json, json::array())},
            {"config", parse_or(r.config_json, json::object())},
            {"summary", parse_or(r.summary_json, json::object())},
            {"notes", r.notes},
            {"origin", r.origin},
            {"scalar_keys", store.keys(r.id, Series::Scalars)}};
  if (detail) {
    j["histogram_keys"] = store.keys(r.id, Series::Histograms);
    j["text_keys"] = store.keys(r.id, Series::Texts);
    j["image_keys"] = store.keys(r.id, Series::Images);
    json arts = json::array();
    for (auto& a : store.artifacts(r.id))
      arts.push_back({{"name", a.name}, {"type", a.type}, {"sha256", a.sha256}, {"size", a.size}, {"logged_at", a.logged_at}});
    j["artifacts"] = arts;
  }
  return j.dump();
}

std::string runs_table(Store& store, const std::string& project, const std::string& status) {
  std::string out = fmt::format("{:<9} {:<24} {:<16} {:<9} {:<19} {:>9} {:>7}  {}\n", "ID", "NAME", "PROJECT", "STATUS",
                                "CREATED", "DURATION", "STEPS", "SUMMARY");
  for (auto& r : store.runs()) {
    if (!project.empty() && r.project != project) continue;
    if (!status.empty() && r.status != status) continue;
    const int64_t steps = std::max<int64_t>(0, store.max_step(r.id, /*include_system=*/false).value_or(0));
    std::string summary;
    json s = parse_or(r.summary_json, json::object());
    if (!s.is_object()) s = json::object();  // a database edited by hand: list the run without it
    for (auto it = s.begin(); it != s.end() && summary.size() < 60; ++it)
      summary += (summary.empty() ? "" : " ") + it.key() + "=" +
                 (it.value().is_number() ? format_value(it.value().get<double>()) : it.value().dump());
    out += fmt::format("{:<9} {:<24} {:<16} {:<9} {:<19} {:>9} {:>7}  {}\n", r.id, r.name.substr(0, 24),
                       r.project.substr(0, 16), r.status, format_time(r.created_at), train::format_duration(duration_of(r)),
                       steps, summary);
  }
  return out;
}

std::string run_report(Store& store, const RunRecord& r) {
  std::string out;
  out += fmt::format("run {} ({})  project {}  status {}", r.id, r.name, r.project, r.status);
  if (r.exit_code) out += fmt::format("  exit code {}", *r.exit_code);
  out += fmt::format("\ncreated {}  duration {}  host {}  pid {}\n", format_time(r.created_at),
                     train::format_duration(duration_of(r)), r.host, r.pid);
  json tags = parse_or(r.tags_json, json::array());
  if (!tags.empty()) out += "tags: " + tags.dump() + "\n";
  if (!r.notes.empty()) out += "notes: " + r.notes + "\n";
  out += "\nconfig:\n";
  for (auto& [k, v] : flat_text(r.config_json)) out += fmt::format("  {} = {}\n", k, v);
  out += "\nsummary:\n";
  for (auto& [k, v] : flat_text(r.summary_json)) out += fmt::format("  {} = {}\n", k, v);
  out += fmt::format("\n{:<32} {:>7} {:>9} {:>12} {:>12} {:>12}\n", "SCALAR", "POINTS", "LAST STEP", "LAST", "MIN", "MAX");
  for (auto& k : store.keys(r.id, Series::Scalars)) {
    KeyStats s = stats_of(store.scalars(r.id, k));
    out += fmt::format("{:<32} {:>7} {:>9} {:>12} {:>12} {:>12}\n", k, s.points, s.last_step, format_value(s.last),
                       s.min <= s.max ? format_value(s.min) : "-", s.min <= s.max ? format_value(s.max) : "-");
  }
  for (Series kind : {Series::Histograms, Series::Texts, Series::Images}) {
    auto keys = store.keys(r.id, kind);
    if (keys.empty()) continue;
    out += fmt::format("{}:", series_table(kind));
    for (auto& k : keys) out += " " + k;
    out += "\n";
  }
  auto arts = store.artifacts(r.id);
  if (!arts.empty()) {
    out += "artifacts:\n";
    for (auto& a : arts) out += fmt::format("  {} ({}, {} bytes) sha256:{}\n", a.name, a.type, a.size, a.sha256);
  }
  return out;
}

std::string compare_report(Store& store, const RunRecord& a, const RunRecord& b) {
  std::string out = fmt::format("{:<32} {:<24} {:<24}\n", "", a.id + " " + a.name.substr(0, 15),
                                b.id + " " + b.name.substr(0, 15));
  out += fmt::format("{:<32} {:<24} {:<24}\n", "status", a.status, b.status);
  std::map<std::string, std::string> ca = flat_text(a.config_json), cb = flat_text(b.config_json);
  std::set<std::string> keys;
  for (auto& [k, v] : ca) keys.insert(k);
  for (auto& [k, v] : cb) keys.insert(k);
  out += "\nconfig (* = differs)\n";
  for (auto& k : keys) {
    std::string va = ca.count(k) ? ca[k] : "-", vb = cb.count(k) ? cb[k] : "-";
    out += fmt::format("{} {:<30} {:<24} {:<24}\n", va == vb ? ' ' : '*', k, va, vb);
  }
  out += "\nscalars (last / min)\n";
  std::set<std::string> sk;
  for (auto& k : store.keys(a.id, Series::Scalars)) sk.insert(k);
  for (auto& k : store.keys(b.id, Series::Scalars)) sk.insert(k);
  for (auto& k : sk) {
    auto cell = [&](const RunRecord& r) {
      KeyStats s = stats_of(store.scalars(r.id, k));
      if (s.points == 0) return std::string("-");
      return format_value(s.last) + " / " + (s.min <= s.max ? format_value(s.min) : "-");
    };
    out += fmt::format("  {:<30} {:<24} {:<24}\n", k, cell(a), cell(b));
  }
  return out;
}

}  // namespace foundry::track
