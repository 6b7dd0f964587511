// LSTM and GRU (torch/nn/modules/rnn.py, 1.13). The input-to-hidden products of a whole sequence
// are one GEMM per layer and direction; the recurrence runs step by step in Foundry ops, so
// autograd differentiates it (backpropagation through time).
#include "foundry/nn/recurrent.h"

#include <cmath>

#include "foundry/nn/init.h"
#include "foundry/ops/ops.h"

namespace foundry::nn {

RNNBase::RNNBase(std::string mode_, int64_t in, int64_t hidden, RNNOptions o)
    : mode(std::move(mode_)), input_size(in), hidden_size(hidden), options(o) {
  FOUNDRY_CHECK_AS(ValueError, hidden > 0, "{}: hidden_size must be greater than zero", mode);
  FOUNDRY_CHECK_AS(ValueError, o.num_layers > 0, "{}: num_layers must be greater than zero", mode);
  FOUNDRY_CHECK_AS(ValueError, o.dropout >= 0 && o.dropout <= 1,
                   "{}: dropout should be a number in range [0, 1] representing the probability of an element being "
                   "zeroed",
                   mode);
  FOUNDRY_CHECK_AS(ValueError, o.proj_size >= 0, "{}: proj_size should be a positive integer or zero to disable projections",
                   mode);
  FOUNDRY_CHECK_AS(ValueError, o.proj_size < hidden, "{}: proj_size has to be smaller than hidden_size", mode);
  FOUNDRY_CHECK_AS(ValueError, o.proj_size == 0 || mode == "LSTM", "{}: proj_size argument is only supported for LSTM", mode);
  const int64_t gate = (mode == "LSTM" ? 4 : 3) * hidden;
  const int64_t D = o.bidirectional ? 2 : 1;
  const int64_t real_hidden = o.proj_size > 0 ? o.proj_size : hidden;
  for (int64_t layer = 0; layer < o.num_layers; ++layer) {
    for (int64_t dir = 0; dir < D; ++dir) {
      const int64_t layer_in = layer == 0 ? in : real_hidden * D;
      const std::string sfx = "_l" + std::to_string(layer) + (dir == 1 ? "_reverse" : "");
      register_parameter("weight_ih" + sfx, empty({gate, layer_in}));
      register_parameter("weight_hh" + sfx, empty({gate, real_hidden}));
      names_.push_back("weight_ih" + sfx);
      names_.push_back("weight_hh" + sfx);
      if (o.bias) {
        register_parameter("bias_ih" + sfx, empty({gate}));
        register_parameter("bias_hh" + sfx, empty({gate}));
        names_.push_back("bias_ih" + sfx);
        names_.push_back("bias_hh" + sfx);
      } else {
        names_.push_back("");
        names_.push_back("");
      }
      if (o.proj_size > 0) {
        register_parameter("weight_hr" + sfx, empty({o.proj_size, hidden}));
        names_.push_back("weight_hr" + sfx);
      } else {
        names_.push_back("");
      }
    }
  }
}

void RNNBase::reset_parameters() {
  const double stdv = 1.0 / std::sqrt(double(hidden_size));
  for (Tensor& p : parameters(false)) init::uniform_(p, -stdv, stdv);
}

std::vector<Tensor> RNNBase::layer_weights(int64_t layer, int64_t direction) const {
  const int64_t D = options.bidirectional ? 2 : 1;
  std::vector<Tensor> out;
  auto* self = const_cast<RNNBase*>(this);
  for (int64_t i = 0; i < 5; ++i) {
    const std::string& n = names_[size_t((layer * D + direction) * 5 + i)];
    out.push_back(n.empty() ? Tensor() : self->parameter(n));
  }
  return out;
}

std::string RNNBase::extra_repr() const {
  std::string s = fmt::format("{}, {}", input_size, hidden_size);
  if (options.proj_size != 0) s += fmt::format(", proj_size={}", options.proj_size);
  if (options.num_layers != 1) s += fmt::format(", num_layers={}", options.num_layers);
  if (!options.bias) s += ", bias=False";
  if (options.batch_first) s += ", batch_first=True";
  if (options.dropout != 0) s += ", dropout=" + py_float(options.dropout);
  if (options.bidirectional) s += ", bidirectional=True";
  return s;
}

std::tuple<Tensor, Tensor, Tensor> RNNBase::run(const Tensor& input, const Tensor& h0_in, const Tensor& c0_in) {
  const bool lstm = mode == "LSTM";
  FOUNDRY_CHECK_AS(ValueError, input.dim() == 2 || input.dim() == 3,
                   "{}: Expected input to be 2D or 3D, got {}D instead", mode, input.dim());
  const bool batched = input.dim() == 3;
  Tensor x = input, h0 = h0_in, c0 = c0_in;
  if (!batched) {
    x = x.unsqueeze(1);
    if (h0.defined()) {
      FOUNDRY_CHECK_AS(ValueError, h0.dim() == 2, "{}: For unbatched 2-D input, hx should also be 2-D but got {}-D tensor",
                       mode, h0.dim());
      h0 = h0.unsqueeze(1);
    }
    if (c0.defined()) c0 = c0.unsqueeze(1);
  } else if (options.batch_first) {
    x = x.transpose(0, 1);
  }
  FOUNDRY_CHECK_AS(ValueError, x.size(2) == input_size, "{}: input.size(-1) must be equal to input_size. Expected {}, got {}",
                   mode, input_size, x.size(2));
  const int64_t T = x.size(0), N = x.size(1), H = hidden_size;
  const int64_t D = options.bidirectional ? 2 : 1;
  const int64_t Hout = options.proj_size > 0 ? options.proj_size : H;
  const DType dt = x.dtype();
  auto check_state = [&](const Tensor& s, int64_t size, const char* what) {
    if (!s.defined()) return;
    const std::vector<int64_t> want{options.num_layers * D, N, size};
    if (s.sizes().vec() != want)
      raise<ValueError>("{}: Expected {} size {}, got {}", mode, what, shape_str(want), shape_str(s.sizes()));
  };
  check_state(h0, Hout, "hidden[0]");
  if (lstm) check_state(c0, H, "hidden[1]");

  std::vector<Tensor> h_n, c_n;
  Tensor layer_in = x;
  for (int64_t layer = 0; layer < options.num_layers; ++layer) {
    std::vector<Tensor> dir_out;
    for (int64_t dir = 0; dir < D; ++dir) {
      std::vector<Tensor> w = layer_weights(layer, dir);
      const int64_t idx = layer * D + dir;
      Tensor h = h0.defined() ? h0.select(0, idx) : zeros({N, Hout}, dt);
      Tensor c = lstm ? (c0.defined() ? c0.select(0, idx) : zeros({N, H}, dt)) : Tensor();
      // All input projections of the sequence at once: [T, N, gate].
      Tensor gi = linear(layer_in, w[0], w[2]);
      std::vector<Tensor> steps(static_cast<size_t>(T));
      for (int64_t s = 0; s < T; ++s) {
        const int64_t t = dir == 0 ? s : T - 1 - s;
        Tensor gx = gi.select(0, t);
        Tensor gh = linear(h, w[1], w[3]);
        if (lstm) {
          std::vector<Tensor> g = chunk(gx + gh, 4, 1);
          Tensor i = sigmoid(g[0]), f = sigmoid(g[1]), cell = tanh(g[2]), o = sigmoid(g[3]);
          c = f * c + i * cell;
          h = o * tanh(c);
          if (w[4].defined()) h = matmul(h, w[4].t());
        } else {
          std::vector<Tensor> a = chunk(gx, 3, 1), b = chunk(gh, 3, 1);
          Tensor r = sigmoid(a[0] + b[0]), z = sigmoid(a[1] + b[1]);
          Tensor n = tanh(a[2] + r * b[2]);
          h = n + z * (h - n);  // (1 - z) * n + z * h
        }
        steps[size_t(t)] = h;
      }
      dir_out.push_back(stack(steps, 0));
      h_n.push_back(h);
      if (lstm) c_n.push_back(c);
    }
    layer_in = D == 1 ? dir_out[0] : cat(dir_out, 2);
    if (options.dropout > 0 && training_ && layer + 1 < options.num_layers)
      layer_in = dropout(layer_in, options.dropout, true);
  }
  Tensor out = layer_in;
  Tensor hn = stack(h_n, 0);
  Tensor cn = lstm ? stack(c_n, 0) : Tensor();
  if (!batched) {
    out = out.squeeze(1);
    hn = hn.squeeze(1);
    if (cn.defined()) cn = cn.squeeze(1);
  } else if (options.batch_first) {
    out = out.transpose(0, 1);
  }
  return {out, hn, cn};
}

LSTM::LSTM(int64_t in, int64_t hidden, RNNOptions o) : RNNBase("LSTM", in, hidden, o) { reset_parameters(); }

GRU::GRU(int64_t in, int64_t hidden, RNNOptions o) : RNNBase("GRU", in, hidden, o) { reset_parameters(); }

}  // namespace foundry::nn
