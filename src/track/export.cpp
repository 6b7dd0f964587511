// `foundry runs export`: a run as JSON Lines, CSV (scalars, long format), TensorBoard event files or
// MLflow's file-store layout (mlruns/<experiment id>/<run id>/{meta.yaml,metrics,params,tags}).
#include <cmath>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "foundry/core/error.h"
#include "foundry/io/atomic_file.h"
#include "foundry/track/tools.h"
#include "track/tb_events.h"
#include "track/util.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace foundry::track {

namespace {

void write_atomically(const fs::path& path, const std::string& text) {
  if (path.has_parent_path()) fs::create_directories(path.parent_path());
  io::write_file_atomic(path.string(), text);
}

std::string jsonl(Store& store, const RunRecord& r) {
  std::string out;
  json run = json::parse(run_json(store, r, true));
  run["kind"] = "run";
  out += run.dump() + "\n";
  for (auto& k : store.keys(r.id, Series::Scalars))
    for (auto& p : store.scalars(r.id, k))
      out += json{{"kind", "scalar"}, {"run", r.id}, {"key", k}, {"step", p.step}, {"wall_time", p.wall_time},
                  {"value", json_number(p.value)}}.dump() + "\n";
  for (auto& k : store.keys(r.id, Series::Histograms))
    for (auto& p : store.histograms(r.id, k)) {
      const Histogram& h = p.histogram;
      out += json{{"kind", "histogram"}, {"run", r.id}, {"key", k}, {"step", p.step}, {"wall_time", p.wall_time},
                  {"min", h.min}, {"max", h.max}, {"num", h.num}, {"sum", h.sum}, {"sum_squares", h.sum_squares},
                  {"bucket_limits", h.bucket_limits}, {"bucket_counts", h.bucket_counts}}.dump() + "\n";
    }
  for (auto& k : store.keys(r.id, Series::Texts))
    for (auto& p : store.texts(r.id, k))
      out += json{{"kind", "text"}, {"run", r.id}, {"key", k}, {"step", p.step}, {"wall_time", p.wall_time},
                  {"text", p.text}}.dump() + "\n";
  for (auto& k : store.keys(r.id, Series::Images))
    for (auto& p : store.images(r.id, k, true))
      out += json{{"kind", "image"}, {"run", r.id}, {"key", k}, {"step", p.step}, {"wall_time", p.wall_time},
                  {"width", p.width}, {"height", p.height}, {"png_base64", base64_encode(p.png)}}.dump() + "\n";
  return out;
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

std::string csv_number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return fmt::format("{:.17g}", v);
}

std::string csv(Store& store, const RunRecord& r) {
  std::string out = "run_id,run_name,key,step,wall_time,value\n";
  for (auto& k : store.keys(r.id, Series::Scalars))
    for (auto& p : store.scalars(r.id, k))
      out += fmt::format("{},{},{},{},{},{}\n", r.id, csv_field(r.name), csv_field(k), p.step, csv_number(p.wall_time),
                         csv_number(p.value));
  return out;
}

std::string tensorboard(Store& store, const RunRecord& r, const fs::path& out_dir) {
  std::string folder = r.name + "-" + r.id;
  for (char& c : folder)
    if (c == '/' || c == '\\') c = '_';
  TbEventWriter tb((out_dir / folder).string());
  tb.hparams_start(r.config_json, r.created_at);
  for (auto& k : store.keys(r.id, Series::Scalars))
    for (auto& p : store.scalars(r.id, k)) tb.scalar(k, p.step, p.wall_time, p.value);
  for (auto& k : store.keys(r.id, Series::Histograms))
    for (auto& p : store.histograms(r.id, k)) tb.histogram(k, p.step, p.wall_time, p.histogram);
  for (auto& k : store.keys(r.id, Series::Texts))
    for (auto& p : store.texts(r.id, k)) tb.text(k, p.step, p.wall_time, p.text);
  for (auto& k : store.keys(r.id, Series::Images))
    for (auto& p : store.images(r.id, k, true)) tb.image(k, p.step, p.wall_time, p.png, p.height, p.width, 3);
  if (r.status != "running") tb.hparams_end(r.status == "finished" ? 1 : 2, r.finished_at ? *r.finished_at : r.updated_at);
  tb.flush();
  return tb.path();
}

// MLflow's experiment ids are decimal strings; a stable one per project keeps re-exports together.
std::string experiment_id(const std::string& project) {
  uint64_t h = 1469598103934665603ull;
  for (char c : project) h = (h ^ uint8_t(c)) * 1099511628211ull;
  return std::to_string(100000000 + h % 900000000);
}

std::string yaml_string(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("''") : std::string(1, c);
  return q + "'";
}

int mlflow_status(const std::string& status) {
  if (status == "running") return 1;  // RunStatus: RUNNING 1, FINISHED 3, FAILED 4, KILLED 5
  if (status == "finished") return 3;
  if (status == "crashed") return 5;
  return 4;
}

// A metric or param key as a relative path under metrics/ or params/ (MLflow allows '/' in keys;
// anything that could escape the directory is replaced).
fs::path key_path(const std::string& key) {
  std::string k;
  for (char c : key) k += (std::isalnum(uint8_t(c)) || c == '_' || c == '-' || c == '.' || c == ' ' || c == '/') ? c : '_';
  fs::path p;
  std::stringstream ss(k);
  std::string part;
  while (std::getline(ss, part, '/')) {
    if (part.empty() || part == "." || part == "..") part.assign(1, '_');
    p /= part;
  }
  return p;
}

std::string mlflow(Store& store, const RunRecord& r, const fs::path& out_dir) {
  fs::path root = fs::absolute(out_dir / "mlruns");
  std::string exp = experiment_id(r.project);
  fs::path exp_dir = root / exp, run_dir = exp_dir / r.id;
  int64_t created_ms = int64_t(r.created_at * 1000), end_ms = int64_t((r.finished_at ? *r.finished_at : r.updated_at) * 1000);
  if (!fs::exists(exp_dir / "meta.yaml"))
    write_atomically(exp_dir / "meta.yaml",
                     fmt::format("artifact_location: {}\ncreation_time: {}\nexperiment_id: '{}'\nlast_update_time: {}\n"
                                 "lifecycle_stage: active\nname: {}\n",
                                 yaml_string("file://" + exp_dir.string()), created_ms, exp, end_ms, yaml_string(r.project)));
  fs::remove_all(run_dir);  // an export replaces the previous export of this run
  write_atomically(run_dir / "meta.yaml",
                   fmt::format("artifact_uri: {}\nend_time: {}\nentry_point_name: ''\nexperiment_id: '{}'\n"
                               "lifecycle_stage: active\nrun_id: {}\nrun_name: {}\nrun_uuid: {}\nsource_name: ''\n"
                               "source_type: 4\nsource_version: ''\nstart_time: {}\nstatus: {}\ntags: []\nuser_id: {}\n",
                               yaml_string("file://" + (run_dir / "artifacts").string()),
                               r.status == "running" ? std::string("null") : std::to_string(end_ms), exp, r.id,
                               yaml_string(r.name), r.id, created_ms, mlflow_status(r.status), yaml_string("foundry")));
  for (auto& k : store.keys(r.id, Series::Scalars)) {
    std::string lines;  // "<timestamp ms> <value> <step>" per line, as MLflow's FileStore writes
    for (auto& p : store.scalars(r.id, k))
      lines += fmt::format("{} {} {}\n", int64_t(p.wall_time * 1000), csv_number(p.value), p.step);
    write_atomically(run_dir / "metrics" / key_path(k), lines);
  }
  for (auto& [k, v] : flatten_json(json::parse(r.config_json, nullptr, false)))
    write_atomically(run_dir / "params" / key_path(k), json_leaf_text(v));
  write_atomically(run_dir / "tags" / "mlflow.runName", r.name);
  write_atomically(run_dir / "tags" / "mlflow.source.name", "foundry");
  write_atomically(run_dir / "tags" / "foundry.status", r.status);
  json tags = json::parse(r.tags_json, nullptr, false);
  if (tags.is_array())
    for (auto& t : tags)
      if (t.is_string()) write_atomically(run_dir / "tags" / key_path(t.get<std::string>()), "");
  if (!r.notes.empty()) write_atomically(run_dir / "tags" / "mlflow.note.content", r.notes);
  fs::create_directories(run_dir / "artifacts");
  for (auto& a : store.artifacts(r.id)) {
    fs::path dst = run_dir / "artifacts" / key_path(a.name);
    fs::create_directories(dst.parent_path());
    fs::copy_file(store.blob_path(a.sha256), dst, fs::copy_options::overwrite_existing);
  }
  return run_dir.string();
}

}  // namespace

std::string export_run(Store& store, const RunRecord& run, const std::string& format, const std::string& out) {
  if (format == "jsonl" || format == "csv") {
    std::string text = format == "jsonl" ? jsonl(store, run) : csv(store, run);
    if (out.empty() || out == "-") return text;
    write_atomically(out, text);
    return out;
  }
  fs::path dir = out.empty() ? fs::path(".") : fs::path(out);
  if (!safe_run_id(run.id))  // a database synced before ids were checked
    raise<ValueError>("run id '{}' is not safe as a folder name; not exporting it as files", run.id);
  if (format == "tensorboard") return tensorboard(store, run, dir);
  if (format == "mlflow") return mlflow(store, run, dir);
  raise<ValueError>("unknown export format '{}': expected jsonl, csv, tensorboard or mlflow", format);
}

}  // namespace foundry::track
