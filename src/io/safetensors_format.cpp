#include "io/safetensors_format.h"

#include <algorithm>
#include <limits>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "foundry/core/error.h"
#include "foundry/io/json_depth.h"

namespace foundry::io::detail {

namespace {

using json = nlohmann::json;

// serde_json's recursion limit (io::kMaxJsonDepth); headers that nest deeper are rejected, as upstream does.
constexpr int kMaxDepth = io::kMaxJsonDepth;

[[noreturn]] void bad(const std::string& what, const std::string& rule) { raise<IOError>("{}: {}", what, rule); }

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// A short, printable form of a JSON value for error messages.
std::string brief(const json& v) {
  std::string s = v.dump(-1, ' ', true, json::error_handler_t::replace);
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

// serde's usize: a non-negative JSON integer (serde_json accepts "-0" too).
bool as_usize(const json& v, uint64_t* out) {
  if (v.is_number_unsigned()) {
    *out = v.get<uint64_t>();
    return true;
  }
  if (v.is_number_integer() && v.get<int64_t>() == 0) {
    *out = 0;
    return true;
  }
  return false;
}

// Parses JSON the way serde_json does for our purposes: no comments, no byte-order mark, no
// trailing bytes other than whitespace; in addition every object must have unique keys (at any
// depth), and nesting is limited to kMaxDepth.
json parse_strict_json(std::string_view text, const std::string& what, const char* kind) {
  if (text.size() >= 3 && text.compare(0, 3, "\xEF\xBB\xBF") == 0)
    bad(what, fmt::format("{} starts with a UTF-8 byte-order mark, which JSON does not allow", kind));
  // nlohmann's lexer ends the input at a NUL byte, so "{}\0garbage" would pass; serde_json (and
  // JSON) reject NUL outside and inside strings alike.
  if (size_t nul = text.find('\0'); nul != std::string_view::npos)
    bad(what, fmt::format("{} is not valid JSON: NUL byte at offset {} (NUL padding is not allowed; writers pad "
                          "with spaces)",
                          kind, nul));
  std::vector<std::unordered_set<std::string>> keys;
  json::parser_callback_t cb = [&](int depth, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (depth >= kMaxDepth) bad(what, fmt::format("{} nests deeper than {} levels", kind, kMaxDepth));
        if (event == json::parse_event_t::object_start) keys.emplace_back();
        break;
      case json::parse_event_t::object_end:
        keys.pop_back();
        break;
      case json::parse_event_t::key:
        if (!keys.back().insert(parsed.get<std::string>()).second)
          bad(what, fmt::format("{} has the key {} twice in one object (duplicate names are not allowed)", kind,
                                json_quote(parsed.get<std::string>())));
        break;
      default:
        break;
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), cb, /*allow_exceptions=*/true, /*ignore_comments=*/false);
  } catch (const json::exception& e) {
    bad(what, fmt::format("{} is not valid JSON: {}", kind, e.what()));
  }
}

const SafetensorsDType kDTypes[] = {
    // name, dtype, size, upstream enum rank (BOOL < U8 < I8 < F8_E5M2 < F8_E4M3 < I16 < U16 < F16
    // < BF16 < I32 < U32 < F32 < F64 < I64 < U64; newer dtypes we do not read sit in between).
    {"BOOL", DType::Bool, 1, 0},          {"U8", DType::UInt8, 1, 1},
    {"I8", DType::Int8, 1, 2},            {"F8_E5M2", DType::Float8E5M2, 1, 3},
    {"F8_E4M3", DType::Float8E4M3, 1, 4}, {"I16", DType::Int16, 2, 5},
    {"U16", DType::UInt16, 2, 6},         {"F16", DType::Float16, 2, 7},
    {"BF16", DType::BFloat16, 2, 8},      {"I32", DType::Int32, 4, 9},
    {"U32", DType::UInt32, 4, 10},        {"F32", DType::Float32, 4, 11},
    {"F64", DType::Float64, 8, 12},       {"I64", DType::Int64, 8, 13},
    {"U64", DType::UInt64, 8, 14},
};

}  // namespace

const std::vector<SafetensorsDType>& safetensors_dtypes() {
  static const std::vector<SafetensorsDType> all(std::begin(kDTypes), std::end(kDTypes));
  return all;
}

const SafetensorsDType* safetensors_dtype(std::string_view name) {
  for (const SafetensorsDType& d : kDTypes)
    if (name == d.name) return &d;
  return nullptr;
}

const SafetensorsDType& safetensors_dtype(DType dtype) {
  for (const SafetensorsDType& d : kDTypes)
    if (d.dtype == dtype) return d;
  raise<TypeError>("safetensors: no dtype string for dtype {}", int(dtype));
}

size_t find_invalid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t n = s.size(), i = 0;
  while (i < n) {
    unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;  // overlong
      if (c == 0xED) hi = 0x9F;  // surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;  // overlong
      if (c == 0xF4) hi = 0x8F;  // above U+10FFFF
    } else {
      return i;
    }
    if (i + len > n) return i;
    if (p[i + 1] < lo || p[i + 1] > hi) return i;
    for (size_t k = 2; k < len; ++k)
      if (p[i + k] < 0x80 || p[i + k] > 0xBF) return i;
    i += len;
  }
  return std::string_view::npos;
}

std::string json_quote(std::string_view s) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  out.reserve(s.size() + 2);
  out += '"';
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out += hex[c >> 4];
          out += hex[c & 0xF];
        } else {
          out += ch;
        }
    }
  }
  out += '"';
  return out;
}

SafetensorsHeader parse_safetensors_header(const uint8_t* data, size_t size, const std::string& what) {
  SafetensorsHeader h;
  if (size < 8)
    bad(what, fmt::format("not a safetensors file: it has {} bytes, fewer than the 8-byte header length", size));
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(data[i]) << (8 * i);
  if (n > kSafetensorsMaxHeader)
    bad(what, fmt::format("header length {} exceeds the limit of {} bytes (not a safetensors file, or corrupt)", n,
                          kSafetensorsMaxHeader));
  if (n > size - 8)
    bad(what, fmt::format("header length {} runs past the end of the file ({} bytes after the 8-byte length): "
                          "truncated file",
                          n, size - 8));
  h.header_len = n;
  h.data_start = 8 + n;
  std::string_view text(reinterpret_cast<const char*>(data + 8), size_t(n));
  size_t badpos = find_invalid_utf8(text);
  if (badpos != std::string_view::npos)
    bad(what, fmt::format("header is not valid UTF-8 (byte {} of the header, file offset {})", badpos, 8 + badpos));
  json root = parse_strict_json(text, what, "header");
  if (!root.is_object()) bad(what, fmt::format("header must be a JSON object, not {}", root.type_name()));

  for (auto& item : root.items()) {
    const std::string& name = item.key();
    const json& value = item.value();
    if (name == "__metadata__") {
      if (value.is_null()) continue;  // serde's Option: null means "no metadata"
      if (!value.is_object()) bad(what, fmt::format("__metadata__ must be an object of strings, not {}", value.type_name()));
      for (auto& [k, v] : value.items()) {
        if (!v.is_string())
          bad(what, fmt::format("__metadata__ entry {} must be a string, not {} ({})", json_quote(k), v.type_name(), brief(v)));
        h.metadata[k] = v.get<std::string>();
      }
      h.has_metadata = true;
      continue;
    }
    std::string tname = "tensor " + json_quote(name);
    // serde reads a struct from an object (unknown fields ignored) or from a 3-element array.
    const json *dt = nullptr, *shape = nullptr, *offsets = nullptr;
    if (value.is_object()) {
      auto find = [&](const char* key) -> const json* {
        auto it = value.find(key);
        if (it == value.end()) bad(what, fmt::format("{}: missing field \"{}\"", tname, key));
        return &*it;
      };
      dt = find("dtype");
      shape = find("shape");
      offsets = find("data_offsets");
    } else if (value.is_array() && value.size() == 3) {
      dt = &value[0];
      shape = &value[1];
      offsets = &value[2];
    } else {
      bad(what, fmt::format("{}: expected an object with dtype, shape and data_offsets, got {}", tname, brief(value)));
    }
    SafetensorsEntry e;
    e.name = name;
    if (!dt->is_string()) bad(what, fmt::format("{}: dtype must be a string, got {}", tname, brief(*dt)));
    e.dtype = safetensors_dtype(dt->get<std::string>());
    if (!e.dtype)
      bad(what, fmt::format("{}: unknown dtype {} (known: BOOL, U8, I8, I16, U16, I32, U32, I64, U64, F16, BF16, F32, "
                            "F64, F8_E4M3, F8_E5M2)",
                            tname, json_quote(dt->get<std::string>())));
    if (!shape->is_array()) bad(what, fmt::format("{}: shape must be an array of non-negative integers, got {}", tname, brief(*shape)));
    // Element count with upstream's overflow rule (checked product in order, as usize).
    uint64_t numel = 1;
    uint64_t nonzero = 1;  // Foundry also needs the non-zero dims to fit int64 (strides)
    for (const json& d : *shape) {
      uint64_t v;
      if (!as_usize(d, &v))
        bad(what, fmt::format("{}: shape entries must be non-negative integers, got {}", tname, brief(d)));
      if (__builtin_mul_overflow(numel, v, &numel))
        bad(what, fmt::format("{}: shape {} overflows the element count", tname, brief(*shape)));
      if (v > uint64_t(std::numeric_limits<int64_t>::max()) ||
          (v != 0 && __builtin_mul_overflow(nonzero, v, &nonzero)) ||
          nonzero > uint64_t(std::numeric_limits<int64_t>::max()))
        bad(what, fmt::format("{}: shape {} is too large for a tensor", tname, brief(*shape)));
      e.shape.push_back(int64_t(v));
    }
    if (!offsets->is_array() || offsets->size() != 2)
      bad(what, fmt::format("{}: data_offsets must be [begin, end], got {}", tname, brief(*offsets)));
    if (!as_usize((*offsets)[0], &e.begin) || !as_usize((*offsets)[1], &e.end))
      bad(what, fmt::format("{}: data_offsets must be non-negative integers, got {}", tname, brief(*offsets)));
    uint64_t nbytes;
    if (__builtin_mul_overflow(numel, uint64_t(e.dtype->size), &nbytes))
      bad(what, fmt::format("{}: shape {} of {} overflows the byte count", tname, shape_text(e.shape), e.dtype->name));
    (void)nbytes;
    h.entries.push_back(std::move(e));
  }

  // Upstream sorts by data_offsets and requires them to tile [0, end) exactly.
  std::sort(h.entries.begin(), h.entries.end(), [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
    if (a.begin != b.begin) return a.begin < b.begin;
    if (a.end != b.end) return a.end < b.end;
    return a.name < b.name;
  });
  uint64_t start = 0;
  const SafetensorsEntry* prev = nullptr;
  for (const SafetensorsEntry& e : h.entries) {
    std::string tname = "tensor " + json_quote(e.name);
    std::string off = fmt::format("data_offsets [{}, {}]", e.begin, e.end);
    if (e.end < e.begin) bad(what, fmt::format("{}: {} end before they begin", tname, off));
    if (e.begin < start)
      bad(what, fmt::format("{}: {} overlap tensor {} (which ends at {})", tname, off, json_quote(prev->name), start));
    if (e.begin > start)
      bad(what, prev ? fmt::format("{}: {} leave a gap of {} bytes after tensor {} (which ends at {}); offsets must be "
                                   "contiguous",
                                   tname, off, e.begin - start, json_quote(prev->name), start)
                     : fmt::format("{}: {} leave a gap of {} bytes at the start of the data; the first tensor must "
                                   "begin at 0",
                                   tname, off, e.begin));
    uint64_t numel = 1;
    for (int64_t d : e.shape) numel *= uint64_t(d);  // cannot overflow: checked above
    uint64_t nbytes = numel * uint64_t(e.dtype->size);
    if (e.end - e.begin != nbytes)
      bad(what, fmt::format("{}: shape {} of {} needs {} bytes but {} span {} bytes", tname, shape_text(e.shape),
                            e.dtype->name, nbytes, off, e.end - e.begin));
    start = e.end;
    prev = &e;
  }
  uint64_t data_size = size - h.data_start;
  if (start != data_size)
    bad(what, start < data_size
                  ? fmt::format("the tensors cover {} bytes of data but the file has {} bytes after the header: {} "
                                "trailing bytes (the last offset must be the end of the file)",
                                start, data_size, data_size - start)
                  : fmt::format("the tensors need {} bytes of data but the file has only {} after the header: "
                                "truncated file",
                                start, data_size));
  return h;
}

std::string safetensors_header_json(const std::vector<SafetensorsEntry>& entries,
                                    const std::map<std::string, std::string>& metadata, bool with_metadata) {
  std::string out = "{";
  bool first = true;
  if (with_metadata) {
    out += "\"__metadata__\":{";
    bool f = true;
    for (const auto& [k, v] : metadata) {
      if (!f) out += ',';
      f = false;
      out += json_quote(k) + ":" + json_quote(v);
    }
    out += "}";
    first = false;
  }
  for (const SafetensorsEntry& e : entries) {
    if (!first) out += ',';
    first = false;
    out += json_quote(e.name) + ":{\"dtype\":\"" + e.dtype->name + "\",\"shape\":[";
    for (size_t i = 0; i < e.shape.size(); ++i) out += (i ? "," : "") + std::to_string(e.shape[i]);
    out += "],\"data_offsets\":[" + std::to_string(e.begin) + "," + std::to_string(e.end) + "]}";
  }
  out += "}";
  return out;
}

SafetensorsIndex parse_safetensors_index(std::string_view text, const std::string& what) {
  size_t badpos = find_invalid_utf8(text);
  if (badpos != std::string_view::npos) bad(what, fmt::format("index is not valid UTF-8 (byte {})", badpos));
  json root = parse_strict_json(text, what, "index");
  if (!root.is_object()) bad(what, fmt::format("index must be a JSON object, not {}", root.type_name()));
  SafetensorsIndex idx;
  auto meta = root.find("metadata");
  if (meta != root.end() && !meta->is_null()) {
    if (!meta->is_object()) bad(what, fmt::format("index \"metadata\" must be an object, not {}", meta->type_name()));
    idx.metadata_json = meta->dump(-1, ' ', false, json::error_handler_t::replace);
    auto ts = meta->find("total_size");
    if (ts != meta->end()) {
      uint64_t v;
      if (as_usize(*ts, &v) && v <= uint64_t(std::numeric_limits<int64_t>::max())) idx.total_size = int64_t(v);
      else if (ts->is_number_float() && ts->get<double>() >= 0 && ts->get<double>() < 9.2e18)
        idx.total_size = int64_t(ts->get<double>());
      else bad(what, fmt::format("index metadata.total_size must be a non-negative integer, got {}", brief(*ts)));
    }
  }
  auto wm = root.find("weight_map");
  if (wm == root.end()) bad(what, "index has no \"weight_map\"");
  if (!wm->is_object()) bad(what, fmt::format("index \"weight_map\" must be an object, not {}", wm->type_name()));
  for (auto& [name, file] : wm->items()) {
    if (!file.is_string())
      bad(what, fmt::format("weight_map entry {} must be a shard file name, got {}", json_quote(name), brief(file)));
    std::string f = file.get<std::string>();
    if (f.empty() || f == "." || f == ".." || f.find('/') != std::string::npos || f.find('\\') != std::string::npos ||
        f.find('\0') != std::string::npos)
      bad(what, fmt::format("weight_map entry {} names {}, which is not a plain file name in the index's folder",
                            json_quote(name), json_quote(f)));
    idx.weight_map[name] = f;
  }
  return idx;
}

}  // namespace foundry::io::detail
