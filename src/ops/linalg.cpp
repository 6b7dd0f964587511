// Matrix products: mm, bmm, mv, dot, addmm, baddbmm and linear are primitives over the GEMM
// dispatcher (kernels/cpu/gemm.h); matmul, outer, einsum and tensordot are composites that reduce
// to them with views (PyTorch's folding rules), so their gradients come from the primitives'.
// Every backward is written with these same ops, so gradients of gradients work.
// The LAPACK-backed decompositions live in linalg_lapack.cpp.
#include <algorithm>
#include <array>
#include <numeric>

#include "kernels/cpu/gemm.h"
#include "ops/common.h"
#include "ops/linalg_common.h"

namespace foundry {

using ops::Args;
using ops::BackwardContext;
using ops::OpDef;
using ops::Sample;
using ops::Value;

namespace ops {

Tensor as_3d(const Tensor& t) {
  if (t.dim() == 3) return t;
  FOUNDRY_CHECK(t.dim() == 2, "as_3d: expected a matrix");
  return make_tensor(t.storage(), {1, t.size(0), t.size(1)}, {0, t.stride(0), t.stride(1)}, t.storage_offset(),
                     t.dtype());
}

Tensor mT(const Tensor& t) { return t.transpose(-2, -1); }

// A contiguous tensor's elements viewed as [b, m, n] (an alias, no autograd; works for 0-d).
Tensor alias_3d(const Tensor& t, int64_t b, int64_t m, int64_t n) {
  return make_tensor(t.storage(), {b, m, n}, {m * n, n, 1}, t.storage_offset(), t.dtype());
}

void check_matmul_dtype(const char* op, const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype())
    raise<TypeError>("{}: expected both operands to have the same dtype, but got {} and {}", op,
                     dtype_name(a.dtype()), dtype_name(b.dtype()));
  DType dt = a.dtype();
  if (dt == DType::Bool || is_float8(dt))
    raise<TypeError>("{}: not implemented for '{}'", op, dtype_name(dt));
}

}  // namespace ops

namespace {

using ops::as_3d;
using ops::check_matmul_dtype;
using ops::mT;


// Scalar multiplier (skipped when it is 1).
Tensor scaled(const Tensor& t, const Scalar& s) {
  if (!t.defined()) return t;
  double v = s.to_double();
  return v == 1.0 ? t : t * s;
}

void check_int_alpha(const char* op, DType dt, const Scalar& beta, const Scalar& alpha) {
  if (is_floating(dt)) return;
  if (alpha.is_float() || beta.is_float())
    raise<TypeError>("{}: for integral input tensors, arguments alpha and beta must not be floating point numbers", op);
}

// out = beta * input (broadcast) + alpha * (a @ b) for 3-d a, b and out.
void add_product(const char* op, const Tensor& input, const Tensor& a3, const Tensor& b3, Tensor& out3,
                 const Scalar& beta, const Scalar& alpha) {
  double be = beta.to_double(), al = alpha.to_double();
  const int64_t N = out3.size(2);
  // A row-vector input with beta == alpha == 1 is a bias: fused into the product.
  bool is_bias = be == 1.0 && al == 1.0 && input.dim() >= 1 && N > 0 && input.size(-1) == N && input.numel() == N;
  if (is_bias) {
    kernels::gemm(a3, b3, out3, al, 0.0, input.reshape({N}));
    return;
  }
  if (be != 0.0) {
    Tensor in = input.expand(out3.sizes());
    copy_into(out3, in);
  }
  kernels::gemm(a3, b3, out3, al, be);
}

// ---- samples --------------------------------------------------------------------------------

Tensor U(IntList s, DType dt, Generator& g) { return ops::sample_uniform(s, dt, g, -2, 2); }

std::vector<Sample> mm_samples(DType dt, Generator& g) {
  return {{{U({3, 4}, dt, g), U({4, 5}, dt, g)}},
          {{U({4, 3}, dt, g).t(), U({5, 4}, dt, g).t()}, "transposed"},
          {{U({1, 6}, dt, g), U({6, 3}, dt, g)}, "row vector"},
          {{U({3, 6}, dt, g), U({6, 1}, dt, g)}, "column vector"},
          {{U({0, 3}, dt, g), U({3, 2}, dt, g)}, "empty"},
          {{U({2, 0}, dt, g), U({0, 3}, dt, g)}, "empty inner"}};
}

std::vector<Sample> bmm_samples(DType dt, Generator& g) {
  return {{{U({2, 3, 4}, dt, g), U({2, 4, 5}, dt, g)}},
          {{U({2, 4, 3}, dt, g).transpose(1, 2), U({2, 5, 4}, dt, g).transpose(1, 2)}, "transposed"},
          {{U({3, 1, 4}, dt, g), U({3, 4, 2}, dt, g)}, "row vectors"},
          {{U({0, 2, 3}, dt, g), U({0, 3, 2}, dt, g)}, "empty"}};
}

std::vector<Sample> matmul_samples(DType dt, Generator& g) {
  return {{{U({4}, dt, g), U({4}, dt, g)}, "1-d x 1-d"},
          {{U({3, 4}, dt, g), U({4}, dt, g)}, "2-d x 1-d"},
          {{U({4}, dt, g), U({4, 3}, dt, g)}, "1-d x 2-d"},
          {{U({3, 4}, dt, g), U({4, 5}, dt, g)}, "2-d x 2-d"},
          {{U({2, 3, 4}, dt, g), U({4, 5}, dt, g)}, "batched x 2-d (folded)"},
          {{U({2, 3, 4}, dt, g), U({4}, dt, g)}, "batched x 1-d"},
          {{U({4}, dt, g), U({2, 4, 3}, dt, g)}, "1-d x batched"},
          {{U({3, 4}, dt, g), U({2, 4, 5}, dt, g)}, "2-d x batched"},
          {{U({2, 1, 3, 4}, dt, g), U({3, 4, 2}, dt, g)}, "batch broadcast"},
          {{U({2, 4, 3}, dt, g).transpose(1, 2), U({2, 4, 5}, dt, g)}, "transposed batch"},
          {{U({0, 3, 4}, dt, g), U({4, 2}, dt, g)}, "empty"}};
}

// ---- einsum ------------------------------------------------------------------------------------

constexpr int kLabels = 52;
constexpr int kEllipsis = -1;

int label_index(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  return -2;
}
char label_char(int l) { return l < 26 ? char('A' + l) : char('a' + l - 26); }

// One term of the equation: labels in order, kEllipsis where "..." stands.
std::vector<int> parse_term(const std::string& term, const std::string& eq) {
  std::vector<int> out;
  bool ell = false;
  for (size_t i = 0; i < term.size(); ++i) {
    char c = term[i];
    if (c == '.') {
      if (term.compare(i, 3, "...") != 0)
        raise<ValueError>("einsum(): found '.' that is not part of an ellipsis in '{}'", eq);
      FOUNDRY_CHECK_AS(ValueError, !ell, "einsum(): found more than one ellipsis in a term of '{}'", eq);
      ell = true;
      out.push_back(kEllipsis);
      i += 2;
      continue;
    }
    int l = label_index(c);
    if (l < 0) raise<ValueError>("einsum(): invalid subscript '{}' in '{}': subscripts must be letters in [a-zA-Z]", c, eq);
    out.push_back(l);
  }
  return out;
}

// A contracted pair: left and right have the same rank (aligned dims); dims in sum_dims are
// summed (left with size 1 there afterwards). Reduces to one bmm over [batch, lo, sum] x
// [batch, sum, ro].
Tensor sumproduct_pair(Tensor left, Tensor right, const std::vector<int64_t>& sum_dims) {
  const int64_t nd = left.dim();
  std::vector<bool> is_sum(size_t(nd), false);
  for (int64_t d : sum_dims) is_sum[size_t(d)] = true;
  std::vector<int64_t> lro, lo, ro, sm;
  int64_t B = 1, L = 1, R = 1, S = 1;
  Shape lro_sizes, lo_sizes, ro_sizes;
  for (int64_t d = 0; d < nd; ++d) {
    int64_t ls = left.size(d), rs = right.size(d);
    if (is_sum[size_t(d)]) {
      if (ls == 1 && rs == 1) {
        sm.push_back(d);
      } else if (ls == 1) {
        right = sum(right, {d}, true);
        sm.push_back(d);
      } else if (rs == 1) {
        left = sum(left, {d}, true);
        sm.push_back(d);
      } else {
        FOUNDRY_CHECK_AS(ValueError, ls == rs, "einsum(): contracted dimension sizes {} and {} do not match", ls, rs);
        sm.push_back(d);
        S *= ls;
      }
    } else if (ls == rs) {
      lro.push_back(d);
      lro_sizes.push_back(ls);
      B *= ls;
    } else if (rs == 1) {
      lo.push_back(d);
      lo_sizes.push_back(ls);
      L *= ls;
    } else if (ls == 1) {
      ro.push_back(d);
      ro_sizes.push_back(rs);
      R *= rs;
    } else {
      raise<ValueError>("einsum(): operands do not broadcast: sizes {} and {} for the same subscript", ls, rs);
    }
  }
  std::vector<int64_t> lperm, rperm;
  for (auto* v : {&lro, &lo, &sm, &ro}) lperm.insert(lperm.end(), v->begin(), v->end());
  for (auto* v : {&lro, &sm, &ro, &lo}) rperm.insert(rperm.end(), v->begin(), v->end());
  Tensor l3 = left.permute(lperm).reshape({B, L, S});
  Tensor r3 = right.permute(rperm).reshape({B, S, R});
  Tensor res = bmm(l3, r3);
  // [lro..., lo..., sum (1)..., ro...] then back to the aligned order.
  Shape out_sizes;
  for (int64_t s : lro_sizes) out_sizes.push_back(s);
  for (int64_t s : lo_sizes) out_sizes.push_back(s);
  for (size_t i = 0; i < sm.size(); ++i) out_sizes.push_back(1);
  for (int64_t s : ro_sizes) out_sizes.push_back(s);
  res = res.reshape(out_sizes);
  std::vector<int64_t> order;
  for (auto* v : {&lro, &lo, &sm, &ro}) order.insert(order.end(), v->begin(), v->end());
  std::vector<int64_t> inv(static_cast<size_t>(nd));
  for (int64_t i = 0; i < nd; ++i) inv[size_t(order[size_t(i)])] = i;
  return res.permute(inv);
}

Tensor einsum_impl(const std::string& equation, const std::vector<Tensor>& operands) {
  std::string eq;
  for (char c : equation)
    if (c != ' ') eq.push_back(c);
  FOUNDRY_CHECK_AS(ValueError, !operands.empty(), "einsum(): must provide at least one operand");
  size_t arrow = eq.find("->");
  std::string lhs = arrow == std::string::npos ? eq : eq.substr(0, arrow);
  std::vector<std::vector<int>> terms;
  {
    size_t start = 0;
    while (true) {
      size_t comma = lhs.find(',', start);
      terms.push_back(parse_term(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start), eq));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  if (terms.size() != operands.size())
    raise<ValueError>("einsum(): the equation '{}' has {} operand terms but {} operands were given", equation,
                      terms.size(), operands.size());
  const size_t n_ops = operands.size();
  // Ellipsis dims of each operand, and the most of any.
  std::vector<int64_t> ell_dims(n_ops, 0);
  int64_t E = 0;
  std::array<int, kLabels> count{};
  for (size_t i = 0; i < n_ops; ++i) {
    const auto& t = terms[i];
    int64_t nlab = 0;
    bool has_ell = false;
    for (int l : t) {
      if (l == kEllipsis) has_ell = true;
      else {
        ++nlab;
        count[size_t(l)]++;
      }
    }
    int64_t nd = operands[i].dim();
    if (has_ell) {
      FOUNDRY_CHECK_AS(ValueError, nd >= nlab,
                       "einsum(): the number of subscripts in the equation ({}) is more than the number of dimensions "
                       "({}) for operand {}",
                       nlab, nd, i);
      ell_dims[i] = nd - nlab;
      E = std::max(E, ell_dims[i]);
    } else {
      FOUNDRY_CHECK_AS(ValueError, nd == nlab,
                       "einsum(): the number of subscripts in the equation ({}) does not match the number of "
                       "dimensions ({}) for operand {} and no ellipsis was given",
                       nlab, nd, i);
    }
  }
  // Axes: 0..E-1 are ellipsis dims, E + l is label l.
  const int n_axes = int(E) + kLabels;
  std::vector<int> out_axes;
  bool out_has_ell = false;
  if (arrow != std::string::npos) {
    std::vector<int> rhs = parse_term(eq.substr(arrow + 2), eq);
    std::array<bool, kLabels> seen{};
    for (int l : rhs) {
      if (l == kEllipsis) {
        out_has_ell = true;
        for (int e = 0; e < E; ++e) out_axes.push_back(e);
        continue;
      }
      FOUNDRY_CHECK_AS(ValueError, count[size_t(l)] > 0,
                       "einsum(): output subscript {} does not appear in the equation for any input operand",
                       label_char(l));
      FOUNDRY_CHECK_AS(ValueError, !seen[size_t(l)], "einsum(): output subscript {} appears more than once in the output",
                       label_char(l));
      seen[size_t(l)] = true;
      out_axes.push_back(int(E) + l);
    }
  } else {
    out_has_ell = true;
    for (int e = 0; e < E; ++e) out_axes.push_back(e);
    for (int l = 0; l < kLabels; ++l)
      if (count[size_t(l)] == 1) out_axes.push_back(int(E) + l);
  }
  // Aligned order: output axes, then the summed axes.
  std::vector<int> pos(size_t(n_axes), -1);
  std::vector<int> aligned = out_axes;
  for (size_t i = 0; i < aligned.size(); ++i) pos[size_t(aligned[i])] = int(i);
  const int n_out = int(aligned.size());
  if (!out_has_ell)
    for (int e = 0; e < E; ++e) {
      pos[size_t(e)] = int(aligned.size());
      aligned.push_back(e);
    }
  for (int l = 0; l < kLabels; ++l)
    if (count[size_t(l)] > 0 && pos[size_t(E + l)] < 0) {
      pos[size_t(E + l)] = int(aligned.size());
      aligned.push_back(int(E) + l);
    }
  const int64_t nd = int64_t(aligned.size());

  // Each operand: diagonals for repeated subscripts, then permuted and unsqueezed to the aligned
  // order. has[i][d]: operand i has aligned dim d.
  std::vector<Tensor> al(n_ops);
  std::vector<std::vector<bool>> has(n_ops, std::vector<bool>(size_t(nd), false));
  for (size_t i = 0; i < n_ops; ++i) {
    Tensor t = operands[i];
    std::vector<int> dim_axis;  // aligned position of each current dim of t
    for (int l : terms[i]) {
      if (l == kEllipsis) {
        for (int64_t e = 0; e < ell_dims[i]; ++e) dim_axis.push_back(pos[size_t(E - ell_dims[i] + e)]);
      } else {
        dim_axis.push_back(pos[size_t(E + l)]);
      }
    }
    // Repeated subscripts: take the diagonal (appended as the last dim).
    for (size_t a = 0; a < dim_axis.size(); ++a) {
      for (size_t b = a + 1; b < dim_axis.size(); ++b) {
        if (dim_axis[a] != dim_axis[b]) continue;
        FOUNDRY_CHECK_AS(ValueError, t.size(int64_t(a)) == t.size(int64_t(b)),
                         "einsum(): subscript {} is repeated for operand {} but the sizes don't match, {} != {}",
                         label_char(aligned[size_t(dim_axis[a])] - int(E)), i, t.size(int64_t(a)), t.size(int64_t(b)));
        int axis = dim_axis[a];
        t = diagonal(t, 0, int64_t(a), int64_t(b));
        dim_axis.erase(dim_axis.begin() + long(b));
        dim_axis.erase(dim_axis.begin() + long(a));
        dim_axis.push_back(axis);
        a = size_t(-1);  // restart the scan
        break;
      }
    }
    std::vector<int64_t> perm(dim_axis.size());
    std::iota(perm.begin(), perm.end(), 0);
    std::sort(perm.begin(), perm.end(), [&](int64_t x, int64_t y) { return dim_axis[size_t(x)] < dim_axis[size_t(y)]; });
    t = t.permute(perm);
    Shape sizes(size_t(nd), 1);
    for (size_t k = 0; k < perm.size(); ++k) {
      int ax = dim_axis[size_t(perm[k])];
      sizes[size_t(ax)] = t.size(int64_t(k));
      has[i][size_t(ax)] = true;
    }
    al[i] = t.reshape(sizes);
  }
  // Broadcast check per aligned dim.
  for (int64_t d = 0; d < nd; ++d) {
    int64_t size = 1;
    for (size_t i = 0; i < n_ops; ++i) {
      int64_t s = al[i].size(d);
      if (s == 1) continue;
      if (size != 1 && s != size)
        raise<ValueError>("einsum(): operands do not broadcast with remapped shapes: dimension for {} has sizes {} and {}",
                          aligned[size_t(d)] < E ? std::string("...") : std::string(1, label_char(aligned[size_t(d)] - int(E))),
                          size, s);
      size = s;
    }
  }
  // Last operand holding each summed dim: it is contracted there.
  std::vector<int> last(size_t(nd), -1);
  for (size_t i = 0; i < n_ops; ++i)
    for (int64_t d = n_out; d < nd; ++d)
      if (has[i][size_t(d)]) last[size_t(d)] = int(i);
  auto sum_only_in = [&](Tensor t, int i) {
    // Summed dims held by operand i alone are summed out right away.
    std::vector<int64_t> dims;
    for (int64_t d = n_out; d < nd; ++d) {
      if (!has[size_t(i)][size_t(d)] || t.size(d) == 1) continue;
      bool elsewhere = false;
      for (size_t j = 0; j < n_ops; ++j)
        if (int(j) != i && has[j][size_t(d)]) elsewhere = true;
      if (!elsewhere) dims.push_back(d);
    }
    return dims.empty() ? t : sum(t, dims, true);
  };
  Tensor result = sum_only_in(al[0], 0);
  std::vector<bool> res_has = has[0];
  for (size_t i = 1; i < n_ops; ++i) {
    Tensor right = sum_only_in(al[i], int(i));
    std::vector<int64_t> sum_dims;
    for (int64_t d = n_out; d < nd; ++d) {
      if (last[size_t(d)] == int(i) && (res_has[size_t(d)] || has[i][size_t(d)])) sum_dims.push_back(d);
      res_has[size_t(d)] = res_has[size_t(d)] || has[i][size_t(d)];
    }
    result = sumproduct_pair(result, right, sum_dims);
  }
  // Anything still not summed (single operand, or dims no pair contracted).
  std::vector<int64_t> rest;
  for (int64_t d = n_out; d < nd; ++d)
    if (result.size(d) != 1) rest.push_back(d);
  if (!rest.empty()) result = sum(result, rest, true);
  Shape out_sizes;
  for (int d = 0; d < n_out; ++d) out_sizes.push_back(result.size(d));
  return result.reshape(out_sizes);
}

Tensor tensordot_impl(const Tensor& a, const Tensor& b, const std::vector<int64_t>& dims_a_in,
                      const std::vector<int64_t>& dims_b_in) {
  FOUNDRY_CHECK_AS(ValueError, dims_a_in.size() == dims_b_in.size(),
                   "tensordot: both dimension lists should have the same length, got {} and {}", dims_a_in.size(),
                   dims_b_in.size());
  std::vector<bool> ca(size_t(a.dim()), false), cb(size_t(b.dim()), false);
  std::vector<int64_t> dims_a, dims_b;
  int64_t S = 1;
  for (size_t i = 0; i < dims_a_in.size(); ++i) {
    int64_t da = wrap_dim(dims_a_in[i], a.dim(), "tensordot"), db = wrap_dim(dims_b_in[i], b.dim(), "tensordot");
    FOUNDRY_CHECK_AS(ValueError, a.size(da) == b.size(db),
                     "tensordot: contracted dimensions need to match, but first has size {} in dim {} and second has "
                     "size {} in dim {}",
                     a.size(da), da, b.size(db), db);
    FOUNDRY_CHECK_AS(ValueError, !ca[size_t(da)] && !cb[size_t(db)], "tensordot: a dim is listed twice");
    ca[size_t(da)] = cb[size_t(db)] = true;
    dims_a.push_back(da);
    dims_b.push_back(db);
    S *= a.size(da);
  }
  std::vector<int64_t> pa, pb;
  Shape out;
  int64_t Fa = 1, Fb = 1;
  for (int64_t d = 0; d < a.dim(); ++d)
    if (!ca[size_t(d)]) {
      pa.push_back(d);
      out.push_back(a.size(d));
      Fa *= a.size(d);
    }
  pa.insert(pa.end(), dims_a.begin(), dims_a.end());
  pb = dims_b;
  for (int64_t d = 0; d < b.dim(); ++d)
    if (!cb[size_t(d)]) {
      pb.push_back(d);
      out.push_back(b.size(d));
      Fb *= b.size(d);
    }
  Tensor res = mm(a.permute(pa).reshape({Fa, S}), b.permute(pb).reshape({S, Fb}));
  return res.reshape(out);
}

Tensor matmul_impl(const Tensor& a, const Tensor& b) {
  const int64_t da = a.dim(), db = b.dim();
  FOUNDRY_CHECK_AS(ValueError, da > 0 && db > 0,
                   "matmul: both arguments to matmul need to be at least 1D, but they are {}D and {}D", da, db);
  if (da == 1 && db == 1) return dot(a, b);
  if (da == 2 && db == 1) return mv(a, b);
  if (da == 1 && db == 2) return mm(a.unsqueeze(0), b).squeeze(0);
  if (da == 2 && db == 2) return mm(a, b);
  const int64_t K = a.size(-1);
  if (da >= 3 && db <= 2) {
    // Fold the batch into the rows of one mm when that needs no copy (always for a contiguous a).
    Shape rows_shape(a.sizes());
    rows_shape.pop_back();
    int64_t rows = numel_of(rows_shape);
    bool viewable = a.is_contiguous();
    if (!viewable) {
      // rows fold without copying when every batch dim steps over whole rows of the next
      viewable = true;
      for (int64_t d = da - 2; d > 0; --d)
        if (a.size(d - 1) != 1 && a.stride(d - 1) != a.stride(d) * a.size(d)) viewable = false;
    }
    if (viewable) {
      FOUNDRY_CHECK_AS(ValueError, K == b.size(0),
                       "matmul: mat1 and mat2 shapes cannot be multiplied ({}x{} and {})", rows, K,
                       db == 2 ? fmt::format("{}x{}", b.size(0), b.size(1)) : fmt::format("{}", b.size(0)));
      Tensor folded = a.reshape({rows, K});
      if (db == 1) return mv(folded, b).reshape(rows_shape);
      Shape out = rows_shape;
      out.push_back(b.size(1));
      return mm(folded, b).reshape(out);
    }
  }
  // General case: broadcast the batch dims, one bmm.
  Tensor a2 = da == 1 ? a.unsqueeze(0) : a;
  Tensor b2 = db == 1 ? b.unsqueeze(-1) : b;
  const int64_t M = a2.size(-2), N = b2.size(-1);
  FOUNDRY_CHECK_AS(ValueError, K == b2.size(-2),
                   "matmul: shapes {} and {} cannot be multiplied ({} columns against {} rows)", shape_str(a.sizes()),
                   shape_str(b.sizes()), K, b2.size(-2));
  Shape ba(a2.sizes()), bb(b2.sizes());
  ba.pop_back();
  ba.pop_back();
  bb.pop_back();
  bb.pop_back();
  Shape batch = broadcast_shapes(ba, bb, "matmul");
  int64_t B = numel_of(batch);
  Shape ea = batch, eb = batch;
  ea.push_back(M);
  ea.push_back(K);
  eb.push_back(K);
  eb.push_back(N);
  Tensor a3 = (Shape(a2.sizes()) == ea ? a2 : a2.expand(ea)).reshape({B, M, K});
  Tensor b3 = (Shape(b2.sizes()) == eb ? b2 : b2.expand(eb)).reshape({B, K, N});
  Shape out = batch;
  if (da > 1) out.push_back(M);
  if (db > 1) out.push_back(N);
  return bmm(a3, b3).reshape(out);
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) { return ops::call1(FOUNDRY_OP("matmul"), {a, b}); }
Tensor mm(const Tensor& a, const Tensor& b) { return ops::call1(FOUNDRY_OP("mm"), {a, b}); }
Tensor bmm(const Tensor& a, const Tensor& b) { return ops::call1(FOUNDRY_OP("bmm"), {a, b}); }
Tensor mv(const Tensor& a, const Tensor& v) { return ops::call1(FOUNDRY_OP("mv"), {a, v}); }
Tensor dot(const Tensor& a, const Tensor& b) { return ops::call1(FOUNDRY_OP("dot"), {a, b}); }
Tensor outer(const Tensor& a, const Tensor& b) { return ops::call1(FOUNDRY_OP("outer"), {a, b}); }
Tensor addmm(const Tensor& input, const Tensor& m1, const Tensor& m2, const Scalar& beta, const Scalar& alpha) {
  return ops::call1(FOUNDRY_OP("addmm"), {input, m1, m2, beta, alpha});
}
Tensor baddbmm(const Tensor& input, const Tensor& b1, const Tensor& b2, const Scalar& beta, const Scalar& alpha) {
  return ops::call1(FOUNDRY_OP("baddbmm"), {input, b1, b2, beta, alpha});
}
Tensor einsum(const std::string& equation, const std::vector<Tensor>& operands) {
  return ops::call1(FOUNDRY_OP("einsum"), {equation, operands});
}
Tensor tensordot(const Tensor& a, const Tensor& b, IntList dims_a, IntList dims_b) {
  return ops::call1(FOUNDRY_OP("tensordot"), {a, b, dims_a, dims_b});
}
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  return ops::call1(FOUNDRY_OP("linear"), {x, weight, bias});
}

namespace ops {

void register_linalg_ops(Registry& r) {
  register_linalg_gemm_ops(r);
  register_linalg_lapack_ops(r);
}

void register_linalg_gemm_ops(Registry& r) {
  const std::vector<DType> mm_types = {DType::UInt8, DType::Int8,     DType::Int16,   DType::Int32,
                                       DType::Int64, DType::BFloat16, DType::Float32, DType::Float64};
  const std::string f16_note = "float16 is also accepted (computed in float32); PyTorch 1.13 has no CPU float16 GEMM.";

  r.add({.schema_text = "matmul(Tensor input, Tensor other) -> Tensor",
         .family = "linalg",
         .doc = "Matrix product with NumPy semantics: 1-d operands are vectors, batch dims broadcast.",
         .kind = OpDef::Kind::Composite,
         .forward = [](const Args& a) { return std::vector<Tensor>{matmul_impl(a.tensor(0), a.tensor(1))}; },
         .dtypes = mm_types,
         .samples = matmul_samples,
         .notes = f16_note});

  r.add({.schema_text = "mm(Tensor input, Tensor mat2) -> Tensor",
         .family = "linalg",
         .doc = "Product of two matrices.",
         .saves = {"input", "mat2"},
         .forward =
             [](const Args& a) {
               const Tensor &x = a.tensor(0), &y = a.tensor(1);
               FOUNDRY_CHECK_AS(ValueError, x.dim() == 2, "mm: input must be a matrix, got a {}-d tensor", x.dim());
               FOUNDRY_CHECK_AS(ValueError, y.dim() == 2, "mm: mat2 must be a matrix, got a {}-d tensor", y.dim());
               FOUNDRY_CHECK_AS(ValueError, x.size(1) == y.size(0),
                                "mm: mat1 and mat2 shapes cannot be multiplied ({}x{} and {}x{})", x.size(0), x.size(1),
                                y.size(0), y.size(1));
               check_matmul_dtype("mm", x, y);
               Tensor out = empty({x.size(0), y.size(1)}, x.dtype());
               Tensor o3 = alias_3d(out, 1, x.size(0), y.size(1));
               kernels::gemm(as_3d(x), as_3d(y), o3);
               return std::vector<Tensor>{out};
             },
         .backward =
             [](BackwardContext& c) {
               const Tensor& g = c.grad();
               Tensor ga, gb;
               if (c.needs_grad("input")) ga = mm(g, mT(c.input("mat2")));
               if (c.needs_grad("mat2")) gb = mm(mT(c.input("input")), g);
               return std::vector<Tensor>{ga, gb};
             },
         .dtypes = mm_types,
         .samples = mm_samples,
         .notes = f16_note});

  r.add({.schema_text = "bmm(Tensor input, Tensor mat2) -> Tensor",
         .family = "linalg",
         .doc = "Batched matrix product of [b, n, m] and [b, m, p].",
         .saves = {"input", "mat2"},
         .forward =
             [](const Args& a) {
               const Tensor &x = a.tensor(0), &y = a.tensor(1);
               FOUNDRY_CHECK_AS(ValueError, x.dim() == 3, "bmm: input must be a 3-d tensor, got {}-d", x.dim());
               FOUNDRY_CHECK_AS(ValueError, y.dim() == 3, "bmm: mat2 must be a 3-d tensor, got {}-d", y.dim());
               FOUNDRY_CHECK_AS(ValueError, x.size(0) == y.size(0) && x.size(2) == y.size(1),
                                "bmm: batch shapes {} and {} cannot be multiplied", shape_str(x.sizes()),
                                shape_str(y.sizes()));
               check_matmul_dtype("bmm", x, y);
               Tensor out = empty({x.size(0), x.size(1), y.size(2)}, x.dtype());
               kernels::gemm(x, y, out);
               return std::vector<Tensor>{out};
             },
         .backward =
             [](BackwardContext& c) {
               const Tensor& g = c.grad();
               Tensor ga, gb;
               if (c.needs_grad("input")) ga = bmm(g, mT(c.input("mat2")));
               if (c.needs_grad("mat2")) gb = bmm(mT(c.input("input")), g);
               return std::vector<Tensor>{ga, gb};
             },
         .dtypes = mm_types,
         .samples = bmm_samples,
         .notes = f16_note});

  r.add({.schema_text = "mv(Tensor input, Tensor vec) -> Tensor",
         .family = "linalg",
         .doc = "Matrix-vector product.",
         .saves = {"input", "vec"},
         .forward =
             [](const Args& a) {
               const Tensor &x = a.tensor(0), &v = a.tensor(1);
               FOUNDRY_CHECK_AS(ValueError, x.dim() == 2 && v.dim() == 1,
                                "mv: expected a matrix and a vector, got {}-d and {}-d tensors", x.dim(), v.dim());
               FOUNDRY_CHECK_AS(ValueError, x.size(1) == v.size(0),
                                "mv: size mismatch, got input ({}x{}) and vec ({})", x.size(0), x.size(1), v.size(0));
               check_matmul_dtype("mv", x, v);
               Tensor out = empty({x.size(0)}, x.dtype());
               Tensor v3 = make_tensor(v.storage(), {1, v.size(0), 1}, {0, v.stride(0), 1}, v.storage_offset(), v.dtype());
               Tensor o3 = alias_3d(out, 1, x.size(0), 1);
               kernels::gemm(as_3d(x), v3, o3);
               return std::vector<Tensor>{out};
             },
         .backward =
             [](BackwardContext& c) {
               const Tensor& g = c.grad();
               Tensor ga, gv;
               if (c.needs_grad("input")) ga = outer(g, c.input("vec"));
               if (c.needs_grad("vec")) gv = mv(mT(c.input("input")), g);
               return std::vector<Tensor>{ga, gv};
             },
         .dtypes = mm_types,
         .samples =
             [](DType dt, Generator& g) {
               return std::vector<Sample>{{{U({3, 4}, dt, g), U({4}, dt, g)}},
                                          {{U({4, 3}, dt, g).t(), U({4}, dt, g)}, "transposed"},
                                          {{U({5, 8}, dt, g), U({16}, dt, g).slice(0, 0, None, 2)}, "strided vec"},
                                          {{U({0, 3}, dt, g), U({3}, dt, g)}, "empty"}};
             },
         .notes = f16_note});

  r.add({.schema_text = "dot(Tensor input, Tensor tensor) -> Tensor",
         .family = "linalg",
         .doc = "Inner product of two 1-d tensors (0-d result).",
         .saves = {"input", "tensor"},
         .forward =
             [](const Args& a) {
               const Tensor &x = a.tensor(0), &y = a.tensor(1);
               FOUNDRY_CHECK_AS(ValueError, x.dim() == 1 && y.dim() == 1,
                                "dot: 1D tensors expected, but got {}D and {}D tensors", x.dim(), y.dim());
               FOUNDRY_CHECK_AS(ValueError, x.size(0) == y.size(0),
                                "dot: inconsistent tensor size, expected tensor [{}] and src [{}] to have the same "
                                "number of elements",
                                x.size(0), y.size(0));
               if (x.dtype() != y.dtype())
                 raise<TypeError>("dot: expected both vectors to have same dtype, but found {} and {}",
                                  dtype_name(x.dtype()), dtype_name(y.dtype()));
               check_matmul_dtype("dot", x, y);
               Tensor out = empty({}, x.dtype());
               Tensor x3 = make_tensor(x.storage(), {1, 1, x.size(0)}, {0, 0, x.stride(0)}, x.storage_offset(), x.dtype());
               Tensor y3 = make_tensor(y.storage(), {1, y.size(0), 1}, {0, y.stride(0), 1}, y.storage_offset(), y.dtype());
               Tensor o3 = alias_3d(out, 1, 1, 1);
               kernels::gemm(x3, y3, o3);
               return std::vector<Tensor>{out};
             },
         .backward =
             [](BackwardContext& c) {
               const Tensor& g = c.grad();
               Tensor ga, gb;
               if (c.needs_grad("input")) ga = g * c.input("tensor");
               if (c.needs_grad("tensor")) gb = g * c.input("input");
               return std::vector<Tensor>{ga, gb};
             },
         .dtypes = mm_types,
         .samples =
             [](DType dt, Generator& g) {
               return std::vector<Sample>{{{U({5}, dt, g), U({5}, dt, g)}},
                                          {{U({40}, dt, g), U({80}, dt, g).slice(0, 0, None, 2)}, "strided"},
                                          {{U({0}, dt, g), U({0}, dt, g)}, "empty"}};
             },
         .notes = f16_note});

  r.add({.schema_text = "outer(Tensor input, Tensor vec2) -> Tensor",
         .family = "linalg",
         .doc = "Outer product of two vectors (input[:, None] * vec2, with type promotion).",
         .kind = OpDef::Kind::Composite,
         .forward =
             [](const Args& a) {
               const Tensor &x = a.tensor(0), &y = a.tensor(1);
               FOUNDRY_CHECK_AS(ValueError, x.dim() == 1, "outer: expected 1-D argument input, but got {}-D", x.dim());
               FOUNDRY_CHECK_AS(ValueError, y.dim() == 1, "outer: expected 1-D argument vec2, but got {}-D", y.dim());
               return std::vector<Tensor>{x.reshape({-1, 1}) * y};
             },
         .dtypes = kNumericTypes,
         .samples =
             [](DType dt, Generator& g) {
               return std::vector<Sample>{{{U({3}, dt, g), U({4}, dt, g)}}, {{U({0}, dt, g), U({2}, dt, g)}, "empty"}};
             }});

  auto addmm_like = [](bool batched) {
    return [batched](const Args& a) {
      const char* op = batched ? "baddbmm" : "addmm";
      const Tensor &in = a.tensor(0), &x = a.tensor(1), &y = a.tensor(2);
      const int64_t nd = batched ? 3 : 2;
      FOUNDRY_CHECK_AS(ValueError, x.dim() == nd && y.dim() == nd, "{}: expected {}-d operands, got {}-d and {}-d", op,
                       nd, x.dim(), y.dim());
      FOUNDRY_CHECK_AS(ValueError, x.size(-1) == y.size(-2) && (!batched || x.size(0) == y.size(0)),
                       "{}: shapes {} and {} cannot be multiplied", op, shape_str(x.sizes()), shape_str(y.sizes()));
      check_matmul_dtype(op, x, y);
      if (in.dtype() != x.dtype())
        raise<TypeError>("{}: expected input to have the dtype of the operands ({}), got {}", op, dtype_name(x.dtype()),
                         dtype_name(in.dtype()));
      Scalar beta = a[3].scalar(), alpha = a[4].scalar();
      check_int_alpha(op, x.dtype(), beta, alpha);
      Shape out_shape = batched ? Shape{x.size(0), x.size(1), y.size(2)} : Shape{x.size(0), y.size(1)};
      FOUNDRY_CHECK_AS(ValueError, in.dim() <= nd && Shape(broadcast_shapes(in.sizes(), out_shape, op)) == out_shape,
                       "{}: input of shape {} does not broadcast to the result shape {}", op, shape_str(in.sizes()),
                       shape_str(out_shape));
      Tensor out = empty(out_shape, x.dtype());
      Tensor o3 = batched ? out : alias_3d(out, 1, out_shape[0], out_shape[1]);
      add_product(op, in, batched ? x : as_3d(x), batched ? y : as_3d(y), o3, beta, alpha);
      return std::vector<Tensor>{out};
    };
  };
  auto addmm_backward = [](bool batched) {
    return [batched](BackwardContext& c) {
      const Tensor& g = c.grad();
      Scalar beta = c.arg("beta").scalar(), alpha = c.arg("alpha").scalar();
      const char* n1 = batched ? "batch1" : "mat1";
      const char* n2 = batched ? "batch2" : "mat2";
      Tensor gi, g1, g2;
      if (c.needs_grad("input")) gi = sum_to(scaled(g, beta), c.input_sizes("input"));
      auto prod = [&](const Tensor& x, const Tensor& y) { return batched ? bmm(x, y) : mm(x, y); };
      if (c.needs_grad(n1)) g1 = scaled(prod(g, mT(c.input(n2))), alpha);
      if (c.needs_grad(n2)) g2 = scaled(prod(mT(c.input(n1)), g), alpha);
      return std::vector<Tensor>{gi, g1, g2};
    };
  };
  r.add({.schema_text = "addmm(Tensor input, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1) -> Tensor",
         .family = "linalg",
         .doc = "beta * input + alpha * (mat1 @ mat2); input broadcasts; beta = 0 ignores input (NaN-safe).",
         .saves = {"mat1", "mat2"},
         .forward = addmm_like(false),
         .backward = addmm_backward(false),
         .dtypes = mm_types,
         .samples =
             [](DType dt, Generator& g) {
               bool fl = is_floating(dt);
               Scalar half = fl ? Scalar(0.5) : Scalar(2), two = fl ? Scalar(-1.5) : Scalar(3);
               return std::vector<Sample>{
                   {{U({3, 5}, dt, g), U({3, 4}, dt, g), U({4, 5}, dt, g), Scalar(1), Scalar(1)}},
                   {{U({5}, dt, g), U({3, 4}, dt, g), U({4, 5}, dt, g), Scalar(1), Scalar(1)}, "bias"},
                   {{U({3, 1}, dt, g), U({3, 4}, dt, g), U({5, 4}, dt, g).t(), half, two}, "broadcast, scaled"},
                   {{U({3, 5}, dt, g), U({3, 4}, dt, g), U({4, 5}, dt, g), Scalar(0), two}, "beta 0"},
                   {{U({}, dt, g), U({1, 4}, dt, g), U({4, 5}, dt, g), half, Scalar(1)}, "0-d input, row"}};
             },
         .notes = f16_note});
  r.add({.schema_text =
             "baddbmm(Tensor input, Tensor batch1, Tensor batch2, *, Scalar beta=1, Scalar alpha=1) -> Tensor",
         .family = "linalg",
         .doc = "beta * input + alpha * (batch1 @ batch2) over a batch; input broadcasts.",
         .saves = {"batch1", "batch2"},
         .forward = addmm_like(true),
         .backward = addmm_backward(true),
         .dtypes = mm_types,
         .samples =
             [](DType dt, Generator& g) {
               bool fl = is_floating(dt);
               Scalar half = fl ? Scalar(0.5) : Scalar(2), two = fl ? Scalar(-1.5) : Scalar(3);
               return std::vector<Sample>{
                   {{U({2, 3, 5}, dt, g), U({2, 3, 4}, dt, g), U({2, 4, 5}, dt, g), Scalar(1), Scalar(1)}},
                   {{U({5}, dt, g), U({2, 3, 4}, dt, g), U({2, 4, 5}, dt, g), Scalar(1), Scalar(1)}, "bias"},
                   {{U({3, 1}, dt, g), U({2, 3, 4}, dt, g), U({2, 5, 4}, dt, g).transpose(1, 2), half, two},
                    "broadcast, scaled"},
                   {{U({2, 3, 5}, dt, g), U({2, 3, 4}, dt, g), U({2, 4, 5}, dt, g), Scalar(0), two}, "beta 0"}};
             },
         .notes = f16_note});

  r.add({.schema_text = "linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor",
         .family = "nn",
         .doc = "input @ weight^T + bias over the last dim of input (weight [out, in]).",
         .saves = {"input", "weight"},
         .forward =
             [](const Args& a) {
               const Tensor &x = a.tensor(0), &w = a.tensor(1);
               const Tensor& bias = a[2].is_none() ? Tensor() : a.tensor(2);
               FOUNDRY_CHECK_AS(ValueError, w.dim() == 2, "linear: weight must be a matrix [out, in], got shape {}",
                                shape_str(w.sizes()));
               FOUNDRY_CHECK_AS(ValueError, x.dim() >= 1, "linear: input must have at least 1 dim");
               const int64_t in = w.size(1), out_f = w.size(0);
               FOUNDRY_CHECK_AS(ValueError, x.size(-1) == in,
                                "linear: input with {} features (shape {}) does not match weight of shape {}",
                                x.size(-1), shape_str(x.sizes()), shape_str(w.sizes()));
               check_matmul_dtype("linear", x, w);
               if (bias.defined()) {
                 FOUNDRY_CHECK_AS(TypeError, bias.dtype() == x.dtype(), "linear: bias has dtype {}, expected {}",
                                  dtype_name(bias.dtype()), dtype_name(x.dtype()));
                 FOUNDRY_CHECK_AS(ValueError, bias.numel() == out_f || bias.numel() == 1,
                                  "linear: bias of shape {} does not match {} output features", shape_str(bias.sizes()),
                                  out_f);
                 FOUNDRY_CHECK_AS(ValueError, bias.dim() <= 1, "linear: bias must be 1-d, got shape {}",
                                  shape_str(bias.sizes()));
               }
               Shape out_shape(x.sizes());
               out_shape.back() = out_f;
               Shape lead(x.sizes());
               lead.pop_back();
               Tensor x2 = x.reshape({numel_of(lead), in});
               Tensor out = empty(out_shape, x.dtype());
               Tensor o3 = alias_3d(out, 1, x2.size(0), out_f);
               kernels::gemm(as_3d(x2), as_3d(mT(w)), o3, 1.0, 0.0, bias);
               return std::vector<Tensor>{out};
             },
         .backward =
             [](BackwardContext& c) {
               const Tensor& g = c.grad();
               const Tensor& w = c.input("weight");
               Tensor gx, gw, gb;
               if (c.needs_grad("input")) gx = matmul(g, w);
               const int64_t out_f = w.size(0);
               Tensor g2 = g.reshape({-1, out_f});
               if (c.needs_grad("weight")) {
                 const Tensor& x = c.input("input");
                 gw = mm(mT(g2), x.reshape({-1, x.size(-1)}));
               }
               if (c.needs_grad("bias")) gb = sum_to(sum(g2, {0}), c.input_sizes("bias"));
               return std::vector<Tensor>{gx, gw, gb};
             },
         .dtypes = mm_types,
         .samples =
             [](DType dt, Generator& g) {
               return std::vector<Sample>{{{U({3, 4}, dt, g), U({5, 4}, dt, g), U({5}, dt, g)}},
                                          {{U({2, 3, 4}, dt, g), U({5, 4}, dt, g), Value()}, "3-d, no bias"},
                                          {{U({4}, dt, g), U({5, 4}, dt, g), U({5}, dt, g)}, "1-d input"},
                                          {{U({0, 4}, dt, g), U({5, 4}, dt, g), U({5}, dt, g)}, "empty"},
                                          {{U({4, 3}, dt, g).t(), U({4, 5}, dt, g).t(), U({5}, dt, g)}, "transposed"}};
             },
         .ref = "torch.nn.functional.linear",
         .notes = f16_note});

  r.add({.schema_text = "einsum(str equation, Tensor[] tensors) -> Tensor",
         .family = "linalg",
         .doc = "Einstein summation: implicit or explicit output, '...', repeated subscripts (diagonals/traces); "
                "reduced to permute + reshape + bmm, contracting left to right.",
         .kind = OpDef::Kind::Composite,
         .forward =
             [](const Args& a) { return std::vector<Tensor>{einsum_impl(a[0].str(), a[1].tensor_list())}; },
         .dtypes = {DType::BFloat16, DType::Float32, DType::Float64},
         .samples =
             [](DType dt, Generator& g) {
               auto S = [](std::string eq, std::vector<Tensor> ts, std::string note) {
                 return Sample{{Value(std::move(eq)), Value(std::move(ts))}, std::move(note)};
               };
               return std::vector<Sample>{
                   S("ij,jk->ik", {U({3, 4}, dt, g), U({4, 5}, dt, g)}, "matmul"),
                   S("ij,jk", {U({3, 4}, dt, g), U({4, 2}, dt, g)}, "implicit"),
                   S("bij,bjk->bik", {U({2, 3, 4}, dt, g), U({2, 4, 2}, dt, g)}, "batched"),
                   S("...ij,...jk->...ik", {U({2, 1, 3, 4}, dt, g), U({3, 4, 2}, dt, g)}, "ellipsis broadcast"),
                   S("ii->i", {U({4, 4}, dt, g)}, "diagonal"),
                   S("ii", {U({4, 4}, dt, g)}, "trace"),
                   S("i,j->ij", {U({3}, dt, g), U({4}, dt, g)}, "outer"),
                   S("i,i->", {U({5}, dt, g), U({5}, dt, g)}, "dot"),
                   S("ijk->kji", {U({2, 3, 4}, dt, g)}, "permute"),
                   S("ij->", {U({3, 4}, dt, g)}, "sum"),
                   S("bn,anm,bm->ba", {U({2, 3}, dt, g), U({4, 3, 5}, dt, g), U({2, 5}, dt, g)}, "bilinear"),
                   S("iij->j", {U({3, 3, 2}, dt, g)}, "partial trace"),
                   S("Ab,bA->", {U({2, 3}, dt, g), U({3, 2}, dt, g)}, "upper case")};
             },
         .ref = "lambda equation, tensors: torch.einsum(equation, tensors)"});

  r.add({.schema_text = "tensordot(Tensor input, Tensor other, int[] dims_self, int[] dims_other) -> Tensor",
         .family = "linalg",
         .doc = "Contracts dims_self of input with dims_other of other (one mm after permuting).",
         .kind = OpDef::Kind::Composite,
         .forward =
             [](const Args& a) {
               return std::vector<Tensor>{tensordot_impl(a.tensor(0), a.tensor(1), a[2].int_list(), a[3].int_list())};
             },
         .dtypes = mm_types,
         .samples =
             [](DType dt, Generator& g) {
               return std::vector<Sample>{
                   {{U({2, 3, 4}, dt, g), U({4, 3, 5}, dt, g), std::vector<int64_t>{1, 2}, std::vector<int64_t>{1, 0}}},
                   {{U({3, 4}, dt, g), U({4, 5}, dt, g), std::vector<int64_t>{1}, std::vector<int64_t>{0}}, "mm"},
                   {{U({3}, dt, g), U({2}, dt, g), std::vector<int64_t>{}, std::vector<int64_t>{}}, "outer"},
                   {{U({2, 3}, dt, g), U({3, 2}, dt, g), std::vector<int64_t>{0, -1}, std::vector<int64_t>{1, 0}},
                    "full"}};
             },
         .ref = "lambda input, other, dims_self, dims_other: torch.tensordot(input, other, dims=(dims_self, "
                "dims_other))"});
}

}  // namespace ops
}  // namespace foundry
