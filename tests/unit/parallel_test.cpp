// The thread pool behind parallel_for (src/core/parallel.cpp): every index exactly once, no chunk
// shorter than half the grain, exceptions carried to the caller, nested and concurrent callers,
// resizing, and a fork()ed child.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <string>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/parallel_testing.h"
#include "foundry/core/error.h"
#include "foundry/core/parallel.h"

using namespace foundry;

namespace {

// A pool of n threads that uses them whatever else runs on the machine (ctest runs two test
// programs at once; the tests below count the threads that took part).
struct ThreadsScope {
  foundry::testing::ThreadCountScope threads;
  explicit ThreadsScope(int n, bool adapts_to_load = false) : threads(n) { set_pool_adapts_to_load(adapts_to_load); }
  ~ThreadsScope() { set_pool_adapts_to_load(true); }
};

// Checks that each index of [begin, end) is visited once, and that no chunk but the last is
// shorter than half the grain.
void expect_each_index_once(int64_t begin, int64_t end, int64_t grain) {
  std::vector<std::atomic<int>> seen(size_t(end - begin));
  std::atomic<int64_t> smallest{end - begin};
  parallel_for(begin, end, grain, [&](int64_t b, int64_t e) {
    ASSERT_LE(begin, b);
    ASSERT_LT(b, e);
    ASSERT_LE(e, end);
    for (int64_t i = b; i < e; ++i) seen[size_t(i - begin)]++;
    if (e != end) {
      int64_t cur = smallest.load();
      while (e - b < cur && !smallest.compare_exchange_weak(cur, e - b)) {
      }
    }
  });
  for (size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i].load(), 1) << "index " << begin + int64_t(i);
  EXPECT_GE(smallest.load(), std::min(grain, end - begin) / 2) << "grain " << grain;
}

}  // namespace

TEST(ThreadPool, EveryIndexOnceAtAnyThreadCountAndGrain) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadsScope scope(threads);
    EXPECT_EQ(get_num_threads(), threads);
    for (int64_t n : {1, 2, 7, 100, 4097, 1 << 20})
      for (int64_t grain : {int64_t(1), int64_t(3), int64_t(1000), kGrainSize}) expect_each_index_once(-5, n - 5, grain);
  }
}

TEST(ThreadPool, ManySmallJobsInARow) {
  // Decode runs thousands of short kernels a second: the job hand-over must not lose one.
  ThreadsScope scope(4);
  std::atomic<int64_t> total{0};
  for (int job = 0; job < 20000; ++job)
    parallel_for(0, 64, 1, [&](int64_t b, int64_t e) { total += e - b; });
  EXPECT_EQ(total.load(), 20000 * 64);
}

TEST(ThreadPool, GroupsIdleForThousandsOfJobsStillRunTheirChunks) {
  // A group's claim word is set by the job's first claim on it; jobs of 2 chunks on 4 threads give
  // groups 0 and 2 none, so their words go untouched while the job tag (12 bits) wraps around. A
  // job of every group after 4094-4098 such jobs (one of them lands on a whole tag cycle) must still
  // run each index once, not find an old job's spent range under its own tag and wait forever.
  ThreadsScope scope(4);
  for (int idle_jobs = 4094; idle_jobs <= 4098; ++idle_jobs) {
    std::atomic<int64_t> small{0};
    for (int job = 0; job < idle_jobs; ++job) parallel_for(0, 2, 1, 1, [&](int64_t b, int64_t e) { small += e - b; });
    ASSERT_EQ(small.load(), 2 * idle_jobs);
    expect_each_index_once(0, 64, 1);
  }
}

// The threads that ran chunks of jobs of 8 chunks of 5 ms each, after workers went to sleep.
size_t threads_taking_part(int rounds) {
  std::mutex mu;
  std::set<std::thread::id> ids;
  for (int round = 0; round < rounds; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // past the spin: workers sleep
    parallel_for(0, 8, 1, [&](int64_t, int64_t) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      std::lock_guard<std::mutex> lock(mu);
      ids.insert(std::this_thread::get_id());
    });
  }
  return ids.size();
}

TEST(ThreadPool, WorkersWakeAfterSleeping) {
  ThreadsScope scope(2);
  EXPECT_EQ(threads_taking_part(3), 2u) << "a sleeping worker never took a chunk";
}

TEST(ThreadPool, ResizedPoolsUseTheirWorkers) {
  ThreadsScope scope(3);
  EXPECT_EQ(threads_taking_part(3), 3u);
  set_num_threads(2);
  EXPECT_EQ(threads_taking_part(3), 2u);
  set_num_threads(4);
  EXPECT_EQ(threads_taking_part(3), 4u);
}

TEST(ThreadPool, EveryWorkerOfAResizedPoolTakesTheFirstJob) {
  // The first job after a resize has one chunk per thread, and each chunk waits until all have
  // started: a worker whose thread began after the job was published must still take its chunk
  // (CI's sanitizer build, where threads start slowly, hung on one that did not).
  ThreadsScope scope(2);
  const int saved = get_num_threads();
  for (int round = 0; round < 40; ++round) {
    const int threads = 2 + round % 3;
    set_num_threads(threads);
    std::atomic<int> arrived{0};
    std::atomic<bool> all_met{true};
    parallel_for(0, threads, 1, [&](int64_t, int64_t) {
      ++arrived;
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (arrived.load() < threads)
        if (std::chrono::steady_clock::now() > give_up) {
          all_met = false;
          return;
        }
    });
    ASSERT_TRUE(all_met.load()) << "round " << round << ": a worker of a " << threads << "-thread pool missed its first job";
  }
  set_num_threads(saved);
}

TEST(ThreadPool, ExceptionReachesTheCallerAndThePoolGoesOn) {
  ThreadsScope scope(2);
  EXPECT_THROW(parallel_for(0, 1000, 1,
                            [](int64_t b, int64_t) {
                              if (b >= 500) throw std::runtime_error("chunk failed");
                            }),
               std::runtime_error);
  expect_each_index_once(0, 1000, 1);
}

TEST(ThreadPool, NestedCallsRunInsideTheChunk) {
  ThreadsScope scope(2);
  std::atomic<int64_t> total{0};
  parallel_for(0, 8, 1, [&](int64_t b, int64_t e) {
    EXPECT_TRUE(in_parallel_region());
    for (int64_t i = b; i < e; ++i) {
      const auto me = std::this_thread::get_id();
      parallel_for(0, 100, 1, [&](int64_t b2, int64_t e2) {
        EXPECT_EQ(std::this_thread::get_id(), me);
        total += e2 - b2;
      });
    }
  });
  EXPECT_FALSE(in_parallel_region());
  EXPECT_EQ(total.load(), 800);
}

TEST(ThreadPool, TwoCallingThreadsAtOnce) {
  ThreadsScope scope(2);
  std::atomic<int64_t> total{0};
  auto caller = [&] {
    for (int job = 0; job < 2000; ++job) parallel_for(0, 1000, 10, [&](int64_t b, int64_t e) { total += e - b; });
  };
  std::thread a(caller), b(caller);
  a.join();
  b.join();
  EXPECT_EQ(total.load(), 2 * 2000 * 1000);
}

TEST(ThreadPool, ASecondCallerDoesNotWaitForABusyPool) {
  // While one thread's job holds every worker (its chunks wait for `release`), another thread's
  // job runs at once on that thread.
  ThreadsScope scope(2);
  std::atomic<bool> release{false};
  std::atomic<int> started{0};
  std::thread holder([&] {
    parallel_for(0, 2, 1, [&](int64_t, int64_t) {
      ++started;
      while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
  });
  // Both chunks start: the worker, however late its thread began, takes the job published
  // after it was created. A bounded wait, so that a worker that missed it fails the test.
  for (int ms = 0; ms < 10000 && started.load() < 2; ++ms) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (started.load() < 2) {
    release = true;
    holder.join();
    FAIL() << "the pool's worker never ran the holder's second chunk";
  }
  // A pool that made this caller wait would be freed only by this timer, after 5 s.
  std::thread timer([&] {
    for (int ms = 0; ms < 5000 && !release.load(); ++ms) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    release = true;
  });
  const auto t0 = std::chrono::steady_clock::now();
  std::atomic<int64_t> total{0};
  parallel_for(0, 1 << 16, 1, [&](int64_t b, int64_t e) { total += e - b; });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  release = true;
  timer.join();
  holder.join();
  EXPECT_EQ(total.load(), 1 << 16);
  EXPECT_LT(seconds, 4.0);  // not a speed goal: waiting for the holder's job would take 5 s
}

TEST(ThreadPool, ForkedChildRunsJobs) {
  ThreadsScope scope(2);
  expect_each_index_once(0, 1000, 1);  // workers exist in the parent
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::atomic<int64_t> total{0};
    parallel_for(0, 100000, 1, [&](int64_t b, int64_t e) { total += e - b; });
    set_num_threads(3);
    parallel_for(0, 100000, 1, [&](int64_t b, int64_t e) { total += e - b; });
    _exit(total.load() == 200000 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

// Too many threads, or threads the system refuses, give an error naming the count; the pool stays
// usable at one thread and can be resized again (OMP_NUM_THREADS=100000 ended in `terminate`).
TEST(ThreadPool, ThreadsTheSystemRefusesAreAnErrorAndThePoolStaysUsable) {
  foundry::testing::ThreadCountScope restore;
  auto total_of_a_job = [] {
    std::atomic<int64_t> total{0};
    parallel_for(0, 100000, 1, [&](int64_t b, int64_t e) { total += e - b; });
    return total.load();
  };
  try {
    set_num_threads(5000);
    FAIL() << "5000 threads were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("5000 threads asked for, at most 1024"), std::string::npos) << e.what();
  }
  EXPECT_EQ(get_num_threads(), 1);
  EXPECT_EQ(total_of_a_job(), 100000);
  set_num_threads(2);
  EXPECT_EQ(total_of_a_job(), 100000);
  // A child whose address space leaves no room for another thread's stack.
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    rlimit as{};
    getrlimit(RLIMIT_AS, &as);
    size_t vm_kb = 0;
    if (FILE* f = std::fopen("/proc/self/statm", "r")) {
      size_t pages = 0;
      if (std::fscanf(f, "%zu", &pages) == 1) vm_kb = pages * size_t(sysconf(_SC_PAGESIZE)) / 1024;
      std::fclose(f);
    }
    as.rlim_cur = rlim_t(vm_kb + 64 * 1024) * 1024;  // 64 MB more: a few 8 MB stacks
    if (setrlimit(RLIMIT_AS, &as) != 0) _exit(3);
    bool refused = false;
    try {
      set_num_threads(64);
    } catch (const Error& e) {
      refused = std::string(e.what()).find("the system refused thread") != std::string::npos;
    }
    _exit(!refused ? 1 : get_num_threads() == 1 && total_of_a_job() == 100000 ? 0 : 2);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

// Beside programs that keep every core but one busy, jobs run on the caller alone (every chunk,
// the same chunks as with the workers), as with one thread; once they stop, the workers take part
// again.
TEST(ThreadPool, RunsOnTheCallerAloneWhileOtherProgramsHoldTheCores) {
  if (std::FILE* f = std::fopen("/proc/loadavg", "r")) std::fclose(f);
  else GTEST_SKIP() << "no /proc/loadavg here: the pool never goes alone";
  ThreadsScope scope(2, true);
  const int cores = std::max(1, int(std::thread::hardware_concurrency()));
  std::vector<pid_t> busy;
  for (int i = 0; i + 1 < cores; ++i) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0)
      for (volatile uint64_t spin = 0;; spin = spin + 1) {
      }
    busy.push_back(pid);
  }
  // The threads that ran a job of 8 chunks of 1 ms, and the chunks' count.
  const auto job = [] {
    std::mutex mu;
    std::set<std::thread::id> ids;
    int chunks = 0;
    parallel_for(0, 8, 1, [&](int64_t b, int64_t e) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      std::lock_guard<std::mutex> lock(mu);
      ids.insert(std::this_thread::get_id());
      chunks += int(e - b);
    });
    return std::make_pair(ids, chunks);
  };
  bool alone = false;
  for (auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5); !alone && std::chrono::steady_clock::now() < give_up;) {
    job();
    alone = threads_in_use() == 1;
  }
  const auto [ids, chunks] = job();
  for (pid_t pid : busy) kill(pid, SIGKILL);
  for (pid_t pid : busy) waitpid(pid, nullptr, 0);
  ASSERT_TRUE(alone) << "the pool never ran alone beside " << cores - 1 << " busy processes on " << cores << " cores";
  EXPECT_EQ(chunks, 8);
  EXPECT_EQ(ids.size(), 1u);
  EXPECT_EQ(*ids.begin(), std::this_thread::get_id());
  EXPECT_EQ(get_num_threads(), 2);  // the pool keeps its size
  if (cores < 2) return;
  bool shared = false;
  for (auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5); !shared && std::chrono::steady_clock::now() < give_up;)
    shared = job().first.size() == 2 && threads_in_use() == 2;
  if (!shared) {  // other test programs may hold the cores now; only a quiet machine must share
    int running = -1, total = 0;
    double a, b, c;
    if (std::FILE* f = std::fopen("/proc/loadavg", "r")) {
      if (std::fscanf(f, "%lf %lf %lf %d/%d", &a, &b, &c, &running, &total) != 5) running = -1;
      std::fclose(f);
    }
    EXPECT_GE(running, cores) << "the workers never took part again on a quiet machine";
  }
}
