// Decompositions and solvers over LAPACK (OpenBLAS's, OpenMP build): linalg_inv, linalg_solve,
// linalg_cholesky, linalg_qr, linalg_det, linalg_slogdet. Inputs are batches of matrices
// [..., m, n] in float32 or float64; the batch runs across threads (each LAPACK call then runs
// on one thread), a single large matrix lets OpenBLAS thread inside the call.
//
// LAPACK is column-major. A row-major buffer holding A is, to LAPACK, A^T; the code below uses
// that instead of transposing where the algebra allows (inv(A^T)^T = inv(A), det(A^T) = det(A),
// getrs with trans='T' on the factors of A^T solves A X = B).
//
// Gradients are written with Foundry ops (matmul, linalg_solve, linalg_inv, tril), so they can
// be differentiated again.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "ops/common.h"
#include "ops/linalg_common.h"

extern "C" {
void sgetrf_(const int* m, const int* n, float* a, const int* lda, int* ipiv, int* info);
void dgetrf_(const int* m, const int* n, double* a, const int* lda, int* ipiv, int* info);
void sgetri_(const int* n, float* a, const int* lda, const int* ipiv, float* work, const int* lwork, int* info);
void dgetri_(const int* n, double* a, const int* lda, const int* ipiv, double* work, const int* lwork, int* info);
void sgetrs_(const char* trans, const int* n, const int* nrhs, const float* a, const int* lda, const int* ipiv,
             float* b, const int* ldb, int* info, size_t);
void dgetrs_(const char* trans, const int* n, const int* nrhs, const double* a, const int* lda, const int* ipiv,
             double* b, const int* ldb, int* info, size_t);
void spotrf_(const char* uplo, const int* n, float* a, const int* lda, int* info, size_t);
void dpotrf_(const char* uplo, const int* n, double* a, const int* lda, int* info, size_t);
void sgeqrf_(const int* m, const int* n, float* a, const int* lda, float* tau, float* work, const int* lwork,
             int* info);
void dgeqrf_(const int* m, const int* n, double* a, const int* lda, double* tau, double* work, const int* lwork,
             int* info);
void sorgqr_(const int* m, const int* n, const int* k, float* a, const int* lda, const float* tau, float* work,
             const int* lwork, int* info);
void dorgqr_(const int* m, const int* n, const int* k, double* a, const int* lda, const double* tau, double* work,
             const int* lwork, int* info);
}

namespace foundry {

using ops::Args;
using ops::BackwardContext;
using ops::OpDef;
using ops::Sample;
using ops::Value;

namespace {

using ops::mT;

// ---- LAPACK by type --------------------------------------------------------------------------

template <typename T>
struct Lapack;

template <>
struct Lapack<float> {
  static void getrf(int m, int n, float* a, int lda, int* ipiv, int* info) { sgetrf_(&m, &n, a, &lda, ipiv, info); }
  static void getri(int n, float* a, int lda, const int* ipiv, float* work, int lwork, int* info) {
    sgetri_(&n, a, &lda, ipiv, work, &lwork, info);
  }
  static void getrs(char trans, int n, int nrhs, const float* a, int lda, const int* ipiv, float* b, int ldb, int* info) {
    sgetrs_(&trans, &n, &nrhs, a, &lda, ipiv, b, &ldb, info, 1);
  }
  static void potrf(char uplo, int n, float* a, int lda, int* info) { spotrf_(&uplo, &n, a, &lda, info, 1); }
  static void geqrf(int m, int n, float* a, int lda, float* tau, float* work, int lwork, int* info) {
    sgeqrf_(&m, &n, a, &lda, tau, work, &lwork, info);
  }
  static void orgqr(int m, int n, int k, float* a, int lda, const float* tau, float* work, int lwork, int* info) {
    sorgqr_(&m, &n, &k, a, &lda, tau, work, &lwork, info);
  }
};

template <>
struct Lapack<double> {
  static void getrf(int m, int n, double* a, int lda, int* ipiv, int* info) { dgetrf_(&m, &n, a, &lda, ipiv, info); }
  static void getri(int n, double* a, int lda, const int* ipiv, double* work, int lwork, int* info) {
    dgetri_(&n, a, &lda, ipiv, work, &lwork, info);
  }
  static void getrs(char trans, int n, int nrhs, const double* a, int lda, const int* ipiv, double* b, int ldb,
                    int* info) {
    dgetrs_(&trans, &n, &nrhs, a, &lda, ipiv, b, &ldb, info, 1);
  }
  static void potrf(char uplo, int n, double* a, int lda, int* info) { dpotrf_(&uplo, &n, a, &lda, info, 1); }
  static void geqrf(int m, int n, double* a, int lda, double* tau, double* work, int lwork, int* info) {
    dgeqrf_(&m, &n, a, &lda, tau, work, &lwork, info);
  }
  static void orgqr(int m, int n, int k, double* a, int lda, const double* tau, double* work, int lwork, int* info) {
    dorgqr_(&m, &n, &k, a, &lda, tau, work, &lwork, info);
  }
};

// Calls fn.template operator()<T>() for float32 / float64.
template <typename F>
void visit_lapack(DType dt, const char* op, F&& fn) {
  if (dt == DType::Float32) fn(float{});
  else if (dt == DType::Float64) fn(double{});
  else raise<TypeError>("{}: expected a float32 or float64 tensor, got {}", op, dtype_name(dt));
}

// ---- shapes and batches ------------------------------------------------------------------------

void check_float(const char* op, const Tensor& a) {
  if (a.dtype() != DType::Float32 && a.dtype() != DType::Float64)
    raise<TypeError>("{}: expected a float32 or float64 tensor, got {}", op, dtype_name(a.dtype()));
}

void check_matrix(const char* op, const Tensor& a, const char* name = "A") {
  FOUNDRY_CHECK_AS(ValueError, a.dim() >= 2, "{}: the input tensor {} must have at least 2 dimensions, got shape {}", op,
                   name, shape_str(a.sizes()));
  check_float(op, a);
}

void check_square(const char* op, const Tensor& a, const char* name = "A") {
  check_matrix(op, a, name);
  FOUNDRY_CHECK_AS(ValueError, a.size(-1) == a.size(-2),
                   "{}: {} must be batches of square matrices, but they are {} by {} matrices", op, name, a.size(-2),
                   a.size(-1));
  int64_t n = a.size(-1);
  FOUNDRY_CHECK_AS(ValueError, n <= std::numeric_limits<int>::max() / std::max<int64_t>(n, 1),
                   "{}: matrices of size {} are too large for LAPACK's 32-bit indices", op, n);
}

// A fresh contiguous copy of t (broadcast to `shape`), which LAPACK may overwrite.
Tensor owned_copy(const Tensor& t, IntList shape) {
  Tensor out = empty(shape, t.dtype());
  copy_into(out, t);
  return out;
}

int64_t batch_count(const Tensor& t) {
  int64_t mn = t.size(-1) * t.size(-2);
  return mn == 0 ? 0 : t.numel() / mn;
}

// Runs fn(b) for b in [0, batch) across threads (grain from the per-matrix cost).
template <typename F>
void for_batch(int64_t batch, int64_t n, F&& fn) {
  int64_t cost = std::max<int64_t>(1, n * n * n);
  parallel_for(0, batch, std::max<int64_t>(1, 65536 / cost), [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) fn(b);
  });
}

// The first failing batch element's LAPACK info, or (-1, 0) when all succeeded.
std::pair<int64_t, int> first_failure(const std::vector<int>& infos) {
  for (size_t i = 0; i < infos.size(); ++i)
    if (infos[i] != 0) return {int64_t(i), infos[i]};
  return {-1, 0};
}

std::string batch_prefix(const Tensor& a, int64_t b) {
  return a.dim() > 2 ? fmt::format("(Batch element {}): ", b) : std::string();
}

// ---- forwards --------------------------------------------------------------------------------

Tensor inv_forward(const Tensor& A) {
  const char* op = "linalg_inv";
  check_square(op, A);
  Tensor out = owned_copy(A, A.sizes());
  const int n = int(A.size(-1));
  const int64_t batch = batch_count(A);
  std::vector<int> infos(size_t(batch), 0);
  visit_lapack(A.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    T* base = static_cast<T*>(out.data_ptr());
    for_batch(batch, n, [&](int64_t b) {
      std::vector<int> ipiv(static_cast<size_t>(n));
      T* p = base + b * int64_t(n) * n;
      int info = 0;
      Lapack<T>::getrf(n, n, p, n, ipiv.data(), &info);
      if (info == 0) {
        int lwork = std::max(1, n * 64);
        std::vector<T> work(static_cast<size_t>(lwork));
        Lapack<T>::getri(n, p, n, ipiv.data(), work.data(), lwork, &info);
      }
      infos[size_t(b)] = info;
    });
  });
  auto [b, info] = first_failure(infos);
  if (b >= 0)
    raise<Error>("{}: {}The diagonal element {} is zero, the inversion could not be completed because the input "
                 "matrix is singular.",
                 op, batch_prefix(A, b), info);
  return out;
}

// Whether B is a batch of vectors for A (PyTorch's rule for linalg.solve).
bool solve_vector_case(const Tensor& A, const Tensor& B) {
  if (B.dim() == 1) return true;
  if (B.dim() != A.dim() - 1) return false;
  for (int64_t d = 0; d < B.dim(); ++d)
    if (B.size(d) != A.size(d)) return false;
  return true;
}

Tensor solve_forward(const Tensor& A, const Tensor& B) {
  const char* op = "linalg_solve";
  check_square(op, A);
  FOUNDRY_CHECK_AS(ValueError, B.dim() >= 1, "{}: B must have at least 1 dimension", op);
  check_float(op, B);
  if (A.dtype() != B.dtype())
    raise<TypeError>("{}: expected A and B to have the same dtype, but found A of type {} and B of type {} instead", op,
                     dtype_name(A.dtype()), dtype_name(B.dtype()));
  const bool vec = solve_vector_case(A, B);
  Tensor B2 = vec ? B.unsqueeze(-1) : B;
  const int64_t n = A.size(-1), k = B2.size(-1);
  FOUNDRY_CHECK_AS(ValueError, B2.size(-2) == n,
                   "{}: incompatible shapes of A and B for the equation AX = B ({}x{} and {}x{})", op, n, n,
                   B2.size(-2), k);
  Shape ba(A.sizes()), bb(B2.sizes());
  ba.pop_back();
  ba.pop_back();
  bb.pop_back();
  bb.pop_back();
  Shape batch_shape = broadcast_shapes(ba, bb, op);
  Shape a_shape = batch_shape, xt_shape = batch_shape;
  a_shape.push_back(n);
  a_shape.push_back(n);
  xt_shape.push_back(k);
  xt_shape.push_back(n);
  Tensor lu = owned_copy(A.expand(a_shape), a_shape);
  // X^T row-major [k, n] is X column-major: what getrs reads and writes.
  Tensor xt = empty(xt_shape, A.dtype());
  {
    Shape b_shape = batch_shape;
    b_shape.push_back(n);
    b_shape.push_back(k);
    copy_into(xt, mT(B2.expand(b_shape)));
  }
  const int64_t batch = numel_of(batch_shape);
  std::vector<int> infos(size_t(batch), 0);
  if (n > 0 && k > 0) {
    visit_lapack(A.dtype(), op, [&](auto tag) {
      using T = decltype(tag);
      T* lbase = static_cast<T*>(lu.data_ptr());
      T* xbase = static_cast<T*>(xt.data_ptr());
      for_batch(batch, n, [&](int64_t b) {
        std::vector<int> ipiv(static_cast<size_t>(n));
        T* p = lbase + b * n * n;
        int info = 0;
        Lapack<T>::getrf(int(n), int(n), p, int(n), ipiv.data(), &info);
        if (info == 0) Lapack<T>::getrs('T', int(n), int(k), p, int(n), ipiv.data(), xbase + b * n * k, int(n), &info);
        infos[size_t(b)] = info;
      });
    });
  }
  auto [b, info] = first_failure(infos);
  if (b >= 0)
    raise<Error>("{}: {}The solver failed because the input matrix is singular (U[{},{}] is zero).", op,
                 batch_prefix(A, b), info, info);
  Tensor x = mT(xt);
  return vec ? x.squeeze(-1) : x;
}

Tensor cholesky_forward(const Tensor& A, bool upper) {
  const char* op = "linalg_cholesky";
  check_square(op, A, "input");
  Tensor L = owned_copy(A, A.sizes());
  const int64_t n = A.size(-1), batch = batch_count(A);
  std::vector<int> infos(size_t(batch), 0);
  visit_lapack(A.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    T* base = static_cast<T*>(L.data_ptr());
    for_batch(batch, n, [&](int64_t b) {
      T* p = base + b * n * n;
      int info = 0;
      // 'U' on the column-major view reads and writes our lower triangle (A = U^T U, L = U^T).
      Lapack<T>::potrf('U', int(n), p, int(n), &info);
      infos[size_t(b)] = info;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = i + 1; j < n; ++j) p[i * n + j] = T(0);
    });
  });
  auto [b, info] = first_failure(infos);
  if (b >= 0)
    raise<Error>("{}: {}The factorization could not be completed because the input is not positive-definite (the "
                 "leading minor of order {} is not positive-definite).",
                 op, batch_prefix(A, b), info);
  return upper ? mT(L).contiguous() : L;
}

std::vector<Tensor> qr_forward(const Tensor& A, const std::string& mode) {
  const char* op = "linalg_qr";
  if (mode != "reduced" && mode != "complete" && mode != "r")
    raise<ValueError>("{}: qr received unrecognized mode '{}' but expected one of 'reduced' (default), 'r', or "
                      "'complete'",
                      op, mode);
  check_matrix(op, A);
  const int64_t m = A.size(-2), n = A.size(-1), k = std::min(m, n);
  FOUNDRY_CHECK_AS(ValueError, m <= std::numeric_limits<int>::max() / std::max<int64_t>(std::max(m, n), 1),
                   "{}: matrix too large for LAPACK's 32-bit indices", op);
  const bool complete = mode == "complete", want_q = mode != "r";
  const int64_t qcols = complete ? m : k, rrows = complete ? m : k;
  Shape batch_shape(A.sizes());
  batch_shape.pop_back();
  batch_shape.pop_back();
  const int64_t batch = numel_of(batch_shape);
  // Column-major copy of A: row-major [n, m] holding A^T.
  Shape t_shape = batch_shape;
  t_shape.push_back(n);
  t_shape.push_back(m);
  Tensor work_a = owned_copy(mT(A), t_shape);
  Shape q_shape = batch_shape, r_shape = batch_shape;
  q_shape.push_back(m);
  q_shape.push_back(qcols);
  r_shape.push_back(rrows);
  r_shape.push_back(n);
  Tensor Q = want_q ? empty(q_shape, A.dtype()) : empty({0}, A.dtype());
  Tensor R = empty(r_shape, A.dtype());
  visit_lapack(A.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    T* abase = static_cast<T*>(work_a.data_ptr());
    T* qbase = want_q ? static_cast<T*>(Q.data_ptr()) : nullptr;
    T* rbase = static_cast<T*>(R.data_ptr());
    for_batch(batch, std::max(m, n), [&](int64_t b) {
      T* a = abase + b * m * n;
      T* r = rbase + b * rrows * n;
      const int lda = int(std::max<int64_t>(m, 1));
      std::vector<T> tau(size_t(std::max<int64_t>(k, 1)));
      int lwork = int(std::max<int64_t>(std::max(m, n), 1) * 64);
      std::vector<T> work(static_cast<size_t>(lwork));
      int info = 0;
      if (k > 0) Lapack<T>::geqrf(int(m), int(n), a, lda, tau.data(), work.data(), lwork, &info);
      for (int64_t i = 0; i < rrows; ++i)
        for (int64_t j = 0; j < n; ++j) r[i * n + j] = (i <= j && i < k) ? a[j * m + i] : T(0);
      if (!want_q) return;
      T* q = qbase + b * m * qcols;
      if (qcols == 0 || m == 0) return;
      std::vector<T> qbuf;
      T* qa = a;  // column-major m x qcols reflectors, overwritten by Q
      if (qcols > n) {
        qbuf.assign(size_t(m * qcols), T(0));
        std::copy(a, a + m * n, qbuf.begin());
        qa = qbuf.data();
      }
      Lapack<T>::orgqr(int(m), int(qcols), int(k), qa, lda, tau.data(), work.data(), lwork, &info);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < qcols; ++j) q[i * qcols + j] = qa[j * m + i];
    });
  });
  return {Q, R};
}

// (sign, logabsdet, det) of each matrix from one LU factorisation.
std::vector<Tensor> lu_det(const Tensor& A, const char* op, bool want_det) {
  check_square(op, A);
  Tensor lu = owned_copy(A, A.sizes());
  const int64_t n = A.size(-1);
  Shape batch_shape(A.sizes());
  batch_shape.pop_back();
  batch_shape.pop_back();
  const int64_t batch = numel_of(batch_shape);
  Tensor sign = empty(batch_shape, A.dtype()), logabs = empty(batch_shape, A.dtype()), det = empty(batch_shape, A.dtype());
  visit_lapack(A.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    T* base = static_cast<T*>(lu.data_ptr());
    T *sp = static_cast<T*>(sign.data_ptr()), *lp = static_cast<T*>(logabs.data_ptr()),
      *dp = static_cast<T*>(det.data_ptr());
    for_batch(batch, n, [&](int64_t b) {
      T* p = base + b * n * n;
      std::vector<int> ipiv(size_t(std::max<int64_t>(n, 1)));
      int info = 0;
      if (n > 0) Lapack<T>::getrf(int(n), int(n), p, int(n), ipiv.data(), &info);
      double s = 1, la = 0, d = 1;
      for (int64_t i = 0; i < n; ++i) {
        double u = double(p[i * n + i]);
        if (ipiv[size_t(i)] != int(i + 1)) {
          s = -s;
          d = -d;
        }
        d *= u;
        if (u < 0) s = -s;
        if (u == 0) s = 0;
        la += std::log(std::fabs(u));
      }
      if (s == 0) la = -std::numeric_limits<double>::infinity();
      sp[b] = T(s);
      lp[b] = T(la);
      dp[b] = T(d);
    });
  });
  if (want_det) return {det};
  return {sign, logabs};
}

// inv(A)^T, for the det/slogdet gradients; a clear error at singular matrices.
Tensor inv_transposed(const Tensor& A, const char* op) {
  try {
    return mT(linalg_inv(A));
  } catch (const Error& e) {
    raise<Error>("{}: the gradient is not implemented for singular matrices (it needs A^-1): {}", op, e.what());
  }
}

Tensor unsq2(const Tensor& t) { return t.unsqueeze(-1).unsqueeze(-1); }

// ---- QR gradient -----------------------------------------------------------------------------

// gA for A = QR with m >= n (Q m x n, R n x n), after Walter & Lehmann (2018) / Liao et al. (2019):
//   M = R gR^T - gQ^T Q,   gA = (gQ + Q copyltu(M)) R^-T,
// copyltu(M) = tril(M) + tril(M, -1)^T; the triangular solve uses linalg_solve.
Tensor qr_backward_tall(const Tensor& gQ, const Tensor& gR, const Tensor& Q, const Tensor& R) {
  Tensor M = matmul(R, mT(gR)) - matmul(mT(gQ), Q);
  Tensor sym = tril(M) + mT(tril(M, -1));
  Tensor b = gQ + matmul(Q, sym);
  // b R^-T = (R^-1 b^T)^T
  return mT(linalg_solve(R, mT(b)));
}

// ---- samples -----------------------------------------------------------------------------------

// Well-conditioned matrices: uniform(-1, 1) plus n on the diagonal.
Tensor well_conditioned(IntList shape, DType dt, Generator& g) {
  int64_t n = shape.back();
  Tensor r = ops::sample_uniform(shape, DType::Float64, g, -1, 1);
  return (r + eye(n, std::nullopt, DType::Float64) * Scalar(double(n))).to(dt);
}
// Symmetric positive definite: R R^T / n + I.
Tensor spd(IntList shape, DType dt, Generator& g) {
  int64_t n = shape.back();
  Tensor r = ops::sample_uniform(shape, DType::Float64, g, -1, 1);
  return (matmul(r, mT(r)) / Scalar(double(std::max<int64_t>(n, 1))) + eye(n, std::nullopt, DType::Float64)).to(dt);
}
// A matrix with a negative determinant (first row of a well-conditioned one negated).
Tensor negative_det(int64_t n, DType dt, Generator& g) {
  Tensor a = well_conditioned({n, n}, DType::Float64, g);
  Tensor flip_first = Scalar(1.0) - eye(n, 1, DType::Float64) * Scalar(2.0);  // [n, 1]: -1, 1, 1, ...
  return (a * flip_first).to(dt);
}

const std::vector<DType> kLapackTypes = {DType::Float32, DType::Float64};

}  // namespace

Tensor linalg_inv(const Tensor& a) { return ops::call1(FOUNDRY_OP("linalg_inv"), {a}); }
Tensor linalg_solve(const Tensor& a, const Tensor& b) { return ops::call1(FOUNDRY_OP("linalg_solve"), {a, b}); }
Tensor linalg_cholesky(const Tensor& a, bool upper) { return ops::call1(FOUNDRY_OP("linalg_cholesky"), {a, upper}); }
std::tuple<Tensor, Tensor> linalg_qr(const Tensor& a, const std::string& mode) {
  auto out = ops::call(FOUNDRY_OP("linalg_qr"), {a, mode});
  return {out[0], out[1]};
}
Tensor linalg_det(const Tensor& a) { return ops::call1(FOUNDRY_OP("linalg_det"), {a}); }
std::tuple<Tensor, Tensor> linalg_slogdet(const Tensor& a) {
  auto out = ops::call(FOUNDRY_OP("linalg_slogdet"), {a});
  return {out[0], out[1]};
}

namespace ops {

void register_linalg_lapack_ops(Registry& r) {
  r.add({.schema_text = "linalg_inv(Tensor A) -> Tensor",
         .family = "linalg",
         .doc = "Inverse of each square matrix (LU with partial pivoting); singular input raises.",
         .saves_outputs = {0},
         .forward = [](const Args& a) { return std::vector<Tensor>{inv_forward(a.tensor(0))}; },
         .backward =
             [](BackwardContext& c) {
               Tensor invT = mT(c.output(0));
               return std::vector<Tensor>{-matmul(matmul(invT, c.grad()), invT)};
             },
         .dtypes = kLapackTypes,
         .samples =
             [](DType dt, Generator& g) {
               return std::vector<Sample>{{{well_conditioned({3, 3}, dt, g)}},
                                          {{well_conditioned({2, 4, 4}, dt, g)}, "batched"},
                                          {{well_conditioned({1, 1}, dt, g)}, "1x1"},
                                          {{well_conditioned({3, 3}, dt, g).t()}, "transposed"},
                                          {{empty({0, 0}, dt)}, "empty"}};
             },
         .ref = "torch.linalg.inv"});

  r.add({.schema_text = "linalg_solve(Tensor A, Tensor B) -> Tensor",
         .family = "linalg",
         .doc = "X with A X = B (B a batch of vectors when B.dim() == 1 or B.shape == A.shape[:-1]); batch dims "
                "broadcast; singular A raises.",
         .saves = {"A"},
         .saves_outputs = {0},
         .forward = [](const Args& a) { return std::vector<Tensor>{solve_forward(a.tensor(0), a.tensor(1))}; },
         .backward =
             [](BackwardContext& c) {
               const Tensor& A = c.input("A");
               Tensor X = c.output(0);
               // gB = A^-T g (same vector/matrix case as the forward), gA = -gB X^T.
               Tensor gB = linalg_solve(mT(A), c.grad());
               Tensor gA, gb_out;
               Shape bshape = c.input_sizes("B");
               bool vec = X.dim() == A.dim() - 1;  // B was a (batch of) vector(s)
               if (c.needs_grad("A")) {
                 Tensor ga = vec ? -matmul(gB.unsqueeze(-1), X.unsqueeze(-2)) : -matmul(gB, mT(X));
                 gA = sum_to(ga, c.input_sizes("A"));
               }
               if (c.needs_grad("B")) gb_out = sum_to(gB, bshape);
               return std::vector<Tensor>{gA, gb_out};
             },
         .dtypes = kLapackTypes,
         .samples =
             [](DType dt, Generator& g) {
               auto U = [&](IntList s) { return ops::sample_uniform(s, dt, g, -2, 2); };
               return std::vector<Sample>{{{well_conditioned({3, 3}, dt, g), U({3, 2})}},
                                          {{well_conditioned({3, 3}, dt, g), U({3})}, "vector"},
                                          {{well_conditioned({2, 3, 3}, dt, g), U({2, 3})}, "batched vectors"},
                                          {{well_conditioned({2, 3, 3}, dt, g), U({3, 4})}, "broadcast B"},
                                          {{well_conditioned({1, 3, 3}, dt, g), U({2, 3, 2})}, "broadcast A"}};
             },
         .ref = "torch.linalg.solve"});

  r.add({.schema_text = "linalg_cholesky(Tensor input, *, bool upper=False) -> Tensor",
         .family = "linalg",
         .doc = "Cholesky factor L (A = L L^T; U = L^T when upper) of symmetric positive-definite matrices; reads "
                "the lower triangle; non-PD input raises.",
         .saves_outputs = {0},
         .forward = [](const Args& a) { return std::vector<Tensor>{cholesky_forward(a.tensor(0), a[1].to_bool())}; },
         .backward =
             [](BackwardContext& c) {
               // Murray (2016): gA = L^-T Phi(L^T gL) L^-1, symmetrised; Phi takes the lower
               // triangle with the diagonal halved.
               bool upper = c.bool_arg("upper");
               Tensor L = upper ? mT(c.output(0)) : c.output(0);
               Tensor gL = upper ? mT(c.grad()) : c.grad();
               Tensor P = tril(matmul(mT(L), gL));
               Tensor S = (P + mT(tril(P, -1))) * Scalar(0.5);
               Tensor X = linalg_solve(mT(L), S);                      // L^-T S
               return std::vector<Tensor>{mT(linalg_solve(mT(L), mT(X)))};  // (L^-T X^T)^T = X L^-1
             },
         .dtypes = kLapackTypes,
         .samples =
             [](DType dt, Generator& g) {
               // gradcheck = false: the op reads only the lower triangle while its gradient (as in
               // PyTorch) is the symmetric one, so raw finite differences disagree by design (the
               // unit tests check n x n through a symmetrising wrapper). 1x1 matrices have no
               // off-diagonal part, so they are checked raw.
               return std::vector<Sample>{{{spd({2, 1, 1}, dt, g), false}, "1x1 batch"},
                                          {{spd({3, 3}, dt, g), false}, "", false},
                                          {{spd({2, 4, 4}, dt, g), false}, "batched", false},
                                          {{spd({3, 3}, dt, g), true}, "upper", false},
                                          {{empty({0, 0}, dt), false}, "empty", false}};
             },
         .ref = "torch.linalg.cholesky"});

  r.add({.schema_text = "linalg_qr(Tensor A, str mode='reduced') -> (Tensor Q, Tensor R)",
         .family = "linalg",
         .doc = "QR decomposition by Householder reflections (LAPACK geqrf/orgqr); mode 'reduced', 'complete' or "
                "'r' (Q is then empty).",
         .saves_outputs = {0, 1},
         .forward = [](const Args& a) { return qr_forward(a.tensor(0), a[1].str()); },
         .backward =
             [](BackwardContext& c) {
               const std::string mode = c.arg("mode").str();
               if (mode == "r")
                 raise<Error>("linalg_qr: the derivative of linalg_qr depends on Q, which is not computed when "
                              "mode='r'; use mode='reduced' to differentiate through linalg_qr");
               Tensor Q = c.output(0), R = c.output(1);
               const int64_t m = Q.size(-2), n = R.size(-1);
               if (mode == "complete" && m > n)
                 raise<Error>("linalg_qr: the QR decomposition is not differentiable when mode='complete' and nrows > "
                              "ncols");
               const Tensor &gQ = c.grad(0), &gR = c.grad(1);
               if (m >= n) return std::vector<Tensor>{qr_backward_tall(gQ, gR, Q, R)};
               // Wide: A = [X | Y] with X = Q U square, Y = Q V. Y's gradient reaches Q.
               Tensor U = R.narrow(-1, 0, m), V = R.narrow(-1, m, n - m);
               Tensor gU = gR.narrow(-1, 0, m), gV = gR.narrow(-1, m, n - m);
               Tensor gX = qr_backward_tall(gQ + matmul(matmul(Q, V), mT(gV)), gU, Q, U);
               Tensor gY = matmul(Q, gV);
               return std::vector<Tensor>{cat({gX, gY}, -1)};
             },
         .dtypes = kLapackTypes,
         .samples =
             [](DType dt, Generator& g) {
               auto U = [&](IntList s) { return ops::sample_uniform(s, dt, g, -2, 2); };
               return std::vector<Sample>{{{U({4, 3}), "reduced"}, "tall"},
                                          {{U({3, 3}), "reduced"}, "square"},
                                          {{U({2, 4}), "reduced"}, "wide"},
                                          {{U({2, 3, 2}), "reduced"}, "batched"},
                                          {{U({3, 4}), "complete"}, "complete, wide"},
                                          {{U({4, 2}), "complete"}, "complete, tall (not differentiable)", false},
                                          {{U({3, 3}), "r"}, "r (not differentiable)", false}};
             },
         .ref = "torch.linalg.qr"});

  r.add({.schema_text = "linalg_det(Tensor A) -> Tensor",
         .family = "linalg",
         .doc = "Determinant from an LU factorisation (0 for singular matrices).",
         .saves = {"A"},
         .saves_outputs = {0},
         .forward = [](const Args& a) { return lu_det(a.tensor(0), "linalg_det", true); },
         .backward =
             [](BackwardContext& c) {
               // d det / dA = det * A^-T
               Tensor invT = inv_transposed(c.input("A"), "linalg_det");
               return std::vector<Tensor>{unsq2(c.grad() * c.output(0)) * invT};
             },
         .dtypes = kLapackTypes,
         .samples =
             [](DType dt, Generator& g) {
               return std::vector<Sample>{{{well_conditioned({3, 3}, dt, g)}},
                                          {{well_conditioned({2, 3, 3}, dt, g)}, "batched"},
                                          {{negative_det(3, dt, g)}, "negative"},
                                          {{well_conditioned({1, 1}, dt, g)}, "1x1"},
                                          {{empty({0, 0}, dt)}, "empty"}};
             },
         .ref = "torch.linalg.det"});

  r.add({.schema_text = "linalg_slogdet(Tensor A) -> (Tensor sign, Tensor logabsdet)",
         .family = "linalg",
         .doc = "Sign and log |det| from an LU factorisation (0 and -inf for singular matrices).",
         .saves = {"A"},
         .forward = [](const Args& a) { return lu_det(a.tensor(0), "linalg_slogdet", false); },
         .backward =
             [](BackwardContext& c) {
               // d log|det| / dA = A^-T; the sign is piecewise constant.
               Tensor invT = inv_transposed(c.input("A"), "linalg_slogdet");
               return std::vector<Tensor>{unsq2(c.grad(1)) * invT};
             },
         .dtypes = kLapackTypes,
         .samples =
             [](DType dt, Generator& g) {
               return std::vector<Sample>{{{well_conditioned({3, 3}, dt, g)}},
                                          {{well_conditioned({2, 4, 4}, dt, g)}, "batched"},
                                          {{negative_det(3, dt, g)}, "negative"}};
             },
         .ref = "torch.linalg.slogdet"});
}

}  // namespace ops
}  // namespace foundry
