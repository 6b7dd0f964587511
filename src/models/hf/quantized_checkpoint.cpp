// `foundry quantize` folders: the writer (quantize_folder) and the reader (QuantizedCheckpoint).
// The bitsandbytes layouts follow what transformers saves for a bitsandbytes-quantized model
// (Linear4bit / Linear8bitLt state dicts, QuantState.as_dict(packed=True)).
#include "models/hf/quantized_checkpoint.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "foundry/core/error.h"
#include "foundry/core/numeric.h"
#include "foundry/core/parallel.h"
#include "foundry/io/atomic_file.h"
#include "foundry/models/quantized_folder.h"
#include "foundry/ops/ops.h"
#include "foundry/quant/weight_only.h"
#include "quant/formats_internal.h"
#include "foundry/io/json_depth.h"

namespace foundry::models {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr const char* kNF4State = ".quant_state.bitsandbytes__nf4";

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Linear weights only: embeddings, LM heads and MoE routers (read outside the projection path)
// keep their precision, as bitsandbytes' default skips the head.
bool quantizable(const std::string& name, const Tensor& t) {
  if (t.dim() != 2 || !is_floating(t.dtype()) || !ends_with(name, ".weight")) return false;
  for (const char* skip : {"embed", "wte", "wpe", "lm_head", "word_embeddings", "position", "block_sparse_moe.gate.",
                           "mlp.gate.weight"})
    if (name.find(skip) != std::string::npos) return false;
  return true;
}

Tensor bytes_tensor(const void* data, int64_t n, Shape shape, DType dtype) {
  Tensor t = empty(shape, dtype);
  if (n) std::memcpy(t.data_ptr(), data, size_t(n));
  return t;
}

template <class T>
Tensor vector_tensor(const std::vector<T>& v, Shape shape, DType dtype) {
  return bytes_tensor(v.data(), int64_t(v.size() * sizeof(T)), shape, dtype);
}

template <class T>
std::vector<T> tensor_vector(const Tensor& t, DType dtype, const std::string& what) {
  FOUNDRY_CHECK_AS(TypeError, t.dtype() == dtype, "{} has dtype {}, expected {}", what, dtype_name(t.dtype()),
                   dtype_name(dtype));
  Tensor c = t.contiguous();
  const T* p = static_cast<const T*>(c.data_ptr());
  return std::vector<T>(p, p + c.numel());
}

}  // namespace

int64_t quantize_folder(const std::string& dir, const std::string& out, const QuantizeFolderOptions& o) {
  FOUNDRY_CHECK_AS(ValueError, o.type == "nf4" || o.type == "int8" || o.type == "int4",
                   "quantize: --type must be nf4, int8 or int4, got '{}'", o.type);
  FOUNDRY_CHECK_AS(ValueError, o.type != "int4" || o.group_size == 32 || o.group_size == 64 || o.group_size == 128,
                   "quantize: int4 group size must be 32, 64 or 128, got {}", o.group_size);
  FOUNDRY_CHECK_AS(ValueError, fs::is_regular_file(fs::path(dir) / "config.json"), "quantize: {} has no config.json",
                   dir);
  std::error_code ec;
  FOUNDRY_CHECK_AS(ValueError, !fs::equivalent(dir, out, ec), "quantize: the output folder must differ from {}", dir);
  const std::string config_text = io::read_file((fs::path(dir) / "config.json").string());
  io::check_json_depth(config_text, "quantize: " + dir + "/config.json");
  json config = json::parse(config_text, nullptr, false);
  FOUNDRY_CHECK_AS(ValueError, config.is_object(), "quantize: {}/config.json is not a JSON object", dir);
  FOUNDRY_CHECK_AS(ValueError, !config.contains("quantization_config"), "quantize: {} is already quantized", dir);
  io::ShardedSafetensors st = io::ShardedSafetensors::open(dir);

  std::map<std::string, Tensor> tensors;
  int64_t count = 0;
  for (const std::string& name : st.names()) {
    Tensor t = st.get(name);
    if (!quantizable(name, t) || (o.type == "int4" && t.size(1) % o.group_size != 0)) {
      tensors[name] = t;
      continue;
    }
    ++count;
    Tensor w = t.to(DType::Float32).contiguous();
    const int64_t rows = w.size(0), cols = w.size(1);
    const std::string prefix = name.substr(0, name.size() - std::string("weight").size());
    if (o.type == "nf4") {
      const quant::NF4Weight q = quant::quantize_nf4(w.data<float>(), w.numel(), o.double_quant);
      tensors[name] = vector_tensor(q.packed, {int64_t(q.packed.size()), 1}, DType::UInt8);
      tensors[name + ".quant_map"] =
          bytes_tensor(quant::nf4_codebook(), 16 * sizeof(float), {16}, DType::Float32);
      nlohmann::ordered_json state = {{"quant_type", "nf4"},
                                      {"blocksize", quant::kNF4BlockSize},
                                      {"dtype", dtype_name(t.dtype())},
                                      {"shape", {rows, cols}}};
      if (q.double_quant) {
        tensors[name + ".absmax"] = vector_tensor(q.absmax_codes, {int64_t(q.absmax_codes.size())}, DType::UInt8);
        tensors[name + ".nested_absmax"] =
            vector_tensor(q.nested_absmax, {int64_t(q.nested_absmax.size())}, DType::Float32);
        tensors[name + ".nested_quant_map"] =
            bytes_tensor(quant::dynamic_map_signed(), 256 * sizeof(float), {256}, DType::Float32);
        state["nested_blocksize"] = quant::kNF4NestedBlockSize;
        state["nested_dtype"] = "float32";
        state["nested_offset"] = double(q.offset);
      } else {
        tensors[name + ".absmax"] = vector_tensor(q.absmax, {int64_t(q.absmax.size())}, DType::Float32);
      }
      const std::string s = state.dump();
      tensors[name + kNF4State] = bytes_tensor(s.data(), int64_t(s.size()), {int64_t(s.size())}, DType::UInt8);
    } else if (o.type == "int8") {
      const quant::Int8RowWeight q = quant::quantize_int8_rows(w.data<float>(), rows, cols);
      tensors[name] = vector_tensor(q.codes, {rows, cols}, DType::Int8);
      tensors[prefix + "SCB"] = vector_tensor(q.scales, {rows}, DType::Float32);
      tensors[prefix + "weight_format"] = zeros({}, DType::UInt8);  // "row", the only layout
    } else {
      const quant::Int4GroupWeight q = quant::quantize_int4_groups(w.data<float>(), rows, cols, o.group_size, o.symmetric);
      tensors[name + ".qweight"] = vector_tensor(q.packed, {rows, cols / 2}, DType::UInt8);
      tensors[name + ".scales"] = vector_tensor(q.scales, {rows, cols / o.group_size}, DType::Float16);
      if (!o.symmetric) tensors[name + ".zeros"] = vector_tensor(q.zeros, {rows, cols / o.group_size}, DType::UInt8);
    }
  }
  // A folder that claims quantization_config while every matrix stayed float (rows narrower than
  // the int4 group, say) was written with "quantized 0 weights" and exit status 0.
  FOUNDRY_CHECK_AS(ValueError, count > 0,
                   "quantize: no matrix of {} can be quantized to {}{} (nothing written)", dir, o.type,
                   o.type == "int4" ? fmt::format(": every row length must be a multiple of --group-size {}", o.group_size)
                                    : std::string());

  fs::create_directories(out);
  io::save_safetensors((fs::path(out) / "model.safetensors").string(), tensors, {{"format", "pt"}});
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string file = entry.path().filename().string();
    if (!entry.is_regular_file() || file == "config.json" || ends_with(file, ".safetensors") ||
        ends_with(file, ".safetensors.index.json"))
      continue;
    fs::copy_file(entry.path(), fs::path(out) / file, fs::copy_options::overwrite_existing);
  }
  if (o.type == "int4") {
    config["quantization_config"] = {{"quant_method", "foundry"}, {"bits", 4}, {"group_size", o.group_size},
                                     {"symmetric", o.symmetric}};
  } else {
    const bool four = o.type == "nf4";
    config["quantization_config"] = {{"quant_method", "bitsandbytes"},
                                     {"load_in_4bit", four},
                                     {"load_in_8bit", !four},
                                     {"_load_in_4bit", four},
                                     {"_load_in_8bit", !four},
                                     {"llm_int8_threshold", 6.0},
                                     {"llm_int8_skip_modules", nullptr},
                                     {"llm_int8_enable_fp32_cpu_offload", false},
                                     {"llm_int8_has_fp16_weight", false},
                                     {"bnb_4bit_quant_type", four ? "nf4" : "fp4"},
                                     {"bnb_4bit_use_double_quant", four && o.double_quant},
                                     {"bnb_4bit_compute_dtype", "float32"},
                                     {"bnb_4bit_quant_storage", "uint8"}};
  }
  io::write_file_atomic((fs::path(out) / "config.json").string(), config.dump(2) + "\n");  // last: a complete folder
  return count;
}

namespace hf {

QuantizedCheckpoint::QuantizedCheckpoint(const std::string& dir, const std::string& config_json,
                                         const io::ShardedSafetensors& st)
    : dir_(dir), st_(&st) {
  const json j = json::parse(config_json, nullptr, false);
  if (!j.is_object() || !j.contains("quantization_config")) return;
  const json& q = j["quantization_config"];
  FOUNDRY_CHECK_AS(ValueError, q.is_object() && q.contains("quant_method") && q["quant_method"].is_string(),
                   "{}: quantization_config has no quant_method", dir);
  method_ = q["quant_method"].get<std::string>();
  if (method_ == "bitsandbytes") {
    bits_ = q.value("load_in_4bit", false) ? 4 : q.value("load_in_8bit", false) ? 8 : 0;
    FOUNDRY_CHECK_AS(ValueError, bits_ != 0, "{}: bitsandbytes quantization_config loads neither 4 nor 8 bits", dir);
    if (bits_ == 4 && q.value("bnb_4bit_quant_type", std::string("fp4")) != "nf4")
      raise<NotImplementedError>("{}: bitsandbytes 4-bit type '{}' is not supported (nf4 is)", dir,
                                 q.value("bnb_4bit_quant_type", std::string("fp4")));
  } else if (method_ == "foundry") {
    bits_ = q.value("bits", 0);
    group_ = q.value("group_size", 0);
    symmetric_ = q.value("symmetric", true);
    FOUNDRY_CHECK_AS(ValueError, bits_ == 4 && (group_ == 32 || group_ == 64 || group_ == 128),
                     "{}: foundry quantization_config needs bits 4 and group_size 32, 64 or 128", dir);
  } else {
    raise<NotImplementedError>("{}: quantization method '{}' is not supported (bitsandbytes nf4/int8, foundry int4)",
                               dir, method_);
  }
}

bool QuantizedCheckpoint::quantized(const std::string& name) const {
  if (!active() || !ends_with(name, ".weight")) return false;
  if (method_ == "foundry") return st_->contains(name + ".qweight");
  if (bits_ == 4) return st_->contains(name + kNF4State);
  return st_->contains(name.substr(0, name.size() - 6) + "SCB");
}

namespace {

struct NF4Parts {
  std::vector<uint8_t> packed;
  std::vector<float> absmax, quant_map;
  int64_t blocksize = 0, numel = 0;
};

NF4Parts read_nf4(const io::ShardedSafetensors& st, const std::string& dir, const std::string& name,
                  const Shape& shape) {
  const Tensor state_bytes = st.get(name + kNF4State);
  const std::vector<uint8_t> sb = tensor_vector<uint8_t>(state_bytes, DType::UInt8, name + kNF4State);
  const std::string state_text(sb.begin(), sb.end());
  io::check_json_depth(state_text, name + kNF4State);
  const json state = json::parse(state_text, nullptr, false);
  FOUNDRY_CHECK_AS(ValueError, state.is_object() && state.value("quant_type", std::string()) == "nf4" &&
                                   state.contains("blocksize") && state.contains("shape"),
                   "{}: '{}' is not an nf4 quant state", dir, name + kNF4State);
  NF4Parts p;
  p.blocksize = state["blocksize"].get<int64_t>();
  const auto file_shape = state["shape"].get<std::vector<int64_t>>();
  FOUNDRY_CHECK_AS(ValueError, shape.size() == 2 && Shape(file_shape) == shape, "{}: '{}' has shape {} but the config implies {}", dir,
                   name, shape_str(file_shape), shape_str(shape));
  p.numel = shape[0] * shape[1];
  p.packed = tensor_vector<uint8_t>(st.get(name), DType::UInt8, name);
  p.quant_map = tensor_vector<float>(st.get(name + ".quant_map"), DType::Float32, name + ".quant_map");
  const int64_t blocks = p.blocksize > 0 ? (p.numel + p.blocksize - 1) / p.blocksize : -1;
  FOUNDRY_CHECK_AS(ValueError, p.blocksize > 0 && int64_t(p.packed.size()) == (p.numel + 1) / 2 && p.quant_map.size() == 16,
                   "{}: '{}' holds {} bytes and a {}-entry map for {} values", dir, name, p.packed.size(),
                   p.quant_map.size(), p.numel);
  if (state.contains("nested_blocksize")) {
    FOUNDRY_CHECK_AS(ValueError, state["nested_blocksize"].get<int64_t>() == quant::kNF4NestedBlockSize,
                     "{}: '{}' nested block size {} is not supported (256 is)", dir, name, state["nested_blocksize"].dump());
    const auto codes = tensor_vector<uint8_t>(st.get(name + ".absmax"), DType::UInt8, name + ".absmax");
    const auto nested = tensor_vector<float>(st.get(name + ".nested_absmax"), DType::Float32, name + ".nested_absmax");
    const auto map = tensor_vector<float>(st.get(name + ".nested_quant_map"), DType::Float32, name + ".nested_quant_map");
    FOUNDRY_CHECK_AS(ValueError, map.size() == 256, "{}: '{}.nested_quant_map' has {} entries, not 256", dir, name,
                     map.size());
    p.absmax = quant::nf4_absmax_from_nested(codes, nested, state.value("nested_offset", 0.0f), map.data());
  } else {
    p.absmax = tensor_vector<float>(st.get(name + ".absmax"), DType::Float32, name + ".absmax");
  }
  FOUNDRY_CHECK_AS(ValueError, int64_t(p.absmax.size()) == blocks, "{}: '{}' has {} block maxima for {} blocks", dir,
                   name, p.absmax.size(), blocks);
  return p;
}

}  // namespace

Tensor QuantizedCheckpoint::dequantize(const std::string& name, const Shape& shape) const {
  FOUNDRY_CHECK_AS(ValueError, shape.size() == 2, "{}: quantized weight '{}' must be 2-D", dir_, name);
  const int64_t rows = shape[0], cols = shape[1];
  Tensor out = empty(shape, DType::Float32);
  float* y = out.data<float>();
  if (method_ == "foundry") {
    quant::Int4GroupWeight q;
    q.rows = rows;
    q.cols = cols;
    q.group = group_;
    q.symmetric = symmetric_;
    q.packed = tensor_vector<uint8_t>(st_->get(name + ".qweight"), DType::UInt8, name + ".qweight");
    q.scales = tensor_vector<uint16_t>(st_->get(name + ".scales"), DType::Float16, name + ".scales");
    if (!symmetric_) q.zeros = tensor_vector<uint8_t>(st_->get(name + ".zeros"), DType::UInt8, name + ".zeros");
    FOUNDRY_CHECK_AS(ValueError, cols % group_ == 0, "{}: '{}' rows of {} are not whole groups of {}", dir_, name, cols,
                     group_);
    quant::dequantize_int4_groups(q, y);
  } else if (bits_ == 8) {
    quant::Int8RowWeight q;
    q.rows = rows;
    q.cols = cols;
    const Tensor codes = st_->get(name);
    FOUNDRY_CHECK_AS(ValueError, Shape(codes.sizes()) == shape, "{}: '{}' has shape {} but the config implies {}", dir_,
                     name, shape_str(codes.sizes()), shape_str(shape));
    q.codes = tensor_vector<int8_t>(codes, DType::Int8, name);
    q.scales = tensor_vector<float>(st_->get(name.substr(0, name.size() - 6) + "SCB"), DType::Float32, name + " SCB");
    quant::dequantize_int8_rows(q, y);
  } else {
    const NF4Parts p = read_nf4(*st_, dir_, name, shape);
    for (int64_t i = 0; i < p.numel; ++i) {
      const uint8_t b = p.packed[size_t(i / 2)];
      y[i] = p.quant_map[(i % 2 == 0) ? b >> 4 : b & 0x0F] * p.absmax[size_t(i / p.blocksize)];
    }
  }
  return out;
}

std::optional<Tensor> QuantizedCheckpoint::nf4_rows(const std::string& name, const Shape& shape) const {
  if (method_ != "bitsandbytes" || bits_ != 4 || shape.size() != 2 || shape[1] % quant::kNF4BlockSize != 0)
    return std::nullopt;
  const NF4Parts p = read_nf4(*st_, dir_, name, shape);
  if (p.blocksize != quant::kNF4BlockSize ||
      !std::equal(p.quant_map.begin(), p.quant_map.end(), quant::nf4_codebook()))
    return std::nullopt;
  const int64_t blocks = p.numel / quant::kNF4BlockSize, half = quant::kNF4BlockSize / 2;
  Tensor rows = empty({shape[0], shape[1] / quant::kNF4BlockSize * (4 + half)}, DType::UInt8);
  auto* dst = static_cast<uint8_t*>(rows.data_ptr());
  for (int64_t b = 0; b < blocks; ++b)
    quant::detail::nf4_block_from_bnb(p.absmax[size_t(b)], p.packed.data() + b * half, dst + b * (4 + half));
  return rows;
}

}  // namespace hf

}  // namespace foundry::models
