#include "foundry/core/parallel.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>

extern "C" void openblas_set_num_threads(int);

namespace foundry {

int get_num_threads() { return omp_get_max_threads(); }

void set_num_threads(int n) {
  n = std::max(1, n);
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

bool in_parallel_region() { return omp_in_parallel(); }

void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& fn) {
  if (begin >= end) return;
  int64_t n = end - begin;
  grain = std::max<int64_t>(grain, 1);
  int max_threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  int64_t nthreads = std::min<int64_t>(max_threads, (n + grain - 1) / grain);
  if (nthreads <= 1) {
    fn(begin, end);
    return;
  }
  std::exception_ptr error;
  std::mutex error_mu;
#pragma omp parallel num_threads(int(nthreads))
  {
    int64_t tid = omp_get_thread_num();
    int64_t nt = omp_get_num_threads();
    int64_t chunk = (n + nt - 1) / nt;
    int64_t b = begin + tid * chunk;
    int64_t e = std::min(end, b + chunk);
    if (b < e) {
      try {
        fn(b, e);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mu);
        if (!error) error = std::current_exception();
      }
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace foundry
