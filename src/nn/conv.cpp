// Convolution and pooling layers (torch/nn/modules/conv.py and pooling.py, 1.13).
#include "foundry/nn/conv.h"

#include <cmath>

#include "foundry/nn/init.h"
#include "foundry/ops/ops.h"
#include "foundry/ops/registry.h"

namespace foundry::nn {

namespace {

// PyTorch's _single/_pair: one value repeats for every dim.
std::vector<int64_t> ntuple(const std::vector<int64_t>& v, int64_t n, const char* what, const char* layer) {
  if (int64_t(v.size()) == n) return v;
  FOUNDRY_CHECK_AS(ValueError, v.size() == 1, "{}: {} must have 1 or {} values, got {}", layer, what, n, v.size());
  return std::vector<int64_t>(size_t(n), v[0]);
}

// An int list printed as PyTorch prints what the user passed: a lone int, or a tuple.
std::string int_or_tuple(const std::vector<int64_t>& v) {
  return v.size() == 1 ? std::to_string(v[0]) : py_tuple(v);
}

const char* conv_name(int64_t nd, bool transposed) {
  if (transposed) return nd == 1 ? "ConvTranspose1d" : "ConvTranspose2d";
  return nd == 1 ? "Conv1d" : "Conv2d";
}

}  // namespace

// ---- ConvNd ------------------------------------------------------------------------------------

ConvNd::ConvNd(int64_t nd, int64_t in, int64_t out, std::vector<int64_t> k, std::vector<int64_t> stride_,
               ConvPadding padding_, std::vector<int64_t> dilation_, bool transposed_,
               std::vector<int64_t> output_padding_, int64_t groups_, bool has_bias, std::string padding_mode_)
    : in_channels(in),
      out_channels(out),
      kernel_size(ntuple(k, nd, "kernel_size", conv_name(nd, transposed_))),
      stride(ntuple(stride_, nd, "stride", conv_name(nd, transposed_))),
      padding(padding_.mode.empty() ? ntuple(padding_.values, nd, "padding", conv_name(nd, transposed_))
                                    : std::vector<int64_t>(size_t(nd), 0)),
      dilation(ntuple(dilation_, nd, "dilation", conv_name(nd, transposed_))),
      output_padding(ntuple(output_padding_, nd, "output_padding", conv_name(nd, transposed_))),
      padding_string(padding_.mode),
      transposed(transposed_),
      groups(groups_),
      padding_mode(std::move(padding_mode_)),
      weight(register_parameter("weight", Tensor())),
      bias(register_parameter("bias", Tensor())),
      nd_(nd) {
  const char* name = conv_name(nd, transposed_);
  FOUNDRY_CHECK_AS(ValueError, groups > 0, "{}: groups must be a positive integer", name);
  FOUNDRY_CHECK_AS(ValueError, in % groups == 0, "{}: in_channels must be divisible by groups", name);
  FOUNDRY_CHECK_AS(ValueError, out % groups == 0, "{}: out_channels must be divisible by groups", name);
  if (!padding_string.empty()) {
    FOUNDRY_CHECK_AS(ValueError, padding_string == "same" || padding_string == "valid",
                     "{}: invalid padding string '{}', should be one of {{'valid', 'same'}}", name, padding_string);
    if (padding_string == "same")
      for (int64_t s : stride)
        FOUNDRY_CHECK_AS(ValueError, s == 1, "{}: padding='same' is not supported for strided convolutions", name);
  }
  FOUNDRY_CHECK_AS(ValueError,
                   padding_mode == "zeros" || padding_mode == "reflect" || padding_mode == "replicate" ||
                       padding_mode == "circular",
                   "{}: padding_mode must be one of 'zeros', 'reflect', 'replicate' or 'circular', got '{}'", name,
                   padding_mode);
  std::vector<int64_t> wshape = transposed ? std::vector<int64_t>{in, out / groups} : std::vector<int64_t>{out, in / groups};
  wshape.insert(wshape.end(), kernel_size.begin(), kernel_size.end());
  register_parameter("weight", foundry::empty(wshape));
  if (has_bias) register_parameter("bias", empty({out}));
  reset_parameters();
}

void ConvNd::reset_parameters() {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    const int64_t fan_in = init::calculate_fan_in_and_fan_out(weight).first;
    if (fan_in != 0) {
      const double bound = 1.0 / std::sqrt(double(fan_in));
      init::uniform_(bias, -bound, bound);
    }
  }
}

std::string ConvNd::extra_repr() const {
  std::string s = fmt::format("{}, {}, kernel_size={}, stride={}", in_channels, out_channels, py_tuple(kernel_size),
                              py_tuple(stride));
  if (!padding_string.empty()) s += ", padding=" + padding_string;
  else if (padding != std::vector<int64_t>(padding.size(), 0)) s += ", padding=" + py_tuple(padding);
  if (dilation != std::vector<int64_t>(dilation.size(), 1)) s += ", dilation=" + py_tuple(dilation);
  if (output_padding != std::vector<int64_t>(output_padding.size(), 0))
    s += ", output_padding=" + py_tuple(output_padding);
  if (groups != 1) s += fmt::format(", groups={}", groups);
  if (!bias.defined()) s += ", bias=False";
  if (padding_mode != "zeros") s += ", padding_mode=" + padding_mode;
  return s;
}

std::pair<Tensor, std::vector<int64_t>> ConvNd::prepare_input(const Tensor& x) const {
  // Per-dim (left, right) padding.
  std::vector<int64_t> left(padding), right(padding);
  if (padding_string == "same") {
    for (int64_t d = 0; d < nd_; ++d) {
      const int64_t total = dilation[size_t(d)] * (kernel_size[size_t(d)] - 1);
      left[size_t(d)] = total / 2;
      right[size_t(d)] = total - total / 2;
    }
  }
  const bool symmetric = left == right;
  if (padding_mode == "zeros" && symmetric) return {x, left};
  // F.pad lists (left, right) pairs from the last dim backwards.
  std::vector<int64_t> pads;
  for (int64_t d = nd_ - 1; d >= 0; --d) {
    if (padding_mode == "zeros") {
      pads.push_back(0);
      pads.push_back(right[size_t(d)] - left[size_t(d)]);
    } else {
      pads.push_back(left[size_t(d)]);
      pads.push_back(right[size_t(d)]);
    }
  }
  const std::string mode = padding_mode == "zeros" ? "constant" : padding_mode;
  Tensor padded = pad(x, pads, mode);
  return {padded, padding_mode == "zeros" ? left : std::vector<int64_t>(size_t(nd_), 0)};
}

// ---- Conv1d / Conv2d ---------------------------------------------------------------------------

Conv1d::Conv1d(int64_t in, int64_t out, int64_t k, ConvOptions o)
    : ConvNd(1, in, out, {k}, o.stride, o.padding, o.dilation, false, {0}, o.groups, o.bias, o.padding_mode) {}

Tensor Conv1d::forward(const Tensor& x) {
  FOUNDRY_CHECK_AS(ValueError, x.dim() == 2 || x.dim() == 3,
                   "Conv1d: expected 2-D (unbatched) or 3-D (batched) input, got {}", shape_str(x.sizes()));
  if (x.dim() == 2) return forward(x.unsqueeze(0)).squeeze(0);
  auto [xp, pad] = prepare_input(x);
  return conv1d(xp, weight, bias, stride, pad, dilation, groups);
}

Conv2d::Conv2d(int64_t in, int64_t out, std::vector<int64_t> k, ConvOptions o)
    : ConvNd(2, in, out, std::move(k), o.stride, o.padding, o.dilation, false, {0}, o.groups, o.bias, o.padding_mode) {}

Tensor Conv2d::forward(const Tensor& x) {
  FOUNDRY_CHECK_AS(ValueError, x.dim() == 3 || x.dim() == 4,
                   "Conv2d: expected 3-D (unbatched) or 4-D (batched) input, got {}", shape_str(x.sizes()));
  if (x.dim() == 3) return forward(x.unsqueeze(0)).squeeze(0);
  auto [xp, pad] = prepare_input(x);
  return conv2d(xp, weight, bias, stride, pad, dilation, groups);
}

// ---- ConvTranspose2d ---------------------------------------------------------------------------

ConvTranspose2d::ConvTranspose2d(int64_t in, int64_t out, std::vector<int64_t> k, ConvTransposeOptions o)
    : ConvNd(2, in, out, std::move(k), o.stride, ConvPadding(o.padding), o.dilation, true, o.output_padding, o.groups,
             o.bias, "zeros") {}

Tensor ConvTranspose2d::forward(const Tensor& x, const std::vector<int64_t>& output_size) {
  FOUNDRY_CHECK_AS(ValueError, x.dim() == 3 || x.dim() == 4,
                   "ConvTranspose2d: expected 3-D (unbatched) or 4-D (batched) input, got {}", shape_str(x.sizes()));
  if (x.dim() == 3) return forward(x.unsqueeze(0), output_size).squeeze(0);
  std::vector<int64_t> op = output_padding;
  if (!output_size.empty()) {
    // torch's _ConvTransposeNd._output_padding.
    std::vector<int64_t> size = output_size;
    if (size.size() == 4) size.erase(size.begin(), size.begin() + 2);
    FOUNDRY_CHECK_AS(ValueError, size.size() == 2,
                     "ConvTranspose2d: output_size must have 2 or 4 elements (got {})", output_size.size());
    for (size_t d = 0; d < 2; ++d) {
      const int64_t min_size = (x.size(int64_t(d) + 2) - 1) * stride[d] - 2 * padding[d] +
                               dilation[d] * (kernel_size[d] - 1) + 1;
      const int64_t max_size = min_size + stride[d] - 1;
      FOUNDRY_CHECK_AS(ValueError, size[d] >= min_size && size[d] <= max_size,
                       "ConvTranspose2d: requested an output size of {}, but valid sizes range from {} to {} (for an "
                       "input of {})",
                       py_tuple(size), min_size, max_size, shape_str(x.sizes()));
      op[d] = size[d] - min_size;
    }
  }
  return conv_transpose2d(x, weight, bias, stride, padding, op, groups, dilation);
}

// ---- pooling -----------------------------------------------------------------------------------

MaxPool2d::MaxPool2d(std::vector<int64_t> k, MaxPool2dOptions o) : kernel_size(std::move(k)), options(std::move(o)) {
  if (options.return_indices)
    raise<ValueError>("MaxPool2d: return_indices=true is served by forward_with_indices(); forward() returns the output only");
}

std::string MaxPool2d::extra_repr() const {
  return fmt::format("kernel_size={}, stride={}, padding={}, dilation={}, ceil_mode={}", int_or_tuple(kernel_size),
                     int_or_tuple(options.stride.empty() ? kernel_size : options.stride), int_or_tuple(options.padding),
                     int_or_tuple(options.dilation), py_bool(options.ceil_mode));
}

Tensor MaxPool2d::forward(const Tensor& x) {
  return max_pool2d(x, kernel_size, options.stride, options.padding, options.dilation, options.ceil_mode);
}

std::tuple<Tensor, Tensor> MaxPool2d::forward_with_indices(const Tensor& x) {
  std::vector<Tensor> r = ops::call(ops::find_op("max_pool2d_with_indices"),
                                    {x, kernel_size, options.stride, options.padding, options.dilation,
                                     options.ceil_mode});
  return {r[0], r[1]};
}

AvgPool2d::AvgPool2d(std::vector<int64_t> k, AvgPool2dOptions o) : kernel_size(std::move(k)), options(std::move(o)) {}

std::string AvgPool2d::extra_repr() const {
  return fmt::format("kernel_size={}, stride={}, padding={}", int_or_tuple(kernel_size),
                     int_or_tuple(options.stride.empty() ? kernel_size : options.stride), int_or_tuple(options.padding));
}

Tensor AvgPool2d::forward(const Tensor& x) {
  return avg_pool2d(x, kernel_size, options.stride, options.padding, options.ceil_mode, options.count_include_pad,
                    options.divisor_override);
}

AdaptiveAvgPool2d::AdaptiveAvgPool2d(std::vector<std::optional<int64_t>> size) : output_size(std::move(size)) {
  FOUNDRY_CHECK_AS(ValueError, output_size.size() == 1 || output_size.size() == 2,
                   "AdaptiveAvgPool2d: output_size must have 1 or 2 entries, got {}", output_size.size());
}

std::string AdaptiveAvgPool2d::extra_repr() const {
  auto one = [](const std::optional<int64_t>& v) { return v ? std::to_string(*v) : std::string("None"); };
  if (output_size.size() == 1) return "output_size=" + one(output_size[0]);
  return "output_size=(" + one(output_size[0]) + ", " + one(output_size[1]) + ")";
}

Tensor AdaptiveAvgPool2d::forward(const Tensor& x) {
  FOUNDRY_CHECK_AS(ValueError, x.dim() == 3 || x.dim() == 4, "AdaptiveAvgPool2d: expected 3-D or 4-D input, got {}",
                   shape_str(x.sizes()));
  std::vector<int64_t> size(2);
  for (size_t d = 0; d < 2; ++d) {
    const auto& v = output_size.size() == 1 ? output_size[0] : output_size[d];
    size[d] = v ? *v : x.size(x.dim() - 2 + int64_t(d));
  }
  return adaptive_avg_pool2d(x, size);
}

}  // namespace foundry::nn
