// bench/track_log: what logging costs the training thread. foundry::track's Run::log (queued; a
// background writer commits to SQLite and the TensorBoard file every second) beside, in the same
// run, the two ways a training loop logs without a tracker: appending a JSON line and flushing it
// (foundry train's metrics.jsonl) and a synchronous SQLite INSERT + COMMIT per step (a store without
// a background writer). No wandb/TensorBoard Python package is installed here to time instead.
// Prints microseconds per call (best of --reps rounds of --calls calls) and the ratios.
#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "../bench_main.h"
#include "foundry/track/track.h"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

template <class F>
double best_us_per_call(int reps, int calls, F&& body) {
  double best = 1e300;
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    for (int i = 0; i < calls; ++i) body(r * calls + i);
    best = std::min(best, std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / calls);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const char* usage =
      "Usage: bench_track_log [--calls N] [--reps R] [--dir DIR]\n"
      "Microseconds per logged step: foundry::track Run::log vs JSONL+flush and SQLite INSERT+COMMIT.\n"
      "--dir: where the bench makes (and at its end removes) a scratch folder of its own (default: the\n"
      "system's temporary folder); nothing already there is touched.\n";
  return foundry::bench::guarded_main(argc, argv, usage, [&] {
    int calls = 20000, reps = 5;
    fs::path parent = fs::temp_directory_path();
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      if (a == "--calls") calls = int(foundry::bench::integer_option(argc, argv, i, 1));
      else if (a == "--reps") reps = int(foundry::bench::integer_option(argc, argv, i, 1));
      else if (a == "--dir") parent = foundry::bench::option_value(argc, argv, i);
      else foundry::bench::unknown_option(a);
    }
    if (calls < 1 || reps < 1) throw std::invalid_argument("--calls and --reps must be positive");
    fs::create_directories(parent);
    // A folder of its own, new: --dir once named the folder itself, which was removed whole.
    const std::string dir = parent / ("foundry_bench_track_" + std::to_string(::getpid()));
    if (!fs::create_directory(dir)) throw std::runtime_error("'" + dir + "' exists already; not touching it");

    foundry::track::InitOptions o;
    o.dir = dir + "/track";
    o.system_interval = 0;
    auto run = foundry::track::init(o);
    double one = best_us_per_call(reps, calls, [&](int i) { run->log({{"loss", 1.0 / (i + 1)}}, i); });
    double four = best_us_per_call(reps, calls, [&](int i) {
      run->log({{"loss", 1.0 / (i + 1)}, {"lr", 3e-4}, {"grad_norm", 0.5}, {"tokens_per_sec", 1e5}}, reps * calls + i);
    });
    auto t0 = Clock::now();
    run->finish();
    double drain_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();

    std::FILE* f = std::fopen((dir + "/metrics.jsonl").c_str(), "a");
    char line[256];
    double jsonl = best_us_per_call(reps, calls, [&](int i) {
      int n = std::snprintf(line, sizeof line, "{\"step\": %d, \"loss\": %.17g, \"lr\": 0.0003, \"grad_norm\": 0.5, "
                                              "\"tokens_per_sec\": 100000}\n", i, 1.0 / (i + 1));
      std::fwrite(line, 1, size_t(n), f);
      std::fflush(f);
    });
    std::fclose(f);

    sqlite3* db = nullptr;
    sqlite3_open((dir + "/sync.db").c_str(), &db);
    sqlite3_exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; CREATE TABLE s(k TEXT, step INT, v REAL)",
                 nullptr, nullptr, nullptr);
    sqlite3_stmt* st = nullptr;
    sqlite3_prepare_v2(db, "INSERT INTO s VALUES ('loss', ?, ?)", -1, &st, nullptr);
    int sql_calls = std::max(1, calls / 10);  // slower: fewer calls
    double sync_sql = best_us_per_call(reps, sql_calls, [&](int i) {
      sqlite3_exec(db, "BEGIN", nullptr, nullptr, nullptr);
      for (int k = 0; k < 4; ++k) {
        sqlite3_bind_int(st, 1, i);
        sqlite3_bind_double(st, 2, 1.0 / (i + 1));
        sqlite3_step(st);
        sqlite3_reset(st);
      }
      sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr);
    });
    sqlite3_finalize(st);
    sqlite3_close(db);
    fs::remove_all(dir);

    std::printf("| what the training thread does per step | us per call | vs foundry::track (4 keys) |\n");
    std::printf("|---|---|---|\n");
    std::printf("| foundry::track Run::log, 1 key | %.2f | |\n", one);
    std::printf("| foundry::track Run::log, 4 keys | %.2f | 1.00x |\n", four);
    std::printf("| JSON line + fflush (4 keys) | %.2f | %.2fx |\n", jsonl, jsonl / four);
    std::printf("| SQLite INSERT x4 + COMMIT, WAL, synchronous=NORMAL | %.2f | %.2fx |\n", sync_sql, sync_sql / four);
    std::printf("\nwriter drained %d queued points at finish() in %.1f ms; %d calls per round, best of %d rounds\n",
                reps * calls * 5, drain_ms, calls, reps);
    return 0;
  });
}
