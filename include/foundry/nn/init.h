// Parameter initialisation (torch.nn.init, PyTorch 1.13): each function fills a tensor in place
// under no_grad and returns it. The distributions, bounds and fan computations are PyTorch's,
// so a freshly built layer has the same parameter statistics as in PyTorch (the random numbers
// themselves come from Foundry's Philox generator: `gen`, or the default one).
#pragma once

#include <optional>
#include <string>
#include <utility>

#include "foundry/core/rng.h"
#include "foundry/core/tensor.h"

namespace foundry::nn::init {

/// Recommended gain for a nonlinearity: linear/conv*/sigmoid 1, tanh 5/3, relu sqrt(2),
/// leaky_relu sqrt(2 / (1 + slope^2)) (slope = param, default 0.01), selu 3/4.
double calculate_gain(const std::string& nonlinearity, std::optional<double> param = std::nullopt);
/// (fan_in, fan_out) of a weight of at least 2 dims: size(1) and size(0) times the receptive
/// field (product of the remaining dims).
std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& t);

/// U(a, b).
Tensor uniform_(Tensor t, double a = 0.0, double b = 1.0, Generator* gen = nullptr);
/// N(mean, std^2).
Tensor normal_(Tensor t, double mean = 0.0, double std = 1.0, Generator* gen = nullptr);
/// N(mean, std^2) truncated to [a, b] (inverse-CDF method, as PyTorch).
Tensor trunc_normal_(Tensor t, double mean = 0.0, double std = 1.0, double a = -2.0, double b = 2.0,
                     Generator* gen = nullptr);
Tensor constant_(Tensor t, double value);
Tensor ones_(Tensor t);
Tensor zeros_(Tensor t);
/// The identity matrix (2-D tensors).
Tensor eye_(Tensor t);
/// U(-a, a) with a = gain * sqrt(6 / (fan_in + fan_out)).
Tensor xavier_uniform_(Tensor t, double gain = 1.0, Generator* gen = nullptr);
/// N(0, std^2) with std = gain * sqrt(2 / (fan_in + fan_out)).
Tensor xavier_normal_(Tensor t, double gain = 1.0, Generator* gen = nullptr);
/// U(-bound, bound), bound = gain * sqrt(3 / fan); mode "fan_in" or "fan_out"; gain from
/// calculate_gain(nonlinearity, a).
Tensor kaiming_uniform_(Tensor t, double a = 0.0, const std::string& mode = "fan_in",
                        const std::string& nonlinearity = "leaky_relu", Generator* gen = nullptr);
/// N(0, std^2), std = gain / sqrt(fan).
Tensor kaiming_normal_(Tensor t, double a = 0.0, const std::string& mode = "fan_in",
                       const std::string& nonlinearity = "leaky_relu", Generator* gen = nullptr);
/// A (semi-)orthogonal matrix from the QR decomposition of a normal matrix (dims after the first
/// are flattened), times gain.
Tensor orthogonal_(Tensor t, double gain = 1.0, Generator* gen = nullptr);

}  // namespace foundry::nn::init
