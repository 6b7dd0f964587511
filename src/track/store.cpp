#include "foundry/track/store.h"

#include <signal.h>
#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <functional>
#include <thread>
#include <cmath>
#include <filesystem>
#include <set>
#include <fstream>
#include <nlohmann/json.hpp>

#include "foundry/core/error.h"
#include "track/sha256.h"
#include "track/util.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace foundry::track {

namespace {

constexpr int kSchemaVersion = 1;

// Tables and indexes; docs/tracking.md describes each column.
constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs(
  id TEXT PRIMARY KEY, project TEXT NOT NULL, name TEXT NOT NULL, status TEXT NOT NULL,
  created_at REAL NOT NULL, updated_at REAL NOT NULL, finished_at REAL, exit_code INTEGER,
  host TEXT NOT NULL, pid INTEGER NOT NULL, config TEXT NOT NULL, tags TEXT NOT NULL,
  summary TEXT NOT NULL, notes TEXT NOT NULL DEFAULT '', origin TEXT NOT NULL DEFAULT '');
CREATE TABLE IF NOT EXISTS scalars(run_id TEXT NOT NULL, key TEXT NOT NULL, step INTEGER NOT NULL,
  wall_time REAL NOT NULL, value REAL);
CREATE INDEX IF NOT EXISTS scalars_by_key ON scalars(run_id, key, step);
CREATE TABLE IF NOT EXISTS histograms(run_id TEXT NOT NULL, key TEXT NOT NULL, step INTEGER NOT NULL,
  wall_time REAL NOT NULL, min REAL, max REAL, num REAL, sum REAL, sum_squares REAL,
  bucket_limits TEXT NOT NULL, bucket_counts TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS histograms_by_key ON histograms(run_id, key, step);
CREATE TABLE IF NOT EXISTS texts(run_id TEXT NOT NULL, key TEXT NOT NULL, step INTEGER NOT NULL,
  wall_time REAL NOT NULL, value TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS texts_by_key ON texts(run_id, key, step);
CREATE TABLE IF NOT EXISTS images(run_id TEXT NOT NULL, key TEXT NOT NULL, step INTEGER NOT NULL,
  wall_time REAL NOT NULL, width INTEGER NOT NULL, height INTEGER NOT NULL, png BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS images_by_key ON images(run_id, key, step);
CREATE TABLE IF NOT EXISTS artifacts(run_id TEXT NOT NULL, name TEXT NOT NULL, type TEXT NOT NULL,
  sha256 TEXT NOT NULL, size INTEGER NOT NULL, logged_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS sync_marks(remote TEXT NOT NULL, run_id TEXT NOT NULL, tbl TEXT NOT NULL,
  last_rowid INTEGER NOT NULL, PRIMARY KEY(remote, run_id, tbl));
)sql";

// A prepared statement that finalizes itself; bind() takes values by position (1-based).
class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) : db_(db) {
    if (sqlite3_prepare_v2(db, sql, -1, &s_, nullptr) != SQLITE_OK)
      raise<IOError>("tracking database: cannot prepare query: {}", sqlite3_errmsg(db));
  }
  ~Stmt() { sqlite3_finalize(s_); }
  Stmt& bind(int i, const std::string& v) {
    sqlite3_bind_text(s_, i, v.data(), int(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Stmt& bind(int i, const char* v) { return bind(i, std::string(v)); }
  Stmt& bind(int i, int64_t v) {
    sqlite3_bind_int64(s_, i, v);
    return *this;
  }
  Stmt& bind(int i, double v) {  // NaN becomes NULL explicitly (SQLite would do the same silently)
    if (std::isnan(v)) sqlite3_bind_null(s_, i);
    else sqlite3_bind_double(s_, i, v);
    return *this;
  }
  template <class T>
  Stmt& bind(int i, const std::optional<T>& v) {
    if (!v) {
      sqlite3_bind_null(s_, i);
      return *this;
    }
    return bind(i, *v);
  }
  Stmt& bind_blob(int i, const std::string& v) {
    sqlite3_bind_blob(s_, i, v.data(), int(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  bool step() {
    int rc = sqlite3_step(s_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    raise<IOError>("tracking database: {}", sqlite3_errmsg(db_));
  }
  void run() { while (step()) {} }
  std::string text(int c) const {
    auto p = reinterpret_cast<const char*>(sqlite3_column_text(s_, c));
    return p ? std::string(p, size_t(sqlite3_column_bytes(s_, c))) : std::string();
  }
  std::string blob(int c) const {
    auto p = static_cast<const char*>(sqlite3_column_blob(s_, c));
    return p ? std::string(p, size_t(sqlite3_column_bytes(s_, c))) : std::string();
  }
  int64_t i64(int c) const { return sqlite3_column_int64(s_, c); }
  double real(int c) const {  // NULL is NaN (see the header)
    return sqlite3_column_type(s_, c) == SQLITE_NULL ? NAN : sqlite3_column_double(s_, c);
  }
  bool null(int c) const { return sqlite3_column_type(s_, c) == SQLITE_NULL; }

 private:
  sqlite3* db_;
  sqlite3_stmt* s_ = nullptr;
};

RunRecord read_run(const Stmt& q) {
  RunRecord r;
  r.id = q.text(0);
  r.project = q.text(1);
  r.name = q.text(2);
  r.status = q.text(3);
  r.created_at = q.real(4);
  r.updated_at = q.real(5);
  if (!q.null(6)) r.finished_at = q.real(6);
  if (!q.null(7)) r.exit_code = q.i64(7);
  r.host = q.text(8);
  r.pid = q.i64(9);
  r.config_json = q.text(10);
  r.tags_json = q.text(11);
  r.summary_json = q.text(12);
  r.notes = q.text(13);
  r.origin = q.text(14);
  return r;
}
constexpr const char* kRunColumns =
    "id, project, name, status, created_at, updated_at, finished_at, exit_code, host, pid, config, tags, summary, "
    "notes, origin";

bool process_alive(int64_t pid) {
  if (pid <= 0) return false;
  return ::kill(pid_t(pid), 0) == 0 || errno == EPERM;
}

}  // namespace

const char* series_table(Series s) {
  switch (s) {
    case Series::Scalars: return "scalars";
    case Series::Histograms: return "histograms";
    case Series::Texts: return "texts";
    case Series::Images: return "images";
  }
  return "scalars";
}

namespace {

// Runs `step` again while it fails because another connection holds the database (SQLITE_BUSY /
// SQLITE_LOCKED), for up to the busy timeout (60 s), with short growing sleeps.
void with_busy_retries(sqlite3* db, const std::function<void()>& step) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (int wait_ms = 1;; wait_ms = std::min(wait_ms * 2, 50)) {
    try {
      step();
      return;
    } catch (const IOError&) {
      const int code = sqlite3_errcode(db) & 0xff;
      if ((code != SQLITE_BUSY && code != SQLITE_LOCKED) || std::chrono::steady_clock::now() > deadline) throw;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms));
  }
}

}  // namespace

namespace {

// A histogram's stored array of numbers, or an error naming the row (a database edited by hand).
std::vector<double> stored_numbers(const std::string& text, const std::string& run_id, const std::string& key,
                                   int64_t step, const char* column) {
  const json j = json::parse(text, nullptr, false);
  if (j.is_array() && std::all_of(j.begin(), j.end(), [](const json& v) { return v.is_number(); }))
    return j.get<std::vector<double>>();
  raise<IOError>("tracking database: run {} histogram '{}' step {}: {} is not an array of numbers ({})", run_id, key,
                 step, column, text.substr(0, 40));
}

}  // namespace

Store Store::open(const std::string& dir, bool create) {
  fs::path db_file = fs::path(dir) / "foundry.db";
  if (!create && !fs::exists(db_file)) raise<IOError>("no tracking database at '{}'", db_file.string());
  // SQLite takes an empty file for a new database; beside stored artifacts it is one that lost its
  // contents (truncated, a failed copy), and `runs gc` would then delete every artifact as unreferenced.
  std::error_code ec;
  if (fs::is_regular_file(db_file, ec) && fs::file_size(db_file, ec) == 0 && !ec &&
      fs::exists(fs::path(dir) / "artifacts", ec))
    raise<IOError>("tracking database '{}' is empty (0 bytes) beside stored artifacts: it lost its contents; it was "
                   "left untouched (restore it, or move the folder's artifacts away to start a new one)",
                   db_file.string());
  if (create) fs::create_directories(dir);
  Store s;
  s.dir_ = dir;
  int flags = SQLITE_OPEN_READWRITE | (create ? SQLITE_OPEN_CREATE : 0) | SQLITE_OPEN_FULLMUTEX;
  if (sqlite3_open_v2(db_file.c_str(), &s.db_, flags, nullptr) != SQLITE_OK) {
    std::string msg = s.db_ ? sqlite3_errmsg(s.db_) : "out of memory";
    raise<IOError>("cannot open tracking database '{}': {}", db_file.string(), msg);
  }
  sqlite3_busy_timeout(s.db_, 60000);
  // The first statement that reads the file tells a corrupt or foreign file apart; nothing is written
  // before it succeeds, so such a file is never overwritten.
  try {
    Stmt probe(s.db_, "SELECT name FROM sqlite_master WHERE type = 'table'");
    bool any_table = false, has_meta = false;
    while (probe.step()) {
      any_table = true;
      if (probe.text(0) == "meta") has_meta = true;
    }
    if (any_table && !has_meta)
      raise<IOError>("'{}' is an SQLite database but not a Foundry tracking database; refusing to modify it",
                     db_file.string());
    if (has_meta) {
      Stmt v(s.db_, "SELECT value FROM meta WHERE key = 'schema_version'");
      if (v.step() && std::stoi(v.text(0)) > kSchemaVersion)
        raise<IOError>("tracking database '{}' has schema version {} (this Foundry reads up to {})", db_file.string(),
                       v.text(0), kSchemaVersion);
    }
  } catch (const IOError& e) {
    std::string what = e.what();
    if (what.find("not a database") != std::string::npos || what.find("malformed") != std::string::npos)
      raise<IOError>("tracking database '{}' is corrupt or not an SQLite file ({}); it was left untouched",
                     db_file.string(), what);
    throw;
  }
  // Several processes opening a new database at once: switching it to WAL needs the file to
  // itself, and SQLite answers "database is locked" there without waiting on the busy timeout
  // (waiting could deadlock two readers that both want to write), so the set-up retries.
  with_busy_retries(s.db_, [&] {
    s.exec("PRAGMA journal_mode = WAL");
    s.exec("PRAGMA synchronous = NORMAL");  // WAL + NORMAL: durable across a process crash
    s.exec("PRAGMA foreign_keys = OFF");
    s.transaction([&] {
      s.exec(kSchema);
      Stmt(s.db_, "INSERT OR IGNORE INTO meta(key, value) VALUES ('schema_version', ?)")
          .bind(1, std::to_string(kSchemaVersion))
          .run();
    });
  });
  return s;
}

Store::Store(Store&& o) noexcept : db_(o.db_), dir_(std::move(o.dir_)) { o.db_ = nullptr; }
Store& Store::operator=(Store&& o) noexcept {
  if (this != &o) {
    if (db_) sqlite3_close_v2(db_);
    db_ = o.db_;
    dir_ = std::move(o.dir_);
    o.db_ = nullptr;
  }
  return *this;
}
Store::~Store() {
  if (db_) sqlite3_close_v2(db_);
}

std::string Store::db_path() const { return (fs::path(dir_) / "foundry.db").string(); }
std::string Store::blob_path(const std::string& sha) const {
  return (fs::path(dir_) / "artifacts" / "sha256" / sha.substr(0, 2) / sha).string();
}

void Store::exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : sqlite3_errmsg(db_);
    sqlite3_free(err);
    raise<IOError>("tracking database '{}': {}", db_path(), msg);
  }
}

void Store::transaction(const std::function<void()>& body) {
  if (!sqlite3_get_autocommit(db_)) {  // nested: part of the outer transaction
    body();
    return;
  }
  exec("BEGIN IMMEDIATE");  // take the write lock now: waits (busy timeout) instead of failing later
  try {
    body();
    exec("COMMIT");
  } catch (...) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
}

std::vector<RunRecord> Store::runs(double stale_seconds) {
  std::vector<RunRecord> out;
  {
    Stmt q(db_, fmt::format("SELECT {} FROM runs ORDER BY created_at DESC", kRunColumns).c_str());
    while (q.step()) out.push_back(read_run(q));
  }
  std::string host = host_name();
  double now = unix_now();
  for (auto& r : out) {
    if (r.status != "running" || !r.origin.empty()) continue;
    bool dead = (r.host == host && !process_alive(r.pid)) || now - r.updated_at > stale_seconds;
    if (!dead) continue;
    // Only the run's own state changes, and only if nobody updated it meanwhile.
    Stmt(db_, "UPDATE runs SET status = 'crashed' WHERE id = ? AND status = 'running' AND updated_at = ?")
        .bind(1, r.id)
        .bind(2, r.updated_at)
        .run();
    r.status = "crashed";
  }
  return out;
}

std::optional<RunRecord> Store::find_run(const std::string& id) {
  Stmt q(db_, fmt::format("SELECT {} FROM runs WHERE id = ?", kRunColumns).c_str());
  q.bind(1, id);
  if (!q.step()) return std::nullopt;
  return read_run(q);
}

RunRecord Store::run(const std::string& key) {
  if (key.empty()) raise<ValueError>("empty run id");
  std::vector<RunRecord> all = runs();
  std::vector<const RunRecord*> hits;
  for (auto& r : all)
    if (r.id == key) return r;
  for (auto& r : all)
    if (r.id.rfind(key, 0) == 0 || r.name == key) hits.push_back(&r);
  if (hits.size() == 1) return *hits[0];
  if (hits.empty()) raise<ValueError>("unknown run ID '{}' in '{}'", key, db_path());
  std::string ids;
  for (auto* r : hits) ids += (ids.empty() ? "" : ", ") + r->id + " (" + r->name + ")";
  raise<ValueError>("'{}' matches several runs: {}; give more of the id", key, ids);
}

std::vector<std::string> Store::keys(const std::string& run_id, Series s) {
  Stmt q(db_, fmt::format("SELECT DISTINCT key FROM {} WHERE run_id = ? ORDER BY key", series_table(s)).c_str());
  q.bind(1, run_id);
  std::vector<std::string> out;
  while (q.step()) out.push_back(q.text(0));
  return out;
}

std::vector<ScalarPoint> Store::scalars(const std::string& run_id, const std::string& key) {
  Stmt q(db_, "SELECT step, wall_time, value FROM scalars WHERE run_id = ? AND key = ? ORDER BY step, rowid");
  q.bind(1, run_id).bind(2, key);
  std::vector<ScalarPoint> out;
  while (q.step()) out.push_back({q.i64(0), q.real(1), q.real(2)});
  return out;
}

std::optional<int64_t> Store::max_step(const std::string& run_id, bool include_system) {
  Stmt q(db_, include_system ? "SELECT max(step) FROM scalars WHERE run_id = ?"
                             : "SELECT max(step) FROM scalars WHERE run_id = ? AND key NOT LIKE 'system/%'");
  q.bind(1, run_id);
  if (!q.step() || q.null(0)) return std::nullopt;
  return q.i64(0);
}

std::vector<HistogramPoint> Store::histograms(const std::string& run_id, const std::string& key) {
  Stmt q(db_,
         "SELECT step, wall_time, min, max, num, sum, sum_squares, bucket_limits, bucket_counts FROM histograms "
         "WHERE run_id = ? AND key = ? ORDER BY step, rowid");
  q.bind(1, run_id).bind(2, key);
  std::vector<HistogramPoint> out;
  while (q.step()) {
    HistogramPoint p;
    p.step = q.i64(0);
    p.wall_time = q.real(1);
    p.histogram.min = q.real(2);
    p.histogram.max = q.real(3);
    p.histogram.num = q.real(4);
    p.histogram.sum = q.real(5);
    p.histogram.sum_squares = q.real(6);
    p.histogram.bucket_limits = stored_numbers(q.text(7), run_id, key, p.step, "bucket_limits");
    p.histogram.bucket_counts = stored_numbers(q.text(8), run_id, key, p.step, "bucket_counts");
    out.push_back(std::move(p));
  }
  return out;
}

std::vector<TextPoint> Store::texts(const std::string& run_id, const std::string& key) {
  Stmt q(db_, "SELECT step, wall_time, value FROM texts WHERE run_id = ? AND key = ? ORDER BY step, rowid");
  q.bind(1, run_id).bind(2, key);
  std::vector<TextPoint> out;
  while (q.step()) out.push_back({q.i64(0), q.real(1), q.text(2)});
  return out;
}

std::vector<ImagePoint> Store::images(const std::string& run_id, const std::string& key, bool with_png) {
  Stmt q(db_, with_png ? "SELECT rowid, step, wall_time, width, height, png FROM images WHERE run_id = ? AND key = ? "
                         "ORDER BY step, rowid"
                       : "SELECT rowid, step, wall_time, width, height FROM images WHERE run_id = ? AND key = ? "
                         "ORDER BY step, rowid");
  q.bind(1, run_id).bind(2, key);
  std::vector<ImagePoint> out;
  while (q.step()) out.push_back({q.i64(0), q.i64(1), q.real(2), q.i64(3), q.i64(4), with_png ? q.blob(5) : ""});
  return out;
}

std::optional<ImagePoint> Store::image(int64_t image_id) {
  Stmt q(db_, "SELECT rowid, step, wall_time, width, height, png FROM images WHERE rowid = ?");
  q.bind(1, image_id);
  if (!q.step()) return std::nullopt;
  return ImagePoint{q.i64(0), q.i64(1), q.real(2), q.i64(3), q.i64(4), q.blob(5)};
}

std::vector<ArtifactRecord> Store::artifacts(const std::string& run_id) {
  Stmt q(db_, "SELECT name, type, sha256, size, logged_at FROM artifacts WHERE run_id = ? ORDER BY rowid");
  q.bind(1, run_id);
  std::vector<ArtifactRecord> out;
  while (q.step()) out.push_back({q.text(0), q.text(1), q.text(2), q.i64(3), q.real(4)});
  return out;
}

bool safe_run_id(const std::string& id) {
  if (id.empty() || id.size() > 64 || id[0] == '.') return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.';
  });
}

void Store::insert_run(const RunRecord& r) {
  if (!safe_run_id(r.id))
    raise<ValueError>("run id '{}' must be 1-64 of A-Z a-z 0-9 _ . - and not start with '.'", r.id);
  Stmt(db_, fmt::format("INSERT INTO runs({}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", kRunColumns).c_str())
      .bind(1, r.id).bind(2, r.project).bind(3, r.name).bind(4, r.status).bind(5, r.created_at)
      .bind(6, r.updated_at).bind(7, r.finished_at).bind(8, r.exit_code).bind(9, r.host).bind(10, r.pid)
      .bind(11, r.config_json).bind(12, r.tags_json).bind(13, r.summary_json).bind(14, r.notes).bind(15, r.origin)
      .run();
}

void Store::update_run(const RunRecord& r) {
  Stmt(db_,
       "UPDATE runs SET project = ?, name = ?, status = ?, created_at = ?, updated_at = ?, finished_at = ?, "
       "exit_code = ?, host = ?, pid = ?, config = ?, tags = ?, summary = ?, notes = ?, origin = ? WHERE id = ?")
      .bind(1, r.project).bind(2, r.name).bind(3, r.status).bind(4, r.created_at).bind(5, r.updated_at)
      .bind(6, r.finished_at).bind(7, r.exit_code).bind(8, r.host).bind(9, r.pid).bind(10, r.config_json)
      .bind(11, r.tags_json).bind(12, r.summary_json).bind(13, r.notes).bind(14, r.origin).bind(15, r.id)
      .run();
}

void Store::insert_scalar(const std::string& run_id, const std::string& key, const ScalarPoint& p) {
  Stmt(db_, "INSERT INTO scalars(run_id, key, step, wall_time, value) VALUES (?,?,?,?,?)")
      .bind(1, run_id).bind(2, key).bind(3, p.step).bind(4, p.wall_time).bind(5, p.value)
      .run();
}

void Store::insert_histogram(const std::string& run_id, const std::string& key, const HistogramPoint& p) {
  const Histogram& h = p.histogram;
  Stmt(db_,
       "INSERT INTO histograms(run_id, key, step, wall_time, min, max, num, sum, sum_squares, bucket_limits, "
       "bucket_counts) VALUES (?,?,?,?,?,?,?,?,?,?,?)")
      .bind(1, run_id).bind(2, key).bind(3, p.step).bind(4, p.wall_time).bind(5, h.min).bind(6, h.max)
      .bind(7, h.num).bind(8, h.sum).bind(9, h.sum_squares).bind(10, json(h.bucket_limits).dump())
      .bind(11, json(h.bucket_counts).dump())
      .run();
}

void Store::insert_text(const std::string& run_id, const std::string& key, const TextPoint& p) {
  Stmt(db_, "INSERT INTO texts(run_id, key, step, wall_time, value) VALUES (?,?,?,?,?)")
      .bind(1, run_id).bind(2, key).bind(3, p.step).bind(4, p.wall_time).bind(5, p.text)
      .run();
}

void Store::insert_image(const std::string& run_id, const std::string& key, const ImagePoint& p) {
  Stmt(db_, "INSERT INTO images(run_id, key, step, wall_time, width, height, png) VALUES (?,?,?,?,?,?,?)")
      .bind(1, run_id).bind(2, key).bind(3, p.step).bind(4, p.wall_time).bind(5, p.width).bind(6, p.height)
      .bind_blob(7, p.png)
      .run();
}

std::pair<std::string, int64_t> Store::store_blob(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) raise<IOError>("cannot read artifact '{}'", path);
  std::string sha = sha256_file_hex(in);
  int64_t size = int64_t(fs::file_size(path));
  fs::path dst = blob_path(sha);
  if (!fs::exists(dst)) {
    fs::create_directories(dst.parent_path());
    // Copy to a temporary name, then rename: a crash mid-copy never leaves a blob with wrong bytes.
    fs::path tmp = dst;
    tmp += fmt::format(".tmp.{}", ::getpid());
    fs::copy_file(path, tmp, fs::copy_options::overwrite_existing);
    fs::rename(tmp, dst);
  }
  return {sha, size};
}

void Store::insert_artifact(const std::string& run_id, const ArtifactRecord& a) {
  Stmt(db_, "INSERT INTO artifacts(run_id, name, type, sha256, size, logged_at) VALUES (?,?,?,?,?,?)")
      .bind(1, run_id).bind(2, a.name).bind(3, a.type).bind(4, a.sha256).bind(5, a.size).bind(6, a.logged_at)
      .run();
}

int64_t Store::gc(int64_t* files_removed) {
  std::set<std::string> live;
  {
    Stmt q(db_, "SELECT DISTINCT sha256 FROM artifacts");
    while (q.step()) live.insert(q.text(0));
  }
  int64_t freed = 0, removed = 0;
  fs::path root = fs::path(dir_) / "artifacts" / "sha256";
  if (fs::exists(root)) {
    std::vector<fs::path> doomed;
    for (auto& e : fs::recursive_directory_iterator(root))
      if (e.is_regular_file() && !live.count(e.path().filename().string())) doomed.push_back(e.path());
    for (auto& p : doomed) {
      freed += int64_t(fs::file_size(p));
      fs::remove(p);
      ++removed;
    }
  }
  if (files_removed) *files_removed = removed;
  return freed;
}

int64_t Store::sync_mark(const std::string& remote, const std::string& run_id, const std::string& table) {
  Stmt q(db_, "SELECT last_rowid FROM sync_marks WHERE remote = ? AND run_id = ? AND tbl = ?");
  q.bind(1, remote).bind(2, run_id).bind(3, table);
  return q.step() ? q.i64(0) : 0;
}

void Store::set_sync_mark(const std::string& remote, const std::string& run_id, const std::string& table,
                          int64_t rowid) {
  Stmt(db_, "INSERT OR REPLACE INTO sync_marks(remote, run_id, tbl, last_rowid) VALUES (?,?,?,?)")
      .bind(1, remote).bind(2, run_id).bind(3, table).bind(4, rowid)
      .run();
}

std::string Store::rows_after_json(const std::string& run_id, Series s, int64_t after, int64_t limit,
                                   int64_t* last_rowid, int64_t* count) {
  json rows = json::array();
  *last_rowid = after;
  *count = 0;
  switch (s) {
    case Series::Scalars: {
      Stmt q(db_, "SELECT rowid, key, step, wall_time, value FROM scalars WHERE run_id = ? AND rowid > ? "
                  "ORDER BY rowid LIMIT ?");
      q.bind(1, run_id).bind(2, after).bind(3, limit);
      while (q.step()) {
        rows.push_back({q.i64(0), q.text(1), q.i64(2), q.real(3), json_number(q.real(4))});
        *last_rowid = q.i64(0);
      }
      break;
    }
    case Series::Histograms: {
      Stmt q(db_, "SELECT rowid, key, step, wall_time, min, max, num, sum, sum_squares, bucket_limits, bucket_counts "
                  "FROM histograms WHERE run_id = ? AND rowid > ? ORDER BY rowid LIMIT ?");
      q.bind(1, run_id).bind(2, after).bind(3, limit);
      while (q.step()) {
        rows.push_back({q.i64(0), q.text(1), q.i64(2), q.real(3), json_number(q.real(4)), json_number(q.real(5)),
                        json_number(q.real(6)), json_number(q.real(7)), json_number(q.real(8)),
                        stored_numbers(q.text(9), run_id, q.text(1), q.i64(2), "bucket_limits"),
                        stored_numbers(q.text(10), run_id, q.text(1), q.i64(2), "bucket_counts")});
        *last_rowid = q.i64(0);
      }
      break;
    }
    case Series::Texts: {
      Stmt q(db_, "SELECT rowid, key, step, wall_time, value FROM texts WHERE run_id = ? AND rowid > ? "
                  "ORDER BY rowid LIMIT ?");
      q.bind(1, run_id).bind(2, after).bind(3, limit);
      while (q.step()) {
        rows.push_back({q.i64(0), q.text(1), q.i64(2), q.real(3), q.text(4)});
        *last_rowid = q.i64(0);
      }
      break;
    }
    case Series::Images: {
      Stmt q(db_, "SELECT rowid, key, step, wall_time, width, height, png FROM images WHERE run_id = ? AND rowid > ? "
                  "ORDER BY rowid LIMIT ?");
      q.bind(1, run_id).bind(2, after).bind(3, limit);
      while (q.step()) {
        rows.push_back({q.i64(0), q.text(1), q.i64(2), q.real(3), q.i64(4), q.i64(5), base64_encode(q.blob(6))});
        *last_rowid = q.i64(0);
      }
      break;
    }
  }
  *count = int64_t(rows.size());
  return rows.dump();
}

}  // namespace foundry::track
