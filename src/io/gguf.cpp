#include "foundry/io/gguf.h"

#include <cstring>
#include <set>

#include "foundry/core/error.h"
#include "foundry/io/atomic_file.h"
#include "foundry/ops/ops.h"
#include "foundry/quant/block_formats.h"

namespace foundry::io {

namespace {

constexpr uint64_t kMaxStringBytes = uint64_t(1) << 30;
constexpr uint64_t kMaxDims = 4;

const char* type_name(GGUFValue::Type t) {
  static const char* names[] = {"uint8", "int8",  "uint16", "int16", "uint32", "int32", "float32",
                                "bool",  "string", "array", "uint64", "int64", "float64"};
  return uint32_t(t) < 13 ? names[t] : "unknown";
}

// Bounds-checked little-endian cursor over the mapped bytes.
struct Cursor {
  const uint8_t* base;
  uint64_t size, pos = 0;
  const std::string& path;

  void need(uint64_t n, const char* what) const {
    if (n > size - pos)
      raise<ValueError>("{}: truncated GGUF file: {} needs {} bytes at offset {}, the file has {}", path, what, n, pos,
                        size);
  }
  template <typename T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, base + pos, sizeof(T));
    pos += sizeof(T);
    return v;
  }
  std::string string(const char* what) {
    const uint64_t n = read<uint64_t>(what);
    if (n > kMaxStringBytes) raise<ValueError>("{}: {} has an absurd length of {} bytes", path, what, n);
    need(n, what);
    std::string s(reinterpret_cast<const char*>(base + pos), size_t(n));
    pos += n;
    return s;
  }
};

GGUFValue read_value(Cursor& c, GGUFValue::Type t, const std::string& key, int depth) {
  GGUFValue v;
  v.type = t;
  switch (t) {
    case GGUFValue::UINT8: v.value = uint64_t(c.read<uint8_t>(key.c_str())); break;
    case GGUFValue::INT8: v.value = int64_t(c.read<int8_t>(key.c_str())); break;
    case GGUFValue::UINT16: v.value = uint64_t(c.read<uint16_t>(key.c_str())); break;
    case GGUFValue::INT16: v.value = int64_t(c.read<int16_t>(key.c_str())); break;
    case GGUFValue::UINT32: v.value = uint64_t(c.read<uint32_t>(key.c_str())); break;
    case GGUFValue::INT32: v.value = int64_t(c.read<int32_t>(key.c_str())); break;
    case GGUFValue::FLOAT32: v.value = double(c.read<float>(key.c_str())); break;
    case GGUFValue::BOOL: {
      const uint8_t b = c.read<uint8_t>(key.c_str());
      if (b > 1) raise<ValueError>("{}: metadata '{}': bool byte {} is neither 0 nor 1", c.path, key, b);
      v.value = b == 1;
      break;
    }
    case GGUFValue::STRING: v.value = c.string(key.c_str()); break;
    case GGUFValue::UINT64: v.value = c.read<uint64_t>(key.c_str()); break;
    case GGUFValue::INT64: v.value = c.read<int64_t>(key.c_str()); break;
    case GGUFValue::FLOAT64: v.value = c.read<double>(key.c_str()); break;
    case GGUFValue::ARRAY: {
      if (depth > 0) raise<ValueError>("{}: metadata '{}': nested arrays are not allowed", c.path, key);
      const uint32_t et = c.read<uint32_t>(key.c_str());
      if (et > 12) raise<ValueError>("{}: metadata '{}': unknown array element type {}", c.path, key, et);
      if (et == GGUFValue::ARRAY) raise<ValueError>("{}: metadata '{}': nested arrays are not allowed", c.path, key);
      const uint64_t n = c.read<uint64_t>(key.c_str());
      // Every element takes at least one byte: a count beyond the bytes left is corrupt.
      if (n > c.size - c.pos) raise<ValueError>("{}: metadata '{}': array of {} elements exceeds the file", c.path, key, n);
      v.array_type = GGUFValue::Type(et);
      std::vector<GGUFValue> items;
      items.reserve(size_t(n));
      for (uint64_t i = 0; i < n; ++i) items.push_back(read_value(c, GGUFValue::Type(et), key, depth + 1));
      v.value = std::move(items);
      break;
    }
    default: raise<ValueError>("{}: metadata '{}': unknown value type {}", c.path, key, uint32_t(t));
  }
  return v;
}

void write_value(std::string& out, const GGUFValue& v);

template <typename T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

void put_string(std::string& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out += s;
}

void write_scalar(std::string& out, GGUFValue::Type t, const GGUFValue& v) {
  switch (t) {
    case GGUFValue::UINT8: put<uint8_t>(out, uint8_t(v.as_int())); break;
    case GGUFValue::INT8: put<int8_t>(out, int8_t(v.as_int())); break;
    case GGUFValue::UINT16: put<uint16_t>(out, uint16_t(v.as_int())); break;
    case GGUFValue::INT16: put<int16_t>(out, int16_t(v.as_int())); break;
    case GGUFValue::UINT32: put<uint32_t>(out, uint32_t(v.as_int())); break;
    case GGUFValue::INT32: put<int32_t>(out, int32_t(v.as_int())); break;
    case GGUFValue::FLOAT32: put<float>(out, float(v.as_double())); break;
    case GGUFValue::BOOL: put<uint8_t>(out, std::get<bool>(v.value) ? 1 : 0); break;
    case GGUFValue::STRING: put_string(out, v.as_string()); break;
    case GGUFValue::UINT64: put<uint64_t>(out, std::holds_alternative<uint64_t>(v.value) ? std::get<uint64_t>(v.value) : uint64_t(v.as_int())); break;
    case GGUFValue::INT64: put<int64_t>(out, v.as_int()); break;
    case GGUFValue::FLOAT64: put<double>(out, v.as_double()); break;
    case GGUFValue::ARRAY: raise<ValueError>("GGUF: nested arrays are not allowed");
  }
}

void write_value(std::string& out, const GGUFValue& v) {
  put<uint32_t>(out, v.type);
  if (v.type != GGUFValue::ARRAY) return write_scalar(out, v.type, v);
  put<uint32_t>(out, v.array_type);
  const auto& items = v.as_array();
  put<uint64_t>(out, items.size());
  for (const GGUFValue& e : items) write_scalar(out, v.array_type, e);
}

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

}  // namespace

int64_t GGUFValue::as_int() const {
  if (const auto* u = std::get_if<uint64_t>(&value)) return int64_t(*u);
  if (const auto* i = std::get_if<int64_t>(&value)) return *i;
  if (const auto* b = std::get_if<bool>(&value)) return *b ? 1 : 0;
  raise<ValueError>("GGUF metadata: a {} value is not an integer", type_name(type));
}

double GGUFValue::as_double() const {
  if (const auto* d = std::get_if<double>(&value)) return *d;
  return double(as_int());
}

const std::string& GGUFValue::as_string() const {
  if (const auto* s = std::get_if<std::string>(&value)) return *s;
  raise<ValueError>("GGUF metadata: a {} value is not a string", type_name(type));
}

const std::vector<GGUFValue>& GGUFValue::as_array() const {
  if (const auto* a = std::get_if<std::vector<GGUFValue>>(&value)) return *a;
  raise<ValueError>("GGUF metadata: a {} value is not an array", type_name(type));
}

const GGMLTypeInfo& ggml_type_info(uint32_t type) {
  static const std::map<uint32_t, GGMLTypeInfo> table = {
      {0, {"F32", 1, 4}},      {1, {"F16", 1, 2}},      {2, {"Q4_0", 32, 18}},   {3, {"Q4_1", 32, 20}},
      {6, {"Q5_0", 32, 22}},   {7, {"Q5_1", 32, 24}},   {8, {"Q8_0", 32, 34}},   {9, {"Q8_1", 32, 36}},
      {10, {"Q2_K", 256, 84}}, {11, {"Q3_K", 256, 110}}, {12, {"Q4_K", 256, 144}}, {13, {"Q5_K", 256, 176}},
      {14, {"Q6_K", 256, 210}}, {15, {"Q8_K", 256, 292}}, {24, {"I8", 1, 1}},     {25, {"I16", 1, 2}},
      {26, {"I32", 1, 4}},     {27, {"I64", 1, 8}},     {28, {"F64", 1, 8}},     {30, {"BF16", 1, 2}},
  };
  auto it = table.find(type);
  if (it == table.end()) raise<ValueError>("unknown or unsupported ggml tensor type {}", type);
  return it->second;
}

GGUFFile GGUFFile::open(const std::string& path) {
  GGUFFile f;
  f.path_ = path;
  f.storage_ = map_file_storage(path);
  const auto* base = static_cast<const uint8_t*>(f.storage_->data());
  Cursor c{base, uint64_t(f.storage_->nbytes()), 0, f.path_};
  c.need(4, "the magic");
  if (std::memcmp(base, "GGUF", 4) != 0) raise<ValueError>("{}: not a GGUF file (bad magic)", path);
  c.pos = 4;
  f.version_ = c.read<uint32_t>("the version");
  if (f.version_ != 2 && f.version_ != 3)
    raise<ValueError>("{}: GGUF version {} is not supported (2 and 3 are)", path, f.version_);
  const uint64_t n_tensors = c.read<uint64_t>("the tensor count");
  const uint64_t n_kv = c.read<uint64_t>("the metadata count");
  // Each metadata pair and tensor info takes well over 8 bytes: bound the counts by the file.
  if (n_kv > c.size / 8 || n_tensors > c.size / 8)
    raise<ValueError>("{}: absurd counts ({} tensors, {} metadata pairs) for a {}-byte file", path, n_tensors, n_kv,
                      c.size);
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = c.string("a metadata key");
    const uint32_t t = c.read<uint32_t>("a metadata type");
    if (t > 12) raise<ValueError>("{}: metadata '{}': unknown value type {}", path, key, t);
    GGUFValue v = read_value(c, GGUFValue::Type(t), key, 0);
    if (f.metadata_.count(key)) raise<ValueError>("{}: duplicate metadata key '{}'", path, key);
    f.keys_.push_back(key);
    f.metadata_.emplace(std::move(key), std::move(v));
  }
  if (auto it = f.metadata_.find("general.alignment"); it != f.metadata_.end()) {
    const int64_t a = it->second.as_int();
    if (a <= 0 || (a & (a - 1)) != 0) raise<ValueError>("{}: general.alignment {} is not a power of two", path, a);
    f.alignment_ = uint64_t(a);
  }
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GGUFTensorInfo t;
    t.name = c.string("a tensor name");
    const uint32_t nd = c.read<uint32_t>("a tensor's dimension count");
    if (nd == 0 || nd > kMaxDims) raise<ValueError>("{}: tensor '{}' has {} dimensions (1 to 4 allowed)", path, t.name, nd);
    uint64_t numel = 1;
    for (uint32_t d = 0; d < nd; ++d) {
      const uint64_t n = c.read<uint64_t>("a tensor dimension");
      if (n == 0 || n > (uint64_t(1) << 40) || numel > (uint64_t(1) << 50) / n)
        raise<ValueError>("{}: tensor '{}' has an absurd dimension {}", path, t.name, n);
      numel *= n;
      t.dims.push_back(int64_t(n));
    }
    t.ggml_type = c.read<uint32_t>("a tensor type");
    const GGMLTypeInfo& ti = ggml_type_info(t.ggml_type);
    if (uint64_t(t.dims[0]) % uint64_t(ti.block_size) != 0)
      raise<ValueError>("{}: tensor '{}' rows of {} values are not whole {} blocks of {}", path, t.name, t.dims[0],
                        ti.name, ti.block_size);
    t.nbytes = numel / uint64_t(ti.block_size) * uint64_t(ti.block_bytes);
    t.offset = c.read<uint64_t>("a tensor offset");
    if (!f.index_.emplace(t.name, f.tensors_.size()).second)
      raise<ValueError>("{}: duplicate tensor name '{}'", path, t.name);
    f.tensors_.push_back(std::move(t));
  }
  f.data_offset_ = align_up(c.pos, f.alignment_);
  // Tensors: aligned, inside the file, not overlapping.
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  for (const GGUFTensorInfo& t : f.tensors_) {
    if (t.offset % f.alignment_ != 0)
      raise<ValueError>("{}: tensor '{}' offset {} is not a multiple of the alignment {}", path, t.name, t.offset,
                        f.alignment_);
    if (f.data_offset_ > c.size || t.offset > c.size - f.data_offset_ || t.nbytes > c.size - f.data_offset_ - t.offset)
      raise<ValueError>("{}: tensor '{}' ({} bytes at data offset {}) lies outside the {}-byte file", path, t.name,
                        t.nbytes, t.offset, c.size);
    spans.push_back({t.offset, t.offset + t.nbytes});
  }
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i)
    if (spans[i].first < spans[i - 1].second) raise<ValueError>("{}: tensor data ranges overlap", path);
  return f;
}

const GGUFTensorInfo& GGUFFile::info(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) raise<ValueError>("{}: no tensor named '{}'", path_, name);
  return tensors_[it->second];
}

const uint8_t* GGUFFile::data(const GGUFTensorInfo& t) const {
  return static_cast<const uint8_t*>(storage_->data()) + data_offset_ + t.offset;
}

Tensor GGUFFile::raw(const std::string& name) const {
  const GGUFTensorInfo& t = info(name);
  int64_t rows = 1;
  for (size_t i = 1; i < t.dims.size(); ++i) rows *= t.dims[i];
  const int64_t row_bytes = rows == 0 ? 0 : int64_t(t.nbytes) / rows;
  return make_tensor(storage_, {rows, row_bytes}, contiguous_strides({rows, row_bytes}),
                     int64_t(data_offset_ + t.offset), DType::UInt8);
}

Tensor GGUFFile::tensor(const std::string& name) const {
  const GGUFTensorInfo& t = info(name);
  const std::vector<int64_t> shape = t.shape();
  Shape sizes(shape.begin(), shape.end());
  auto view = [&](DType dt) {
    const int64_t item = itemsize(dt);
    const uint64_t off = data_offset_ + t.offset;
    if (off % uint64_t(item) != 0) {  // can't happen with aligned offsets; copy to be safe
      Tensor out = empty(IntList(sizes), dt);
      std::memcpy(out.data_ptr(), data(t), t.nbytes);
      return out;
    }
    return make_tensor(storage_, IntList(sizes), contiguous_strides(IntList(sizes)), int64_t(off) / item, dt);
  };
  switch (t.ggml_type) {
    case 0: return view(DType::Float32);
    case 1: return view(DType::Float16);
    case 30: return view(DType::BFloat16);
    case 24: return view(DType::Int8);
    case 25: return view(DType::Int16);
    case 26: return view(DType::Int32);
    case 27: return view(DType::Int64);
    case 28: return view(DType::Float64);
    default: break;
  }
  const GGMLTypeInfo& ti = ggml_type_info(t.ggml_type);
  for (const auto& q : quant::block_formats()) {
    if (q.ggml_type != t.ggml_type) continue;
    Tensor out = empty(IntList(sizes), DType::Float32);
    const int64_t rows = out.numel() / t.dims[0];
    const int64_t row_bytes = t.dims[0] / q.block_size * q.block_bytes;
    for (int64_t r = 0; r < rows; ++r) q.dequantize(data(t) + r * row_bytes, out.data<float>() + r * t.dims[0], t.dims[0]);
    return out;
  }
  raise<NotImplementedError>("{}: tensor '{}' is {}, which Foundry cannot dequantize yet", path_, name, ti.name);
}

void write_gguf(const std::string& path, const std::vector<std::pair<std::string, GGUFValue>>& metadata,
                const std::vector<GGUFTensorData>& tensors, uint64_t alignment) {
  FOUNDRY_CHECK_AS(ValueError, alignment > 0 && (alignment & (alignment - 1)) == 0,
                   "write_gguf: alignment {} is not a power of two", alignment);
  std::string head = "GGUF";
  put<uint32_t>(head, 3);
  put<uint64_t>(head, tensors.size());
  std::vector<std::pair<std::string, GGUFValue>> kv = metadata;
  bool has_alignment = false;
  for (const auto& [k, v] : kv) has_alignment |= k == "general.alignment";
  if (alignment != 32 && !has_alignment) {
    GGUFValue a;
    a.type = GGUFValue::UINT32;
    a.value = uint64_t(alignment);
    kv.emplace_back("general.alignment", a);
  }
  put<uint64_t>(head, kv.size());
  std::set<std::string> seen;
  for (const auto& [k, v] : kv) {
    if (!seen.insert(k).second) raise<ValueError>("write_gguf: duplicate metadata key '{}'", k);
    put_string(head, k);
    write_value(head, v);
  }
  uint64_t offset = 0;
  std::vector<uint64_t> offsets;
  for (const GGUFTensorData& t : tensors) {
    FOUNDRY_CHECK_AS(ValueError, !t.shape.empty() && t.shape.size() <= kMaxDims,
                     "write_gguf: tensor '{}' must have 1 to 4 dimensions", t.name);
    const GGMLTypeInfo& ti = ggml_type_info(t.ggml_type);
    uint64_t numel = 1;
    for (int64_t d : t.shape) numel *= uint64_t(d);
    FOUNDRY_CHECK_AS(ValueError, t.shape.back() % ti.block_size == 0 &&
                                     t.bytes.size() == numel / uint64_t(ti.block_size) * uint64_t(ti.block_bytes),
                     "write_gguf: tensor '{}' has {} bytes; {} {} values need {}", t.name, t.bytes.size(), numel,
                     ti.name, numel / uint64_t(ti.block_size) * uint64_t(ti.block_bytes));
    put_string(head, t.name);
    put<uint32_t>(head, uint32_t(t.shape.size()));
    for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it) put<uint64_t>(head, uint64_t(*it));
    put<uint32_t>(head, t.ggml_type);
    put<uint64_t>(head, offset);
    offsets.push_back(offset);
    offset = align_up(offset + t.bytes.size(), alignment);
  }
  head.resize(size_t(align_up(head.size(), alignment)), '\0');
  AtomicFile out(path);
  out.write(head);
  uint64_t written = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (offsets[i] > written) out.write(std::string(size_t(offsets[i] - written), '\0'));
    out.write(tensors[i].bytes);
    written = offsets[i] + tensors[i].bytes.size();
  }
  out.commit();
}

}  // namespace foundry::io
