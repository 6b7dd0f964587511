// Pooling and resampling ops: max pooling with indices (+ its backward op), average pooling,
// adaptive average pooling and nearest / bilinear upsampling, each with its backward as an op of
// its own. Every backward is linear in the output gradient, and the gradient of each backward op
// is the forward op again (or a gather at the max indices), so derivatives of any order work.
// The 1-d forms and interpolate are composites. Inputs are [N, C, H, W] or unbatched [C, H, W]
// (interpolate: 4-D only).
#include <algorithm>
#include <cmath>

#include "kernels/cpu/pool.h"
#include "ops/nn_common.h"

namespace foundry {

using kernels::Pool2d;
using ops::Args;
using ops::BackwardContext;
using ops::Sample;
using ops::Value;
using ops::nn::U;

namespace {

using V = std::vector<int64_t>;

void check_pool_input(const char* op, const Tensor& x) {
  ops::nn::check_floating(x, op);
  FOUNDRY_CHECK_AS(ValueError, x.dim() == 3 || x.dim() == 4,
                   "{}: expected a 3-D (unbatched) or 4-D (batched) input, got input of size {}", op,
                   shape_str(x.sizes()));
  for (int64_t d = x.dim() - 3; d < x.dim(); ++d)
    FOUNDRY_CHECK_AS(ValueError, x.size(d) > 0, "{}: expected input with non-zero channel and spatial sizes, got {}", op,
                     shape_str(x.sizes()));
}

// kernel_size / stride (empty: the kernel size) / padding / dilation of a 2-d pooling.
Pool2d pool_params(const char* op, const Value& kernel, const Value& stride, const Value& padding, const Value* dilation,
                   bool ceil_mode) {
  V k = ops::nn::expand_param(kernel.int_list(), 2, op, "kernel_size");
  V s = stride.is_none() || stride.int_list().empty() ? k : ops::nn::expand_param(stride.int_list(), 2, op, "stride");
  V p = ops::nn::expand_param(padding.int_list(), 2, op, "padding");
  V d = dilation ? ops::nn::expand_param(dilation->int_list(), 2, op, "dilation") : V{1, 1};
  FOUNDRY_CHECK_AS(ValueError, k[0] > 0 && k[1] > 0, "{}: kernel size should be greater than zero, but got {}", op,
                   shape_str(k));
  FOUNDRY_CHECK_AS(ValueError, s[0] > 0 && s[1] > 0, "{}: stride should be greater than zero, but got {}", op, shape_str(s));
  FOUNDRY_CHECK_AS(ValueError, d[0] > 0 && d[1] > 0, "{}: dilation should be greater than zero, but got {}", op,
                   shape_str(d));
  FOUNDRY_CHECK_AS(ValueError, p[0] >= 0 && p[1] >= 0 && p[0] <= k[0] / 2 && p[1] <= k[1] / 2,
                   "{}: pad should be smaller than or equal to half of kernel size, but got padding {} for kernel size {}",
                   op, shape_str(p), shape_str(k));
  Pool2d r;
  r.kh = k[0], r.kw = k[1], r.sh = s[0], r.sw = s[1], r.ph = p[0], r.pw = p[1], r.dh = d[0], r.dw = d[1];
  r.ceil_mode = ceil_mode;
  return r;
}

std::pair<int64_t, int64_t> pool_out(const char* op, const Tensor& x, const Pool2d& p) {
  const int64_t OH = kernels::pool_out_size(x.size(-2), p.kh, p.ph, p.sh, p.dh, p.ceil_mode);
  const int64_t OW = kernels::pool_out_size(x.size(-1), p.kw, p.pw, p.sw, p.dw, p.ceil_mode);
  if (OH < 1 || OW < 1)
    raise<ValueError>("{}: given input size {}, the calculated output size ({}x{}) is too small", op,
                      shape_str(x.sizes()), OH, OW);
  return {OH, OW};
}

// A tensor of the given shape with no storage of its own (backward ops only read input shapes).
Tensor shape_only(IntList sizes, DType dt) { return zeros({}, dt).expand(sizes); }

std::optional<int64_t> opt_int(const Value& v) { return v.is_none() ? std::nullopt : std::optional<int64_t>(v.to_int()); }
std::optional<double> opt_double(const Value& v) {
  return v.is_none() ? std::nullopt : std::optional<double>(v.to_double());
}

std::pair<int64_t, int64_t> out_hw(const char* op, const Value& v) {
  V s = ops::nn::expand_param(v.int_list(), 2, op, "output_size");
  FOUNDRY_CHECK_AS(ValueError, s[0] >= 0 && s[1] >= 0, "{}: output_size must be non-negative, got {}", op, shape_str(s));
  return {s[0], s[1]};
}

void check_upsample_input(const char* op, const Tensor& x) {
  ops::nn::check_floating(x, op);
  FOUNDRY_CHECK_AS(ValueError, x.dim() == 4, "{}: expected a 4-D [N, C, H, W] input, got {}", op, shape_str(x.sizes()));
  FOUNDRY_CHECK_AS(ValueError, x.size(2) > 0 && x.size(3) > 0, "{}: input spatial sizes must be non-zero, got {}", op,
                   shape_str(x.sizes()));
}

// ---- samples -----------------------------------------------------------------------------------

std::vector<Sample> max_pool_samples(DType dt, Generator& g, bool with_indices_op) {
  (void)with_indices_op;
  std::vector<Sample> s;
  auto add = [&](Shape x, V k, V st, V p, V d, bool ceil, const char* note) {
    s.push_back({{U(x, dt, g), k, st, p, d, ceil}, note});
  };
  add({2, 3, 6, 5}, {2, 2}, {}, {0, 0}, {1, 1}, false, "2x2, default stride");
  add({1, 2, 7, 7}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, false, "3x3 stride 2 padding 1");
  add({1, 2, 7, 8}, {3, 2}, {2, 1}, {1, 0}, {2, 1}, true, "dilation, ceil_mode");
  add({2, 5, 5}, {2, 3}, {2, 2}, {0, 1}, {1, 1}, true, "unbatched, ceil_mode");
  add({1, 1, 4, 4}, {4, 4}, {1, 1}, {2, 2}, {1, 1}, false, "windows in the padding");
  s.push_back({{ops::nn::noncontig(U({2, 2, 5, 4}, dt, g)), V{2}, V{1}, V{1}, V{1}, false}, "non-contiguous"});
  return s;
}

std::vector<Sample> avg_pool_samples(DType dt, Generator& g) {
  std::vector<Sample> s;
  auto add = [&](Shape x, V k, V st, V p, bool ceil, bool cip, Value div, const char* note) {
    s.push_back({{U(x, dt, g), k, st, p, ceil, cip, div}, note});
  };
  add({2, 3, 6, 5}, {2, 2}, {}, {0, 0}, false, true, Value(), "2x2");
  add({1, 2, 7, 7}, {3, 3}, {2, 2}, {1, 1}, false, true, Value(), "padding, count_include_pad");
  add({1, 2, 7, 7}, {3, 3}, {2, 2}, {1, 1}, false, false, Value(), "padding, exclude pad");
  add({1, 2, 7, 8}, {3, 2}, {2, 3}, {1, 1}, true, true, Value(), "ceil_mode");
  add({1, 2, 7, 8}, {3, 2}, {2, 3}, {1, 1}, true, false, Value(), "ceil_mode, exclude pad");
  add({2, 5, 5}, {2, 2}, {1, 1}, {1, 0}, false, true, int64_t(3), "unbatched, divisor_override");
  return s;
}

}  // namespace

// ---- C++ API -----------------------------------------------------------------------------------

Tensor max_pool1d(const Tensor& x, IntList kernel_size, IntList stride, IntList padding, IntList dilation,
                  bool ceil_mode) {
  return ops::call1(FOUNDRY_OP("max_pool1d"), {x, kernel_size, stride, padding, dilation, ceil_mode});
}
Tensor max_pool2d(const Tensor& x, IntList kernel_size, IntList stride, IntList padding, IntList dilation,
                  bool ceil_mode) {
  return ops::call1(FOUNDRY_OP("max_pool2d"), {x, kernel_size, stride, padding, dilation, ceil_mode});
}
Tensor avg_pool1d(const Tensor& x, IntList kernel_size, IntList stride, IntList padding, bool ceil_mode,
                  bool count_include_pad) {
  return ops::call1(FOUNDRY_OP("avg_pool1d"), {x, kernel_size, stride, padding, ceil_mode, count_include_pad});
}
Tensor avg_pool2d(const Tensor& x, IntList kernel_size, IntList stride, IntList padding, bool ceil_mode,
                  bool count_include_pad, OptInt divisor_override) {
  return ops::call1(FOUNDRY_OP("avg_pool2d"),
                    {x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override});
}
Tensor adaptive_avg_pool2d(const Tensor& x, IntList output_size) {
  return ops::call1(FOUNDRY_OP("adaptive_avg_pool2d"), {x, output_size});
}
Tensor interpolate(const Tensor& x, std::optional<std::vector<int64_t>> size,
                   std::optional<std::vector<double>> scale_factor, const std::string& mode,
                   std::optional<bool> align_corners) {
  return ops::call1(FOUNDRY_OP("interpolate"), {x, Value(size), Value(scale_factor), mode, Value(align_corners)});
}

namespace ops {

void register_nn_pool_ops(Registry& r) {
  // ---- max pooling ------------------------------------------------------------------------------
  r.add({.schema_text = "max_pool2d_with_indices(Tensor input, int[] kernel_size, int[] stride=[], int[] padding=0, "
                        "int[] dilation=1, bool ceil_mode=False) -> (Tensor, Tensor)",
         .family = "nn",
         .doc = "2-d max pooling returning (values, flat indices into each input plane); NaN wins",
         .saves_outputs = {1},
         .forward =
             [](const Args& a) {
               const Tensor& x = a.tensor(0);
               check_pool_input("max_pool2d", x);
               Pool2d p = pool_params("max_pool2d", a[1], a[2], a[3], &a[4], a[5].to_bool());
               auto [OH, OW] = pool_out("max_pool2d", x, p);
               return kernels::max_pool2d_forward(x, p, OH, OW);
             },
         .backward =
             [](BackwardContext& c) {
               Shape in = c.input_sizes("input");
               return std::vector<Tensor>{ops::call1(
                   FOUNDRY_OP("max_pool2d_with_indices_backward"),
                   {c.grad(0), shape_only(in, c.input_dtype("input")), c.arg("kernel_size"), c.arg("stride"),
                    c.arg("padding"), c.arg("dilation"), c.arg("ceil_mode"), c.output(1)})};
             },
         .dtypes = kFloatTypes,
         .samples = [](DType dt, Generator& g) { return max_pool_samples(dt, g, true); },
         .ref = "torch.ops.aten.max_pool2d_with_indices"});

  r.add({.schema_text = "max_pool2d_with_indices_backward(Tensor grad_output, Tensor input, int[] kernel_size, "
                        "int[] stride, int[] padding, int[] dilation, bool ceil_mode, Tensor indices) -> Tensor",
         .family = "nn",
         .doc = "gradient of max pooling: grad_output scattered (summed) to the argmax positions",
         .saves = {"indices"},
         .forward =
             [](const Args& a) {
               const Tensor& g = a.tensor(0);
               const Tensor& x = a.tensor(1);
               const Tensor& idx = a.tensor(7);
               check_pool_input("max_pool2d_with_indices_backward", x);
               FOUNDRY_CHECK_AS(TypeError, idx.dtype() == DType::Int64,
                                "max_pool2d_with_indices_backward: indices must be int64, got {}", dtype_name(idx.dtype()));
               Pool2d p = pool_params("max_pool2d_with_indices_backward", a[2], a[3], a[4], &a[5], a[6].to_bool());
               auto [OH, OW] = pool_out("max_pool2d_with_indices_backward", x, p);
               Shape expect(x.sizes());
               expect[expect.size() - 2] = OH, expect[expect.size() - 1] = OW;
               FOUNDRY_CHECK_AS(ValueError, Shape(g.sizes()) == expect && Shape(idx.sizes()) == expect,
                                "max_pool2d_with_indices_backward: grad_output {} and indices {} must have the pooled "
                                "shape {}",
                                shape_str(g.sizes()), shape_str(idx.sizes()), shape_str(expect));
               return std::vector<Tensor>{kernels::max_pool2d_backward(g.to(x.dtype()), idx, x.sizes())};
             },
         .backward =
             [](BackwardContext& c) {
               // Linear in grad_output: the adjoint gathers at the indices.
               const Tensor& idx = c.input("indices");
               Tensor gg = c.grad();
               Tensor r = gather(gg.flatten(-2), -1, idx.flatten(-2)).view(idx.sizes());
               return std::vector<Tensor>{r, Tensor(), Tensor()};
             },
         .dtypes = kFloatTypes,
         .samples =
             [](DType dt, Generator& g) {
               std::vector<Sample> s;
               for (const Sample& f : max_pool_samples(DType::Float64, g, true)) {
                 const Tensor& x = f.args[0].tensor();
                 std::vector<Tensor> o = ops::call(FOUNDRY_OP("max_pool2d_with_indices"), f.args);
                 s.push_back({{U(o[0].sizes(), dt, g), x.to(dt), f.args[1], f.args[2], f.args[3], f.args[4], f.args[5],
                               o[1]},
                              f.note});
               }
               return s;
             },
         .ref = "torch.ops.aten.max_pool2d_with_indices_backward"});

  r.add({.schema_text = "max_pool2d(Tensor input, int[] kernel_size, int[] stride=[], int[] padding=0, "
                        "int[] dilation=1, bool ceil_mode=False) -> Tensor",
         .family = "nn",
         .doc = "2-d max pooling (stride defaults to kernel_size)",
         .kind = OpDef::Kind::Composite,
         .forward =
             [](const Args& a) {
               return std::vector<Tensor>{ops::nn::nth(
                   ops::call(FOUNDRY_OP("max_pool2d_with_indices"), {a[0], a[1], a[2], a[3], a[4], a[5]}), 0)};
             },
         .dtypes = kFloatTypes,
         .samples = [](DType dt, Generator& g) { return max_pool_samples(dt, g, false); },
         .ref = "torch.nn.functional.max_pool2d"});

  r.add({.schema_text = "max_pool1d(Tensor input, int[] kernel_size, int[] stride=[], int[] padding=0, "
                        "int[] dilation=1, bool ceil_mode=False) -> Tensor",
         .family = "nn",
         .doc = "1-d max pooling over [N, C, L] or [C, L] (a 2-d pooling over a unit height)",
         .kind = OpDef::Kind::Composite,
         .forward =
             [](const Args& a) {
               const Tensor& x = a.tensor(0);
               FOUNDRY_CHECK_AS(ValueError, x.dim() == 2 || x.dim() == 3,
                                "max_pool1d: expected a 2-D (unbatched) or 3-D (batched) input, got {}", shape_str(x.sizes()));
               auto one = [](const Value& v, int64_t unit) {
                 V l = v.int_list();
                 return l.empty() ? V{} : V{unit, ops::nn::expand_param(l, 1, "max_pool1d", "argument")[0]};
               };
               Tensor y = ops::nn::nth(ops::call(FOUNDRY_OP("max_pool2d_with_indices"),
                                                 {x.unsqueeze(-2), one(a[1], 1), one(a[2], 1), one(a[3], 0),
                                                  one(a[4], 1), a[5]}),
                                       0);
               return std::vector<Tensor>{y.squeeze(-2)};
             },
         .dtypes = kFloatTypes,
         .samples =
             [](DType dt, Generator& g) {
               return std::vector<Sample>{
                   {{U({2, 3, 9}, dt, g), V{3}, V{}, V{0}, V{1}, false}, "default stride"},
                   {{U({2, 3, 9}, dt, g), V{3}, V{2}, V{1}, V{2}, true}, "padding, dilation, ceil_mode"},
                   {{U({3, 8}, dt, g), V{2}, V{1}, V{1}, V{1}, false}, "unbatched"}};
             },
         .ref = "torch.nn.functional.max_pool1d"});

  // ---- average pooling --------------------------------------------------------------------------
  r.add({.schema_text = "avg_pool2d(Tensor input, int[] kernel_size, int[] stride=[], int[] padding=0, "
                        "bool ceil_mode=False, bool count_include_pad=True, int? divisor_override=None) -> Tensor",
         .family = "nn",
         .doc = "2-d average pooling (windows clipped to the padded input; divisor as PyTorch)",
         .forward =
             [](const Args& a) {
               const Tensor& x = a.tensor(0);
               check_pool_input("avg_pool2d", x);
               Pool2d p = pool_params("avg_pool2d", a[1], a[2], a[3], nullptr, a[4].to_bool());
               auto div = opt_int(a[6]);
               FOUNDRY_CHECK_AS(ValueError, !div || *div != 0, "avg_pool2d: divisor must be not zero");
               auto [OH, OW] = pool_out("avg_pool2d", x, p);
               return std::vector<Tensor>{kernels::avg_pool2d_forward(x, p, OH, OW, a[5].to_bool(), div)};
             },
         .backward =
             [](BackwardContext& c) {
               Shape in = c.input_sizes("input");
               return std::vector<Tensor>{ops::call1(
                   FOUNDRY_OP("avg_pool2d_backward"),
                   {c.grad(), shape_only(in, c.input_dtype("input")), c.arg("kernel_size"), c.arg("stride"),
                    c.arg("padding"), c.arg("ceil_mode"), c.arg("count_include_pad"), c.arg("divisor_override")})};
             },
         .dtypes = kFloatTypes,
         .samples = avg_pool_samples,
         .ref = "torch.nn.functional.avg_pool2d"});

  r.add({.schema_text = "avg_pool2d_backward(Tensor grad_output, Tensor input, int[] kernel_size, int[] stride, "
                        "int[] padding, bool ceil_mode, bool count_include_pad, int? divisor_override) -> Tensor",
         .family = "nn",
         .doc = "gradient of avg_pool2d (its adjoint); its own gradient is avg_pool2d",
         .forward =
             [](const Args& a) {
               const Tensor& g = a.tensor(0);
               const Tensor& x = a.tensor(1);
               check_pool_input("avg_pool2d_backward", x);
               Pool2d p = pool_params("avg_pool2d_backward", a[2], a[3], a[4], nullptr, a[5].to_bool());
               auto [OH, OW] = pool_out("avg_pool2d_backward", x, p);
               Shape expect(x.sizes());
               expect[expect.size() - 2] = OH, expect[expect.size() - 1] = OW;
               FOUNDRY_CHECK_AS(ValueError, Shape(g.sizes()) == expect,
                                "avg_pool2d_backward: grad_output {} must have the pooled shape {}", shape_str(g.sizes()),
                                shape_str(expect));
               auto div = opt_int(a[7]);
               FOUNDRY_CHECK_AS(ValueError, !div || *div != 0, "avg_pool2d_backward: divisor must be not zero");
               return std::vector<Tensor>{kernels::avg_pool2d_backward(g.to(x.dtype()), x.sizes(), p, a[6].to_bool(), div)};
             },
         .backward =
             [](BackwardContext& c) {
               return std::vector<Tensor>{
                   ops::call1(FOUNDRY_OP("avg_pool2d"), {c.grad(), c.arg("kernel_size"), c.arg("stride"), c.arg("padding"),
                                                         c.arg("ceil_mode"), c.arg("count_include_pad"),
                                                         c.arg("divisor_override")}),
                   Tensor()};
             },
         .dtypes = kFloatTypes,
         .samples =
             [](DType dt, Generator& g) {
               std::vector<Sample> s;
               for (const Sample& f : avg_pool_samples(DType::Float64, g)) {
                 Tensor y = ops::call1(FOUNDRY_OP("avg_pool2d"), f.args);
                 s.push_back({{U(y.sizes(), dt, g), f.args[0].tensor().to(dt), f.args[1], f.args[2], f.args[3],
                               f.args[4], f.args[5], f.args[6]},
                              f.note});
               }
               return s;
             },
         .ref = "torch.ops.aten.avg_pool2d_backward"});

  r.add({.schema_text = "avg_pool1d(Tensor input, int[] kernel_size, int[] stride=[], int[] padding=0, "
                        "bool ceil_mode=False, bool count_include_pad=True) -> Tensor",
         .family = "nn",
         .doc = "1-d average pooling over [N, C, L] or [C, L]",
         .kind = OpDef::Kind::Composite,
         .forward =
             [](const Args& a) {
               const Tensor& x = a.tensor(0);
               FOUNDRY_CHECK_AS(ValueError, x.dim() == 2 || x.dim() == 3,
                                "avg_pool1d: expected a 2-D (unbatched) or 3-D (batched) input, got {}", shape_str(x.sizes()));
               auto one = [](const Value& v, int64_t unit) {
                 V l = v.int_list();
                 return l.empty() ? V{} : V{unit, ops::nn::expand_param(l, 1, "avg_pool1d", "argument")[0]};
               };
               Tensor y = ops::call1(FOUNDRY_OP("avg_pool2d"), {x.unsqueeze(-2), one(a[1], 1), one(a[2], 1),
                                                                one(a[3], 0), a[4], a[5], Value()});
               return std::vector<Tensor>{y.squeeze(-2)};
             },
         .dtypes = kFloatTypes,
         .samples =
             [](DType dt, Generator& g) {
               return std::vector<Sample>{{{U({2, 3, 9}, dt, g), V{3}, V{}, V{0}, false, true}, "default stride"},
                                          {{U({2, 3, 9}, dt, g), V{3}, V{2}, V{1}, true, false}, "ceil, exclude pad"},
                                          {{U({3, 8}, dt, g), V{2}, V{1}, V{1}, false, true}, "unbatched"}};
             },
         .ref = "torch.nn.functional.avg_pool1d"});

  r.add({.schema_text = "adaptive_avg_pool2d(Tensor input, int[] output_size) -> Tensor",
         .family = "nn",
         .doc = "2-d average pooling to a given output size (windows floor(i*H/OH) .. ceil((i+1)*H/OH))",
         .forward =
             [](const Args& a) {
               const Tensor& x = a.tensor(0);
               check_pool_input("adaptive_avg_pool2d", x);
               auto [OH, OW] = out_hw("adaptive_avg_pool2d", a[1]);
               return std::vector<Tensor>{kernels::adaptive_avg_pool2d_forward(x, OH, OW)};
             },
         .backward =
             [](BackwardContext& c) {
               return std::vector<Tensor>{ops::call1(FOUNDRY_OP("_adaptive_avg_pool2d_backward"),
                                                     {c.grad(), shape_only(c.input_sizes("input"), c.input_dtype("input"))})};
             },
         .dtypes = kFloatTypes,
         .samples =
             [](DType dt, Generator& g) {
               return std::vector<Sample>{{{U({2, 3, 7, 5}, dt, g), V{3, 2}}, "shrink"},
                                          {{U({1, 2, 3, 4}, dt, g), V{5, 7}}, "grow"},
                                          {{U({2, 6, 6}, dt, g), V{1, 1}}, "unbatched, global"},
                                          {{U({1, 2, 8, 8}, dt, g), V{4, 4}}, "divisible"}};
             },
         .ref = "torch.nn.functional.adaptive_avg_pool2d"});

  r.add({.schema_text = "_adaptive_avg_pool2d_backward(Tensor grad_output, Tensor self) -> Tensor",
         .family = "nn",
         .doc = "gradient of adaptive_avg_pool2d (its adjoint); its own gradient is adaptive_avg_pool2d",
         .forward =
             [](const Args& a) {
               const Tensor& g = a.tensor(0);
               const Tensor& x = a.tensor(1);
               check_pool_input("_adaptive_avg_pool2d_backward", x);
               FOUNDRY_CHECK_AS(ValueError, g.dim() == x.dim(),
                                "_adaptive_avg_pool2d_backward: grad_output {} and self {} must have the same rank",
                                shape_str(g.sizes()), shape_str(x.sizes()));
               return std::vector<Tensor>{kernels::adaptive_avg_pool2d_backward(g.to(x.dtype()), x.sizes())};
             },
         .backward =
             [](BackwardContext& c) {
               Shape go = c.input_sizes("grad_output");
               return std::vector<Tensor>{
                   ops::call1(FOUNDRY_OP("adaptive_avg_pool2d"), {c.grad(), V{go[go.size() - 2], go[go.size() - 1]}}),
                   Tensor()};
             },
         .dtypes = kFloatTypes,
         .samples =
             [](DType dt, Generator& g) {
               return std::vector<Sample>{{{U({2, 3, 3, 2}, dt, g), U({2, 3, 7, 5}, dt, g)}, "shrink"},
                                          {{U({1, 2, 5, 7}, dt, g), U({1, 2, 3, 4}, dt, g)}, "grow"}};
             },
         .ref = "torch.ops.aten._adaptive_avg_pool2d_backward"});

  // ---- upsampling ---------------------------------------------------------------------------------
  r.add({.schema_text = "upsample_nearest2d(Tensor self, int[] output_size, float? scales_h=None, "
                        "float? scales_w=None) -> Tensor",
         .family = "nn",
         .doc = "nearest-neighbour resampling of [N, C, H, W]: src = min(floor(dst * scale), in - 1)",
         .forward =
             [](const Args& a) {
               const Tensor& x = a.tensor(0);
               check_upsample_input("upsample_nearest2d", x);
               auto [OH, OW] = out_hw("upsample_nearest2d", a[1]);
               return std::vector<Tensor>{
                   kernels::upsample_nearest2d_forward(x, OH, OW, opt_double(a[2]), opt_double(a[3]))};
             },
         .backward =
             [](BackwardContext& c) {
               Shape in = c.input_sizes("self");
               return std::vector<Tensor>{ops::call1(FOUNDRY_OP("upsample_nearest2d_backward"),
                                                     {c.grad(), c.arg("output_size"), V(in.begin(), in.end()),
                                                      c.arg("scales_h"), c.arg("scales_w")})};
             },
         .dtypes = kFloatTypes,
         .samples =
             [](DType dt, Generator& g) {
               return std::vector<Sample>{{{U({1, 2, 3, 4}, dt, g), V{6, 8}, Value(), Value()}, "2x"},
                                          {{U({1, 2, 3, 4}, dt, g), V{5, 7}, Value(), Value()}, "odd sizes"},
                                          {{U({2, 1, 5, 6}, dt, g), V{3, 4}, Value(), Value()}, "downsample"},
                                          {{U({1, 2, 3, 4}, dt, g), V{4, 10}, 1.5, 2.5}, "scales"}};
             },
         .ref = "torch.ops.aten.upsample_nearest2d"});

  r.add({.schema_text = "upsample_nearest2d_backward(Tensor grad_output, int[] output_size, int[] input_size, "
                        "float? scales_h=None, float? scales_w=None) -> Tensor",
         .family = "nn",
         .doc = "gradient of upsample_nearest2d (sums into the source pixels)",
         .forward =
             [](const Args& a) {
               const Tensor& g = a.tensor(0);
               ops::nn::check_floating(g, "upsample_nearest2d_backward", "grad_output");
               V in = a[2].int_list();
               auto [OH, OW] = out_hw("upsample_nearest2d_backward", a[1]);
               FOUNDRY_CHECK_AS(ValueError, in.size() == 4 && g.dim() == 4 && g.size(2) == OH && g.size(3) == OW &&
                                                g.size(0) == in[0] && g.size(1) == in[1],
                                "upsample_nearest2d_backward: grad_output {} does not match output_size {} and "
                                "input_size {}",
                                shape_str(g.sizes()), shape_str(a[1].int_list()), shape_str(in));
               return std::vector<Tensor>{kernels::upsample_nearest2d_backward(g, in, opt_double(a[3]), opt_double(a[4]))};
             },
         .backward =
             [](BackwardContext& c) {
               return std::vector<Tensor>{ops::call1(FOUNDRY_OP("upsample_nearest2d"),
                                                     {c.grad(), c.arg("output_size"), c.arg("scales_h"), c.arg("scales_w")})};
             },
         .dtypes = kFloatTypes,
         .samples =
             [](DType dt, Generator& g) {
               return std::vector<Sample>{{{U({1, 2, 5, 7}, dt, g), V{5, 7}, V{1, 2, 3, 4}, Value(), Value()}},
                                          {{U({1, 2, 4, 10}, dt, g), V{4, 10}, V{1, 2, 3, 4}, 1.5, 2.5}, "scales"}};
             },
         .ref = "torch.ops.aten.upsample_nearest2d_backward"});

  r.add({.schema_text = "upsample_bilinear2d(Tensor self, int[] output_size, bool align_corners, float? scales_h=None, "
                        "float? scales_w=None) -> Tensor",
         .family = "nn",
         .doc = "bilinear resampling of [N, C, H, W] with PyTorch's source-coordinate rules",
         .forward =
             [](const Args& a) {
               const Tensor& x = a.tensor(0);
               check_upsample_input("upsample_bilinear2d", x);
               auto [OH, OW] = out_hw("upsample_bilinear2d", a[1]);
               return std::vector<Tensor>{kernels::upsample_bilinear2d_forward(x, OH, OW, a[2].to_bool(),
                                                                               opt_double(a[3]), opt_double(a[4]))};
             },
         .backward =
             [](BackwardContext& c) {
               Shape in = c.input_sizes("self");
               return std::vector<Tensor>{ops::call1(
                   FOUNDRY_OP("upsample_bilinear2d_backward"),
                   {c.grad(), c.arg("output_size"), V(in.begin(), in.end()), c.arg("align_corners"), c.arg("scales_h"),
                    c.arg("scales_w")})};
             },
         .dtypes = kFloatTypes,
         .samples =
             [](DType dt, Generator& g) {
               std::vector<Sample> s;
               for (bool ac : {false, true}) {
                 s.push_back({{U({1, 2, 3, 4}, dt, g), V{6, 8}, ac, Value(), Value()}, "2x"});
                 s.push_back({{U({1, 2, 3, 4}, dt, g), V{5, 7}, ac, Value(), Value()}, "odd sizes"});
                 s.push_back({{U({2, 1, 6, 5}, dt, g), V{4, 3}, ac, Value(), Value()}, "downsample"});
                 s.push_back({{U({1, 1, 3, 4}, dt, g), V{1, 1}, ac, Value(), Value()}, "to 1x1"});
               }
               s.push_back({{U({1, 2, 3, 4}, dt, g), V{4, 10}, false, 1.5, 2.5}, "scales"});
               return s;
             },
         .ref = "torch.ops.aten.upsample_bilinear2d"});

  r.add({.schema_text = "upsample_bilinear2d_backward(Tensor grad_output, int[] output_size, int[] input_size, "
                        "bool align_corners, float? scales_h=None, float? scales_w=None) -> Tensor",
         .family = "nn",
         .doc = "gradient of upsample_bilinear2d (each output gradient spread to its 4 source pixels)",
         .forward =
             [](const Args& a) {
               const Tensor& g = a.tensor(0);
               ops::nn::check_floating(g, "upsample_bilinear2d_backward", "grad_output");
               V in = a[2].int_list();
               auto [OH, OW] = out_hw("upsample_bilinear2d_backward", a[1]);
               FOUNDRY_CHECK_AS(ValueError, in.size() == 4 && g.dim() == 4 && g.size(2) == OH && g.size(3) == OW &&
                                                g.size(0) == in[0] && g.size(1) == in[1],
                                "upsample_bilinear2d_backward: grad_output {} does not match output_size {} and "
                                "input_size {}",
                                shape_str(g.sizes()), shape_str(a[1].int_list()), shape_str(in));
               return std::vector<Tensor>{kernels::upsample_bilinear2d_backward(g, in, a[3].to_bool(), opt_double(a[4]),
                                                                                opt_double(a[5]))};
             },
         .backward =
             [](BackwardContext& c) {
               return std::vector<Tensor>{ops::call1(FOUNDRY_OP("upsample_bilinear2d"),
                                                     {c.grad(), c.arg("output_size"), c.arg("align_corners"),
                                                      c.arg("scales_h"), c.arg("scales_w")})};
             },
         .dtypes = kFloatTypes,
         .samples =
             [](DType dt, Generator& g) {
               return std::vector<Sample>{
                   {{U({1, 2, 5, 7}, dt, g), V{5, 7}, V{1, 2, 3, 4}, false, Value(), Value()}},
                   {{U({1, 2, 5, 7}, dt, g), V{5, 7}, V{1, 2, 3, 4}, true, Value(), Value()}, "align_corners"},
                   {{U({1, 2, 4, 10}, dt, g), V{4, 10}, V{1, 2, 3, 4}, false, 1.5, 2.5}, "scales"}};
             },
         .ref = "torch.ops.aten.upsample_bilinear2d_backward"});

  r.add({.schema_text = "interpolate(Tensor input, int[]? size=None, float[]? scale_factor=None, str mode='nearest', "
                        "bool? align_corners=None) -> Tensor",
         .family = "nn",
         .doc = "resizes [N, C, H, W] to `size` or by `scale_factor` (output floor(in * scale)); mode 'nearest' or "
                "'bilinear'",
         .kind = OpDef::Kind::Composite,
         .forward =
             [](const Args& a) {
               const Tensor& x = a.tensor(0);
               const std::string& mode = a[3].str();
               FOUNDRY_CHECK_AS(NotImplementedError, mode == "nearest" || mode == "bilinear",
                                "interpolate: mode '{}' is not supported (use 'nearest' or 'bilinear')", mode);
               FOUNDRY_CHECK_AS(ValueError, x.dim() == 4,
                                "interpolate: only 4-D [N, C, H, W] input is supported, got input of size {}",
                                shape_str(x.sizes()));
               if (a[1].is_none() && a[2].is_none())
                 raise<ValueError>("interpolate: either size or scale_factor should be defined");
               if (!a[1].is_none() && !a[2].is_none())
                 raise<ValueError>("interpolate: only one of size or scale_factor should be defined");
               if (mode == "nearest" && !a[4].is_none())
                 raise<ValueError>("interpolate: align_corners option can only be set with the interpolating modes: "
                                   "linear | bilinear | bicubic | trilinear");
               V size;
               Value sh, sw;
               if (!a[1].is_none()) {
                 size = ops::nn::expand_param(a[1].int_list(), 2, "interpolate", "size");
               } else {
                 std::vector<double> sf = a[2].double_list();
                 if (sf.size() == 1) sf.push_back(sf[0]);
                 FOUNDRY_CHECK_AS(ValueError, sf.size() == 2,
                                  "interpolate: scale_factor shape must match input shape: input is 2-D spatially, "
                                  "scale_factor has {} values",
                                  sf.size());
                 for (size_t i = 0; i < 2; ++i)
                   size.push_back(int64_t(std::floor(double(x.size(int64_t(i) + 2)) * sf[i])));
                 sh = sf[0], sw = sf[1];
               }
               if (mode == "nearest")
                 return std::vector<Tensor>{ops::call1(FOUNDRY_OP("upsample_nearest2d"), {x, size, sh, sw})};
               bool ac = a[4].is_none() ? false : a[4].to_bool();
               return std::vector<Tensor>{ops::call1(FOUNDRY_OP("upsample_bilinear2d"), {x, size, ac, sh, sw})};
             },
         .dtypes = kFloatTypes,
         .samples =
             [](DType dt, Generator& g) {
               Tensor x = U({1, 2, 3, 4}, dt, g);
               using D = std::vector<double>;
               return std::vector<Sample>{
                   {{x, V{6, 8}, Value(), "nearest", Value()}, "nearest size"},
                   {{x, V{5, 5}, Value(), "nearest", Value()}, "nearest square size"},
                   {{x, Value(), D{2.0, 2.0}, "nearest", Value()}, "nearest scale 2"},
                   {{x, Value(), D{1.7, 0.6}, "nearest", Value()}, "nearest fractional scales"},
                   {{x, V{7, 5}, Value(), "bilinear", false}, "bilinear size"},
                   {{x, V{7, 5}, Value(), "bilinear", true}, "bilinear align_corners"},
                   {{x, Value(), D{2.5, 2.5}, "bilinear", false}, "bilinear scale"},
                   {{x, Value(), D{1.5, 2.0}, "bilinear", true}, "bilinear scales align_corners"}};
             },
         .ref = "torch.nn.functional.interpolate"});
}

}  // namespace ops
}  // namespace foundry
