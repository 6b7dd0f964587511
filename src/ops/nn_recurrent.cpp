// The recurrences of RWKV and Mamba as ops: rwkv_wkv (RWKV-4's WKV time mixing) and
// selective_scan (Mamba's S6), each one kernel over the whole sequence (kernels/cpu/recurrent.h)
// with its gradient from a fused reverse-time kernel (_rwkv_wkv_backward,
// _selective_scan_backward; first order only). The references are PyTorch transcriptions of
// transformers v4.40's loops (tools/torch_ref.py). rwkv_wkv_with_state / selective_scan_with_state
// run the same forward kernels from a carried state, for generation (no gradient).
#include "kernels/cpu/recurrent.h"
#include "ops/nn_common.h"

namespace foundry {

using ops::Args;
using ops::BackwardContext;
using ops::Sample;
using ops::Value;
using ops::nn::U;

namespace {

DType compute_type(std::initializer_list<Tensor> ts) {
  for (const Tensor& t : ts)
    if (t.dtype() == DType::Float64) return DType::Float64;
  return DType::Float32;
}

Tensor as(const Tensor& t, DType dt) { return t.to(dt).contiguous(); }

void check_wkv(const Tensor& td, const Tensor& tf, const Tensor& k, const Tensor& v) {
  for (const Tensor* t : {&td, &tf, &k, &v}) ops::nn::check_floating(*t, "rwkv_wkv");
  FOUNDRY_CHECK_AS(ValueError, k.dim() == 3 && Shape(k.sizes()) == Shape(v.sizes()),
                   "rwkv_wkv: key and value must be [batch, time, channels] of one shape, got {} and {}",
                   shape_str(k.sizes()), shape_str(v.sizes()));
  const int64_t C = k.size(2);
  FOUNDRY_CHECK_AS(ValueError, td.dim() == 1 && td.size(0) == C && tf.dim() == 1 && tf.size(0) == C,
                   "rwkv_wkv: time_decay {} and time_first {} must be [{}] (the channels of key)", shape_str(td.sizes()),
                   shape_str(tf.sizes()), C);
}

// y and the final state of the WKV from `state` ([3, B, C] in the compute type; updated in place).
Tensor wkv(const Tensor& td, const Tensor& tf, const Tensor& k, const Tensor& v, Tensor& state) {
  const DType ct = state.dtype();
  Tensor w = as(neg(exp(td.to(ct))), ct), u = as(tf, ct), kc = as(k, ct), vc = as(v, ct);
  const int64_t B = k.size(0), T = k.size(1), C = k.size(2);
  Tensor y = empty({B, T, C}, ct);
  if (ct == DType::Float32)
    kernels::rwkv_wkv_forward_f32(w.data<float>(), u.data<float>(), kc.data<float>(), vc.data<float>(), y.data<float>(),
                                  state.data<float>(), B, T, C);
  else
    kernels::rwkv_wkv_forward<double>(w.data<double>(), u.data<double>(), kc.data<double>(), vc.data<double>(),
                                      y.data<double>(), state.data<double>(), B, T, C);
  return y.to(k.dtype());
}

Tensor fresh_wkv_state(int64_t B, int64_t C, DType ct) {
  Tensor s = zeros({B, 3, C}, ct);
  s.select(1, 2).fill_(-1e38);
  return s;
}

void check_scan(const Tensor& x, const Tensor& delta, const Tensor& A, const Tensor& Bm, const Tensor& Cm, const Tensor& Dv) {
  for (const Tensor* t : {&x, &delta, &A, &Bm, &Cm, &Dv}) ops::nn::check_floating(*t, "selective_scan");
  FOUNDRY_CHECK_AS(ValueError, x.dim() == 3 && Shape(x.sizes()) == Shape(delta.sizes()),
                   "selective_scan: u and delta must be [batch, length, channels] of one shape, got {} and {}",
                   shape_str(x.sizes()), shape_str(delta.sizes()));
  const int64_t B = x.size(0), L = x.size(1), D = x.size(2);
  FOUNDRY_CHECK_AS(ValueError, A.dim() == 2 && A.size(0) == D, "selective_scan: A must be [{}, state], got {}", D,
                   shape_str(A.sizes()));
  const int64_t N = A.size(1);
  FOUNDRY_CHECK_AS(ValueError, Shape(Bm.sizes()) == Shape({B, L, N}) && Shape(Cm.sizes()) == Shape({B, L, N}),
                   "selective_scan: B and C must be [{}, {}, {}], got {} and {}", B, L, N, shape_str(Bm.sizes()),
                   shape_str(Cm.sizes()));
  FOUNDRY_CHECK_AS(ValueError, Dv.dim() == 1 && Dv.size(0) == D, "selective_scan: D must be [{}], got {}", D,
                   shape_str(Dv.sizes()));
}

Tensor scan(const Tensor& x, const Tensor& delta, const Tensor& A, const Tensor& Bm, const Tensor& Cm, const Tensor& Dv,
            Tensor& state) {
  const DType ct = state.dtype();
  const int64_t B = x.size(0), L = x.size(1), D = x.size(2), N = A.size(1);
  Tensor xc = as(x, ct), dc = as(delta, ct), Ac = as(A, ct), Bc = as(Bm, ct), Cc = as(Cm, ct), Dc = as(Dv, ct);
  Tensor y = empty({B, L, D}, ct);
  if (ct == DType::Float32)
    kernels::selective_scan_forward_f32(xc.data<float>(), dc.data<float>(), Ac.data<float>(), Bc.data<float>(),
                                        Cc.data<float>(), Dc.data<float>(), y.data<float>(), state.data<float>(), B, L,
                                        D, N);
  else
    kernels::selective_scan_forward<double>(xc.data<double>(), dc.data<double>(), Ac.data<double>(), Bc.data<double>(),
                                            Cc.data<double>(), Dc.data<double>(), y.data<double>(),
                                            state.data<double>(), B, L, D, N);
  return y.to(x.dtype());
}

std::vector<Sample> wkv_samples(DType dt, Generator& g, bool backward) {
  std::vector<Sample> s;
  for (auto [B, T, C] : {std::tuple<int64_t, int64_t, int64_t>{2, 4, 5}, {1, 7, 3}, {3, 1, 4}}) {
    std::vector<Value> args;
    if (backward) args.push_back(U({B, T, C}, dt, g, -1, 1));
    args.push_back(U({C}, dt, g, -2, 1));   // time_decay: w = -exp(.) in [-2.7, -0.14]
    args.push_back(U({C}, dt, g, -1, 1));   // time_first
    args.push_back(U({B, T, C}, dt, g, -3, 3));
    args.push_back(U({B, T, C}, dt, g));
    s.push_back({args, T == 1 ? "one step" : ""});
  }
  {  // keys far apart in scale: the stable form's maxima at work
    std::vector<Value> args;
    if (backward) args.push_back(U({1, 6, 2}, dt, g, -1, 1));
    args.push_back(U({2}, dt, g, -1, 0.5));
    args.push_back(U({2}, dt, g, -1, 1));
    args.push_back(U({1, 6, 2}, dt, g, -30, 30));
    args.push_back(U({1, 6, 2}, dt, g));
    s.push_back({args, "large keys", /*gradcheck=*/false});
  }
  return s;
}

std::vector<Sample> scan_samples(DType dt, Generator& g, bool backward) {
  std::vector<Sample> s;
  // (2, 2, 5, 16): decoding's per-channel kernel (a few steps, the state index across lanes).
  for (auto [B, L, D, N] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{2, 5, 3, 2}, {1, 3, 17, 4}, {2, 1, 4, 3},
                            {2, 2, 5, 16}}) {
    std::vector<Value> args;
    if (backward) args.push_back(U({B, L, D}, dt, g, -1, 1));
    args.push_back(U({B, L, D}, dt, g));             // u
    args.push_back(U({B, L, D}, dt, g, 0.05, 1.5));  // delta (softplus output: positive)
    args.push_back(U({D, N}, dt, g, -2, -0.1));      // A = -exp(A_log)
    args.push_back(U({B, L, N}, dt, g));
    args.push_back(U({B, L, N}, dt, g));
    args.push_back(U({D}, dt, g));
    s.push_back({args, D == 17 ? "channels past a vector" : L == 1 ? "one step" : N == 16 ? "decoding steps" : ""});
  }
  return s;
}

}  // namespace

Tensor rwkv_wkv(const Tensor& time_decay, const Tensor& time_first, const Tensor& key, const Tensor& value) {
  return ops::call1(FOUNDRY_OP("rwkv_wkv"), {time_decay, time_first, key, value});
}

Tensor rwkv_wkv_with_state(const Tensor& time_decay, const Tensor& time_first, const Tensor& key, const Tensor& value,
                           Tensor& state) {
  check_wkv(time_decay, time_first, key, value);
  const DType ct = compute_type({key});
  const int64_t B = key.size(0), C = key.size(2);
  if (!state.defined()) state = fresh_wkv_state(B, C, ct);
  FOUNDRY_CHECK_AS(ValueError, Shape(state.sizes()) == Shape({B, 3, C}) && state.dtype() == ct && state.is_contiguous(),
                   "rwkv_wkv: state must be a contiguous {} [{}, 3, {}], got {} {}", dtype_name(ct), B, C,
                   dtype_name(state.dtype()), shape_str(state.sizes()));
  return wkv(time_decay, time_first, key, value, state);
}

Tensor selective_scan(const Tensor& u, const Tensor& delta, const Tensor& A, const Tensor& B, const Tensor& C,
                      const Tensor& D) {
  return ops::call1(FOUNDRY_OP("selective_scan"), {u, delta, A, B, C, D});
}

Tensor selective_scan_with_state(const Tensor& u, const Tensor& delta, const Tensor& A, const Tensor& B, const Tensor& C,
                                 const Tensor& D, Tensor& state) {
  check_scan(u, delta, A, B, C, D);
  const DType ct = compute_type({u});
  const int64_t Bn = u.size(0), Dn = u.size(2), N = A.size(1);
  if (!state.defined()) state = zeros({Bn, Dn, N}, ct);
  FOUNDRY_CHECK_AS(ValueError, Shape(state.sizes()) == Shape({Bn, Dn, N}) && state.dtype() == ct && state.is_contiguous(),
                   "selective_scan: state must be a contiguous {} [{}, {}, {}], got {} {}", dtype_name(ct), Bn, Dn, N,
                   dtype_name(state.dtype()), shape_str(state.sizes()));
  return scan(u, delta, A, B, C, D, state);
}

namespace ops {

void register_nn_recurrent_ops(Registry& r) {
  r.add({.schema_text = "rwkv_wkv(Tensor time_decay, Tensor time_first, Tensor key, Tensor value) -> Tensor",
         .family = "nn",
         .doc = "RWKV-4 time mixing: wkv_t = (sum_{i<t} e^{-(t-1-i)e^{time_decay} + k_i} v_i + e^{time_first + k_t} v_t)"
                " / (the same without v), over key/value [batch, time, channels], in the stable running-max form",
         .saves = {"time_decay", "time_first", "key", "value"},
         .forward =
             [](const Args& a) {
               check_wkv(a.tensor(0), a.tensor(1), a.tensor(2), a.tensor(3));
               const Tensor& k = a.tensor(2);
               Tensor state = fresh_wkv_state(k.size(0), k.size(2), compute_type({a.tensor(0), a.tensor(1), k, a.tensor(3)}));
               return std::vector<Tensor>{wkv(a.tensor(0), a.tensor(1), k, a.tensor(3), state)};
             },
         .backward =
             [](BackwardContext& c) {
               std::vector<Tensor> g = ops::call(FOUNDRY_OP("_rwkv_wkv_backward"),
                                                 {c.grad(0), c.input("time_decay"), c.input("time_first"),
                                                  c.input("key"), c.input("value")});
               return g;
             },
         .dtypes = {DType::Float32, DType::Float64},
         .samples = [](DType dt, Generator& g) { return wkv_samples(dt, g, false); },
         .ref = "rwkv_wkv",
         .notes = "the reference is transformers v4.40's rwkv_linear_attention_cpu (no state)",
         .second_order = false});

  r.add({.schema_text = "_rwkv_wkv_backward(Tensor grad, Tensor time_decay, Tensor time_first, Tensor key, Tensor value)"
                        " -> (Tensor, Tensor, Tensor, Tensor)",
         .family = "nn",
         .doc = "gradients of rwkv_wkv: (time_decay, time_first, key, value), from a reverse-time kernel",
         .differentiable = false,
         .forward =
             [](const Args& a) {
               const Tensor &td = a.tensor(1), &tf = a.tensor(2), &k = a.tensor(3), &v = a.tensor(4);
               check_wkv(td, tf, k, v);
               FOUNDRY_CHECK_AS(ValueError, Shape(a.tensor(0).sizes()) == Shape(k.sizes()),
                                "_rwkv_wkv_backward: grad {} must have the key's shape {}", shape_str(a.tensor(0).sizes()),
                                shape_str(k.sizes()));
               const DType ct = compute_type({a.tensor(0), td, tf, k, v});
               const int64_t B = k.size(0), T = k.size(1), C = k.size(2);
               Tensor w = as(neg(exp(td.to(ct))), ct), u = as(tf, ct), kc = as(k, ct), vc = as(v, ct), gy = as(a.tensor(0), ct);
               Tensor gw = empty({C}, ct), gu = empty({C}, ct), gk = empty({B, T, C}, ct), gv = empty({B, T, C}, ct);
               if (ct == DType::Float32)
                 kernels::rwkv_wkv_backward<float>(w.data<float>(), u.data<float>(), kc.data<float>(), vc.data<float>(),
                                                   gy.data<float>(), gw.data<float>(), gu.data<float>(), gk.data<float>(),
                                                   gv.data<float>(), B, T, C);
               else
                 kernels::rwkv_wkv_backward<double>(w.data<double>(), u.data<double>(), kc.data<double>(),
                                                    vc.data<double>(), gy.data<double>(), gw.data<double>(),
                                                    gu.data<double>(), gk.data<double>(), gv.data<double>(), B, T, C);
               // w = -exp(time_decay): d/dtime_decay = w.
               return std::vector<Tensor>{(gw * w).to(td.dtype()), gu.to(tf.dtype()), gk.to(k.dtype()), gv.to(v.dtype())};
             },
         .dtypes = {DType::Float32, DType::Float64},
         .samples = [](DType dt, Generator& g) { return wkv_samples(dt, g, true); },
         .ref = "_rwkv_wkv_backward"});

  r.add({.schema_text = "selective_scan(Tensor u, Tensor delta, Tensor A, Tensor B, Tensor C, Tensor D) -> Tensor",
         .family = "nn",
         .doc = "Mamba's selective scan over [batch, length, channels]: h_t = exp(delta_t A) h_{t-1} + delta_t B_t u_t "
                "(state [channels, N] from zeros), y_t = C_t h_t + D u_t",
         .saves = {"u", "delta", "A", "B", "C", "D"},
         .forward =
             [](const Args& a) {
               const Tensor &x = a.tensor(0), &A = a.tensor(2);
               check_scan(x, a.tensor(1), A, a.tensor(3), a.tensor(4), a.tensor(5));
               Tensor state = zeros({x.size(0), x.size(2), A.size(1)},
                                    compute_type({x, a.tensor(1), A, a.tensor(3), a.tensor(4), a.tensor(5)}));
               return std::vector<Tensor>{scan(x, a.tensor(1), A, a.tensor(3), a.tensor(4), a.tensor(5), state)};
             },
         .backward =
             [](BackwardContext& c) {
               return ops::call(FOUNDRY_OP("_selective_scan_backward"),
                                {c.grad(0), c.input("u"), c.input("delta"), c.input("A"), c.input("B"), c.input("C"),
                                 c.input("D")});
             },
         .dtypes = {DType::Float32, DType::Float64},
         .samples = [](DType dt, Generator& g) { return scan_samples(dt, g, false); },
         .ref = "selective_scan",
         .notes = "the reference is the scan of transformers v4.40's MambaMixer.slow_forward",
         .second_order = false});

  r.add({.schema_text = "_selective_scan_backward(Tensor grad, Tensor u, Tensor delta, Tensor A, Tensor B, Tensor C, "
                        "Tensor D) -> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)",
         .family = "nn",
         .doc = "gradients of selective_scan: (u, delta, A, B, C, D), from a reverse-time kernel",
         .differentiable = false,
         .forward =
             [](const Args& a) {
               const Tensor &x = a.tensor(1), &dl = a.tensor(2), &A = a.tensor(3), &Bm = a.tensor(4), &Cm = a.tensor(5),
                            &Dv = a.tensor(6);
               check_scan(x, dl, A, Bm, Cm, Dv);
               FOUNDRY_CHECK_AS(ValueError, Shape(a.tensor(0).sizes()) == Shape(x.sizes()),
                                "_selective_scan_backward: grad {} must have u's shape {}", shape_str(a.tensor(0).sizes()),
                                shape_str(x.sizes()));
               const DType ct = compute_type({a.tensor(0), x, dl, A, Bm, Cm, Dv});
               const int64_t B = x.size(0), L = x.size(1), D = x.size(2), N = A.size(1);
               Tensor gy = as(a.tensor(0), ct), xc = as(x, ct), dc = as(dl, ct), Ac = as(A, ct), Bc = as(Bm, ct),
                      Cc = as(Cm, ct), Dc = as(Dv, ct);
               Tensor gx = empty({B, L, D}, ct), gd = empty({B, L, D}, ct), gA = empty({D, N}, ct),
                      gB = empty({B, L, N}, ct), gC = empty({B, L, N}, ct), gD = empty({D}, ct);
               auto run = [&](auto* tag) {
                 using S = std::remove_pointer_t<decltype(tag)>;
                 kernels::selective_scan_backward<S>(xc.data<S>(), dc.data<S>(), Ac.data<S>(), Bc.data<S>(),
                                                     Cc.data<S>(), Dc.data<S>(), gy.data<S>(), gx.data<S>(), gd.data<S>(),
                                                     gA.data<S>(), gB.data<S>(), gC.data<S>(), gD.data<S>(), B, L, D, N);
               };
               if (ct == DType::Float32) run(static_cast<float*>(nullptr));
               else run(static_cast<double*>(nullptr));
               return std::vector<Tensor>{gx.to(x.dtype()), gd.to(dl.dtype()), gA.to(A.dtype()),
                                          gB.to(Bm.dtype()), gC.to(Cm.dtype()), gD.to(Dv.dtype())};
             },
         .dtypes = {DType::Float32, DType::Float64},
         .samples = [](DType dt, Generator& g) { return scan_samples(dt, g, true); },
         .ref = "_selective_scan_backward"});
}

}  // namespace ops
}  // namespace foundry
