// .npy/.npz: hand-assembled files in the layouts numpy writes (big-endian, Fortran order, 0-d,
// empty, bool, format 2.0), round trips, and clear errors for malformed input. The files numpy
// itself writes and reads are checked in tests/python/test_npy_compat.py.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "foundry/io/npy.h"
#include "foundry/ops/ops.h"

using namespace foundry;
using namespace foundry::io;
namespace fs = std::filesystem;

namespace {

std::string tmpdir(const std::string& name) {
  std::string d = ::testing::TempDir() + "/foundry_npy_" + name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// An .npy image as numpy 1.x writes it: magic, version, header padded to 64 bytes with '\n'.
std::string npy(const std::string& dict, const std::string& data, int major = 1) {
  size_t prefix = major == 1 ? 10 : 12;
  std::string header = dict;
  size_t total = prefix + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::string out = "\x93NUMPY";
  out += char(major);
  out += char(0);
  size_t n = header.size();
  for (size_t i = 0; i < (major == 1 ? 2u : 4u); ++i) out += char((n >> (8 * i)) & 0xff);
  return out + header + data;
}

template <typename T>
std::string raw(std::initializer_list<T> v, bool big_endian = false) {
  std::string s;
  for (T x : v) {
    std::string b(reinterpret_cast<const char*>(&x), sizeof(T));
    if (big_endian) std::reverse(b.begin(), b.end());
    s += b;
  }
  return s;
}

}  // namespace

TEST(Npy, ReadsNumpyLayouts) {
  // np.arange(6, dtype='>i4').reshape(2, 3)
  Tensor be = parse_npy(npy("{'descr': '>i4', 'fortran_order': False, 'shape': (2, 3), }", raw<int32_t>({0, 1, 2, 3, 4, 5}, true)), "be");
  EXPECT_EQ(be.dtype(), DType::Int32);
  EXPECT_EQ(be.to_vector<int32_t>(), (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
  // np.asfortranarray(np.arange(6.).reshape(2, 3)): memory holds columns.
  Tensor f = parse_npy(npy("{'descr': '<f8', 'fortran_order': True, 'shape': (2, 3), }", raw<double>({0, 3, 1, 4, 2, 5})), "f");
  EXPECT_EQ(f.sizes().vec(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(f.to_vector<double>(), (std::vector<double>{0, 1, 2, 3, 4, 5}));
  // Big-endian and Fortran together.
  Tensor bf = parse_npy(npy("{'descr': '>f4', 'fortran_order': True, 'shape': (2, 2), }", raw<float>({1, 3, 2, 4}, true)), "bf");
  EXPECT_EQ(bf.to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));
  // 0-d, empty, bool, uint16.
  Tensor z = parse_npy(npy("{'descr': '<i8', 'fortran_order': False, 'shape': (), }", raw<int64_t>({-7})), "z");
  EXPECT_EQ(z.dim(), 0);
  EXPECT_EQ(z.item<int64_t>(), -7);
  Tensor e = parse_npy(npy("{'descr': '<f4', 'fortran_order': False, 'shape': (0, 5), }", ""), "e");
  EXPECT_EQ(e.sizes().vec(), (std::vector<int64_t>{0, 5}));
  Tensor b = parse_npy(npy("{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }", std::string("\1\0\1", 3)), "b");
  EXPECT_EQ(b.dtype(), DType::Bool);
  EXPECT_EQ(b.to_vector<bool>(), (std::vector<bool>{true, false, true}));
  Tensor u = parse_npy(npy("{'descr': '>u2', 'fortran_order': False, 'shape': (2,), }", raw<uint16_t>({1, 65535}, true)), "u");
  EXPECT_EQ(u.dtype(), DType::UInt16);
  EXPECT_EQ(u.to_vector<int64_t>(), (std::vector<int64_t>{1, 65535}));
  // Format 2.0 (4-byte header length).
  Tensor v2 = parse_npy(npy("{'descr': '<f2', 'fortran_order': False, 'shape': (1,), }", raw<uint16_t>({0x3c00}), 2), "v2");
  EXPECT_EQ(v2.to_vector<float>(), (std::vector<float>{1.0f}));
}

TEST(Npy, RoundTripsEveryNumpyDtype) {
  std::string dir = tmpdir("rt");
  for (DType dt : {DType::Bool, DType::UInt8, DType::Int8, DType::Int16, DType::Int32, DType::Int64, DType::Float16,
                   DType::Float32, DType::Float64, DType::UInt16, DType::UInt32, DType::UInt64}) {
    Tensor t = arange(12, DType::Int64).to(dt).reshape({3, 4}).t();  // non-contiguous
    std::string path = dir + "/" + std::string(dtype_name(dt)) + ".npy";
    save_npy(path, t);
    Tensor u = load_npy(path);
    EXPECT_EQ(u.dtype(), dt);
    EXPECT_EQ(u.sizes().vec(), (std::vector<int64_t>{4, 3}));
    EXPECT_EQ(u.contiguous().to(DType::Float64).to_vector<double>(), t.contiguous().to(DType::Float64).to_vector<double>())
        << dtype_name(dt);
    std::string bytes = read_file(path);
    EXPECT_EQ((bytes.size() - t.nbytes()) % 64, 0u);  // numpy aligns the data to 64 bytes
  }
  EXPECT_THROW(save_npy(dir + "/x.npy", ones({2}, DType::BFloat16)), TypeError);
  EXPECT_THROW(save_npy(dir + "/x.npy", ones({2}, DType::Float8E4M3)), TypeError);
  save_npy(dir + "/scalar.npy", full({}, 2.5));
  EXPECT_EQ(load_npy(dir + "/scalar.npy").dim(), 0);
  EXPECT_NE(read_file(dir + "/scalar.npy").find("'shape': ()"), std::string::npos);
  save_npy(dir + "/one.npy", ones({3}));
  EXPECT_NE(read_file(dir + "/one.npy").find("'shape': (3,)"), std::string::npos);
}

TEST(Npy, NpzRoundTrip) {
  std::string dir = tmpdir("npz");
  std::map<std::string, Tensor> in = {{"a", arange(5, DType::Int64)}, {"b", ones({2, 2}, DType::Float16)},
                                      {"empty", zeros({0})}, {"flag", full({}, true, DType::Bool)}};
  save_npz(dir + "/x.npz", in);
  std::map<std::string, Tensor> out = load_npz(dir + "/x.npz");
  ASSERT_EQ(out.size(), in.size());
  for (const auto& [k, t] : in)
    EXPECT_EQ(out.at(k).to(DType::Float64).to_vector<double>(), t.to(DType::Float64).to_vector<double>()) << k;
  save_npz(dir + "/empty.npz", {});
  EXPECT_TRUE(load_npz(dir + "/empty.npz").empty());
  for (const auto& e : fs::directory_iterator(dir)) EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos);
}

TEST(Npy, MalformedInputGivesClearErrors) {
  auto expect = [](const std::string& bytes, const char* fragment) {
    try {
      parse_npy(bytes, "bad.npy");
      ADD_FAILURE() << "no error; expected " << fragment;
    } catch (const IOError& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("bad.npy"), std::string::npos) << e.what();
    }
  };
  std::string good = npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", raw<float>({1, 2}));
  expect("", "bad magic");
  expect("PK\3\4garbage", "bad magic");
  for (size_t n = 0; n < good.size(); ++n) EXPECT_THROW(parse_npy(good.substr(0, n), "t"), IOError) << n;
  expect(npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", raw<float>({1})), "truncated data");
  expect(npy("{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", ""), "unsupported dtype");
  expect(npy("{'descr': '|O', 'fortran_order': False, 'shape': (2,), }", ""), "unsupported dtype");
  expect(npy("{'fortran_order': False, 'shape': (2,), }", ""), "no 'descr'");
  expect(npy("{'descr': '<f4', 'fortran_order': False, 'shape': 2, }", ""), "malformed shape");
  expect(npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, -1), }", ""), "negative dimension");
  expect(npy("{'descr': '<f4', 'fortran_order': False, 'shape': (x,), }", ""), "malformed shape");
  expect(npy("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999, 99999999), }", ""), "too large");
  std::string v9 = good;
  v9[6] = 9;
  expect(v9, "unsupported .npy format version 9");
  std::string dir = tmpdir("bad");
  std::ofstream(dir + "/not.npz") << "this is not a zip";
  EXPECT_THROW(load_npz(dir + "/not.npz"), IOError);
  EXPECT_THROW(load_npy(dir + "/missing.npy"), IOError);
}
