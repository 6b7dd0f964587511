// safetensors: round trips for every dtype, upstream's exact byte layout, zero-copy mapping,
// sharded checkpoints, and a clear IOError (never a crash) for every kind of malformed file.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "foundry/io/atomic_file.h"
#include "foundry/io/safetensors.h"
#include "foundry/ops/ops.h"

using namespace foundry;
using namespace foundry::io;
namespace fs = std::filesystem;

namespace {

std::string tmpdir(const std::string& name) {
  std::string d = ::testing::TempDir() + "/foundry_st_" + name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
}

std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[size_t(i)] = char((n >> (8 * i)) & 0xff);
  return s;
}

// A file image from a header text and data bytes (no padding added).
std::string file_of(const std::string& header, const std::string& data) { return le64(header.size()) + header + data; }

std::string bytes_of(const Tensor& t) {
  Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), size_t(c.nbytes()));
}

// A tensor with random bytes (any bit pattern is a valid value for the byte comparison).
Tensor random_tensor(IntList shape, DType dt, uint32_t seed) {
  Tensor t = empty(shape, dt);
  std::mt19937 rng(seed);
  auto* p = static_cast<uint8_t*>(t.data_ptr());
  for (int64_t i = 0; i < t.nbytes(); ++i) p[i] = uint8_t(rng());
  if (dt == DType::Bool)
    for (int64_t i = 0; i < t.nbytes(); ++i) p[i] &= 1;
  return t;
}

const DType kAll[] = {DType::Bool,    DType::UInt8,    DType::Int8,       DType::Int16,      DType::UInt16,
                      DType::Int32,   DType::UInt32,   DType::Int64,      DType::UInt64,     DType::Float16,
                      DType::BFloat16, DType::Float32, DType::Float64,    DType::Float8E4M3, DType::Float8E5M2};

// Expects an IOError whose message contains every fragment.
void expect_error(const std::string& image, std::initializer_list<const char*> fragments) {
  try {
    SafetensorsFile::from_bytes(image, "bad.safetensors");
    ADD_FAILURE() << "no error for a malformed file; expected " << *fragments.begin();
  } catch (const IOError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("bad.safetensors"), std::string::npos) << msg;
    for (const char* f : fragments) EXPECT_NE(msg.find(f), std::string::npos) << "missing '" << f << "' in: " << msg;
  }
}

}  // namespace

TEST(Safetensors, RoundTripEveryDtype) {
  std::string dir = tmpdir("dtypes");
  std::map<std::string, Tensor> in;
  uint32_t seed = 1;
  for (DType dt : kAll) {
    std::string n(dtype_name(dt));
    in[n] = random_tensor({3, 5}, dt, seed++);
    in[n + ".scalar"] = random_tensor({}, dt, seed++);
    in[n + ".empty"] = empty({0, 4}, dt);
  }
  save_safetensors(dir + "/all.safetensors", in, {{"format", "pt"}, {"note", "every dtype"}});
  SafetensorsContents out = load_safetensors(dir + "/all.safetensors");
  ASSERT_EQ(out.tensors.size(), in.size());
  EXPECT_EQ(out.metadata.at("note"), "every dtype");
  for (const auto& [name, t] : in) {
    const Tensor& u = out.tensors.at(name);
    EXPECT_EQ(u.dtype(), t.dtype()) << name;
    EXPECT_EQ(u.sizes().vec(), t.sizes().vec()) << name;
    EXPECT_EQ(bytes_of(u), bytes_of(t)) << name;
    // Upstream's layout keeps every tensor aligned, so all are views over the mapping.
    EXPECT_EQ(u.storage()->kind(), StorageImpl::Kind::Mapped) << name;
    EXPECT_TRUE(u.storage()->read_only()) << name;
  }
  // copy=true gives writable owned tensors.
  SafetensorsContents copied = load_safetensors(dir + "/all.safetensors", /*copy=*/true);
  Tensor f = copied.tensors.at("float32");
  EXPECT_EQ(f.storage()->kind(), StorageImpl::Kind::Owned);
  f.fill_(1.0);
  EXPECT_EQ(bytes_of(out.tensors.at("float32")), bytes_of(in.at("float32")));
}

TEST(Safetensors, MappedTensorsAreReadOnlyAndOutliveTheFile) {
  std::string dir = tmpdir("readonly");
  save_safetensors(dir + "/a.safetensors", {{"w", arange(6, DType::Float32).reshape({2, 3})}});
  Tensor w;
  {
    SafetensorsContents c = load_safetensors(dir + "/a.safetensors");
    w = c.tensors.at("w");
  }
  EXPECT_THROW(w.fill_(0.0), Error);
  // Replacing the file (atomic rename) leaves the old mapping intact.
  save_safetensors(dir + "/a.safetensors", {{"w", zeros({2, 3}, DType::Float32)}});
  EXPECT_EQ(w.to_vector<float>(), (std::vector<float>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(load_safetensors(dir + "/a.safetensors").tensors.at("w").to_vector<float>(), std::vector<float>(6, 0.f));
  for (const auto& e : fs::directory_iterator(dir)) EXPECT_EQ(e.path().filename(), "a.safetensors");  // no temp files
}

TEST(Safetensors, ExactUpstreamLayout) {
  // huggingface/safetensors tensor.rs test_serialization: attn.0, F32, [1, 2, 3], 0..5.
  Tensor t = arange(6, DType::Float32).reshape({1, 2, 3});
  std::string header = R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})";
  ASSERT_EQ(header.size(), 64u);  // already a multiple of 8: no padding
  EXPECT_EQ(serialize_safetensors({{"attn.0", t}}), file_of(header, bytes_of(t)));
  // test_serialization_forced_alignement: "attn0" makes the JSON 65 bytes -> 7 spaces of padding.
  std::string header2 = R"({"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}})";
  EXPECT_EQ(serialize_safetensors({{"attn0", t.reshape({1, 1, 2, 3})}}), file_of(header2 + "       ", bytes_of(t)));
  // test_empty: no tensors, with and without metadata.
  EXPECT_EQ(serialize_safetensors({}), file_of("{}      ", ""));
  EXPECT_EQ(serialize_safetensors({}, {{"framework", "pt"}}), file_of(R"({"__metadata__":{"framework":"pt"}})" "     ", ""));
}

TEST(Safetensors, WriterOrdersByDtypeAlignmentThenName) {
  std::map<std::string, Tensor> in = {{"a", ones({2}, DType::Bool)},    {"b", ones({2}, DType::Float32)},
                                      {"c", ones({2}, DType::Int64)},   {"d", ones({2}, DType::Float32)},
                                      {"e", ones({2}, DType::BFloat16)}, {"f", ones({2}, DType::Float16)},
                                      {"g", ones({2}, DType::Float64)},  {"h", ones({2}, DType::UInt64)},
                                      {"i", ones({2}, DType::Float8E4M3)}, {"j", ones({2}, DType::Float8E5M2)},
                                      {"B", ones({2}, DType::Float32)}};
  SafetensorsFile f = SafetensorsFile::from_bytes(serialize_safetensors(in));
  // Upstream's Dtype enum order, descending: U64 I64 F64 F32 BF16 F16 F8_E4M3 F8_E5M2 BOOL; then
  // names byte-wise ("B" < "b").
  EXPECT_EQ(f.names(), (std::vector<std::string>{"h", "c", "g", "B", "b", "d", "e", "f", "i", "j", "a"}));
}

TEST(Safetensors, NonContiguousAndUnicodeNamesAndMetadata) {
  Tensor base = arange(12, DType::Int32).reshape({3, 4});
  Tensor tr = base.t();  // non-contiguous
  std::string name = "caf\xC3\xA9.\"quoted\"\n\\";
  std::map<std::string, std::string> meta = {{"k\t", "v\x01\"\xE2\x82\xAC"}};
  std::string image = serialize_safetensors({{name, tr}}, meta);
  EXPECT_NE(image.find("\"caf\xC3\xA9."), std::string::npos);  // non-ASCII is not escaped (serde_json)
  EXPECT_NE(image.find(R"(\"quoted\"\n\\)"), std::string::npos);
  EXPECT_NE(image.find(R"("k\t":"v\u0001\")"), std::string::npos);
  SafetensorsFile f = SafetensorsFile::from_bytes(image);
  EXPECT_EQ(f.metadata(), meta);
  EXPECT_EQ(f.get(name).to_vector<int32_t>(), tr.contiguous().to_vector<int32_t>());
  EXPECT_THROW(serialize_safetensors({{"__metadata__", base}}), ValueError);
  EXPECT_THROW(serialize_safetensors({{"bad\xFF", base}}), ValueError);
}

TEST(Safetensors, MisalignedDataIsCopied) {
  // A valid file (upstream does not require alignment) whose F32 data starts at file offset 17.
  Tensor t = arange(4, DType::Float32);
  std::string header = R"({"x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})";
  while (header.size() % 8 != 1) header += ' ';  // the data starts at a file offset = 1 (mod 8)
  std::string image = file_of(header, bytes_of(t));
  ASSERT_NE((8 + header.size()) % 4, 0u);
  SafetensorsFile f = SafetensorsFile::from_bytes(image);
  Tensor x = f.get("x");
  EXPECT_EQ(x.storage()->kind(), StorageImpl::Kind::Owned);
  EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{0, 1, 2, 3}));
}

TEST(Safetensors, AcceptsWhatUpstreamAccepts) {
  // Any key order, unknown fields, `null` metadata, struct-as-array, "-0", whitespace.
  std::string data(8, '\0');
  SafetensorsFile a = SafetensorsFile::from_bytes(file_of(
      R"( { "b": {"data_offsets": [4, 8], "shape": [1], "dtype": "I32", "extra": {"x": [1]}},
            "__metadata__": null, "a": ["U8", [2, 2], [-0, 4]] }  )",
      data));
  EXPECT_EQ(a.names(), (std::vector<std::string>{"a", "b"}));
  EXPECT_FALSE(a.has_metadata());
  EXPECT_EQ(a.info("a").dtype, DType::UInt8);
  // Zero-size tensors may sit anywhere their offsets say, including past the last one.
  SafetensorsFile b = SafetensorsFile::from_bytes(file_of(
      R"({"e":{"dtype":"F32","shape":[0,3],"data_offsets":[4,4]},"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
      std::string(4, '\0')));
  EXPECT_EQ(b.get("e").sizes().vec(), (std::vector<int64_t>{0, 3}));
  EXPECT_THROW(b.info("nope"), ValueError);
}

TEST(Safetensors, MalformedFilesGiveClearErrors) {
  std::string ok_header = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  std::string data8(8, '\0');
  expect_error("", {"fewer than the 8-byte header length"});
  expect_error("abc", {"fewer than the 8-byte header length"});
  expect_error(le64(100'000'001) + "{}", {"exceeds the limit of 100000000"});
  expect_error(le64(~uint64_t(0)), {"exceeds the limit"});
  expect_error(le64(1000) + ok_header, {"runs past the end of the file", "truncated"});
  expect_error(file_of("{\"w\xff\":1}", ""), {"not valid UTF-8"});
  expect_error(file_of("{\"\xed\xa0\x80\":1}", ""), {"not valid UTF-8"});  // surrogate
  expect_error(file_of("{\"\xc0\xaf\":1}", ""), {"not valid UTF-8"});      // overlong
  expect_error(file_of("{", ""), {"not valid JSON"});
  expect_error(file_of("", ""), {"not valid JSON"});
  expect_error(file_of(std::string("{}\0\0\0\0\0\0", 8), ""), {"not valid JSON", "NUL byte"});  // NUL padding
  expect_error(file_of(std::string("{}\0{\"x\":1}", 10), ""), {"not valid JSON", "NUL byte at offset 2"});
  expect_error(file_of("{} // c", ""), {"not valid JSON"});
  expect_error(file_of("\xEF\xBB\xBF{}", ""), {"byte-order mark"});
  expect_error(file_of("[]", ""), {"must be a JSON object"});
  expect_error(file_of(R"({"w":{"dtype":"F128","shape":[2],"data_offsets":[0,8]}})", data8),
               {"tensor \"w\"", "unknown dtype \"F128\""});
  expect_error(file_of(R"({"w":{"dtype":"f32","shape":[2],"data_offsets":[0,8]}})", data8), {"unknown dtype \"f32\""});
  expect_error(file_of(R"({"w":{"dtype":7,"shape":[2],"data_offsets":[0,8]}})", data8), {"dtype must be a string"});
  expect_error(file_of(R"({"w":{"shape":[2],"data_offsets":[0,8]}})", data8), {"missing field \"dtype\""});
  expect_error(file_of(R"({"w":{"dtype":"F32","data_offsets":[0,8]}})", data8), {"missing field \"shape\""});
  expect_error(file_of(R"({"w":{"dtype":"F32","shape":[2]}})", data8), {"missing field \"data_offsets\""});
  expect_error(file_of(R"({"w":3})", data8), {"tensor \"w\"", "expected an object"});
  expect_error(file_of(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", data8), {"non-negative integers"});
  expect_error(file_of(R"({"w":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", data8), {"non-negative integers"});
  expect_error(file_of(R"({"w":{"dtype":"F32","shape":2,"data_offsets":[0,8]}})", data8), {"shape must be an array"});
  expect_error(file_of(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8,9]}})", data8), {"[begin, end]"});
  expect_error(file_of(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,"8"]}})", data8), {"non-negative integers"});
  expect_error(file_of(R"({"w":{"dtype":"F32","shape":[1099511627776,1099511627776,1099511627776],"data_offsets":[0,8]}})", data8),
               {"overflows"});
  expect_error(file_of(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", data8), {"end before they begin"});
  // Offsets: overlap, gap, not starting at 0.
  expect_error(file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                       std::string(12, '\0')),
               {"tensor \"b\"", "overlap tensor \"a\""});
  expect_error(file_of(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                       std::string(12, '\0')),
               {"tensor \"b\"", "gap of 4 bytes after tensor \"a\""});
  expect_error(file_of(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", data8), {"first tensor must begin at 0"});
  // Size != numel x itemsize.
  expect_error(file_of(R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,8]}})", data8),
               {"tensor \"w\"", "shape [2, 2] of F32 needs 16 bytes", "span 8 bytes"});
  // Duplicate names (top level, metadata, fields).
  expect_error(file_of(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                       data8),
               {"key \"w\" twice"});
  expect_error(file_of(R"({"w":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}})", data8), {"key \"dtype\" twice"});
  expect_error(file_of(R"({"__metadata__":{"a":"1","a":"2"}})", ""), {"key \"a\" twice"});
  // Buffer end must be the file end.
  expect_error(file_of(ok_header, data8 + "xx"), {"2 trailing bytes"});
  expect_error(file_of(ok_header, "1234"), {"only 4 after the header", "truncated"});
  // Metadata must map strings to strings.
  expect_error(file_of(R"({"__metadata__":{"a":1}})", ""), {"__metadata__ entry \"a\" must be a string"});
  expect_error(file_of(R"({"__metadata__":[]})", ""), {"__metadata__ must be an object"});
  // Nesting beyond serde_json's limit.
  std::string deep = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":)" + std::string(200, '[') +
                     std::string(200, ']') + "}}";
  expect_error(file_of(deep, data8), {"nests deeper than 128"});
}

TEST(Safetensors, EveryTruncationOfAValidFileIsAnError) {
  std::string image = serialize_safetensors({{"a", arange(5, DType::Int64)}, {"b", ones({3}, DType::BFloat16)}},
                                            {{"format", "pt"}});
  for (size_t n = 0; n < image.size(); ++n) EXPECT_THROW(SafetensorsFile::from_bytes(image.substr(0, n)), IOError) << n;
  EXPECT_NO_THROW(SafetensorsFile::from_bytes(image));
}

TEST(Safetensors, FileErrorsNameTheFile) {
  std::string dir = tmpdir("fileerr");
  try {
    load_safetensors(dir + "/missing.safetensors");
    FAIL();
  } catch (const IOError& e) {
    EXPECT_NE(std::string(e.what()).find("missing.safetensors"), std::string::npos);
  }
  write_bytes(dir + "/empty.safetensors", "");
  EXPECT_THROW(load_safetensors(dir + "/empty.safetensors"), IOError);
  EXPECT_THROW(load_safetensors(dir), IOError);  // a folder
}

TEST(Safetensors, ShardedRoundTripAndIndex) {
  std::string dir = tmpdir("sharded");
  std::map<std::string, Tensor> in;
  for (int i = 0; i < 6; ++i) in["layer." + std::to_string(i) + ".weight"] = random_tensor({4, 8}, DType::Float32, 100u + uint32_t(i));
  in["big"] = random_tensor({100}, DType::Float64, 7);  // 800 bytes, over the limit: its own shard
  std::vector<std::string> files = save_safetensors_sharded(dir, in, /*max_shard_bytes=*/300);
  ASSERT_GE(files.size(), 4u);
  EXPECT_EQ(files.back(), "model.safetensors.index.json");
  EXPECT_EQ(files.front(), fmt::format("model-00001-of-{:05d}.safetensors", files.size() - 1));
  ShardedSafetensors s = ShardedSafetensors::open(dir);
  EXPECT_EQ(s.names().size(), in.size());
  EXPECT_EQ(s.total_size(), int64_t(6 * 128 + 800));
  EXPECT_EQ(s.shard_files().size(), files.size() - 1);
  for (const auto& [name, t] : in) EXPECT_EQ(bytes_of(s.get(name)), bytes_of(t)) << name;
  // Each shard carries {"format": "pt"} as transformers requires.
  EXPECT_EQ(SafetensorsFile::open(dir + "/" + files[0]).metadata().at("format"), "pt");
  // Opening by the index path works the same.
  EXPECT_EQ(ShardedSafetensors::open(dir + "/model.safetensors.index.json").load_all().size(), in.size());

  // Re-saving into fewer shards removes the stale ones; one shard means a plain model.safetensors.
  std::vector<std::string> one = save_safetensors_sharded(dir, {{"x", ones({2})}}, 1 << 20);
  EXPECT_EQ(one, (std::vector<std::string>{"model.safetensors"}));
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(dir)) left.push_back(e.path().filename().string());
  EXPECT_EQ(left, (std::vector<std::string>{"model.safetensors"}));
  ShardedSafetensors single = ShardedSafetensors::open(dir);
  EXPECT_EQ(single.names(), (std::vector<std::string>{"x"}));
  EXPECT_EQ(single.total_size(), -1);
}

TEST(Safetensors, BadIndexesGiveClearErrors) {
  std::string dir = tmpdir("badindex");
  save_safetensors(dir + "/a.safetensors", {{"x", ones({2})}});
  auto index = [&](const std::string& text) {
    write_bytes(dir + "/model.safetensors.index.json", text);
    return ShardedSafetensors::open(dir);
  };
  auto expect = [&](const std::string& text, const char* fragment) {
    try {
      ShardedSafetensors s = index(text);
      for (const std::string& n : s.names()) s.get(n);
      ADD_FAILURE() << "no error for " << text;
    } catch (const IOError& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  expect(R"({"weight_map": {"x": "../a.safetensors"}})", "not a plain file name");
  expect(R"({"weight_map": {"x": "/etc/passwd"}})", "not a plain file name");
  expect(R"({"weight_map": {"x": "missing.safetensors"}})", "missing.safetensors");
  expect(R"({"weight_map": {"y": "a.safetensors"}})", "does not");
  expect(R"({"weight_map": {"x": 3}})", "must be a shard file name");
  expect(R"({"metadata": {}})", "no \"weight_map\"");
  expect(R"({"weight_map": {"x": "a.safetensors"}, "weight_map": {}})", "twice");
  expect("{", "not valid JSON");
  EXPECT_EQ(index(R"({"metadata": {"total_size": 8}, "weight_map": {"x": "a.safetensors"}})").get("x").numel(), 2);
  fs::remove(dir + "/model.safetensors.index.json");
  EXPECT_THROW(ShardedSafetensors::open(dir), IOError);  // neither index nor model.safetensors
}
