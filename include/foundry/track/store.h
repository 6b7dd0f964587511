// The tracking database (<dir>/foundry.db): SQLite in WAL mode, one connection per Store, safe for
// several processes at once (writes take an immediate transaction and wait for each other). The
// schema is documented in docs/tracking.md; NaN is stored as NULL (SQLite has no NaN), infinities
// as themselves.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "foundry/track/track.h"

struct sqlite3;

namespace foundry::track {

struct RunRecord {
  std::string id, project, name, status;  ///< status: running | finished | failed | crashed
  double created_at = 0, updated_at = 0;  ///< unix seconds; updated_at is the writer's heartbeat
  std::optional<double> finished_at;
  std::optional<int64_t> exit_code;
  std::string host;
  int64_t pid = 0;
  std::string config_json = "{}", tags_json = "[]", summary_json = "{}", notes;
  std::string origin;  ///< "" for local runs; the sender's host for runs received by sync
};

struct ScalarPoint {
  int64_t step = 0;
  double wall_time = 0, value = 0;
};
struct HistogramPoint {
  int64_t step = 0;
  double wall_time = 0;
  Histogram histogram;
};
struct TextPoint {
  int64_t step = 0;
  double wall_time = 0;
  std::string text;
};
struct ImagePoint {
  int64_t id = 0, step = 0;
  double wall_time = 0;
  int64_t width = 0, height = 0;
  std::string png;  ///< empty unless asked for
};
struct ArtifactRecord {
  std::string name, type, sha256;
  int64_t size = 0;
  double logged_at = 0;
};

/// The kinds of series a run holds; also the table names.
enum class Series { Scalars, Histograms, Texts, Images };
const char* series_table(Series s);

/// A run id names folders in exports (TensorBoard, MLflow) and comes from other machines through
/// sync: 1-64 of [A-Za-z0-9_.-], not starting with '.', so that none climbs out of a folder.
bool safe_run_id(const std::string& id);

class Store {
 public:
  /// Opens <dir>/foundry.db; `create` makes the directory and database when missing. A file that
  /// is not a Foundry tracking database (or is corrupt) raises IOError naming it and is left as is.
  static Store open(const std::string& dir, bool create = true);
  Store(Store&&) noexcept;
  Store& operator=(Store&&) noexcept;
  ~Store();

  const std::string& dir() const { return dir_; }
  std::string db_path() const;
  std::string blob_path(const std::string& sha256) const;

  // ---- reads
  /// Every run, newest first. Runs still marked running whose process is gone (same host, pid not
  /// alive) or whose heartbeat stopped more than `stale_seconds` ago are marked crashed first.
  std::vector<RunRecord> runs(double stale_seconds = 120);
  /// By exact id, unique id prefix, or unique name; ValueError naming the problem otherwise.
  RunRecord run(const std::string& id_prefix_or_name);
  std::optional<RunRecord> find_run(const std::string& id);
  std::vector<std::string> keys(const std::string& run_id, Series s);
  std::vector<ScalarPoint> scalars(const std::string& run_id, const std::string& key);
  /// The largest step of any scalar of the run (optionally leaving out the system/ metrics).
  std::optional<int64_t> max_step(const std::string& run_id, bool include_system = true);
  std::vector<HistogramPoint> histograms(const std::string& run_id, const std::string& key);
  std::vector<TextPoint> texts(const std::string& run_id, const std::string& key);
  std::vector<ImagePoint> images(const std::string& run_id, const std::string& key, bool with_png = false);
  std::optional<ImagePoint> image(int64_t image_id);
  std::vector<ArtifactRecord> artifacts(const std::string& run_id);

  // ---- writes (each call is its own transaction unless inside transaction())
  void transaction(const std::function<void()>& body);
  void insert_run(const RunRecord& r);  ///< refuses an id that is not safe_run_id()
  void update_run(const RunRecord& r);
  void insert_scalar(const std::string& run_id, const std::string& key, const ScalarPoint& p);
  void insert_histogram(const std::string& run_id, const std::string& key, const HistogramPoint& p);
  void insert_text(const std::string& run_id, const std::string& key, const TextPoint& p);
  void insert_image(const std::string& run_id, const std::string& key, const ImagePoint& p);
  /// Copies `path` into the blob store if its content is new; returns (sha256, size).
  std::pair<std::string, int64_t> store_blob(const std::string& path);
  void insert_artifact(const std::string& run_id, const ArtifactRecord& a);
  /// Deletes blob files no artifact refers to (and stray temporary files); returns bytes freed.
  int64_t gc(int64_t* files_removed = nullptr);

  // ---- sync bookkeeping (rowids of what was already sent to / received from a remote)
  int64_t sync_mark(const std::string& remote, const std::string& run_id, const std::string& table);
  void set_sync_mark(const std::string& remote, const std::string& run_id, const std::string& table, int64_t rowid);
  /// Rows of `table` for a run with rowid > after, in rowid order, at most `limit`, as JSON arrays
  /// (see docs/tracking.md, "sync").
  std::string rows_after_json(const std::string& run_id, Series s, int64_t after, int64_t limit, int64_t* last_rowid,
                              int64_t* count);

  sqlite3* handle() const { return db_; }

 private:
  Store() = default;
  friend struct Run::Impl;
  void exec(const char* sql);
  sqlite3* db_ = nullptr;
  std::string dir_;
};

}  // namespace foundry::track
