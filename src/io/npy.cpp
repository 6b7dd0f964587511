#include "foundry/io/npy.h"

#include <fcntl.h>
#include <unistd.h>
#include <zip.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <sstream>

#include "foundry/io/atomic_file.h"
#include "foundry/ops/ops.h"

namespace foundry::io {

namespace {

struct NpyType {
  const char* descr;
  DType dtype;
};
constexpr NpyType kTypes[] = {
    {"b1", DType::Bool},   {"u1", DType::UInt8},   {"i1", DType::Int8},    {"i2", DType::Int16},
    {"i4", DType::Int32},  {"i8", DType::Int64},   {"f2", DType::Float16}, {"f4", DType::Float32},
    {"f8", DType::Float64},  {"u2", DType::UInt16},   {"u4", DType::UInt32},  {"u8", DType::UInt64},
};

[[noreturn]] void fail(const std::string& what, const std::string& msg) {
  raise<IOError>("{}: {}", what, msg);
}

// Extracts the value text of 'key' from the header dict.
std::string dict_value(const std::string& header, const std::string& key, const std::string& what) {
  size_t k = header.find("'" + key + "'");
  if (k == std::string::npos) fail(what, "npy header has no '" + key + "' entry");
  size_t colon = header.find(':', k);
  if (colon == std::string::npos) fail(what, "malformed npy header");
  size_t start = header.find_first_not_of(' ', colon + 1);
  if (start == std::string::npos) fail(what, "malformed npy header");
  size_t end;
  if (header[start] == '(') {
    end = header.find(')', start);
    if (end == std::string::npos) fail(what, "malformed shape in npy header");
    return header.substr(start, end - start + 1);
  }
  if (header[start] == '\'') {
    end = header.find('\'', start + 1);
    if (end == std::string::npos) fail(what, "malformed npy header");
    return header.substr(start + 1, end - start - 1);
  }
  end = header.find_first_of(",}", start);
  if (end == std::string::npos) fail(what, "malformed npy header");
  return header.substr(start, end - start);
}

}  // namespace

Tensor parse_npy(const std::string& bytes, const std::string& what) {
  if (bytes.size() < 10 || bytes.compare(0, 6, "\x93NUMPY") != 0) fail(what, "not an .npy file (bad magic)");
  uint8_t major = uint8_t(bytes[6]);
  size_t header_len, header_start;
  if (major == 1) {
    header_len = uint8_t(bytes[8]) | (size_t(uint8_t(bytes[9])) << 8);
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) fail(what, "truncated .npy header");
    header_len = 0;
    for (int i = 0; i < 4; ++i) header_len |= size_t(uint8_t(bytes[size_t(8 + i)])) << (8 * i);
    header_start = 12;
  } else {
    fail(what, fmt::format("unsupported .npy format version {}", major));
  }
  if (header_start + header_len > bytes.size()) fail(what, "truncated .npy header");
  std::string header = bytes.substr(header_start, header_len);
  std::string descr = dict_value(header, "descr", what);
  std::string fortran = dict_value(header, "fortran_order", what);
  std::string shape_text = dict_value(header, "shape", what);
  if (descr.size() < 3) fail(what, "unsupported dtype '" + descr + "'");
  char order = descr[0];
  std::string code = descr.substr(1);
  const NpyType* type = nullptr;
  for (const NpyType& t : kTypes)
    if (code == t.descr) type = &t;
  if (!type) fail(what, "unsupported dtype '" + descr + "'");
  bool big_endian = order == '>';
  if (order != '<' && order != '>' && order != '|' && order != '=') fail(what, "bad byte order in '" + descr + "'");
  if (shape_text.size() < 2 || shape_text.front() != '(' || shape_text.back() != ')')
    fail(what, "malformed shape '" + shape_text + "' in npy header");
  Shape shape;
  {
    std::string inner = shape_text.substr(1, shape_text.size() - 2);
    std::stringstream ss(inner);
    std::string item;
    while (std::getline(ss, item, ',')) {
      size_t b = item.find_first_not_of(' ');
      if (b == std::string::npos) continue;
      try {
        long long v = std::stoll(item.substr(b));
        if (v < 0) fail(what, "negative dimension in shape " + shape_text);
        shape.push_back(v);
      } catch (const std::logic_error&) {
        fail(what, "malformed shape " + shape_text);
      }
    }
  }
  // The product of the nonzero dimensions bounds the strides, computed even for an empty array.
  int64_t nonzero = 1;
  bool empty_array = false;
  for (int64_t s : shape) {
    if (s == 0) empty_array = true;
    else if (nonzero > (int64_t(1) << 40) / s) fail(what, "shape " + shape_text + " is too large");
    else nonzero *= s;
  }
  const int64_t n = empty_array ? 0 : nonzero;
  int64_t isz = itemsize(type->dtype);
  size_t data_start = header_start + header_len;
  if (bytes.size() - data_start < size_t(n * isz))
    fail(what, fmt::format("truncated data: {} bytes for shape {} of {} need {}", bytes.size() - data_start,
                           shape_text, descr, n * isz));
  bool is_fortran = fortran.find("True") != std::string::npos;
  Shape storage_shape = shape;
  if (is_fortran) std::reverse(storage_shape.begin(), storage_shape.end());
  Tensor t = empty(storage_shape, type->dtype);
  std::memcpy(t.data_ptr(), bytes.data() + data_start, size_t(n * isz));
  if (type->dtype == DType::Bool) {
    // A bool is one byte that must hold 0 or 1; NumPy reads any nonzero byte as True.
    auto* p = static_cast<uint8_t*>(t.data_ptr());
    for (int64_t i = 0; i < n; ++i) p[i] = p[i] != 0;
  }
  if (big_endian && isz > 1) {
    auto* p = static_cast<uint8_t*>(t.data_ptr());
    for (int64_t i = 0; i < n; ++i) std::reverse(p + i * isz, p + (i + 1) * isz);
  }
  if (is_fortran && shape.size() > 1) {
    std::vector<int64_t> perm;
    for (int64_t d = int64_t(shape.size()) - 1; d >= 0; --d) perm.push_back(d);
    t = t.permute(perm).contiguous();
  }
  return t;
}

Tensor load_npy(const std::string& path) { return parse_npy(read_file(path), path); }

std::string encode_npy(const Tensor& t_in) {
  const NpyType* type = nullptr;
  for (const NpyType& t : kTypes)
    if (t.dtype == t_in.dtype()) type = &t;
  if (!type)
    raise<TypeError>("npy: {} has no NumPy dtype; convert it (e.g. to float32) before saving", dtype_name(t_in.dtype()));
  Tensor t = t_in.contiguous();
  std::string shape = "(";
  for (size_t i = 0; i < t.sizes().size(); ++i) shape += std::to_string(t.sizes()[i]) + (t.dim() == 1 ? "," : (i + 1 < t.sizes().size() ? ", " : ""));
  shape += ")";
  char order = itemsize(t.dtype()) == 1 ? '|' : '<';
  std::string header = fmt::format("{{'descr': '{}{}', 'fortran_order': False, 'shape': {}, }}", order, type->descr, shape);
  size_t total = 10 + header.size() + 1;
  size_t padded = (total + 63) / 64 * 64;
  header.append(padded - total, ' ');
  header += '\n';
  std::string out = "\x93NUMPY";
  out += char(1);
  out += char(0);
  out += char(header.size() & 0xff);
  out += char((header.size() >> 8) & 0xff);
  out += header;
  out.append(static_cast<const char*>(t.data_ptr()), size_t(t.nbytes()));
  return out;
}

void save_npy(const std::string& path, const Tensor& t) { write_file_atomic(path, encode_npy(t)); }

std::map<std::string, Tensor> load_npz(const std::string& path) {
  int err = 0;
  zip_t* z = zip_open(path.c_str(), ZIP_RDONLY, &err);
  if (!z) {
    zip_error_t e;
    zip_error_init_with_code(&e, err);
    std::string msg = zip_error_strerror(&e);
    zip_error_fini(&e);
    raise<IOError>("cannot open npz '{}': {}", path, msg);
  }
  std::map<std::string, Tensor> out;
  try {
    zip_int64_t n = zip_get_num_entries(z, 0);
    for (zip_int64_t i = 0; i < n; ++i) {
      zip_stat_t st;
      if (zip_stat_index(z, zip_uint64_t(i), 0, &st) != 0) raise<IOError>("npz '{}': cannot stat entry {}", path, i);
      std::string name = st.name;
      zip_file_t* f = zip_fopen_index(z, zip_uint64_t(i), 0);
      if (!f) raise<IOError>("npz '{}': cannot open entry '{}': {}", path, name, zip_strerror(z));
      // Read in blocks as the data arrives: the size the entry declares is only trusted once the
      // bytes are there (a corrupt header may declare gigabytes).
      std::string bytes;
      constexpr zip_uint64_t kBlock = 1 << 20;
      zip_int64_t got = 0;
      while (bytes.size() < st.size) {
        const size_t at = bytes.size();
        bytes.resize(at + size_t(std::min<zip_uint64_t>(kBlock, st.size - at)));
        got = zip_fread(f, bytes.data() + at, bytes.size() - at);
        bytes.resize(at + size_t(std::max<zip_int64_t>(got, 0)));
        if (got <= 0) break;
      }
      zip_fclose(f);
      if (got < 0 || bytes.size() != st.size)
        raise<IOError>("npz '{}': entry '{}' is truncated or corrupt", path, name);
      if (name.size() > 4 && name.compare(name.size() - 4, 4, ".npy") == 0) name = name.substr(0, name.size() - 4);
      out[name] = parse_npy(bytes, path + ":" + name);
    }
  } catch (...) {
    zip_discard(z);
    throw;
  }
  zip_discard(z);
  return out;
}

void save_npz(const std::string& path, const std::map<std::string, Tensor>& arrays) {
  if (arrays.empty()) {
    // libzip writes nothing for an empty archive; an empty zip is just the end record.
    std::string eocd = std::string("PK\x05\x06", 4) + std::string(18, '\0');
    write_file_atomic(path, eocd);
    return;
  }
  static std::atomic<uint64_t> counter{0};
  std::string tmp = path + ".tmp." + std::to_string(::getpid()) + ".z" + std::to_string(counter.fetch_add(1));
  ::unlink(tmp.c_str());
  int err = 0;
  zip_t* z = zip_open(tmp.c_str(), ZIP_CREATE | ZIP_EXCL, &err);
  if (!z) raise<IOError>("cannot create npz '{}'", tmp);
  std::vector<std::string> buffers;
  buffers.reserve(arrays.size());
  for (const auto& [name, t] : arrays) {
    buffers.push_back(encode_npy(t));
    zip_source_t* src = zip_source_buffer(z, buffers.back().data(), buffers.back().size(), 0);
    zip_int64_t idx = src ? zip_file_add(z, (name + ".npy").c_str(), src, ZIP_FL_OVERWRITE) : -1;
    if (idx < 0) {
      if (src) zip_source_free(src);
      zip_discard(z);
      raise<IOError>("npz '{}': cannot add '{}'", path, name);
    }
    zip_set_file_compression(z, zip_uint64_t(idx), ZIP_CM_STORE, 0);
  }
  if (zip_close(z) != 0) {
    std::string msg = zip_strerror(z);
    zip_discard(z);
    ::unlink(tmp.c_str());
    raise<IOError>("cannot write npz '{}': {}", path, msg);
  }
  // libzip closed the archive into `tmp`; make it durable before it takes the final name.
  try {
    fsync_file(tmp);
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    raise<IOError>("cannot rename '{}' to '{}': {}", tmp, path, std::strerror(e));
  }
  fsync_dir(parent_dir(path));
}

}  // namespace foundry::io