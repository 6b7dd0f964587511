// Convolutions (Conv1d, Conv2d, ConvTranspose2d) and pooling layers (MaxPool2d, AvgPool2d,
// AdaptiveAvgPool2d), with PyTorch 1.13 arguments, default initialisation and printing.
#pragma once

#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "foundry/nn/module.h"

namespace foundry::nn {

/// A convolution's padding: one value for every spatial dim, one per dim, or "same"/"valid".
struct ConvPadding {
  std::vector<int64_t> values{0};
  std::string mode;  ///< "same", "valid" or empty (explicit values)
  ConvPadding() = default;
  ConvPadding(int64_t p) : values{p} {}  // NOLINT
  ConvPadding(int p) : values{p} {}  // NOLINT
  ConvPadding(std::initializer_list<int64_t> p) : values(p) {}  // NOLINT
  ConvPadding(std::vector<int64_t> p) : values(std::move(p)) {}  // NOLINT
  ConvPadding(const char* m) : values{0}, mode(m) {}  // NOLINT
  ConvPadding(std::string m) : values{0}, mode(std::move(m)) {}  // NOLINT
};

/// Conv1d/Conv2d options (PyTorch's keyword arguments). One-element lists apply to every dim.
struct ConvOptions {
  std::vector<int64_t> stride{1};
  ConvPadding padding{};
  std::vector<int64_t> dilation{1};
  int64_t groups = 1;
  bool bias = true;
  std::string padding_mode = "zeros";  ///< "zeros", "reflect", "replicate" or "circular"
};

struct ConvTransposeOptions {
  std::vector<int64_t> stride{1};
  std::vector<int64_t> padding{0};
  std::vector<int64_t> output_padding{0};
  int64_t groups = 1;
  bool bias = true;
  std::vector<int64_t> dilation{1};
};

/// The shared part of the convolutions (PyTorch's _ConvNd). weight ~ kaiming_uniform_(a = sqrt(5))
/// and bias ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in from the weight's dims 1...
class ConvNd : public Module {
 public:
  std::string extra_repr() const override;
  void reset_parameters();

  const int64_t in_channels, out_channels;
  const std::vector<int64_t> kernel_size, stride, padding, dilation, output_padding;
  const std::string padding_string;  ///< "same"/"valid" when given as a string
  const bool transposed;
  const int64_t groups;
  const std::string padding_mode;
  Tensor& weight;  ///< [out, in / groups, *k] ([in, out / groups, *k] when transposed)
  Tensor& bias;

 protected:
  ConvNd(int64_t nd, int64_t in, int64_t out, std::vector<int64_t> kernel_size, std::vector<int64_t> stride,
         ConvPadding padding, std::vector<int64_t> dilation, bool transposed, std::vector<int64_t> output_padding,
         int64_t groups, bool bias, std::string padding_mode);
  /// Pads the input per padding_mode / asymmetric "same" and returns the padding left for the op.
  std::pair<Tensor, std::vector<int64_t>> prepare_input(const Tensor& x) const;
  int64_t nd_;
};

class Conv1d : public ConvNd {
 public:
  Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, ConvOptions options = {});
  std::string type_name() const override { return "Conv1d"; }
  Tensor forward(const Tensor& x) override;
};

class Conv2d : public ConvNd {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, std::vector<int64_t> kernel_size, ConvOptions options = {});
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, ConvOptions options = {})
      : Conv2d(in_channels, out_channels, std::vector<int64_t>{kernel_size}, std::move(options)) {}
  std::string type_name() const override { return "Conv2d"; }
  Tensor forward(const Tensor& x) override;
};

class ConvTranspose2d : public ConvNd {
 public:
  ConvTranspose2d(int64_t in_channels, int64_t out_channels, std::vector<int64_t> kernel_size,
                  ConvTransposeOptions options = {});
  ConvTranspose2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, ConvTransposeOptions options = {})
      : ConvTranspose2d(in_channels, out_channels, std::vector<int64_t>{kernel_size}, std::move(options)) {}
  std::string type_name() const override { return "ConvTranspose2d"; }
  Tensor forward(const Tensor& x) override { return forward(x, {}); }
  /// output_size (the spatial sizes, optionally with N and C in front) picks the output_padding.
  Tensor forward(const Tensor& x, const std::vector<int64_t>& output_size);
};

struct MaxPool2dOptions {
  std::vector<int64_t> stride{};  ///< empty: kernel_size
  std::vector<int64_t> padding{0};
  std::vector<int64_t> dilation{1};
  bool return_indices = false;  ///< see forward_with_indices
  bool ceil_mode = false;
};

class MaxPool2d : public Module {
 public:
  MaxPool2d(std::vector<int64_t> kernel_size, MaxPool2dOptions options = {});
  MaxPool2d(int64_t kernel_size, MaxPool2dOptions options = {})
      : MaxPool2d(std::vector<int64_t>{kernel_size}, std::move(options)) {}
  std::string type_name() const override { return "MaxPool2d"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;
  /// (output, indices into each flattened input plane), as return_indices=True.
  std::tuple<Tensor, Tensor> forward_with_indices(const Tensor& x);
  const std::vector<int64_t> kernel_size;
  const MaxPool2dOptions options;
};

struct AvgPool2dOptions {
  std::vector<int64_t> stride{};  ///< empty: kernel_size
  std::vector<int64_t> padding{0};
  bool ceil_mode = false;
  bool count_include_pad = true;
  std::optional<int64_t> divisor_override;
};

class AvgPool2d : public Module {
 public:
  AvgPool2d(std::vector<int64_t> kernel_size, AvgPool2dOptions options = {});
  AvgPool2d(int64_t kernel_size, AvgPool2dOptions options = {})
      : AvgPool2d(std::vector<int64_t>{kernel_size}, std::move(options)) {}
  std::string type_name() const override { return "AvgPool2d"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;
  const std::vector<int64_t> kernel_size;
  const AvgPool2dOptions options;
};

/// output_size entries may be nullopt (keep that input size), as None in PyTorch.
class AdaptiveAvgPool2d : public Module {
 public:
  AdaptiveAvgPool2d(std::vector<std::optional<int64_t>> output_size);
  AdaptiveAvgPool2d(int64_t output_size) : AdaptiveAvgPool2d(std::vector<std::optional<int64_t>>{output_size}) {}
  std::string type_name() const override { return "AdaptiveAvgPool2d"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;
  const std::vector<std::optional<int64_t>> output_size;
};

}  // namespace foundry::nn
