// foundry runs list|show|compare|export|gc|sync and foundry dashboard: the tracking directory
// (docs/tracking.md) from the command line.
#include <csignal>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "foundry/track/tools.h"

namespace foundry::cli {

namespace {

std::atomic<bool> g_stop_dashboard{false};

void print(const std::string& s) {
  std::fwrite(s.data(), 1, s.size(), stdout);
  std::fflush(stdout);
}

}  // namespace

void add_runs_commands(CLI::App& app) {
  auto* runs = app.add_subcommand("runs", "Tracked runs: list, show, compare, export, gc, sync (see docs/tracking.md)");
  runs->require_subcommand(1);
  // `foundry runs --dir D list` and `foundry runs list --dir D` both work: the option is the
  // group's, and its subcommands fall through to it.
  runs->fallthrough();
  auto dir = std::make_shared<std::string>("runs");
  runs->add_option("--dir", *dir, "tracking directory holding foundry.db (default: runs)");

  auto* list = runs->add_subcommand("list", "Runs, newest first, with status, duration and summary");
  auto project = std::make_shared<std::string>(), status = std::make_shared<std::string>();
  auto as_json = std::make_shared<bool>(false);
  list->add_option("--project", *project, "only this project");
  list->add_option("--status", *status, "only runs with this status")
      ->check(CLI::IsMember({"running", "finished", "failed", "crashed"}));
  list->add_flag("--json", *as_json, "print the runs as JSON (the dashboard's /api/runs)");
  list->callback([=] {
    track::Store store = track::Store::open(*dir, false);
    if (!*as_json) return print(track::runs_table(store, *project, *status));
    nlohmann::json out = nlohmann::json::array();
    for (auto& r : store.runs())
      if ((project->empty() || r.project == *project) && (status->empty() || r.status == *status))
        out.push_back(nlohmann::json::parse(track::run_json(store, r, false)));
    print(out.dump(2) + "\n");
  });

  auto* show = runs->add_subcommand("show", "One run: config, summary, metrics (last/min/max), artifacts");
  auto run_id = std::make_shared<std::string>();
  auto show_json = std::make_shared<bool>(false);
  show->add_option("RUN", *run_id, "run id, unique id prefix or name")->required();
  show->add_flag("--json", *show_json, "print the run as JSON (the dashboard's /api/runs/<id>)");
  show->callback([=] {
    track::Store store = track::Store::open(*dir, false);
    track::RunRecord r = store.run(*run_id);
    print(*show_json ? nlohmann::json::parse(track::run_json(store, r, true)).dump(2) + "\n" : track::run_report(store, r));
  });

  auto* compare = runs->add_subcommand("compare", "Two runs side by side: config differences and metrics");
  auto a = std::make_shared<std::string>(), b = std::make_shared<std::string>();
  compare->add_option("RUN1", *a, "first run")->required();
  compare->add_option("RUN2", *b, "second run")->required();
  compare->callback([=] {
    track::Store store = track::Store::open(*dir, false);
    print(track::compare_report(store, store.run(*a), store.run(*b)));
  });

  auto* exp = runs->add_subcommand("export", "Write a run as JSON Lines, CSV, TensorBoard event files or an MLflow file store");
  auto exp_run = std::make_shared<std::string>(), format = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  exp->add_option("RUN", *exp_run, "run id, prefix or name")->required();
  exp->add_option("--format", *format, "jsonl | csv | tensorboard | mlflow")
      ->required()
      ->check(CLI::IsMember({"jsonl", "csv", "tensorboard", "mlflow"}));
  exp->add_option("--out", *out, "file (jsonl, csv; default stdout) or directory (tensorboard, mlflow; default .)");
  exp->callback([=] {
    track::Store store = track::Store::open(*dir, false);
    std::string written = track::export_run(store, store.run(*exp_run), *format, *out);
    if ((*format == "jsonl" || *format == "csv") && (out->empty() || *out == "-")) print(written);
    else std::printf("wrote %s\n", written.c_str());
  });

  auto* gc = runs->add_subcommand("gc", "Delete artifact files no run refers to");
  gc->callback([=] {
    track::Store store = track::Store::open(*dir, false);
    int64_t files = 0;
    int64_t freed = store.gc(&files);
    std::printf("removed %lld unreferenced artifact file(s), %.1f MB\n", (long long)files, double(freed) / 1e6);
  });

  auto* sync = runs->add_subcommand("sync", "Push runs to another dashboard (only what it has not received)");
  auto so = std::make_shared<track::SyncOptions>();
  sync->add_option("--to", so->to, "dashboard URL, http://host:port")->required();
  sync->add_option("--token", so->token, "the dashboard's --token");
  sync->add_option("--run", so->run, "only this run (default: all local runs)");
  sync->callback([=] {
    so->dir = *dir;
    track::SyncResult r = track::sync_runs(*so);
    std::printf("synced %lld run(s): %lld new row(s) in %lld request(s)\n", (long long)r.runs, (long long)r.rows,
                (long long)r.requests);
  });

  auto* dash = app.add_subcommand("dashboard", "Serve the runs of a tracking directory as a web dashboard");
  auto d = std::make_shared<track::DashboardOptions>();
  dash->add_option("--dir", d->dir, "tracking directory (default: runs)");
  dash->add_option("--host", d->host, "address to bind (default 127.0.0.1; others need --allow-remote and --token)");
  dash->add_option("--port", d->port, "port (default 6006; 0 picks a free one)")->check(CLI::Range(0, 65535));
  dash->add_flag("--allow-remote", d->allow_remote, "allow binding to a non-loopback address");
  dash->add_option("--token", d->token, "require this token (Bearer header, ?token= or cookie); enables sync ingest")
      ->check(non_empty("--token", "none"));
  auto max_body_mb = std::make_shared<double>(256);
  dash->add_option("--max-body-mb", *max_body_mb, "largest request body accepted (sync ingest), MB (default 256)")
      ->check(finite_number("--max-body-mb must be a number of MB in (0, 1e6]", 0, /*min_allowed=*/false, false, 1e6));
  dash->callback([=] {
    d->max_body_bytes = int64_t(*max_body_mb * 1e6);
    std::signal(SIGINT, [](int) { g_stop_dashboard = true; });
    std::signal(SIGTERM, [](int) { g_stop_dashboard = true; });
    track::serve_dashboard(*d, [](const std::string& url) { print("listening on " + url + "\n"); }, &g_stop_dashboard);
  });
}

}  // namespace foundry::cli
