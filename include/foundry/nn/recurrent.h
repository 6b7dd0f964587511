// LSTM and GRU (multi-layer, bidirectional, batch_first), with PyTorch's parameter names
// (weight_ih_l0, weight_hh_l0, bias_ih_l0, bias_hh_l0, weight_hr_l0, ..._reverse), gate order
// (LSTM: i, f, g, o; GRU: r, z, n) and initialisation (every parameter ~ U(-1/sqrt(hidden),
// 1/sqrt(hidden))).
#pragma once

#include <tuple>
#include <utility>

#include "foundry/nn/module.h"

namespace foundry::nn {

struct RNNOptions {
  int64_t num_layers = 1;
  bool bias = true;
  bool batch_first = false;
  /// Dropout on the outputs of every layer but the last, in training mode.
  double dropout = 0.0;
  bool bidirectional = false;
  /// LSTM only: projects the hidden state to proj_size (weight_hr_l*).
  int64_t proj_size = 0;
};

/// The part LSTM and GRU share (PyTorch's RNNBase).
class RNNBase : public Module {
 public:
  std::string extra_repr() const override;
  void reset_parameters();
  /// The parameters of one layer and direction: (w_ih, w_hh, b_ih, b_hh, w_hr); undefined when absent.
  std::vector<Tensor> layer_weights(int64_t layer, int64_t direction) const;

  const std::string mode;  ///< "LSTM" or "GRU"
  const int64_t input_size, hidden_size;
  const RNNOptions options;

 protected:
  RNNBase(std::string mode, int64_t input_size, int64_t hidden_size, RNNOptions options);
  /// Runs all layers; h0/c0 [num_layers * D, N, H] (c0 only for LSTM; undefined = zeros).
  /// Returns output, h_n, c_n (c_n undefined for GRU).
  std::tuple<Tensor, Tensor, Tensor> run(const Tensor& x, const Tensor& h0, const Tensor& c0);

 private:
  std::vector<std::string> names_;  // per layer*direction*5, "" where absent
};

class LSTM : public RNNBase {
 public:
  LSTM(int64_t input_size, int64_t hidden_size, RNNOptions options = {});
  std::string type_name() const override { return "LSTM"; }
  /// The output sequence [L, N, D * H_out] ([N, L, D * H_out] with batch_first; [L, D * H_out] unbatched).
  Tensor forward(const Tensor& x) override { return std::get<0>(forward_with_state(x)); }
  /// (output, h_n, c_n); h_n [num_layers * D, N, H_out], c_n [num_layers * D, N, H].
  std::tuple<Tensor, Tensor, Tensor> forward_with_state(const Tensor& x, const Tensor& h0 = {}, const Tensor& c0 = {}) {
    return run(x, h0, c0);
  }
};

class GRU : public RNNBase {
 public:
  GRU(int64_t input_size, int64_t hidden_size, RNNOptions options = {});
  std::string type_name() const override { return "GRU"; }
  Tensor forward(const Tensor& x) override { return forward_with_state(x).first; }
  /// (output, h_n).
  std::pair<Tensor, Tensor> forward_with_state(const Tensor& x, const Tensor& h0 = {}) {
    auto [out, h, c] = run(x, h0, Tensor());
    return {out, h};
  }
};

}  // namespace foundry::nn
