// What is done with a tracking directory besides logging: JSON views of runs (the dashboard's API
// and `foundry runs ... --json`), text reports for the CLI, exports (JSON Lines, CSV, TensorBoard,
// MLflow's file store), the dashboard server and pushing runs to another dashboard (sync).
#pragma once

#include <atomic>
#include <functional>
#include <string>

#include "foundry/track/store.h"

namespace foundry::track {

/// A run as the dashboard's /api/runs lists it (config, tags, summary as JSON values; scalar_keys);
/// `detail` adds histogram/text/image keys and artifacts.
std::string run_json(Store& store, const RunRecord& run, bool detail);

/// Plain-text reports for `foundry runs list|show|compare`.
std::string runs_table(Store& store, const std::string& project = "", const std::string& status = "");
std::string run_report(Store& store, const RunRecord& run);
std::string compare_report(Store& store, const RunRecord& a, const RunRecord& b);

/// format: jsonl | csv | tensorboard | mlflow. `out` is a file for jsonl/csv ("" = stdout via the
/// returned text) and a directory for tensorboard/mlflow. Returns what was written (a path or the text).
std::string export_run(Store& store, const RunRecord& run, const std::string& format, const std::string& out);

struct DashboardOptions {
  std::string dir = "runs";
  std::string host = "127.0.0.1";
  int port = 6006;  ///< 0 picks a free port
  bool allow_remote = false;
  std::string token;  ///< required on every request when set; ingest (sync) needs one
  int64_t max_body_bytes = 256ll << 20;
};
/// Serves until `stop` becomes true (checked a few times a second) or forever when null. Calls
/// `on_listening(url)` once the socket is bound. Throws ValueError for a non-loopback host without
/// allow_remote and a token.
void serve_dashboard(const DashboardOptions& options, const std::function<void(const std::string&)>& on_listening,
                     const std::atomic<bool>* stop = nullptr);

struct SyncOptions {
  std::string dir = "runs";
  std::string to;     ///< http://host:port of a dashboard
  std::string token;
  std::string run;    ///< one run (id, prefix or name); "" = all
  int64_t batch_rows = 5000;
};
struct SyncResult {
  int64_t runs = 0, rows = 0, requests = 0;
};
/// Pushes what the remote has not received yet (marks per remote, run and table are kept in the
/// local database, so a re-sync sends only new rows).
SyncResult sync_runs(const SyncOptions& options);

}  // namespace foundry::track
