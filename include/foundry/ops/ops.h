// Foundry's operations as C++ functions. Each is one entry of the op registry (see registry.h and
// the generated docs/ops.md): names, arguments, defaults and semantics follow PyTorch 1.13, so
// `foundry::softmax(x, -1)` is `torch.softmax(x, -1)`. Optional tensors are passed as Tensor()
// (undefined) for None. Every function records autograd history when grad mode is on.
#pragma once

#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "foundry/core/rng.h"
#include "foundry/core/tensor.h"

namespace foundry {

using OptDType = std::optional<DType>;
using OptInt = std::optional<int64_t>;
/// An optional list of dims: None (all dims), one dim, or a braced list: sum(x), sum(x, 1), sum(x, {0, 2}).
struct OptDims {
  std::optional<std::vector<int64_t>> dims;
  OptDims() = default;
  OptDims(std::nullopt_t) {}  // NOLINT
  OptDims(std::initializer_list<int64_t> l) : dims(std::vector<int64_t>(l)) {}  // NOLINT
  OptDims(std::vector<int64_t> v) : dims(std::move(v)) {}  // NOLINT
  OptDims(int64_t d) : dims(std::vector<int64_t>{d}) {}  // NOLINT
  OptDims(int d) : dims(std::vector<int64_t>{d}) {}  // NOLINT
  bool has_value() const { return dims.has_value(); }
};
using OptScalar = std::optional<Scalar>;

// ---------------------------------------------------------------------------------------------
// Creation
// ---------------------------------------------------------------------------------------------
Tensor zeros(IntList size, TensorOptions options = {});
Tensor ones(IntList size, TensorOptions options = {});
/// dtype defaults to the fill value's dtype (bool, int64 or the default float), as in PyTorch.
Tensor full(IntList size, const Scalar& fill_value, TensorOptions options = {});
Tensor zeros_like(const Tensor& input, OptDType dtype = std::nullopt);
Tensor ones_like(const Tensor& input, OptDType dtype = std::nullopt);
Tensor full_like(const Tensor& input, const Scalar& fill_value, OptDType dtype = std::nullopt);
Tensor empty_like(const Tensor& input, OptDType dtype = std::nullopt);
/// Values from start to end (exclusive) by step; int64 when all are integers, else default float.
Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step = 1, OptDType dtype = std::nullopt);
Tensor arange(const Scalar& end, OptDType dtype = std::nullopt);
Tensor linspace(const Scalar& start, const Scalar& end, int64_t steps, OptDType dtype = std::nullopt);
Tensor eye(int64_t n, OptInt m = std::nullopt, OptDType dtype = std::nullopt);
/// A 0-d tensor holding a number (a "wrapped number" when made from a Python scalar).
Tensor scalar_tensor(const Scalar& value, OptDType dtype = std::nullopt);
/// A tensor from nested data given flat, with its shape.
template <typename T>
Tensor tensor(const std::vector<T>& values, IntList shape);
template <typename T>
Tensor tensor(const std::vector<T>& values) {
  return tensor(values, {int64_t(values.size())});
}
Tensor tril(const Tensor& input, int64_t diagonal = 0);
Tensor triu(const Tensor& input, int64_t diagonal = 0);

// Random (the default generator unless one is given; same numbers for any thread count)
Tensor rand(IntList size, TensorOptions options = {}, Generator* gen = nullptr);
Tensor randn(IntList size, TensorOptions options = {}, Generator* gen = nullptr);
Tensor randint(int64_t low, int64_t high, IntList size, TensorOptions options = DType::Int64,
               Generator* gen = nullptr);
Tensor rand_like(const Tensor& input, OptDType dtype = std::nullopt);
Tensor randn_like(const Tensor& input, OptDType dtype = std::nullopt);
Tensor normal(double mean, double std, IntList size, TensorOptions options = {}, Generator* gen = nullptr);
Tensor uniform(double low, double high, IntList size, TensorOptions options = {}, Generator* gen = nullptr);
/// Draws 0/1 with probability `input` (or p when given) per element.
Tensor bernoulli(const Tensor& input, std::optional<double> p = std::nullopt, Generator* gen = nullptr);
Tensor multinomial(const Tensor& input, int64_t num_samples, bool replacement = false, Generator* gen = nullptr);
Tensor randperm(int64_t n, TensorOptions options = DType::Int64, Generator* gen = nullptr);

// ---------------------------------------------------------------------------------------------
// Conversion, copies and views
// ---------------------------------------------------------------------------------------------
Tensor to(const Tensor& input, DType dtype);
Tensor clone(const Tensor& input);
Tensor contiguous(const Tensor& input);
/// Copies src (broadcast, converted) into dst; dst keeps its layout. Records autograd.
Tensor& copy_(Tensor& dst, const Tensor& src);
Tensor& fill_(Tensor& self, const Scalar& value);
Tensor& zero_(Tensor& self);
Tensor view(const Tensor& input, IntList size);
Tensor reshape(const Tensor& input, IntList shape);
Tensor permute(const Tensor& input, IntList dims);
Tensor transpose(const Tensor& input, int64_t dim0, int64_t dim1);
Tensor t(const Tensor& input);
Tensor movedim(const Tensor& input, IntList source, IntList destination);
Tensor expand(const Tensor& input, IntList size);
Tensor broadcast_to(const Tensor& input, IntList size);
Tensor squeeze(const Tensor& input, OptInt dim = std::nullopt);
Tensor unsqueeze(const Tensor& input, int64_t dim);
Tensor flatten(const Tensor& input, int64_t start_dim = 0, int64_t end_dim = -1);
Tensor unflatten(const Tensor& input, int64_t dim, IntList sizes);
Tensor narrow(const Tensor& input, int64_t dim, int64_t start, int64_t length);
Tensor select(const Tensor& input, int64_t dim, int64_t index);
/// NumPy slicing along one dim: any step, including negative (gives negative strides).
Tensor slice(const Tensor& input, int64_t dim, OptInt start, OptInt end, int64_t step = 1);
Tensor diagonal(const Tensor& input, int64_t offset = 0, int64_t dim1 = 0, int64_t dim2 = 1);
Tensor as_strided(const Tensor& input, IntList size, IntList stride, OptInt storage_offset = std::nullopt);
/// Writes src into dst (no autograd; kernels use it). Broadcasts and converts dtypes.
void copy_into(Tensor& dst, const Tensor& src);
/// The shape two shapes broadcast to (NumPy rules); throws ValueError naming both.
Shape broadcast_shapes(IntList a, IntList b, const char* op = "");

// ---------------------------------------------------------------------------------------------
// Unary elementwise (integer inputs of floating functions become the default float dtype)
// ---------------------------------------------------------------------------------------------
Tensor neg(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor sign(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor exp2(const Tensor& x);
Tensor expm1(const Tensor& x);
Tensor log(const Tensor& x);
Tensor log2(const Tensor& x);
Tensor log10(const Tensor& x);
Tensor log1p(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor square(const Tensor& x);
Tensor reciprocal(const Tensor& x);
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
Tensor tan(const Tensor& x);
Tensor asin(const Tensor& x);
Tensor acos(const Tensor& x);
Tensor atan(const Tensor& x);
Tensor sinh(const Tensor& x);
Tensor cosh(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor asinh(const Tensor& x);
Tensor acosh(const Tensor& x);
Tensor atanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor logsigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor relu6(const Tensor& x);
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
Tensor elu(const Tensor& x, double alpha = 1.0);
Tensor selu(const Tensor& x);
Tensor celu(const Tensor& x, double alpha = 1.0);
/// approximate: "none" (erf) or "tanh".
Tensor gelu(const Tensor& x, const std::string& approximate = "none");
Tensor silu(const Tensor& x);
Tensor mish(const Tensor& x);
Tensor softplus(const Tensor& x, double beta = 1.0, double threshold = 20.0);
Tensor softsign(const Tensor& x);
Tensor hardtanh(const Tensor& x, double min_val = -1.0, double max_val = 1.0);
Tensor hardsigmoid(const Tensor& x);
Tensor hardswish(const Tensor& x);
Tensor erf(const Tensor& x);
Tensor erfc(const Tensor& x);
Tensor erfinv(const Tensor& x);
Tensor lgamma(const Tensor& x);
Tensor digamma(const Tensor& x);
Tensor floor(const Tensor& x);
Tensor ceil(const Tensor& x);
/// Round half to even; with decimals, rounds to that many decimal places.
Tensor round(const Tensor& x, int64_t decimals = 0);
Tensor trunc(const Tensor& x);
Tensor frac(const Tensor& x);
Tensor clamp(const Tensor& x, OptScalar min = std::nullopt, OptScalar max = std::nullopt);
Tensor nan_to_num(const Tensor& x, double nan = 0.0, std::optional<double> posinf = std::nullopt,
                  std::optional<double> neginf = std::nullopt);
Tensor isnan(const Tensor& x);
Tensor isinf(const Tensor& x);
Tensor isfinite(const Tensor& x);
Tensor logical_not(const Tensor& x);
Tensor bitwise_not(const Tensor& x);
/// The n-th derivative of digamma (n = 0 is digamma itself).
Tensor polygamma(int64_t n, const Tensor& x);
Tensor gelu_backward(const Tensor& grad_output, const Tensor& input, const std::string& approximate = "none");

// ---------------------------------------------------------------------------------------------
// Binary elementwise with broadcasting and PyTorch type promotion
// ---------------------------------------------------------------------------------------------
Tensor add(const Tensor& a, const Tensor& b, const Scalar& alpha = 1);
Tensor sub(const Tensor& a, const Tensor& b, const Scalar& alpha = 1);
Tensor mul(const Tensor& a, const Tensor& b);
/// rounding_mode: none (true division), "trunc" or "floor".
Tensor div(const Tensor& a, const Tensor& b, const std::optional<std::string>& rounding_mode = std::nullopt);
Tensor floor_divide(const Tensor& a, const Tensor& b);
Tensor remainder(const Tensor& a, const Tensor& b);
Tensor fmod(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Scalar& exponent);
Tensor atan2(const Tensor& a, const Tensor& b);
Tensor hypot(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor fmax(const Tensor& a, const Tensor& b);
Tensor fmin(const Tensor& a, const Tensor& b);
Tensor copysign(const Tensor& a, const Tensor& b);
Tensor xlogy(const Tensor& a, const Tensor& b);
Tensor logaddexp(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
Tensor logical_xor(const Tensor& a, const Tensor& b);
Tensor bitwise_and(const Tensor& a, const Tensor& b);
Tensor bitwise_or(const Tensor& a, const Tensor& b);
Tensor bitwise_xor(const Tensor& a, const Tensor& b);
Tensor bitwise_left_shift(const Tensor& a, const Tensor& b);
Tensor bitwise_right_shift(const Tensor& a, const Tensor& b);
Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b);
Tensor lerp(const Tensor& start, const Tensor& end, const Tensor& weight);
Tensor addcmul(const Tensor& input, const Tensor& t1, const Tensor& t2, const Scalar& value = 1);
Tensor addcdiv(const Tensor& input, const Tensor& t1, const Tensor& t2, const Scalar& value = 1);
/// NumPy isclose: |a - b| <= atol + rtol * |b| (computed without integer overflow).
Tensor isclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false);
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false);
/// Same shape and equal elements.
bool equal(const Tensor& a, const Tensor& b);

// Scalar conveniences (the scalar is a wrapped number: it does not widen the tensor's dtype).
Tensor wrap_scalar(const Scalar& s);
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, const Scalar& b);
Tensor operator-(const Tensor& a, const Scalar& b);
Tensor operator*(const Tensor& a, const Scalar& b);
Tensor operator/(const Tensor& a, const Scalar& b);
Tensor operator+(const Scalar& a, const Tensor& b);
Tensor operator-(const Scalar& a, const Tensor& b);
Tensor operator*(const Scalar& a, const Tensor& b);
Tensor operator/(const Scalar& a, const Tensor& b);
Tensor operator-(const Tensor& a);
Tensor operator==(const Tensor& a, const Tensor& b);
Tensor operator!=(const Tensor& a, const Tensor& b);
Tensor operator<(const Tensor& a, const Tensor& b);
Tensor operator<=(const Tensor& a, const Tensor& b);
Tensor operator>(const Tensor& a, const Tensor& b);
Tensor operator>=(const Tensor& a, const Tensor& b);
Tensor operator<(const Tensor& a, const Scalar& b);
Tensor operator<=(const Tensor& a, const Scalar& b);
Tensor operator>(const Tensor& a, const Scalar& b);
Tensor operator>=(const Tensor& a, const Scalar& b);
Tensor operator==(const Tensor& a, const Scalar& b);
Tensor operator!=(const Tensor& a, const Scalar& b);

// ---------------------------------------------------------------------------------------------
// Reductions (dim = None reduces everything; negative dims count from the end)
// ---------------------------------------------------------------------------------------------
Tensor sum(const Tensor& x, OptDims dim = std::nullopt, bool keepdim = false, OptDType dtype = std::nullopt);
Tensor mean(const Tensor& x, OptDims dim = std::nullopt, bool keepdim = false, OptDType dtype = std::nullopt);
Tensor prod(const Tensor& x, OptInt dim = std::nullopt, bool keepdim = false, OptDType dtype = std::nullopt);
Tensor amax(const Tensor& x, IntList dim = {}, bool keepdim = false);
Tensor amin(const Tensor& x, IntList dim = {}, bool keepdim = false);
/// (values, indices) along one dim; ties give the first index.
std::tuple<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim = false);
std::tuple<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& x, OptInt dim = std::nullopt, bool keepdim = false);
Tensor argmin(const Tensor& x, OptInt dim = std::nullopt, bool keepdim = false);
Tensor var(const Tensor& x, OptDims dim = std::nullopt, int64_t correction = 1, bool keepdim = false);
Tensor std(const Tensor& x, OptDims dim = std::nullopt, int64_t correction = 1, bool keepdim = false);
std::tuple<Tensor, Tensor> var_mean(const Tensor& x, OptDims dim = std::nullopt, int64_t correction = 1,
                                    bool keepdim = false);
std::tuple<Tensor, Tensor> std_mean(const Tensor& x, OptDims dim = std::nullopt, int64_t correction = 1,
                                    bool keepdim = false);
Tensor logsumexp(const Tensor& x, IntList dim, bool keepdim = false);
/// p = 1, 2, inf, -inf, or any positive number; 2 over all dims is the Frobenius norm.
Tensor norm(const Tensor& x, double p = 2.0, OptDims dim = std::nullopt, bool keepdim = false);
Tensor cumsum(const Tensor& x, int64_t dim, OptDType dtype = std::nullopt);
Tensor cumprod(const Tensor& x, int64_t dim, OptDType dtype = std::nullopt);
std::tuple<Tensor, Tensor> cummax(const Tensor& x, int64_t dim);
std::tuple<Tensor, Tensor> cummin(const Tensor& x, int64_t dim);
Tensor all(const Tensor& x, OptInt dim = std::nullopt, bool keepdim = false);
Tensor any(const Tensor& x, OptInt dim = std::nullopt, bool keepdim = false);
Tensor count_nonzero(const Tensor& x, OptDims dim = std::nullopt);
/// Lower median (as PyTorch) and its index along dim.
std::tuple<Tensor, Tensor> median(const Tensor& x, int64_t dim, bool keepdim = false);
std::tuple<Tensor, Tensor> mode(const Tensor& x, int64_t dim = -1, bool keepdim = false);

// ---------------------------------------------------------------------------------------------
// Linear algebra
// ---------------------------------------------------------------------------------------------
Tensor matmul(const Tensor& a, const Tensor& b);
Tensor mm(const Tensor& a, const Tensor& b);
Tensor bmm(const Tensor& a, const Tensor& b);
Tensor mv(const Tensor& a, const Tensor& v);
Tensor dot(const Tensor& a, const Tensor& b);
Tensor outer(const Tensor& a, const Tensor& b);
Tensor addmm(const Tensor& input, const Tensor& mat1, const Tensor& mat2, const Scalar& beta = 1,
             const Scalar& alpha = 1);
Tensor baddbmm(const Tensor& input, const Tensor& b1, const Tensor& b2, const Scalar& beta = 1,
               const Scalar& alpha = 1);
Tensor einsum(const std::string& equation, const std::vector<Tensor>& operands);
Tensor tensordot(const Tensor& a, const Tensor& b, IntList dims_a, IntList dims_b);
Tensor linalg_inv(const Tensor& a);
Tensor linalg_solve(const Tensor& a, const Tensor& b);
Tensor linalg_cholesky(const Tensor& a, bool upper = false);
std::tuple<Tensor, Tensor> linalg_qr(const Tensor& a, const std::string& mode = "reduced");
Tensor linalg_det(const Tensor& a);
std::tuple<Tensor, Tensor> linalg_slogdet(const Tensor& a);

// ---------------------------------------------------------------------------------------------
// Joining, splitting, indexing and reordering
// ---------------------------------------------------------------------------------------------
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);
std::vector<Tensor> split_with_sizes(const Tensor& x, IntList split_sizes, int64_t dim = 0);
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);
std::vector<Tensor> unbind(const Tensor& x, int64_t dim = 0);
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
/// reduce: "sum", "prod", "mean", "amax", "amin".
Tensor scatter_reduce(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src,
                      const std::string& reduce, bool include_self = true);
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source, const Scalar& alpha = 1);
/// Advanced indexing x[indices] where each entry is an index tensor or undefined (a full slice).
Tensor index(const Tensor& x, const std::vector<Tensor>& indices);
Tensor index_put(const Tensor& x, const std::vector<Tensor>& indices, const Tensor& values, bool accumulate = false);
Tensor masked_fill(const Tensor& x, const Tensor& mask, const Scalar& value);
Tensor masked_select(const Tensor& x, const Tensor& mask);
Tensor take_along_dim(const Tensor& x, const Tensor& indices, OptInt dim = std::nullopt);
Tensor flip(const Tensor& x, IntList dims);
Tensor roll(const Tensor& x, IntList shifts, IntList dims = {});
Tensor repeat(const Tensor& x, IntList repeats);
Tensor repeat_interleave(const Tensor& x, int64_t repeats, OptInt dim = std::nullopt);
Tensor tile(const Tensor& x, IntList dims);
/// mode: "constant", "reflect", "replicate", "circular"; pad lists (left, right) pairs from the last dim.
Tensor pad(const Tensor& x, IntList pad, const std::string& mode = "constant", std::optional<double> value = std::nullopt);
std::tuple<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true);
std::tuple<Tensor, Tensor> sort(const Tensor& x, int64_t dim = -1, bool descending = false, bool stable = false);
Tensor argsort(const Tensor& x, int64_t dim = -1, bool descending = false);
/// (unique values, inverse indices, counts); sorted ascending.
std::tuple<Tensor, Tensor, Tensor> unique(const Tensor& x, bool sorted = true, bool return_inverse = false,
                                          bool return_counts = false, OptInt dim = std::nullopt);
Tensor nonzero(const Tensor& x);
Tensor searchsorted(const Tensor& sorted_sequence, const Tensor& input, bool out_int32 = false, bool right = false);
Tensor bucketize(const Tensor& input, const Tensor& boundaries, bool out_int32 = false, bool right = false);
Tensor one_hot(const Tensor& x, int64_t num_classes = -1);
std::vector<Tensor> meshgrid(const std::vector<Tensor>& tensors, const std::string& indexing = "ij");

// ---------------------------------------------------------------------------------------------
// Neural-network functions
// ---------------------------------------------------------------------------------------------
Tensor softmax(const Tensor& x, int64_t dim, OptDType dtype = std::nullopt);
Tensor log_softmax(const Tensor& x, int64_t dim, OptDType dtype = std::nullopt);
Tensor layer_norm(const Tensor& x, IntList normalized_shape, const Tensor& weight = {}, const Tensor& bias = {},
                  double eps = 1e-5);
Tensor rms_norm(const Tensor& x, IntList normalized_shape, const Tensor& weight = {}, std::optional<double> eps = std::nullopt);
Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight = {}, const Tensor& bias = {},
                  double eps = 1e-5);
/// In training mode updates running_mean/running_var in place (when given) with momentum.
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight = {},
                  const Tensor& bias = {}, bool training = false, double momentum = 0.1, double eps = 1e-5);
Tensor embedding(const Tensor& indices, const Tensor& weight, OptInt padding_idx = std::nullopt);
Tensor dropout(const Tensor& x, double p = 0.5, bool training = true, Generator* gen = nullptr);
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});
Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, IntList stride = {1},
              IntList padding = {0}, IntList dilation = {1}, int64_t groups = 1);
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, IntList stride = {1, 1},
              IntList padding = {0, 0}, IntList dilation = {1, 1}, int64_t groups = 1);
Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, IntList stride = {1, 1},
                        IntList padding = {0, 0}, IntList output_padding = {0, 0}, int64_t groups = 1,
                        IntList dilation = {1, 1});
Tensor max_pool1d(const Tensor& x, IntList kernel_size, IntList stride = {}, IntList padding = {0},
                  IntList dilation = {1}, bool ceil_mode = false);
Tensor max_pool2d(const Tensor& x, IntList kernel_size, IntList stride = {}, IntList padding = {0, 0},
                  IntList dilation = {1, 1}, bool ceil_mode = false);
Tensor avg_pool1d(const Tensor& x, IntList kernel_size, IntList stride = {}, IntList padding = {0},
                  bool ceil_mode = false, bool count_include_pad = true);
Tensor avg_pool2d(const Tensor& x, IntList kernel_size, IntList stride = {}, IntList padding = {0, 0},
                  bool ceil_mode = false, bool count_include_pad = true, OptInt divisor_override = std::nullopt);
Tensor adaptive_avg_pool2d(const Tensor& x, IntList output_size);
/// mode: "nearest" or "bilinear" (NCHW input).
Tensor interpolate(const Tensor& x, std::optional<std::vector<int64_t>> size = std::nullopt, std::optional<std::vector<double>> scale_factor = std::nullopt,
                   const std::string& mode = "nearest", std::optional<bool> align_corners = std::nullopt);
/// softmax(q k^T * scale + mask) v over [..., L, E] inputs; memory-efficient tiled kernel.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& attn_mask = {},
                                    double dropout_p = 0.0, bool is_causal = false,
                                    std::optional<double> scale = std::nullopt);
/// RWKV-4's WKV time mixing over key, value [B, T, C] (time_decay, time_first [C]; w = -exp(time_decay)),
/// in the numerically stable form of transformers' rwkv_linear_attention_cpu. Differentiable.
Tensor rwkv_wkv(const Tensor& time_decay, const Tensor& time_first, const Tensor& key, const Tensor& value);
/// The same continuing from `state` ([B, 3, C]: numerator, denominator, max exponent, float32 or
/// float64 as the computation; undefined: a fresh state is made) and leaving the final state in
/// it: generation. Not recorded by autograd.
Tensor rwkv_wkv_with_state(const Tensor& time_decay, const Tensor& time_first, const Tensor& key, const Tensor& value,
                           Tensor& state);
/// Mamba's selective scan over u, delta [B, L, D] with A [D, N], B, C [B, L, N], D [D]:
/// h_t = exp(delta_t A) h_{t-1} + delta_t B_t u_t from h = 0, y_t = C_t h_t + D u_t. Differentiable.
Tensor selective_scan(const Tensor& u, const Tensor& delta, const Tensor& A, const Tensor& B, const Tensor& C,
                      const Tensor& D);
/// The same continuing from `state` [B, D, N] (undefined: zeros) and leaving the final state in it.
/// Not recorded by autograd.
Tensor selective_scan_with_state(const Tensor& u, const Tensor& delta, const Tensor& A, const Tensor& B, const Tensor& C,
                                 const Tensor& D, Tensor& state);

// Losses (reduction: "none", "mean", "sum")
/// target: class indices (int64) or class probabilities (same shape as input).
Tensor cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight = {}, int64_t ignore_index = -100,
                     const std::string& reduction = "mean", double label_smoothing = 0.0);
Tensor nll_loss(const Tensor& input, const Tensor& target, const Tensor& weight = {}, int64_t ignore_index = -100,
                const std::string& reduction = "mean");
Tensor mse_loss(const Tensor& input, const Tensor& target, const std::string& reduction = "mean");
Tensor l1_loss(const Tensor& input, const Tensor& target, const std::string& reduction = "mean");
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, const std::string& reduction = "mean",
                      double beta = 1.0);
Tensor huber_loss(const Tensor& input, const Tensor& target, const std::string& reduction = "mean", double delta = 1.0);
Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight = {},
                            const std::string& reduction = "mean");
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target, const Tensor& weight = {},
                                        const std::string& reduction = "mean", const Tensor& pos_weight = {});
Tensor kl_div(const Tensor& input, const Tensor& target, const std::string& reduction = "mean", bool log_target = false);
Tensor cosine_similarity(const Tensor& x1, const Tensor& x2, int64_t dim = 1, double eps = 1e-8);
Tensor pairwise_distance(const Tensor& x1, const Tensor& x2, double p = 2.0, double eps = 1e-6, bool keepdim = false);

}  // namespace foundry
