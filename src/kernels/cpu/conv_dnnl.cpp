// float32 convolutions on oneDNN 2.6: forward, backward-data and backward-weights primitives with
// layouts left to oneDNN (blocked formats on AVX-512/AVX2), cached per shape together with the
// reorders from and to the NCHW / OIHW tensors Foundry holds. Temporary buffers come from
// Foundry's caching allocator, so repeated calls neither allocate nor fault pages.
//
// The forward pass of a 3x3, stride-1 convolution with many output tiles runs Winograd F(4x4, 3x3)
// where oneDNN has it (jit_wino_4x3, AVX-512 CPUs): 36 multiplications per 4x4 output tile and
// input channel where the direct kernel does 144, as cuDNN picks for such shapes. On a Zen 5 EPYC
// (transforms and reorders included, medians of 12): N8 C64 56x56 -> 64, 9.3 -> 4.5 ms at 1 thread
// and 4.7 -> 2.4 at 2; N8 C128 28x28 9.4 -> 4.6; N8 C256 14x14 9.2 -> 5.7; the mean relative difference
// from the direct kernel's output 2e-6 to 1.5e-5. Few tiles against many channels lose (the weights'
// transform is per call: N1 C256 14x14 1.28 -> 1.70 ms, N8 C512 7x7 9.9 -> 10.3), hence
// winograd_fits. FOUNDRY_CONV_WINOGRAD=0 (or set_conv_winograd(false)) keeps the direct kernel.
#include <dnnl.hpp>

#include <fmt/format.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "foundry/core/error.h"
#include "foundry/core/tensor.h"
#include "kernels/cpu/conv.h"

namespace foundry::kernels {

namespace {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

dnnl::engine& cpu_engine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

enum class Kind { Forward, BackwardData, BackwardWeights };

struct Dims {
  memory::dims src, wei, dst, bias, strides, dilates, pad_l, pad_r;
  tag wei_tag;
};

Dims dims_of(const ConvGeometry& g) {
  Dims d;
  d.src = {g.N, g.C, g.H, g.W};
  d.dst = {g.N, g.OC, g.OH, g.OW};
  d.bias = {g.OC};
  if (g.groups == 1) {
    d.wei = {g.OC, g.C, g.KH, g.KW};
    d.wei_tag = tag::oihw;
  } else {
    d.wei = {g.groups, g.OC / g.groups, g.C / g.groups, g.KH, g.KW};
    d.wei_tag = tag::goihw;
  }
  d.strides = {g.sh, g.sw};
  d.dilates = {g.dh - 1, g.dw - 1};
  d.pad_l = {g.ph, g.pw};
  // oneDNN wants OH == (H + pl + pr - ((KH - 1) dh + 1)) / sh + 1 exactly: the right padding is
  // what the floor in PyTorch's output size leaves (it may be negative).
  d.pad_r = {(g.OH - 1) * g.sh + (g.KH - 1) * g.dh + 1 - g.H - g.ph, (g.OW - 1) * g.sw + (g.KW - 1) * g.dw + 1 - g.W - g.pw};
  return d;
}

// A cached primitive: the descriptors oneDNN chose, the primitive, and reorders for the operands
// whose chosen layout differs from the plain one (null when equal). Operands: 0 and 1 are inputs,
// 2 is the output.
struct Entry {
  std::string implementation;  // oneDNN's name for the kernel (forward entries)
  dnnl::primitive prim;
  memory::desc user[3], inner[3];
  std::unique_ptr<dnnl::reorder> to_inner[2], to_user;
};

std::atomic<bool>& winograd_on() {
  static std::atomic<bool> on{[] {
    const char* v = std::getenv("FOUNDRY_CONV_WINOGRAD");
    return !(v && std::string(v) == "0");
  }()};
  return on;
}

// Shapes where Winograd F(4x4, 3x3) ran faster than the direct kernel (see the top of the file):
// at least 48 output tiles of 4x4 and 32 channels each way (oneDNN itself wants multiples of 16).
bool winograd_fits(const ConvGeometry& g) {
  const int64_t tiles = g.N * ((g.OH + 3) / 4) * ((g.OW + 3) / 4);
  return winograd_on().load(std::memory_order_relaxed) && g.groups == 1 && g.KH == 3 && g.KW == 3 && g.sh == 1 &&
         g.sw == 1 && g.dh == 1 && g.dw == 1 && g.C % 16 == 0 && g.OC % 16 == 0 && g.C >= 32 && g.OC >= 32 &&
         tiles >= 48;
}

std::string key_of(Kind k, const ConvGeometry& g, bool bias) {
  return fmt::format("{}|{},{},{},{}|{},{},{}|{},{}|{},{},{},{},{},{}|{}|{}|{}", int(k), g.N, g.C, g.H, g.W, g.OC,
                     g.KH, g.KW, g.OH, g.OW, g.sh, g.sw, g.ph, g.pw, g.dh, g.dw, g.groups, bias,
                     k == Kind::Forward && winograd_fits(g));
}

// An empty descriptor where oneDNN has no kernel for `alg` (allowed only for Winograd).
dnnl::convolution_forward::primitive_desc forward_pd(const Dims& d, bool bias, dnnl::prop_kind prop,
                                                     dnnl::algorithm alg = dnnl::algorithm::convolution_direct) {
  auto any = [](const memory::dims& x) { return memory::desc(x, dt::f32, tag::any); };
  const bool allow_empty = alg != dnnl::algorithm::convolution_direct;
  if (bias) {
    dnnl::convolution_forward::desc desc(prop, alg, any(d.src), any(d.wei), memory::desc(d.bias, dt::f32, tag::x),
                                         any(d.dst), d.strides, d.dilates, d.pad_l, d.pad_r);
    return {desc, cpu_engine(), allow_empty};
  }
  dnnl::convolution_forward::desc desc(prop, alg, any(d.src), any(d.wei), any(d.dst), d.strides, d.dilates, d.pad_l,
                                       d.pad_r);
  return {desc, cpu_engine(), allow_empty};
}

std::shared_ptr<Entry> make_entry(Kind k, const ConvGeometry& g, bool bias) {
  const Dims d = dims_of(g);
  auto e = std::make_shared<Entry>();
  const memory::desc usrc(d.src, dt::f32, tag::nchw), uwei(d.wei, dt::f32, d.wei_tag), udst(d.dst, dt::f32, tag::nchw);
  auto any = [](const memory::dims& x) { return memory::desc(x, dt::f32, tag::any); };
  switch (k) {
    case Kind::Forward: {
      // forward_training (no workspace for convolutions) lets oneDNN pick the blocked nChw16c /
      // nChw8c direct kernels, whose reorders from NCHW are about twice as cheap as the channels-last
      // layout the brgemm kernels chosen for forward_inference want (measured: 17.0 vs 18.7 ms for
      // N8 C64 56x56 3x3 on one thread).
      dnnl::convolution_forward::primitive_desc pd;
      if (winograd_fits(g))
        pd = forward_pd(d, bias, dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_winograd);
      if (!pd) pd = forward_pd(d, bias, dnnl::prop_kind::forward_training);
      e->implementation = pd.impl_info_str();
      e->prim = dnnl::convolution_forward(pd);
      e->user[0] = usrc, e->user[1] = uwei, e->user[2] = udst;
      e->inner[0] = pd.src_desc(), e->inner[1] = pd.weights_desc(), e->inner[2] = pd.dst_desc();
      break;
    }
    case Kind::BackwardData: {
      auto hint = forward_pd(d, false, dnnl::prop_kind::forward_training);
      dnnl::convolution_backward_data::desc desc(dnnl::algorithm::convolution_direct, any(d.src), any(d.wei),
                                                 any(d.dst), d.strides, d.dilates, d.pad_l, d.pad_r);
      dnnl::convolution_backward_data::primitive_desc pd(desc, cpu_engine(), hint);
      e->prim = dnnl::convolution_backward_data(pd);
      e->user[0] = udst, e->user[1] = uwei, e->user[2] = usrc;
      e->inner[0] = pd.diff_dst_desc(), e->inner[1] = pd.weights_desc(), e->inner[2] = pd.diff_src_desc();
      break;
    }
    case Kind::BackwardWeights: {
      auto hint = forward_pd(d, false, dnnl::prop_kind::forward_training);
      dnnl::convolution_backward_weights::desc desc(dnnl::algorithm::convolution_direct, any(d.src), any(d.wei),
                                                    any(d.dst), d.strides, d.dilates, d.pad_l, d.pad_r);
      dnnl::convolution_backward_weights::primitive_desc pd(desc, cpu_engine(), hint);
      e->prim = dnnl::convolution_backward_weights(pd);
      e->user[0] = usrc, e->user[1] = udst, e->user[2] = uwei;
      e->inner[0] = pd.src_desc(), e->inner[1] = pd.diff_dst_desc(), e->inner[2] = pd.diff_weights_desc();
      break;
    }
  }
  for (int i = 0; i < 2; ++i)
    if (e->user[i] != e->inner[i])
      e->to_inner[i] = std::make_unique<dnnl::reorder>(dnnl::reorder::primitive_desc(
          cpu_engine(), e->user[i], cpu_engine(), e->inner[i]));
  if (e->user[2] != e->inner[2])
    e->to_user = std::make_unique<dnnl::reorder>(
        dnnl::reorder::primitive_desc(cpu_engine(), e->inner[2], cpu_engine(), e->user[2]));
  return e;
}

std::shared_ptr<Entry> lookup(Kind k, const ConvGeometry& g, bool bias) {
  static std::mutex mu;
  static std::unordered_map<std::string, std::shared_ptr<Entry>> cache;
  const std::string key = key_of(k, g, bias);
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  std::shared_ptr<Entry> e;
  try {
    e = make_entry(k, g, bias);
  } catch (const dnnl::error& err) {
    raise<Error>("convolution: oneDNN could not create a primitive for input [{}, {}, {}, {}], weight [{}, {}, {}, {}] "
                 "(groups {}): {}",
                 g.N, g.C, g.H, g.W, g.OC, g.C / g.groups, g.KH, g.KW, g.groups, err.what());
  }
  std::lock_guard<std::mutex> lock(mu);
  if (cache.size() > 512) cache.clear();
  cache.emplace(key, e);
  return e;
}

// A scratch buffer for an operand in oneDNN's layout, from the caching allocator.
memory scratch(const memory::desc& d, Tensor& holder) {
  holder = empty({int64_t(d.get_size())}, DType::UInt8);
  return memory(d, cpu_engine(), holder.data_ptr());
}

// Runs entry `e` on user buffers in0, in1 -> out (plain layouts), with an optional bias.
void run(const Entry& e, Kind k, const float* in0, const float* in1, const float* bias, float* out,
         const ConvGeometry& g) {
  dnnl::stream s(cpu_engine());
  Tensor hold[3];
  memory u0(e.user[0], cpu_engine(), const_cast<float*>(in0));
  memory u1(e.user[1], cpu_engine(), const_cast<float*>(in1));
  memory u2(e.user[2], cpu_engine(), out);
  memory m0 = u0, m1 = u1, m2 = u2;
  if (e.to_inner[0]) {
    m0 = scratch(e.inner[0], hold[0]);
    e.to_inner[0]->execute(s, u0, m0);
  }
  if (e.to_inner[1]) {
    m1 = scratch(e.inner[1], hold[1]);
    e.to_inner[1]->execute(s, u1, m1);
  }
  if (e.to_user) m2 = scratch(e.inner[2], hold[2]);
  switch (k) {
    case Kind::Forward: {
      std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, m0}, {DNNL_ARG_WEIGHTS, m1}, {DNNL_ARG_DST, m2}};
      if (bias) args.emplace(DNNL_ARG_BIAS, memory({{g.OC}, dt::f32, tag::x}, cpu_engine(), const_cast<float*>(bias)));
      e.prim.execute(s, args);
      break;
    }
    case Kind::BackwardData:
      e.prim.execute(s, {{DNNL_ARG_DIFF_DST, m0}, {DNNL_ARG_WEIGHTS, m1}, {DNNL_ARG_DIFF_SRC, m2}});
      break;
    case Kind::BackwardWeights:
      e.prim.execute(s, {{DNNL_ARG_SRC, m0}, {DNNL_ARG_DIFF_DST, m1}, {DNNL_ARG_DIFF_WEIGHTS, m2}});
      break;
  }
  if (e.to_user) e.to_user->execute(s, m2, u2);
  s.wait();
}

}  // namespace

void set_conv_winograd(bool on) { winograd_on().store(on); }

std::string conv_forward_implementation(const ConvGeometry& g, bool bias) {
  return lookup(Kind::Forward, g, bias)->implementation;
}

void conv_forward_f32(const float* src, const float* wei, const float* bias, float* dst, const ConvGeometry& g) {
  auto e = lookup(Kind::Forward, g, bias != nullptr);
  run(*e, Kind::Forward, src, wei, bias, dst, g);
}

void conv_backward_data_f32(const float* diff_dst, const float* wei, float* diff_src, const ConvGeometry& g) {
  auto e = lookup(Kind::BackwardData, g, false);
  run(*e, Kind::BackwardData, diff_dst, wei, nullptr, diff_src, g);
}

void conv_backward_weights_f32(const float* src, const float* diff_dst, float* diff_wei, const ConvGeometry& g) {
  auto e = lookup(Kind::BackwardWeights, g, false);
  run(*e, Kind::BackwardWeights, src, diff_dst, nullptr, diff_wei, g);
}

}  // namespace foundry::kernels
