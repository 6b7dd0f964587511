// GEMM dispatch: picks a backend per dtype and shape (see gemm.h and docs/decisions.md).
#include "kernels/cpu/gemm.h"

#include <omp.h>

#include <dnnl.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <list>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "foundry/autograd/grad_mode.h"
#include "foundry/core/parallel.h"
#include "foundry/ops/ops.h"
#include "kernels/cpu/dtype_dispatch.h"
#include "kernels/cpu/unary.h"

// OpenBLAS (Fortran BLAS interface, LP64).
extern "C" {
void sgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k, const float* alpha,
            const float* a, const int* lda, const float* b, const int* ldb, const float* beta, float* c, const int* ldc,
            size_t, size_t);
void dgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k, const double* alpha,
            const double* a, const int* lda, const double* b, const int* ldb, const double* beta, double* c,
            const int* ldc, size_t, size_t);
}

namespace foundry::kernels {

namespace {

// ---- policy --------------------------------------------------------------------------------

GemmPolicy initial_policy() {
  const char* env = std::getenv("FOUNDRY_GEMM");
  if (!env) return GemmPolicy::Auto;
  std::string v(env);
  if (v == "openblas") return GemmPolicy::OpenBlas;
  if (v == "loop") return GemmPolicy::Loop;
  if (v == "onednn") return GemmPolicy::OneDnn;
  return GemmPolicy::Auto;
}
GemmPolicy g_policy = initial_policy();

// Measured on the reference machine (docs/decisions.md, "GEMM backend per shape"): OpenBLAS's
// small-matrix kernels cost ~0.2 us per call where a oneDNN primitive costs ~3 us, so float32
// products below this many multiply-adds go to OpenBLAS; above it oneDNN's brgemm is faster.
constexpr int64_t kDnnlMinMacs = 112 * 112 * 112;
// bfloat16 products below this many multiply-adds run in the plain loop (no BLAS has bf16).
constexpr int64_t kSmallMacs = 24 * 24 * 24;

// ---- operand layout ------------------------------------------------------------------------

// One operand of a batched product as the backends see it: [batch, rows, cols] with element
// strides; `row_major` says which inner stride is 1, `ld` is the other one (BLAS leading dim).
struct Mat {
  const char* ptr = nullptr;
  int64_t batch = 1, rows = 0, cols = 0;
  int64_t bs = 0, rs = 0, cs = 0;
  bool row_major = true;
  int64_t ld = 0;
};

// Whether [rows, cols] with strides (rs, cs) is a BLAS matrix (one unit stride, a leading
// dimension at least the other extent); fills row_major/ld.
bool blas_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs, bool& row_major, int64_t& ld) {
  if ((cs == 1 || cols <= 1) && (rs >= std::max<int64_t>(cols, 1) || rows <= 1)) {
    row_major = true;
    ld = rows <= 1 ? std::max<int64_t>(cols, 1) : rs;
    return true;
  }
  if ((rs == 1 || rows <= 1) && (cs >= std::max<int64_t>(rows, 1) || cols <= 1)) {
    row_major = false;
    ld = cols <= 1 ? std::max<int64_t>(rows, 1) : cs;
    return true;
  }
  return false;
}

// Describes t ([batch, rows, cols]); copies it to contiguous memory when its layout is not one a
// BLAS call can read (holder keeps the copy alive). A batch stride of 0 broadcasts.
Mat describe(const Tensor& t, Tensor& holder) {
  Mat m;
  m.batch = t.size(0);
  m.rows = t.size(1);
  m.cols = t.size(2);
  Tensor src = t;
  bool ok = blas_layout(m.rows, m.cols, t.stride(1), t.stride(2), m.row_major, m.ld) && t.stride(0) >= 0;
  if (!ok) {
    autograd::NoGradGuard ng;
    holder = t.contiguous();
    src = holder;
    blas_layout(m.rows, m.cols, src.stride(1), src.stride(2), m.row_major, m.ld);
  }
  m.ptr = static_cast<const char*>(src.data_ptr());
  if (src.stride(0) == 0) m.batch = 1;  // one matrix broadcast over the batch
  m.bs = m.batch > 1 ? src.stride(0) : 0;
  m.rs = m.row_major ? m.ld : 1;
  m.cs = m.row_major ? 1 : m.ld;
  return m;
}

template <typename T>
const T* mat_at(const Mat& m, int64_t b) {
  return reinterpret_cast<const T*>(m.ptr) + b * m.bs;
}

// ---- the plain loop (integers, tiny products, fallbacks) -----------------------------------

template <typename T>
using acc_t = std::conditional_t<std::is_integral_v<T>, int64_t, std::conditional_t<std::is_same_v<T, double>, double, float>>;

template <typename T>
acc_t<T> load_acc(T v) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) return float(v);
  else return acc_t<T>(v);
}

template <typename T>
T from_acc(acc_t<T> v) {
  if constexpr (std::is_integral_v<T>) return T(uint64_t(v));  // wraps like the narrow type would
  else return T(v);
}

// c = alpha * a @ b + beta * c + bias. B is read row by row (packed to row-major per batch when
// it is column-major) so the inner loop runs over contiguous n.
template <typename T>
void gemm_loop(const Mat& A, const Mat& B, T* C, int64_t batch, int64_t M, int64_t N, int64_t K, double alpha_d,
               double beta_d, const T* bias, int64_t bias_stride) {
  using Acc = acc_t<T>;
  const Acc alpha = std::is_integral_v<T> ? Acc(std::llround(alpha_d)) : Acc(alpha_d);
  const Acc beta = std::is_integral_v<T> ? Acc(std::llround(beta_d)) : Acc(beta_d);
  const bool use_beta = beta_d != 0.0;
  // Pack each distinct B into row-major [K, N] Acc values once.
  const int64_t nb = B.batch;
  std::vector<Acc> Bp(size_t(nb * K * N));
  parallel_for(0, nb, std::max<int64_t>(1, 65536 / std::max<int64_t>(K * N, 1)), [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const T* bp = mat_at<T>(B, b);
      Acc* dst = Bp.data() + b * K * N;
      for (int64_t k = 0; k < K; ++k)
        for (int64_t n = 0; n < N; ++n) dst[k * N + n] = load_acc(bp[k * B.rs + n * B.cs]);
    }
  });
  // Rows in blocks of kRows share each row of B while it is in L1.
  constexpr int64_t kRows = 8;
  const int64_t blocks_per_batch = (M + kRows - 1) / kRows;
  const int64_t nblocks = batch * blocks_per_batch;
  int64_t grain = std::max<int64_t>(1, 65536 / std::max<int64_t>(kRows * N * std::max<int64_t>(K, 1), 1));
  parallel_for(0, nblocks, grain, [&](int64_t q0, int64_t q1) {
    std::vector<Acc> acc(size_t(kRows * N));
    for (int64_t q = q0; q < q1; ++q) {
      const int64_t b = q / blocks_per_batch, m0 = (q % blocks_per_batch) * kRows;
      const int64_t rows = std::min(kRows, M - m0);
      const T* ap = mat_at<T>(A, A.batch > 1 ? b : 0) + m0 * A.rs;
      const Acc* bp = Bp.data() + (nb > 1 ? b : 0) * K * N;
      std::fill(acc.begin(), acc.end(), Acc(0));
      for (int64_t k = 0; k < K; ++k) {
        const Acc* brow = bp + k * N;
        for (int64_t i = 0; i < rows; ++i) {
          const Acc av = load_acc(ap[i * A.rs + k * A.cs]);
          Acc* arow = acc.data() + i * N;
          for (int64_t n = 0; n < N; ++n) arow[n] += av * brow[n];
        }
      }
      for (int64_t i = 0; i < rows; ++i) {
        T* cp = C + (b * M + m0 + i) * N;
        const Acc* arow = acc.data() + i * N;
        for (int64_t n = 0; n < N; ++n) {
          Acc v = alpha * arow[n];
          if (use_beta) v += beta * load_acc(cp[n]);
          if (bias) v += load_acc(bias[n * bias_stride]);
          cp[n] = from_acc<T>(v);
        }
      }
    }
  });
}

// ---- OpenBLAS ------------------------------------------------------------------------------

bool fits_int(int64_t v) { return v <= std::numeric_limits<int>::max(); }

// c (row-major [M, N], ldc = N) = alpha * a @ b + beta * c, via column-major BLAS:
// C^T = B^T A^T, so B goes first.
template <typename T>
void blas_call(const Mat& A, const Mat& B, T* C, int64_t b, int64_t M, int64_t N, int64_t K, T alpha, T beta) {
  const char tb = B.row_major ? 'N' : 'T', ta = A.row_major ? 'N' : 'T';
  const int m = int(N), n = int(M), k = int(K);
  const int ldb = int(std::max<int64_t>(B.ld, 1)), lda = int(std::max<int64_t>(A.ld, 1)), ldc = int(std::max<int64_t>(N, 1));
  const T* bp = mat_at<T>(B, B.batch > 1 ? b : 0);
  const T* ap = mat_at<T>(A, A.batch > 1 ? b : 0);
  T* cp = C + b * M * N;
  if constexpr (std::is_same_v<T, double>) dgemm_(&tb, &ta, &m, &n, &k, &alpha, bp, &ldb, ap, &lda, &beta, cp, &ldc, 1, 1);
  else sgemm_(&tb, &ta, &m, &n, &k, &alpha, bp, &ldb, ap, &lda, &beta, cp, &ldc, 1, 1);
}

template <typename T>
void gemm_blas(const Mat& A, const Mat& B, T* C, int64_t batch, int64_t M, int64_t N, int64_t K, double alpha,
               double beta) {
  // Many small products: one BLAS call per thread at a time (OpenBLAS runs single-threaded inside
  // our parallel region). Large ones: a serial loop and OpenBLAS threads each call.
  const int64_t macs = M * N * K;
  if (batch > 1 && macs < 2'000'000) {
    parallel_for(0, batch, std::max<int64_t>(1, 200'000 / std::max<int64_t>(macs, 1)), [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) blas_call<T>(A, B, C, b, M, N, K, T(alpha), T(beta));
    });
  } else {
    for (int64_t b = 0; b < batch; ++b) blas_call<T>(A, B, C, b, M, N, K, T(alpha), T(beta));
  }
}

// ---- oneDNN --------------------------------------------------------------------------------

dnnl::engine& dnnl_engine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

struct DnnlKey {
  int dt;
  int64_t dims[10];   // batch_a, batch_b, batch, M, N, K, bias, a row-major, b row-major, ldc
  int64_t strides[7];  // a rs/cs, b rs/cs, a bs, b bs, c bs
  double alpha, beta;
  bool operator==(const DnnlKey& o) const {
    return dt == o.dt && std::memcmp(dims, o.dims, sizeof(dims)) == 0 &&
           std::memcmp(strides, o.strides, sizeof(strides)) == 0 && alpha == o.alpha && beta == o.beta;
  }
};
struct DnnlKeyHash {
  size_t operator()(const DnnlKey& k) const {
    uint64_t h = 1469598103934665603ull ^ uint64_t(k.dt);
    auto mix = [&](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
    for (int64_t v : k.dims) mix(uint64_t(v));
    for (int64_t v : k.strides) mix(uint64_t(v));
    uint64_t a, b;
    std::memcpy(&a, &k.alpha, 8);
    std::memcpy(&b, &k.beta, 8);
    mix(a);
    mix(b);
    return size_t(h);
  }
};
struct DnnlEntry {
  bool ok = false;  // false: oneDNN has no fast implementation for this case (use the fallback)
  dnnl::matmul prim;
  dnnl::memory::desc a, b, c, bias;
  size_t scratch = 0;
};

class DnnlCache {
 public:
  std::shared_ptr<DnnlEntry> find(const DnnlKey& k) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(k);
    return it == map_.end() ? nullptr : it->second;
  }
  void put(const DnnlKey& k, std::shared_ptr<DnnlEntry> e) {
    std::lock_guard<std::mutex> lock(mu_);
    if (map_.size() >= kCapacity) map_.clear();  // shapes of one model fit many times over
    map_[k] = std::move(e);
  }

 private:
  static constexpr size_t kCapacity = 4096;
  std::mutex mu_;
  std::unordered_map<DnnlKey, std::shared_ptr<DnnlEntry>, DnnlKeyHash> map_;
};
DnnlCache& dnnl_cache() {
  static DnnlCache* c = new DnnlCache;  // never destroyed: primitives may outlive static teardown order
  return *c;
}

dnnl::memory::desc dnnl_desc(const Mat& m, int64_t batch, dnnl::memory::data_type dt) {
  using dims = dnnl::memory::dims;
  int64_t b = m.batch > 1 ? batch : 1;
  int64_t bs = m.batch > 1 ? m.bs : std::max(m.rows * m.rs, m.cols * m.cs);
  return dnnl::memory::desc(dims{b, m.rows, m.cols}, dt, dims{bs, m.rs, m.cs});
}

int current_threads() { return in_parallel_region() ? 1 : get_num_threads(); }

// OpenMP's thread count for this thread, for one scope: oneDNN sizes its internal teams from it.
struct OmpThreadsScope {
  int saved = omp_get_max_threads();
  explicit OmpThreadsScope(int n) { omp_set_num_threads(n); }
  ~OmpThreadsScope() { omp_set_num_threads(saved); }
};

// The single-threaded primitive for c[:, :M, :N] (row stride ldc) = a @ b, cached by shape,
// strides and attributes. Threads come from the pool: one primitive call per chunk.
std::shared_ptr<DnnlEntry> dnnl_primitive(const Mat& A, const Mat& B, int64_t batch, int64_t M, int64_t N,
                                          int64_t K, int64_t ldc, int64_t c_bs, double alpha, double beta, bool bias,
                                          DType dtype, DType out_dtype) {
  DnnlKey key{};
  key.dt = int(dtype) | (int(out_dtype) << 8);
  int64_t dims[10] = {A.batch > 1 ? batch : 1, B.batch > 1 ? batch : 1, batch, M, N, K,
                      bias, A.row_major, B.row_major, ldc};
  std::memcpy(key.dims, dims, sizeof(dims));
  int64_t strides[7] = {A.rs, A.cs, B.rs, B.cs, A.batch > 1 ? A.bs : 0, B.batch > 1 ? B.bs : 0, c_bs};
  std::memcpy(key.strides, strides, sizeof(strides));
  key.alpha = alpha;
  key.beta = beta;
  if (auto e = dnnl_cache().find(key)) return e;

  auto e = std::make_shared<DnnlEntry>();
  using dt = dnnl::memory::data_type;
  const dt t = dtype == DType::BFloat16 ? dt::bf16 : dt::f32;
  const dt out = out_dtype == DType::BFloat16 ? dt::bf16 : dt::f32;
  try {
    e->a = dnnl_desc(A, batch, t);
    e->b = dnnl_desc(B, batch, t);
    e->c = dnnl::memory::desc({batch, M, N}, out, {c_bs, ldc, 1});
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (alpha != 1.0) attr.set_output_scales(0, {float(alpha)});
    if (beta != 0.0) {
      dnnl::post_ops po;
      po.append_sum(float(beta));
      attr.set_post_ops(po);
    }
    std::unique_ptr<dnnl::matmul::desc> md;
    if (bias) {
      e->bias = dnnl::memory::desc({1, 1, N}, out, dnnl::memory::format_tag::abc);
      md = std::make_unique<dnnl::matmul::desc>(e->a, e->b, e->bias, e->c);
    } else {
      md = std::make_unique<dnnl::matmul::desc>(e->a, e->b, e->c);
    }
    // oneDNN (OpenMP runtime) sizes its work split from omp_get_max_threads() when the primitive
    // descriptor is made, and keys its own primitive cache on that count when the primitive is
    // made: both must see 1, or a one-thread block can be handed a two-thread kernel from that
    // cache (a crash inside a parallel region, seen when sampling after training).
    OmpThreadsScope threads_scope(1);
    dnnl::matmul::primitive_desc pd(*md, attr, dnnl_engine());
    std::string impl = pd.impl_info_str();
    // The reference implementation is far slower than the BLAS fallback.
    if (impl.rfind("ref", 0) != 0) {
      e->prim = dnnl::matmul(pd);
      e->scratch = pd.scratchpad_desc().get_size();
      e->ok = true;
    }
  } catch (const dnnl::error&) {
    e->ok = false;
  }
  dnnl_cache().put(key, e);
  return e;
}

struct ScratchBuffer {
  void* p = nullptr;
  size_t size = 0;
  ~ScratchBuffer() { std::free(p); }
  void* get(size_t n) {
    if (n > size) {
      std::free(p);
      size = (n + 4095) / 4096 * 4096;
      p = std::aligned_alloc(64, size);
    }
    return p;
  }
};

// oneDNN's brgemm packs a row-major B whole; past ~1.5K columns its blocking falls off (512x768x3072
// at 82 GFLOP/s against 107 in column chunks, measured), so wide products run as column chunks.
constexpr int64_t kDnnlMaxN = 1536;

// One block of the output computed by one primitive call: rows [m0, m0 + mc), columns [n0, n0 + nc).
// A block narrower than the output and small enough (kStageBytes) is computed into a dense buffer
// and copied out (staged): for a destination with a row stride wider than its rows oneDNN runs
// its gemm:jit kernel, for a dense one brgemm, which on Llama-110M's prefill cut in two was 6%
// faster at 1 thread (the two halves one after the other) and 2.7% at 2, and gives other last
// bits. Staged, a block's values are bit for bit the columns of the whole product wherever B is
// stored as [N, K] (a Linear's weight): measured with oneDNN's AVX-512, AVX2 and SSE4.1 kernels
// (ONEDNN_MAX_CPU_ISA), held by test Gemm.ColumnBlocksKeepTheWholeProductsBits.
struct Tile {
  int64_t m0, mc, n0, nc;
  bool staged;
  std::shared_ptr<DnnlEntry> e;
};

// Splits [0, n) into `parts` near-equal pieces whose starts are multiples of `align`.
std::vector<std::pair<int64_t, int64_t>> split_range(int64_t n, int64_t parts, int64_t align) {
  std::vector<std::pair<int64_t, int64_t>> out;
  int64_t step = ((n + parts - 1) / parts + align - 1) / align * align;
  for (int64_t s = 0; s < n; s += step) out.push_back({s, std::min(step, n - s)});
  return out;
}

// Runs one primitive on the calling thread's stream (operands at the given addresses).
void dnnl_execute(const DnnlEntry& e, const char* a, const char* b, char* c, const char* bias) {
  thread_local dnnl::stream stream(dnnl_engine());
  thread_local ScratchBuffer scratch;
  auto& eng = dnnl_engine();
  dnnl::memory am(e.a, eng, const_cast<char*>(a));
  dnnl::memory bm(e.b, eng, const_cast<char*>(b));
  dnnl::memory cm(e.c, eng, c);
  std::unordered_map<int, dnnl::memory> args = {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}};
  if (bias) args.emplace(DNNL_ARG_BIAS, dnnl::memory(e.bias, eng, const_cast<char*>(bias)));
  if (e.scratch) {
    dnnl::memory::desc sd({int64_t(e.scratch)}, dnnl::memory::data_type::u8, dnnl::memory::format_tag::a);
    args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(sd, eng, scratch.get(e.scratch)));
  }
  e.prim.execute(stream, args);
  stream.wait();
}

// Column blocks are staged (computed dense, then copied out) up to this size: beyond it the copy
// costs more than the dense kernel gains (main job's 1024 x 128 x 384 at 2 threads: 250 us strided,
// 283 staged; 128 x 2048 x 768: 1199 strided, 1025 staged; measured).
constexpr int64_t kStageBytes = 512 * 1024;

// The output's blocks for `nt` threads: one group of tiles per thread (columns when there are
// enough, else rows), each group's tiles no wider than kDnnlMaxN where B is row-major.
std::vector<std::vector<Tile>> plan_tiles(const Mat& B, int64_t batch, int64_t M, int64_t N, int64_t out_size,
                                          int nt) {
  std::vector<std::pair<int64_t, int64_t>> mparts = {{0, M}}, nparts = {{0, N}};
  if (nt > 1) {
    if (N >= 128 * nt) nparts = split_range(N, nt, 16);
    else if (M >= 32 * nt) mparts = split_range(M, nt, 8);
  }
  std::vector<std::vector<Tile>> work;
  for (auto [m0, mc] : mparts)
    for (auto [n0, nc] : nparts) {
      std::vector<Tile> tiles;
      int64_t parts = B.row_major && nc > kDnnlMaxN ? (nc + kDnnlMaxN - 1) / kDnnlMaxN : 1;
      for (auto [c0, cw] : split_range(nc, parts, 16))
        tiles.push_back({m0, mc, n0 + c0, cw, cw != N && batch * mc * cw * out_size <= kStageBytes, nullptr});
      work.push_back(std::move(tiles));
    }
  return work;
}

// With several threads, the output is cut into one block per thread (columns when there are
// enough, else rows), each run by a single-threaded primitive: one fork/join per product and no
// barriers inside it. On a busy machine (other processes on the cores) that is what keeps a
// thread that loses its time slice from stalling the other at every internal barrier; on an idle
// one it matches oneDNN's own split (measured, docs/decisions.md). A product too small to split
// runs on the calling thread alone. Where every block is a staged column block and B is stored as
// [N, K] (a Linear's weight), the blocks have the whole product's bits (see Tile), so the cut
// follows the threads the pool runs now: while other programs leave it one core
// (threads_in_use() == 1) the product is one block, not two run one after the other.
bool gemm_dnnl(const Mat& A, const Mat& B, void* C, int64_t batch, int64_t M, int64_t N, int64_t K, double alpha,
               double beta, const void* bias, DType dtype, DType out_dtype) {
  const int64_t esize = itemsize(dtype), out_size = itemsize(out_dtype);
  const int nt = current_threads();
  std::vector<std::vector<Tile>> work = plan_tiles(B, batch, M, N, out_size, nt);
  if (nt > 1 && !B.row_major && threads_in_use() < nt) {
    bool same_bits = true;
    for (const auto& tiles : work)  // row blocks do not keep the bits (128x768x200: other last bits)
      for (const Tile& t : tiles) same_bits = same_bits && (t.staged || (t.nc == N && t.mc == M));
    if (same_bits) work = plan_tiles(B, batch, M, N, out_size, threads_in_use());
  }
  const bool per_thread = work.size() > 1;
  // All primitives first (a few shapes), so a rejected one falls back before any work is done.
  std::shared_ptr<DnnlEntry> last;
  bool last_staged = false;
  for (auto& tiles : work)
    for (Tile& t : tiles) {
      if (last && last->a.data.dims[1] == t.mc && last->c.data.dims[2] == t.nc && last_staged == t.staged) {
        t.e = last;
        continue;
      }
      Mat At = A, Bt = B;
      At.rows = t.mc;
      Bt.cols = t.nc;
      const int64_t ldc = t.staged ? t.nc : N, c_bs = t.staged ? t.mc * t.nc : M * N;
      t.e = dnnl_primitive(At, Bt, batch, t.mc, t.nc, K, ldc, c_bs, alpha, beta, bias != nullptr, dtype, out_dtype);
      if (!t.e->ok) return false;
      last = t.e;
      last_staged = t.staged;
    }
  auto run = [&](const std::vector<Tile>& tiles) {
    for (const Tile& t : tiles) {
      const char* a = A.ptr + t.m0 * A.rs * esize;
      const char* b = B.ptr + t.n0 * B.cs * esize;
      const char* tile_bias = bias ? static_cast<const char*>(bias) + t.n0 * out_size : nullptr;
      char* c = static_cast<char*>(C) + (t.m0 * N + t.n0) * out_size;
      if (!t.staged) {
        dnnl_execute(*t.e, a, b, c, tile_bias);
        continue;
      }
      thread_local ScratchBuffer staging;
      const size_t row_bytes = size_t(t.nc * out_size);
      char* dense = static_cast<char*>(staging.get(size_t(batch * t.mc) * row_bytes));
      auto for_each_row = [&](auto&& fn) {
        for (int64_t bi = 0; bi < batch; ++bi)
          for (int64_t r = 0; r < t.mc; ++r)
            fn(c + (bi * M + r) * N * out_size, dense + size_t(bi * t.mc + r) * row_bytes);
      };
      if (beta != 0.0) for_each_row([&](char* out, char* d) { std::memcpy(d, out, row_bytes); });
      dnnl_execute(*t.e, a, b, dense, tile_bias);
      for_each_row([&](char* out, const char* d) { std::memcpy(out, d, row_bytes); });
    }
  };
  if (per_thread) {
    parallel_for(0, int64_t(work.size()), 1, [&](int64_t w0, int64_t w1) {
      for (int64_t w = w0; w < w1; ++w) run(work[size_t(w)]);
    });
  } else {
    OmpThreadsScope one_thread(1);  // as in a chunk: no OpenMP team beside the pool's threads
    for (const auto& tiles : work) run(tiles);
  }
  return true;
}

// ---- float32 matrix-vector -----------------------------------------------------------------

// c[b] (M == 1 or N == 1) through the SIMD gemv kernels. x vectors with a stride are packed.
void gemm_gemv_f32(const Mat& A, const Mat& B, float* C, int64_t batch, int64_t M, int64_t N, int64_t K,
                   float alpha, float beta, const float* bias) {
  auto one = [&](int64_t b) {
    const float* ap = mat_at<float>(A, A.batch > 1 ? b : 0);
    const float* bp = mat_at<float>(B, B.batch > 1 ? b : 0);
    float* cp = C + b * M * N;
    std::vector<float> xbuf, ybuf;
    auto vec = [&](const float* p, int64_t stride, std::vector<float>& buf) {
      if (stride == 1) return p;
      buf.resize(size_t(K));
      for (int64_t k = 0; k < K; ++k) buf[size_t(k)] = p[k * stride];
      return static_cast<const float*>(buf.data());
    };
    if (M == 1 && N == 1) {
      // a dot product: one "row" of length K
      const float* x = vec(ap, A.cs, xbuf);
      gemv_rows_f32(vec(bp, B.rs, ybuf), K, 1, K, x, cp, alpha, beta, bias);
    } else if (M == 1) {
      // c[1, N] = x[1, K] @ B[K, N]
      const float* x = vec(ap, A.cs, xbuf);
      if (B.row_major) gemv_cols_f32(bp, B.ld, K, N, x, cp, alpha, beta, bias);
      else gemv_rows_f32(bp, B.ld, N, K, x, cp, alpha, beta, bias);
    } else {
      // c[M, 1] = A[M, K] @ x[K, 1]; the bias (size 1) is a scalar added to every row
      const float* x = vec(bp, B.rs, xbuf);
      if (!bias) {
        if (A.row_major) gemv_rows_f32(ap, A.ld, M, K, x, cp, alpha, beta, nullptr);
        else gemv_cols_f32(ap, A.ld, K, M, x, cp, alpha, beta, nullptr);
      } else {
        std::vector<float> bvec(size_t(M), bias[0]);
        if (A.row_major) gemv_rows_f32(ap, A.ld, M, K, x, cp, alpha, beta, bvec.data());
        else gemv_cols_f32(ap, A.ld, K, M, x, cp, alpha, beta, bvec.data());
      }
    }
  };
  if (batch == 1) {
    one(0);
    return;
  }
  int64_t grain = std::max<int64_t>(1, 65536 / std::max<int64_t>(M * N * K, 1));
  parallel_for(0, batch, grain, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) one(b);
  });
}

// ---- 16-bit float matrix-vector --------------------------------------------------------

// c[1, N] = x[1, K] @ B[K, N] (+ bias) for bf16 / f16 (T): x widened to float32 once, float32
// accumulation, one rounding to T as oneDNN's. B's columns contiguous (a [N, K] weight read
// transposed, as a linear layer's): one stream per weight row; B row-major (GPT-2's Conv1D [in,
// out]): blocks of whole rows (oneDNN's bf16 brgemm for one row read 45% of the bandwidth the rows
// form reads; f16 had no kernel at all: every token converted the weights to float32, 2 tokens/s
// for an f16 Llama-110M). False where it does not apply (other layouts, alpha / beta).
template <typename T>
bool gemv_16(const Mat& A, const Mat& B, Tensor& c, int64_t batch, int64_t M, int64_t N, int64_t K, double alpha,
             double beta, const void* bias, int64_t bias_stride) {
  if (batch != 1 || M != 1 || alpha != 1.0 || beta != 0.0 || (A.cs != 1 && K > 1)) return false;
  constexpr bool bf16 = std::is_same_v<T, BFloat16>;
  thread_local std::vector<float> x, y;
  x.resize(static_cast<size_t>(K));
  y.resize(static_cast<size_t>(N));
  (bf16 ? convert_bf16_to_f32 : convert_f16_to_f32)(reinterpret_cast<const uint16_t*>(mat_at<T>(A, 0)), x.data(), K);
  const auto* w = reinterpret_cast<const uint16_t*>(mat_at<T>(B, 0));
  if (B.row_major) gemv_cols_16(bf16, w, B.ld, K, N, x.data(), y.data());
  else gemv_rows_16(bf16, w, B.ld, N, K, x.data(), y.data());
  auto* out = c.data<T>();
  const auto* b = static_cast<const T*>(bias);
  if (!b) {  // the SIMD casts (round to nearest even, as T(float)): the scalar f16 one was 4% of an f16 decode step
    (bf16 ? convert_f32_to_bf16 : convert_f32_to_f16)(y.data(), reinterpret_cast<uint16_t*>(out), N);
    return true;
  }
  for (int64_t n = 0; n < N; ++n) out[n] = T(y[size_t(n)] + float(b[n * bias_stride]));
  return true;
}

// ---- helpers -------------------------------------------------------------------------------

// c = beta * c + bias (rows), in place; used before a BLAS call that has no bias argument.
template <typename T>
void apply_beta_bias(T* C, int64_t rows, int64_t N, double beta, const T* bias, int64_t bias_stride) {
  parallel_for(0, rows, std::max<int64_t>(1, 32768 / std::max<int64_t>(N, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      T* cp = C + r * N;
      for (int64_t n = 0; n < N; ++n) {
        acc_t<T> v = beta != 0.0 ? acc_t<T>(beta) * load_acc(cp[n]) : acc_t<T>(0);
        if (bias) v += load_acc(bias[n * bias_stride]);
        cp[n] = from_acc<T>(v);
      }
    }
  });
}


enum class Backend { Dnnl, Blas, Gemv, Small, Loop };

Backend choose(DType dt, int64_t M, int64_t N, int64_t K) {
  if (is_integral(dt, true)) return Backend::Loop;
  if (g_policy == GemmPolicy::Loop) return Backend::Loop;
  const int64_t macs = M * N * K;
  if (dt == DType::Float64) return Backend::Blas;
  if (dt == DType::BFloat16) return macs <= kSmallMacs ? Backend::Small : Backend::Dnnl;
  // float32 (float16 is converted to it; bfloat16 falls back to it where oneDNN lacks bf16)
  if (g_policy == GemmPolicy::OneDnn) return Backend::Dnnl;
  if (g_policy == GemmPolicy::OpenBlas) return Backend::Blas;
  if (M == 1 || N == 1) return Backend::Gemv;
  if (macs < kDnnlMinMacs) return Backend::Blas;
  return Backend::Dnnl;
}

const char* backend_name(Backend b) {
  switch (b) {
    case Backend::Dnnl: return "onednn";
    case Backend::Blas: return "openblas";
    case Backend::Gemv: return "gemv";
    case Backend::Small: return "small";
    case Backend::Loop: return "loop";
  }
  return "?";
}

}  // namespace

GemmPolicy gemm_policy() { return g_policy; }
void set_gemm_policy(GemmPolicy p) { g_policy = p; }

std::string gemm_backend(const Tensor& a, const Tensor& b) {
  return backend_name(choose(a.dtype(), a.size(1), b.size(2), a.size(2)));
}

bool gemm_bf16_f32out(const Tensor& a, const Tensor& b, Tensor& c) {
  FOUNDRY_CHECK(a.dim() == 2 && b.dim() == 2 && c.dim() == 2 && c.is_contiguous() && a.dtype() == DType::BFloat16 &&
                    b.dtype() == DType::BFloat16 && c.dtype() == DType::Float32 && a.size(1) == b.size(0) &&
                    c.size(0) == a.size(0) && c.size(1) == b.size(1),
                "gemm_bf16_f32out: expected bf16 [M, K] @ bf16 [K, N] -> float32 [M, N]");
  const int64_t M = c.size(0), N = c.size(1), K = a.size(1);
  if (M == 0 || N == 0 || K == 0) return false;
  Tensor ha, hb;
  Mat A = describe(a.unsqueeze(0), ha), B = describe(b.unsqueeze(0), hb);
  return gemm_dnnl(A, B, c.data_ptr(), 1, M, N, K, 1.0, 0.0, nullptr, DType::BFloat16, DType::Float32);
}

bool gemm_bf16_nt_block(const uint16_t* a, int64_t lda, const uint16_t* w, int64_t ldw, float* c, int64_t ldc,
                        int64_t M, int64_t N, int64_t K) {
  if (M == 0 || N == 0 || K == 0) return false;
  Mat A, B;
  A.ptr = reinterpret_cast<const char*>(a);
  A.rows = M, A.cols = K, A.rs = lda, A.cs = 1, A.row_major = true, A.ld = lda;
  B.ptr = reinterpret_cast<const char*>(w);  // W^T [K, N]: column-major with leading dimension ldw
  B.rows = K, B.cols = N, B.rs = 1, B.cs = ldw, B.row_major = false, B.ld = ldw;
  const std::shared_ptr<DnnlEntry> e =
      dnnl_primitive(A, B, 1, M, N, K, ldc, M * ldc, 1.0, 0.0, false, DType::BFloat16, DType::Float32);
  if (!e->ok) return false;
  dnnl_execute(*e, A.ptr, B.ptr, reinterpret_cast<char*>(c), nullptr);
  return true;
}

namespace {

// t as float32, a transposed view (last two dimensions swapped over contiguous memory) kept one.
Tensor to_float32_in_layout(const Tensor& t) {
  if (t.dim() >= 2 && !t.is_contiguous() && t.transpose(-2, -1).is_contiguous())
    return t.transpose(-2, -1).to(DType::Float32).transpose(-2, -1);
  return t.to(DType::Float32);
}

// A 16-bit GEMM without a 16-bit kernel: in float32, rounded once into c. The copies keep the
// operands' layouts, so a weight read as W^T converts over contiguous memory (SIMD) rather than as
// a strided transpose (an AVX2-capped bf16 Llama-110M prefill spent ~24% of its time there), and c
// is only read when beta uses it.
void gemm_in_float32(const Tensor& a, const Tensor& b, Tensor& c, double alpha, double beta, const Tensor& bias) {
  autograd::NoGradGuard ng;
  Tensor c32 = beta == 0.0 ? empty(c.sizes(), DType::Float32) : c.to(DType::Float32).contiguous();
  gemm(to_float32_in_layout(a), to_float32_in_layout(b), c32, alpha, beta,
       bias.defined() ? bias.to(DType::Float32) : Tensor());
  copy_into(c, c32);
}

}  // namespace

void gemm(const Tensor& a, const Tensor& b, Tensor& c, double alpha, double beta, const Tensor& bias) {
  const DType dt = c.dtype();
  FOUNDRY_CHECK(a.dim() == 3 && b.dim() == 3 && c.dim() == 3 && c.is_contiguous(), "gemm: expected 3-d operands");
  FOUNDRY_CHECK(a.dtype() == dt && b.dtype() == dt && (!bias.defined() || bias.dtype() == dt),
                "gemm: operands must share a dtype");
  const int64_t batch = c.size(0), M = c.size(1), N = c.size(2), K = a.size(2);
  if (batch == 0 || M == 0 || N == 0) return;
  if (dt == DType::Float16 || dt == DType::Float8E4M3 || dt == DType::Float8E5M2) {
    if (dt == DType::Float16 && a.size(2) > 0) {
      Tensor ha, hb;
      const Mat A = describe(a, ha), B = describe(b, hb);
      const int64_t bias_stride = bias.defined() ? (bias.numel() == 1 ? 0 : bias.stride(0)) : 0;
      if (gemv_16<Half>(A, B, c, batch, M, N, a.size(2), alpha, beta, bias.defined() ? bias.data_ptr() : nullptr,
                        bias_stride))
        return;
    }
    // No float16 GEMM on CPUs without AVX512-FP16.
    gemm_in_float32(a, b, c, alpha, beta, bias);
    return;
  }
  if (dt == DType::Bool) raise<TypeError>("matmul: not implemented for 'bool'");

  Tensor ha, hb;
  Mat A = describe(a, ha), B = describe(b, hb);
  const void* bias_ptr = bias.defined() ? bias.data_ptr() : nullptr;
  const int64_t bias_stride = bias.defined() ? (bias.numel() == 1 ? 0 : bias.stride(0)) : 0;
  if (K == 0) {
    visit_numeric(dt, "matmul", [&](auto tag) {
      using T = typename decltype(tag)::type;
      apply_beta_bias<T>(static_cast<T*>(c.data_ptr()), batch * M, N, beta, static_cast<const T*>(bias_ptr),
                         bias_stride);
    });
    return;
  }
  if (dt == DType::BFloat16 && gemv_16<BFloat16>(A, B, c, batch, M, N, K, alpha, beta, bias_ptr, bias_stride)) return;
  Backend be = choose(dt, M, N, K);
  if (be == Backend::Gemv || be == Backend::Dnnl) {
    // oneDNN and our gemv want a contiguous bias of N values.
    Tensor bias_c;
    if (bias_ptr && bias_stride != 1 && N > 1) {
      autograd::NoGradGuard ng;
      bias_c = bias.reshape({-1}).expand({N}).contiguous();
      bias_ptr = bias_c.data_ptr();
    }
    if (be == Backend::Gemv) {
      gemm_gemv_f32(A, B, c.data<float>(), batch, M, N, K, float(alpha), float(beta),
                    static_cast<const float*>(bias_ptr));
      return;
    }
    if (gemm_dnnl(A, B, c.data_ptr(), batch, M, N, K, alpha, beta, bias_ptr, dt, dt)) return;
    if (dt == DType::BFloat16) {  // oneDNN has no bf16 kernel for this CPU (AVX2)
      gemm_in_float32(a, b, c, alpha, beta, bias);
      return;
    }
    be = Backend::Blas;
  }
  if (be == Backend::Blas && fits_int(M) && fits_int(N) && fits_int(K) && fits_int(A.ld) && fits_int(B.ld)) {
    visit_floating(dt, "matmul", [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
        T* C = static_cast<T*>(c.data_ptr());
        double beff = beta;
        if (bias_ptr) {
          apply_beta_bias<T>(C, batch * M, N, beta, static_cast<const T*>(bias_ptr), bias_stride);
          beff = 1.0;
        }
        gemm_blas<T>(A, B, C, batch, M, N, K, alpha, beff);
      } else {
        raise<TypeError>("matmul: no BLAS path for {}", dtype_name(dt));
      }
    });
    return;
  }
  visit_numeric(dt, "matmul", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, bool>) {
      raise<TypeError>("matmul: not implemented for 'bool'");
    } else {
      gemm_loop<T>(A, B, static_cast<T*>(c.data_ptr()), batch, M, N, K, alpha, beta,
                   static_cast<const T*>(bias_ptr), bias_stride);
    }
  });
}

}  // namespace foundry::kernels
