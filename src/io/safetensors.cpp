#include "foundry/io/safetensors.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <regex>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "foundry/io/atomic_file.h"
#include "io/safetensors_format.h"

namespace foundry::io {

namespace fs = std::filesystem;
using detail::SafetensorsEntry;

// ---------------------------------------------------------------------------------------------
// Reading

struct SafetensorsFile::Impl {
  std::string path;
  Storage storage;
  uint64_t data_start = 0;
  std::vector<SafetensorsTensorInfo> infos;  // file order
  std::unordered_map<std::string, size_t> index;
  std::map<std::string, std::string> metadata;
  bool has_metadata = false;
};

namespace {

std::shared_ptr<SafetensorsFile::Impl> build(std::string path, Storage storage) {
  auto impl = std::make_shared<SafetensorsFile::Impl>();
  detail::SafetensorsHeader h =
      detail::parse_safetensors_header(static_cast<const uint8_t*>(storage->data()), storage->nbytes(), path);
  impl->path = std::move(path);
  impl->storage = std::move(storage);
  impl->data_start = h.data_start;
  impl->metadata = std::move(h.metadata);
  impl->has_metadata = h.has_metadata;
  impl->infos.reserve(h.entries.size());
  for (SafetensorsEntry& e : h.entries) {
    impl->index.emplace(e.name, impl->infos.size());
    impl->infos.push_back({std::move(e.name), e.dtype->dtype, std::move(e.shape), e.begin, e.end});
  }
  return impl;
}

}  // namespace

SafetensorsFile SafetensorsFile::open(const std::string& path, bool copy_on_write) {
  SafetensorsFile f;
  f.impl_ = build(path, map_file_storage(path, copy_on_write));
  return f;
}

SafetensorsFile SafetensorsFile::from_bytes(const std::string& bytes, const std::string& what) {
  auto storage = make_ref<StorageImpl>(bytes.size());
  if (!bytes.empty()) std::memcpy(storage->data(), bytes.data(), bytes.size());
  SafetensorsFile f;
  f.impl_ = build(what, std::move(storage));
  return f;
}

namespace {
const SafetensorsFile::Impl& need(const std::shared_ptr<const SafetensorsFile::Impl>& impl) {
  if (!impl) raise<ValueError>("safetensors: the file is not open");
  return *impl;
}
}  // namespace

const std::string& SafetensorsFile::path() const { return need(impl_).path; }

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  for (const auto& i : need(impl_).infos) out.push_back(i.name);
  return out;
}

size_t SafetensorsFile::size() const { return need(impl_).infos.size(); }

bool SafetensorsFile::contains(const std::string& name) const { return need(impl_).index.count(name) > 0; }

const SafetensorsTensorInfo& SafetensorsFile::info(const std::string& name) const {
  const Impl& im = need(impl_);
  auto it = im.index.find(name);
  if (it == im.index.end())
    raise<ValueError>("{}: no tensor named {} (the file holds {} tensors)", im.path, detail::json_quote(name),
                      im.infos.size());
  return im.infos[it->second];
}

Tensor SafetensorsFile::get(const std::string& name) const {
  const Impl& im = need(impl_);
  const SafetensorsTensorInfo& ti = info(name);
  uint64_t at = im.data_start + ti.begin;  // file offset of the first byte
  int64_t isz = itemsize(ti.dtype);
  if (at % uint64_t(isz) == 0) {
    // The mapping (or owned buffer) is page/64-byte aligned, so a file offset that is a multiple
    // of the item size gives an aligned element pointer: a view, no copy.
    return make_tensor(im.storage, ti.shape, contiguous_strides(ti.shape), int64_t(at / uint64_t(isz)), ti.dtype);
  }
  Tensor t = empty(ti.shape, ti.dtype);
  if (ti.end > ti.begin) std::memcpy(t.data_ptr(), static_cast<const char*>(im.storage->data()) + at, ti.end - ti.begin);
  return t;
}

std::map<std::string, Tensor> SafetensorsFile::load_all() const {
  std::map<std::string, Tensor> out;
  for (const auto& i : need(impl_).infos) out.emplace(i.name, get(i.name));
  return out;
}

const std::map<std::string, std::string>& SafetensorsFile::metadata() const { return need(impl_).metadata; }
bool SafetensorsFile::has_metadata() const { return need(impl_).has_metadata; }
uint64_t SafetensorsFile::data_offset() const { return need(impl_).data_start; }

SafetensorsContents load_safetensors(const std::string& path, bool copy) {
  SafetensorsContents c;
  c.file = SafetensorsFile::open(path);
  c.tensors = c.file.load_all();
  if (copy)
    for (auto& [name, t] : c.tensors) t = t.clone();
  c.metadata = c.file.metadata();
  return c;
}

// ---------------------------------------------------------------------------------------------
// Writing

namespace {

struct Prepared {
  std::string header;  // 8-byte length + padded JSON
  std::vector<std::pair<const std::string*, const Tensor*>> order;
  uint64_t data_bytes = 0;
};

void check_text(const std::string& s, const char* what) {
  if (detail::find_invalid_utf8(s) != std::string_view::npos)
    raise<ValueError>("safetensors: {} {} is not valid UTF-8", what, detail::json_quote(s));
}

Prepared prepare(const std::map<std::string, Tensor>& tensors, const std::map<std::string, std::string>& metadata) {
  Prepared p;
  for (const auto& [name, t] : tensors) {
    if (name == "__metadata__") raise<ValueError>("safetensors: the tensor name \"__metadata__\" is reserved");
    check_text(name, "tensor name");
    if (!t.defined()) raise<ValueError>("safetensors: tensor {} is undefined", detail::json_quote(name));
    p.order.emplace_back(&name, &t);
  }
  for (const auto& [k, v] : metadata) {
    check_text(k, "metadata key");
    check_text(v, "metadata value");
  }
  // Upstream's `prepare`: descending dtype (its enum order, which follows alignment), then name.
  std::stable_sort(p.order.begin(), p.order.end(), [](const auto& a, const auto& b) {
    int ra = detail::safetensors_dtype(a.second->dtype()).rank, rb = detail::safetensors_dtype(b.second->dtype()).rank;
    if (ra != rb) return ra > rb;
    return *a.first < *b.first;
  });
  std::vector<SafetensorsEntry> entries;
  for (const auto& [name, t] : p.order) {
    SafetensorsEntry e;
    e.name = *name;
    e.dtype = &detail::safetensors_dtype(t->dtype());
    e.shape.assign(t->sizes().begin(), t->sizes().end());
    e.begin = p.data_bytes;
    p.data_bytes += uint64_t(t->nbytes());
    e.end = p.data_bytes;
    entries.push_back(std::move(e));
  }
  std::string json = detail::safetensors_header_json(entries, metadata, !metadata.empty());
  json.append((8 - json.size() % 8) % 8, ' ');
  if (json.size() > detail::kSafetensorsMaxHeader)
    raise<ValueError>("safetensors: the header would be {} bytes, over the {}-byte limit readers accept", json.size(),
                      detail::kSafetensorsMaxHeader);
  uint64_t n = json.size();
  p.header.resize(8);
  for (int i = 0; i < 8; ++i) p.header[size_t(i)] = char((n >> (8 * i)) & 0xff);
  p.header += json;
  return p;
}

// Row-major bytes of a tensor without autograd (a copy only when it is not contiguous).
Tensor dense(const Tensor& t) { return t.detach().contiguous(); }

}  // namespace

std::string serialize_safetensors(const std::map<std::string, Tensor>& tensors,
                                  const std::map<std::string, std::string>& metadata) {
  Prepared p = prepare(tensors, metadata);
  std::string out = std::move(p.header);
  out.reserve(out.size() + p.data_bytes);
  for (const auto& [name, t] : p.order) {
    Tensor c = dense(*t);
    if (c.nbytes() > 0) out.append(static_cast<const char*>(c.data_ptr()), size_t(c.nbytes()));
  }
  return out;
}

void save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  Prepared p = prepare(tensors, metadata);
  AtomicFile f(path);
  f.write(p.header);
  for (const auto& [name, t] : p.order) {
    Tensor c = dense(*t);
    if (c.nbytes() > 0) f.write(c.data_ptr(), size_t(c.nbytes()));
  }
  f.commit();
}

// ---------------------------------------------------------------------------------------------
// Sharded checkpoints

struct ShardedSafetensors::Impl {
  std::string folder;
  detail::SafetensorsIndex index;
  std::vector<std::string> files;  // distinct, in first-appearance order of sorted names
  mutable std::mutex mu;
  mutable std::map<std::string, SafetensorsFile> open;
  bool copy_on_write = false;
};

namespace {
const char* kIndexName = "model.safetensors.index.json";
const char* kSingleName = "model.safetensors";

ShardedSafetensors::Impl& need(const std::shared_ptr<ShardedSafetensors::Impl>& impl) {
  if (!impl) raise<ValueError>("sharded safetensors: not open");
  return *impl;
}
}  // namespace

ShardedSafetensors ShardedSafetensors::open(const std::string& path, bool copy_on_write) {
  auto impl = std::make_shared<Impl>();
  impl->copy_on_write = copy_on_write;
  std::error_code ec;
  std::string index_path;
  if (fs::is_directory(path, ec)) {
    impl->folder = path;
    if (fs::exists(fs::path(path) / kIndexName, ec)) {
      index_path = (fs::path(path) / kIndexName).string();
    } else if (fs::exists(fs::path(path) / kSingleName, ec)) {
      // A single-file checkpoint: every tensor lives in model.safetensors.
      SafetensorsFile f = SafetensorsFile::open((fs::path(path) / kSingleName).string(), copy_on_write);
      for (const std::string& n : f.names()) impl->index.weight_map[n] = kSingleName;
      impl->files.push_back(kSingleName);
      impl->open[kSingleName] = f;
      ShardedSafetensors s;
      s.impl_ = impl;
      return s;
    } else {
      raise<IOError>("'{}': neither {} nor {} is in this folder", path, kIndexName, kSingleName);
    }
  } else {
    index_path = path;
    impl->folder = parent_dir(path);
  }
  impl->index = detail::parse_safetensors_index(read_file(index_path), index_path);
  for (const auto& [name, file] : impl->index.weight_map)
    if (std::find(impl->files.begin(), impl->files.end(), file) == impl->files.end()) impl->files.push_back(file);
  ShardedSafetensors s;
  s.impl_ = impl;
  return s;
}

std::vector<std::string> ShardedSafetensors::names() const {
  std::vector<std::string> out;
  for (const auto& [n, f] : need(impl_).index.weight_map) out.push_back(n);
  return out;
}

bool ShardedSafetensors::contains(const std::string& name) const { return need(impl_).index.weight_map.count(name) > 0; }

const std::string& ShardedSafetensors::shard_of(const std::string& name) const {
  const Impl& im = need(impl_);
  auto it = im.index.weight_map.find(name);
  if (it == im.index.weight_map.end())
    raise<ValueError>("sharded safetensors '{}': no tensor named {} in the index", im.folder, detail::json_quote(name));
  return it->second;
}

std::vector<std::string> ShardedSafetensors::shard_files() const { return need(impl_).files; }

Tensor ShardedSafetensors::get(const std::string& name) const {
  const Impl& im = need(impl_);
  const std::string& file = shard_of(name);
  SafetensorsFile f;
  {
    std::lock_guard<std::mutex> lock(im.mu);
    auto it = im.open.find(file);
    if (it == im.open.end()) it = im.open.emplace(file, SafetensorsFile::open((fs::path(im.folder) / file).string(), im.copy_on_write)).first;
    f = it->second;
  }
  if (!f.contains(name))
    raise<IOError>("{}: the index says this shard holds tensor {}, but it does not", f.path(), detail::json_quote(name));
  return f.get(name);
}

std::map<std::string, Tensor> ShardedSafetensors::load_all() const {
  std::map<std::string, Tensor> out;
  for (const auto& [n, file] : need(impl_).index.weight_map) out.emplace(n, get(n));
  return out;
}

int64_t ShardedSafetensors::total_size() const { return need(impl_).index.total_size; }
const std::string& ShardedSafetensors::metadata_json() const { return need(impl_).index.metadata_json; }
const std::string& ShardedSafetensors::folder() const { return need(impl_).folder; }

std::vector<std::string> save_safetensors_sharded(const std::string& dir, const std::map<std::string, Tensor>& tensors,
                                                  uint64_t max_shard_bytes,
                                                  const std::map<std::string, std::string>& metadata,
                                                  const std::string& prefix) {
  if (max_shard_bytes == 0) raise<ValueError>("save_safetensors_sharded: max_shard_bytes must be positive");
  if (prefix.empty() || prefix.find('/') != std::string::npos)
    raise<ValueError>("save_safetensors_sharded: prefix '{}' must be a plain file name", prefix);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) raise<IOError>("cannot create folder '{}': {}", dir, ec.message());

  // huggingface_hub's split_state_dict_into_shards: greedy in key order; a tensor larger than
  // the limit gets a shard of its own.
  std::vector<std::map<std::string, Tensor>> shards;
  std::map<std::string, Tensor> current;
  uint64_t current_bytes = 0, total = 0;
  for (const auto& [name, t] : tensors) {
    if (!t.defined()) raise<ValueError>("save_safetensors_sharded: tensor {} is undefined", detail::json_quote(name));
    uint64_t n = uint64_t(t.nbytes());
    total += n;
    if (n > max_shard_bytes) {
      shards.push_back({{name, t}});
      continue;
    }
    if (current_bytes + n > max_shard_bytes) {
      shards.push_back(std::move(current));
      current = {};
      current_bytes = 0;
    }
    current.emplace(name, t);
    current_bytes += n;
  }
  if (!current.empty() || shards.empty()) shards.push_back(std::move(current));

  std::vector<std::string> written;
  std::string single = prefix + ".safetensors", index_name = prefix + ".safetensors.index.json";
  if (shards.size() == 1) {
    save_safetensors((fs::path(dir) / single).string(), shards[0], metadata);
    written.push_back(single);
  } else {
    nlohmann::json weight_map = nlohmann::json::object();
    for (size_t i = 0; i < shards.size(); ++i) {
      std::string file = fmt::format("{}-{:05d}-of-{:05d}.safetensors", prefix, i + 1, shards.size());
      save_safetensors((fs::path(dir) / file).string(), shards[i], metadata);
      for (const auto& [name, t] : shards[i]) weight_map[name] = file;
      written.push_back(file);
    }
    nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    write_file_atomic((fs::path(dir) / index_name).string(), index.dump(2) + "\n");
    written.push_back(index_name);
  }
  // Remove what an earlier save with this prefix left and this one did not write.
  std::regex shard_re(std::regex_replace(prefix, std::regex(R"([.^$|()\[\]{}*+?\\])"), R"(\$&)") +
                      R"(-\d{5}-of-\d{5}\.safetensors)");
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::string name = entry.path().filename().string();
    bool ours = std::regex_match(name, shard_re) || name == single || name == index_name;
    if (ours && std::find(written.begin(), written.end(), name) == written.end()) fs::remove(entry.path(), ec);
  }
  fsync_dir(dir);
  return written;
}

}  // namespace foundry::io
