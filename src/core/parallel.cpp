// The thread pool behind parallel_for. Work is cut into a few chunks per thread, in one group of
// consecutive chunks per thread, and each thread runs its own group from the front: on a quiet
// machine that is a static split, and each thread meets again the rows it ran in the previous
// kernel, still in its cache. A thread done with its group takes chunks from the back of any group
// that has some left, so the threads finish within one chunk of each other (when only an owner that
// was two chunks behind could be robbed, 2-thread decode's caller spent 10% of its time waiting for
// the worker's last chunk: memory-bound products leave the threads unevenly fast). The caller
// is thread 0 and waits only for chunks already claimed, never for a worker to turn up. On a
// machine where another process holds a core, a worker that lost its time slice therefore costs
// little: the running threads take its chunks (OpenMP's fork/join waited for every team member at
// every region, and 2 threads ran slower than 1 beside a busy process). What it still cost there
// (a preempted worker holds the job's end until it runs again; two threads share what one would
// have alone) goes when the other programs' runnable threads leave fewer than 2 cores: jobs then
// run on the caller alone until cores free up (cores_taken). Idle workers spin briefly for the
// next job, as a model's next kernel is usually microseconds away, then sleep on a futex.
#include "foundry/core/parallel.h"
#include "core/parallel_testing.h"
#include "foundry/core/error.h"

#include <omp.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define FOUNDRY_CPU_RELAX() _mm_pause()
#else
#define FOUNDRY_CPU_RELAX() std::this_thread::yield()
#endif

extern "C" void openblas_set_num_threads(int);

namespace foundry {

namespace {

// Chunks per thread by default: enough that the threads that are running can take over a
// descheduled one's share, few enough that a chunk's fixed cost (a GEMM tile's setup, a kernel's
// prologue, a quantized product's activation layout) is noise. (16 for every kernel measured 3-6%
// slower q4_0 decode and Mamba prefill, and 5-8% faster float32 decode: that caller asks for it.)
constexpr int kChunksPerThread = 4;
// A job's chunk numbers fit a 20-bit field of a group's claim word and of the job word (Pool).
constexpr int64_t kMaxChunks = (int64_t(1) << 20) - 1;
// How long an idle worker polls for the next job before sleeping: longer than the serial gap
// between two kernels of a model's step (a bench_infer run slept 40 times in 3314 jobs), shorter
// than a scheduler time slice.
constexpr auto kSpin = std::chrono::microseconds(200);
// How often the caller looks at the machine's load (cores_taken): a read of /proc/loadavg, ~10 us;
// two looks decide, so a prompt's prefill (~100 ms) is mostly run the right way.
constexpr auto kLoadCheck = std::chrono::milliseconds(20);

thread_local bool tls_in_region = false;

// set_pool_adapts_to_load's switch: on unless FOUNDRY_POOL_ADAPT=0.
std::atomic<bool>& adapts_to_load() {
  static std::atomic<bool> on{[] {
    const char* v = std::getenv("FOUNDRY_POOL_ADAPT");
    return !(v && std::string(v) == "0");
  }()};
  return on;
}

// testing::force_pool_alone's switch.
std::atomic<bool>& forced_alone() {
  static std::atomic<bool> on{false};
  return on;
}

class Pool {
 public:
  explicit Pool(int threads) { start(threads); }

  int threads() const { return threads_; }

  void resize(int threads) {
    std::lock_guard<std::mutex> lock(run_mu_);
    if (forked_.exchange(false)) restart_after_fork();
    stop();
    start(threads);
  }

  void run(int64_t begin, int64_t end, int64_t chunk, int64_t nchunks, const RangeFn& fn) {
    std::unique_lock<std::mutex> lock(run_mu_, std::try_to_lock);
    if (!lock.owns_lock() || threads_ <= 1) {
      // Another thread of the program holds the pool (two callers at once): run here, serially.
      run_serial(begin, end, fn);
      return;
    }
    if (forked_.exchange(false)) restart_after_fork();
    if (cores_taken()) {
      // The other programs leave this one a single core: the job's chunks, the same ones the
      // threads would run (so every result is the same bits whatever the load), one after the
      // other on the caller, oneDNN and OpenBLAS inside them on this thread too.
      const int omp_threads = omp_get_max_threads();
      if (omp_threads != 1) omp_set_num_threads(1);
      tls_in_region = true;
      std::exception_ptr error;
      for (int64_t b = begin; b < end && !error; b += chunk) {
        try {
          fn(b, std::min(end, b + chunk));
        } catch (...) {
          error = std::current_exception();
        }
      }
      tls_in_region = false;
      if (omp_threads != 1) omp_set_num_threads(omp_threads);
      if (error) std::rethrow_exception(error);
      return;
    }
    begin_ = begin;
    end_ = end;
    chunk_ = chunk;
    fn_.emplace(fn);
    error_ = nullptr;
    const uint64_t job = next_job();
    const uint32_t word = job_word(job, nchunks);
    // The groups' claim words are set by their first claim in the job (claim()); every
    // kRefreshJobs jobs here, so that no word is left a whole tag cycle behind. (A new pool's
    // words are 0, tag 0, which only jobs that write them all here carry.)
    if (job % kRefreshJobs == 0) {
      for (int g = 0; g < threads_; ++g) groups_[g].claim.store(initial_claim(word, g), std::memory_order_relaxed);
    }
    const int64_t done_at = done_target_ += nchunks;
    // seq_cst with the sleepers_ load: either a worker going to sleep sees this job, or this
    // thread sees it going to sleep and wakes it.
    job_.store(word, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) job_.notify_all();
    // oneDNN and OpenBLAS called from a chunk must stay on this thread (as in the workers): they
    // size their OpenMP teams from this thread's count.
    const int omp_threads = omp_get_max_threads();
    if (omp_threads != 1) omp_set_num_threads(1);
    tls_in_region = true;
    work(word, 0);
    tls_in_region = false;
    if (omp_threads != 1) omp_set_num_threads(omp_threads);
    // Chunks still out are being run by a worker now.
    for (int spins = 0; done_.load(std::memory_order_acquire) < done_at; ++spins) {
      if (spins < 4096) FOUNDRY_CPU_RELAX();
      else std::this_thread::yield();
    }
    // fn_ stays as it is until the next job: a write here would take the job's line back from
    // the idle workers polling it, and the unlock below would wait for that.
    if (error_) std::rethrow_exception(error_);
  }

 private:
  // The job word, what idle workers watch: the job's tag (its number's low 12 bits) << 20 | its
  // chunk count. A worker learns both in the one line it must fetch anyway.
  static constexpr uint64_t kField = uint64_t(kMaxChunks);
  static constexpr uint64_t kTags = 4096;
  static uint32_t job_word(uint64_t job, int64_t nchunks) { return uint32_t(((job % kTags) << 20) | uint64_t(nchunks)); }
  static uint64_t tag_of(uint32_t word) { return word >> 20; }
  static int64_t chunks_of(uint32_t word) { return int64_t(word & kField); }
  // Jobs between the caller's writes of every claim word: a word no claim touched for kTags jobs
  // would carry the current tag with an old job's (empty) range, and its chunks would never run.
  static constexpr uint64_t kRefreshJobs = 1024;
  static_assert(kTags % kRefreshJobs == 0, "the jobs of tag 0 write every word (a new pool's words are tag 0)");

  // A group's unclaimed chunks [front, back) and the tag of the job they belong to, in one word so
  // that a claim meant for another job fails: tag << 40 | front << 20 | back.
  struct alignas(64) Group {
    std::atomic<uint64_t> claim{0};
  };
  static uint64_t pack(uint64_t tag, int64_t front, int64_t back) {
    return (tag << 40) | (uint64_t(front) << 20) | uint64_t(back);
  }
  static int64_t front_of(uint64_t c) { return int64_t((c >> 20) & kField); }
  static int64_t back_of(uint64_t c) { return int64_t(c & kField); }
  // Group g's chunks when the job starts: the g-th of threads_ consecutive runs.
  uint64_t initial_claim(uint32_t word, int g) const {
    const int64_t n = chunks_of(word);
    return pack(tag_of(word), n * g / threads_, n * (g + 1) / threads_);
  }

  // Claims a chunk of group g for the job `word`: its owner from the front, another thread from
  // the back. -1: none to take. The caller does not write the groups' words when it starts a job
  // (that took the worker's line to the caller's core and back at every job); a word still
  // tagged with an earlier job is that group's untouched initial range, provided the job is still
  // the current one: a word's last writer saw the job word it tagged, so a worker that saw this
  // job late finds a later job word here. Nor can the job end while a group it had chunks for
  // holds a word of an earlier job.
  int64_t claim(int g, uint32_t word, bool owner) {
    std::atomic<uint64_t>& w = groups_[g].claim;
    uint64_t c = w.load(std::memory_order_acquire);
    for (;;) {
      uint64_t cur = c;
      if ((c >> 40) != tag_of(word)) {
        if (job_.load(std::memory_order_acquire) != word) return -1;
        cur = initial_claim(word, g);
      }
      const int64_t front = front_of(cur), back = back_of(cur);
      if (front >= back) return -1;
      if (w.compare_exchange_weak(c, owner ? cur + (uint64_t(1) << 20) : cur - 1, std::memory_order_acq_rel))
        return owner ? front : back - 1;
    }
  }

  static void run_serial(int64_t begin, int64_t end, const RangeFn& fn) {
    const bool outer = tls_in_region;
    tls_in_region = true;
    try {
      fn(begin, end);
    } catch (...) {
      tls_in_region = outer;
      throw;
    }
    tls_in_region = outer;
  }

  // Whether other programs' runnable threads leave this process fewer than 2 of the machine's
  // cores, looked at every kLoadCheck (from the caller, under run_mu_): the kernel's count of
  // runnable threads (/proc/loadavg) less this pool's own (the caller, and the workers not asleep).
  // Beside a busy process on 2 cores, 2 threads get 2/3 of a core each, and a worker preempted
  // inside a chunk it claimed holds the job's end for a time slice; the caller alone gets a whole
  // core. A hypervisor's stalls of a vCPU are not runnable threads of this machine, so a quiet
  // run is never sent alone (timing the workers' stalls could not tell the two apart: quiet
  // decode lost 23%). Two looks in a row decide to go alone, one to come back.
  bool cores_taken() {
    if (forced_alone().load(std::memory_order_relaxed)) {
      alone_.store(true, std::memory_order_relaxed);
      return true;
    }
    if (!adapts_to_load().load(std::memory_order_relaxed)) {
      taken_once_ = false;
      alone_.store(false, std::memory_order_relaxed);
      return false;
    }
    const bool alone = alone_.load(std::memory_order_relaxed);
    const auto now = std::chrono::steady_clock::now();
    if (now < next_load_check_) return alone;
    next_load_check_ = now + kLoadCheck;
    const int runnable = runnable_threads();
    if (runnable < 0) return alone;
    const int mine = 1 + std::max(0, threads_ - 1 - sleepers_.load(std::memory_order_relaxed));
    const bool short_of_cores = cores_ - std::max(0, runnable - mine) < 2;
    const bool now_alone = short_of_cores && (alone || taken_once_);
    taken_once_ = short_of_cores;
    alone_.store(now_alone, std::memory_order_relaxed);
    return now_alone;
  }

  // Runnable threads on the machine now (the 4th field of /proc/loadavg, "running/total"), or -1.
  static int runnable_threads() {
    FILE* f = std::fopen("/proc/loadavg", "re");
    if (!f) return -1;
    double a, b, c;
    int running = -1, total;
    if (std::fscanf(f, "%lf %lf %lf %d/%d", &a, &b, &c, &running, &total) != 5) running = -1;
    std::fclose(f);
    return running;
  }

  // Runs chunks of job `job`: group `me` first, then what may be taken from the others. The job's
  // fields are read only after a claim succeeds: the caller does not return (and the next job
  // does not overwrite them) before every claimed chunk is counted done.
  // The chunks a thread ran are counted once, when it finds none left to claim: a count per
  // chunk moved the counter's line between the cores at every chunk.
  void work(uint32_t word, int me) {
    int64_t ran = 0;
    for (int i = 0; i < threads_; ++i) {
      for (int64_t k; (k = claim((me + i) % threads_, word, i == 0)) >= 0; ++ran) {
        const int64_t b = begin_ + k * chunk_, e = std::min(end_, b + chunk_);
        try {
          (*fn_)(b, e);
        } catch (...) {
          std::lock_guard<std::mutex> lock(error_mu_);
          if (!error_) error_ = std::current_exception();
        }
      }
    }
    if (ran) done_.fetch_add(ran, std::memory_order_release);
  }

  // `seen` is the job number when the worker was created: a worker whose thread starts late
  // still runs the first job published after that (reading job_ here would skip it).
  void worker(int me, uint32_t seen) {
    omp_set_num_threads(1);  // BLAS or oneDNN called from a chunk stays on this thread
    tls_in_region = true;
    while (!stopping_.load()) {
      uint32_t job = job_.load(std::memory_order_acquire);  // the job word
      const auto until = std::chrono::steady_clock::now() + kSpin;
      for (int spins = 1; job == seen && !stopping_.load(); ++spins) {
        FOUNDRY_CPU_RELAX();
        if (spins % 64 == 0 && std::chrono::steady_clock::now() > until) {
          sleepers_.fetch_add(1, std::memory_order_seq_cst);
          job_.wait(seen, std::memory_order_seq_cst);  // returns at once if a job came meanwhile
          sleepers_.fetch_sub(1, std::memory_order_seq_cst);
        }
        job = job_.load(std::memory_order_acquire);
      }
      if (stopping_.load()) return;
      seen = job;
      work(job, me);
    }
  }

  void start(int threads) {
    // Far past any machine's cores; tens of thousands of threads exhausted the process table
    // before the system refused one.
    constexpr int kMaxThreads = 1024;
    if (threads > kMaxThreads) {
      run_alone_after_failed_start();
      raise<Error>("thread pool: {} threads asked for, at most {} (--threads, OMP_NUM_THREADS)", threads, kMaxThreads);
    }
    threads_ = std::max(1, threads);
    cores_ = std::max(1, int(std::thread::hardware_concurrency()));
    taken_once_ = false;
    alone_.store(false);
    groups_ = std::make_unique<Group[]>(size_t(threads_));
    stopping_ = false;
    const uint32_t seen = job_.load(std::memory_order_acquire);
    for (int i = 1; i < threads_; ++i) {
      try {
        workers_.emplace_back([this, i, seen] { worker(i, seen); });
      } catch (const std::system_error& e) {
        // Out of threads (ulimit -u, memory): join those started and stay usable with one.
        const int wanted = threads_;
        stop();
        run_alone_after_failed_start();
        raise<Error>("thread pool: the system refused thread {} of the {} asked for ({}); ask for fewer threads "
                     "(--threads, OMP_NUM_THREADS)", i + 1, wanted, e.what());
      }
    }
  }

  // The pool as one thread (the caller) with no workers: what a start that raised leaves.
  void run_alone_after_failed_start() {
    threads_ = 1;
    groups_ = std::make_unique<Group[]>(1);
  }

  // A fork()ed child has none of the parent's workers (a job still completes: the caller claims
  // every chunk itself). The next job starts new ones; the old handles are never joined.
  void restart_after_fork() {
    orphans_.push_back(std::move(workers_));  // kept, never joined: their threads are not here
    workers_.clear();
    start(threads_);
  }

  void stop() {
    stopping_ = true;
    job_.store(job_word(next_job(), 0), std::memory_order_seq_cst);  // a word the next workers start from
    job_.notify_all();
    for (auto& t : workers_) t.join();
    workers_.clear();
  }

  // Cache lines by who writes them and when: what a worker needs to start a job (its number, the
  // job's fields, the stop flag, and the sleepers count the caller reads right after publishing)
  // is one line, written by the caller before it publishes and read by workers after; the count
  // of chunks done, which workers write, is another; the run lock, which only callers touch, a
  // third. Idle workers poll the first line, so a caller's lock or count traffic on it would pull
  // it away from them (the run lock's unlock was ~1% of a 2-thread q4_0 decode step), and each
  // line a job's start reads from the caller is one more transfer between the cores.
  int threads_ = 1;
  std::vector<std::thread> workers_;
  std::vector<std::vector<std::thread>> orphans_;
  std::unique_ptr<Group[]> groups_;
  alignas(64) std::mutex run_mu_;  // one job at a time
  // Jobs started: written under run_mu_ (a plain load and store, no locked instruction), read
  // by testing::pool_jobs from the thread that ran them.
  std::atomic<uint64_t> jobs_{0};
  uint64_t next_job() {
    const uint64_t job = jobs_.load(std::memory_order_relaxed) + 1;
    jobs_.store(job, std::memory_order_relaxed);
    return job;
  }
  int64_t done_target_ = 0;        // done_ when the jobs started so far have all ended (under run_mu_)
  // cores_taken()'s state (under run_mu_): the machine's cores, whether to run jobs on the caller
  // alone, whether the last look found the cores taken, and when to look next.
  int cores_ = 1;
  bool taken_once_ = false;

 public:
  // Read by threads_in_use() from any thread; written under run_mu_.
  std::atomic<bool> alone_{false};
  uint64_t jobs_published() const { return jobs_.load(std::memory_order_relaxed); }

 private:
  std::chrono::steady_clock::time_point next_load_check_{};
  std::exception_ptr error_;
  alignas(64) std::atomic<uint32_t> job_{0};  // the latest job's word (job_word): what idle workers watch
  std::atomic<bool> stopping_{false};
  std::atomic<int> sleepers_{0};
  int64_t begin_ = 0, end_ = 0, chunk_ = 1;  // the job: written before job_ is published
  // A copy (two pointers) rather than a pointer to the caller's: one line fewer for a worker to
  // fetch from the caller's core before its first chunk.
  std::optional<RangeFn> fn_;
  alignas(64) std::atomic<int64_t> done_{0};  // chunks finished since the pool started, counted by whoever ran them
  alignas(64) std::mutex error_mu_;

 public:
  std::atomic<bool> forked_{false};
};

int default_threads() {
  // OMP_NUM_THREADS when set, else the cores this process may run on (OpenMP counts them so).
  return std::max(1, omp_get_max_threads());
}

// Never destroyed: workers may still be asleep in it when the program exits.
Pool& pool() {
  static Pool* p = [] {
    Pool* created = nullptr;
    try {
      created = new Pool(default_threads());
    } catch (const Error& e) {  // OMP_NUM_THREADS asked for more threads than the system gives
      std::fprintf(stderr, "[foundry] %s: running on 1 thread\n", e.what());
      created = new Pool(1);
    }
    pthread_atfork(nullptr, nullptr, [] { pool().forked_ = true; });
    return created;
  }();
  return *p;
}

}  // namespace

int get_num_threads() { return pool().threads(); }

void set_num_threads(int n) {
  n = std::max(1, n);
  if (n != pool().threads()) pool().resize(n);
  omp_set_num_threads(n);  // convolutions (oneDNN) and OpenBLAS keep their own OpenMP threads
  openblas_set_num_threads(n);
}

bool in_parallel_region() { return tls_in_region || omp_in_parallel(); }

void set_pool_adapts_to_load(bool on) { adapts_to_load().store(on); }

namespace testing {
void force_pool_alone(bool on) {
  forced_alone().store(on);
  pool().alone_.store(on, std::memory_order_relaxed);
}
uint64_t pool_jobs() { return pool().jobs_published(); }
}  // namespace testing

int threads_in_use() {
  if (in_parallel_region()) return 1;
  Pool& p = pool();
  return p.alone_.load(std::memory_order_relaxed) ? 1 : p.threads();
}

void parallel_for(int64_t begin, int64_t end, int64_t grain, RangeFn fn) {
  parallel_for(begin, end, grain, kChunksPerThread, fn);
}

void parallel_for(int64_t begin, int64_t end, int64_t grain, int chunks_per_thread, RangeFn fn) {
  if (begin >= end) return;
  const int64_t n = end - begin;
  grain = std::max<int64_t>(grain, 1);
  const int threads = in_parallel_region() ? 1 : pool().threads();
  // ceil(n / grain) chunks at most: none shorter than half the grain.
  const int64_t nchunks = std::min<int64_t>({(n + grain - 1) / grain, int64_t(threads) * std::max(1, chunks_per_thread), kMaxChunks});
  if (threads <= 1 || nchunks <= 1) {
    fn(begin, end);
    return;
  }
  const int64_t chunk = (n + nchunks - 1) / nchunks;
  pool().run(begin, end, chunk, (n + chunk - 1) / chunk, fn);
}

}  // namespace foundry
