// The paged layout of KVCache: pools of fixed-size blocks per layer, block tables per sequence,
// reference-counted blocks (a shared prompt prefix is stored once), and the gather that gives a
// forward its rows' keys and values left-padded to the longest row.
#include <algorithm>

#include "foundry/autograd/grad_mode.h"
#include "foundry/ops/ops.h"
#include "foundry/quant/block_formats.h"
#include "models/hf/common.h"

namespace foundry::models {

KVCache KVCache::paged(int64_t layers, int64_t kv_heads, int64_t head_dim, DType dtype, const std::string& format,
                       int64_t num_blocks, int64_t block_size) {
  FOUNDRY_CHECK_AS(ValueError, num_blocks > 0 && block_size > 0, "KVCache::paged: {} blocks of {} positions", num_blocks,
                   block_size);
  KVCache c(layers, num_blocks, kv_heads, block_size, head_dim, dtype, format);  // [blocks, Hkv, block_size, row]
  c.block_size_ = block_size;
  c.kv_heads_ = kv_heads;
  c.batch_ = 0;
  c.refs_.assign(size_t(num_blocks), 0);
  for (int64_t b = num_blocks; b-- > 0;) c.free_.push_back(int32_t(b));
  return c;
}

KVCache::Sequence& KVCache::sequence(int64_t id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) raise<IndexError>("KVCache: no sequence {}", id);
  return it->second;
}

const KVCache::Sequence& KVCache::sequence(int64_t id) const { return const_cast<KVCache*>(this)->sequence(id); }

void KVCache::add_sequence(int64_t id, const std::vector<int32_t>& prefix) {
  FOUNDRY_CHECK_AS(ValueError, paged(), "KVCache::add_sequence needs a paged cache");
  FOUNDRY_CHECK_AS(ValueError, !seqs_.count(id), "KVCache: sequence {} exists", id);
  Sequence s;
  for (int32_t b : prefix) retain_block(b);
  s.blocks = prefix;
  s.length = int64_t(prefix.size()) * block_size_;
  seqs_[id] = std::move(s);
}

void KVCache::remove_sequence(int64_t id) {
  Sequence& s = sequence(id);
  for (int32_t b : s.blocks) release_block(b);
  seqs_.erase(id);
  bound_.erase(std::remove(bound_.begin(), bound_.end(), id), bound_.end());
}

bool KVCache::reserve_sequence(int64_t id, int64_t n) {
  Sequence& s = sequence(id);
  const int64_t need = (s.length + n + block_size_ - 1) / block_size_ - int64_t(s.blocks.size());
  if (need <= 0) return true;
  if (need > int64_t(free_.size())) return false;
  for (int64_t i = 0; i < need; ++i) {
    const int32_t b = free_.back();
    free_.pop_back();
    refs_[size_t(b)] = 1;
    s.blocks.push_back(b);
  }
  return true;
}

int64_t KVCache::sequence_length(int64_t id) const { return sequence(id).length; }
const std::vector<int32_t>& KVCache::block_table(int64_t id) const { return sequence(id).blocks; }

void KVCache::retain_block(int32_t block) {
  FOUNDRY_CHECK_AS(IndexError, block >= 0 && size_t(block) < refs_.size() && refs_[size_t(block)] > 0,
                   "KVCache: block {} is not in use", block);
  ++refs_[size_t(block)];
}

void KVCache::release_block(int32_t block) {
  FOUNDRY_CHECK_AS(IndexError, block >= 0 && size_t(block) < refs_.size() && refs_[size_t(block)] > 0,
                   "KVCache: block {} is not in use", block);
  if (--refs_[size_t(block)] == 0) free_.push_back(block);
}

void KVCache::bind(const std::vector<int64_t>& ids) {
  FOUNDRY_CHECK_AS(ValueError, paged(), "KVCache::bind needs a paged cache");
  length_ = 0;
  for (int64_t id : ids) length_ = std::max(length_, sequence(id).length);
  bound_ = ids;
  batch_ = int64_t(ids.size());
}

void KVCache::store_paged(int64_t layer, const Tensor& k, const Tensor& v) {
  const int64_t B = k.size(0), H = k.size(1), T = k.size(2), D = k.size(3);
  FOUNDRY_CHECK_AS(ValueError, B == int64_t(bound_.size()) && H == kv_heads_ && D == head_dim_,
                   "KVCache: keys {} for {} bound sequences", shape_str(k.sizes()), bound_.size());
  const quant::BlockFormatTraits* fmt = format_traits_;
  Tensor kc = (fmt ? k.to(DType::Float32) : k.to(dtype_)).contiguous();
  Tensor vc = (fmt ? v.to(DType::Float32) : v.to(dtype_)).contiguous();
  Tensor& ks = k_[size_t(layer)];
  Tensor& vs = v_[size_t(layer)];
  const int64_t row = ks.size(3), elem = fmt ? 0 : int64_t(itemsize(dtype_));
  auto* kd = static_cast<uint8_t*>(ks.data_ptr());
  auto* vd = static_cast<uint8_t*>(vs.data_ptr());
  const auto* kin = static_cast<const uint8_t*>(kc.data_ptr());
  const auto* vin = static_cast<const uint8_t*>(vc.data_ptr());
  const int64_t in_row = fmt ? D * int64_t(sizeof(float)) : D * elem, out_row = fmt ? row : D * elem;
  for (int64_t b = 0; b < B; ++b) {
    const Sequence& s = sequence(bound_[size_t(b)]);
    FOUNDRY_CHECK_AS(ValueError, s.length + T <= int64_t(s.blocks.size()) * block_size_,
                     "KVCache: sequence {} has room for {} positions, {} + {} given (reserve_sequence first)",
                     bound_[size_t(b)], s.blocks.size() * size_t(block_size_), s.length, T);
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t) {
        const int64_t pos = s.length + t, block = s.blocks[size_t(pos / block_size_)];
        const int64_t dst = ((block * H + h) * block_size_ + pos % block_size_) * out_row;
        const int64_t src = ((b * H + h) * T + t) * in_row;
        if (fmt) {
          fmt->quantize(reinterpret_cast<const float*>(kin + src), kd + dst, D);
          fmt->quantize(reinterpret_cast<const float*>(vin + src), vd + dst, D);
        } else {
          std::copy(kin + src, kin + src + in_row, kd + dst);
          std::copy(vin + src, vin + src + in_row, vd + dst);
        }
      }
  }
}

std::pair<Tensor, Tensor> KVCache::read_paged(int64_t layer, int64_t T) const {
  // Each row's length + T positions, right-aligned in [B, Hkv, S, D] with S = length() + T; the
  // padding on the left is zeros (the caller's mask hides it).
  const int64_t B = int64_t(bound_.size()), H = kv_heads_, D = head_dim_, S = length_ + T;
  const quant::BlockFormatTraits* fmt = format_traits_;
  const DType out_dtype = fmt ? DType::Float32 : dtype_;
  Tensor ko = zeros({B, H, S, D}, out_dtype), vo = zeros({B, H, S, D}, out_dtype);
  const Tensor& ks = k_[size_t(layer)];
  const Tensor& vs = v_[size_t(layer)];
  const int64_t elem = int64_t(itemsize(out_dtype)), row = fmt ? ks.size(3) : D * elem;
  const auto* kd = static_cast<const uint8_t*>(ks.data_ptr());
  const auto* vd = static_cast<const uint8_t*>(vs.data_ptr());
  auto* ko_p = static_cast<uint8_t*>(ko.data_ptr());
  auto* vo_p = static_cast<uint8_t*>(vo.data_ptr());
  for (int64_t b = 0; b < B; ++b) {
    const Sequence& s = sequence(bound_[size_t(b)]);
    const int64_t L = s.length + T, off = S - L;
    for (int64_t h = 0; h < H; ++h)
      for (int64_t pos = 0; pos < L; ++pos) {
        const int64_t block = s.blocks[size_t(pos / block_size_)];
        const int64_t src = ((block * H + h) * block_size_ + pos % block_size_) * row;
        const int64_t dst = ((b * H + h) * S + off + pos) * D * elem;
        if (fmt) {
          fmt->dequantize(kd + src, reinterpret_cast<float*>(ko_p + dst), D);
          fmt->dequantize(vd + src, reinterpret_cast<float*>(vo_p + dst), D);
        } else {
          std::copy(kd + src, kd + src + D * elem, ko_p + dst);
          std::copy(vd + src, vd + src + D * elem, vo_p + dst);
        }
      }
  }
  return {ko.to(dtype_), vo.to(dtype_)};
}

}  // namespace foundry::models
