// Tensor core: dtypes and promotion, number formats, storage, views, RNG, allocator.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <thread>
#include <tuple>
#include <vector>

#include "foundry/core/allocator.h"
#include "foundry/core/leak_report.h"
#include "foundry/core/parallel.h"
#include "foundry/core/rng.h"
#include "foundry/ops/ops.h"

using namespace foundry;

TEST(DType, PromotionMatchesPyTorchTable) {
  // torch.promote_types for a representative set (values from PyTorch 1.13).
  EXPECT_EQ(promote_types(DType::UInt8, DType::Int8), DType::Int16);
  EXPECT_EQ(promote_types(DType::UInt8, DType::Int32), DType::Int32);
  EXPECT_EQ(promote_types(DType::Bool, DType::UInt8), DType::UInt8);
  EXPECT_EQ(promote_types(DType::Int64, DType::Float16), DType::Float16);
  EXPECT_EQ(promote_types(DType::Float16, DType::BFloat16), DType::Float32);
  EXPECT_EQ(promote_types(DType::BFloat16, DType::Float64), DType::Float64);
  EXPECT_EQ(promote_types(DType::Int8, DType::Int16), DType::Int16);
  EXPECT_THROW(promote_types(DType::Float8E4M3, DType::Float32), TypeError);
}

TEST(DType, ResultTypeWithScalarsAndZeroDim) {
  Tensor i32 = ones({3}, DType::Int32), f16 = ones({3}, DType::Float16), u8 = ones({3}, DType::UInt8);
  EXPECT_EQ((i32 + 5).dtype(), DType::Int32);
  EXPECT_EQ((i32 + 5.5).dtype(), DType::Float32);
  EXPECT_EQ((f16 + 2.5).dtype(), DType::Float16);
  EXPECT_EQ((u8 + full({}, 1000, DType::Int64)).dtype(), DType::UInt8);         // 0-d does not widen
  EXPECT_EQ((i32 + full({}, 2.0, DType::Float64)).dtype(), DType::Float64);     // but raises the category
  EXPECT_EQ((ones({2}, DType::Bool) + 1).dtype(), DType::Int64);
}

TEST(Numeric, HalfRoundTripAndRounding) {
  for (uint32_t b = 0; b < 65536; ++b) {
    float f = Half::to_float(uint16_t(b));
    if (std::isnan(f)) continue;
    ASSERT_EQ(Half::from_float(f), b) << b;
  }
  // Ties to even: 2049 is halfway between 2048 and 2050.
  EXPECT_EQ(float(Half(2049.0f)), 2048.0f);
  EXPECT_EQ(float(Half(2051.0f)), 2052.0f);
  EXPECT_TRUE(std::isinf(float(Half(65520.0f))));
  EXPECT_EQ(float(Half(65519.0f)), 65504.0f);
  EXPECT_EQ(float(Half(5.960464477539063e-08f)), 5.960464477539063e-08f);  // smallest subnormal
}

TEST(Numeric, BFloat16Rounding) {
  EXPECT_EQ(float(BFloat16(1.00390625f)), 1.0f);  // tie -> even
  EXPECT_EQ(float(BFloat16(1.01171875f)), 1.015625f);
  EXPECT_TRUE(std::isnan(float(BFloat16(std::nanf("")))));
}

// float8 conversions against an exhaustive decode table and midpoints (PyTorch 2.x / ml_dtypes rules).
template <typename F8>
void check_float8(float max_finite, bool overflow_to_nan) {
  for (int b = 0; b < 256; ++b) {
    float f = F8::to_float(uint8_t(b));
    if (std::isnan(f)) continue;
    ASSERT_EQ(F8::from_float(f), uint8_t(b)) << b;
  }
  for (int b = 0; b < 255; ++b) {
    float lo = F8::to_float(uint8_t(b)), hi = F8::to_float(uint8_t(b + 1));
    if (std::isnan(lo) || std::isnan(hi) || std::isinf(hi) || (b & 0x7f) == 0x7f || lo < 0) continue;
    double mid = (double(lo) + double(hi)) / 2;
    uint8_t even = (b % 2 == 0) ? uint8_t(b) : uint8_t(b + 1);
    ASSERT_EQ(F8::from_float(float(mid)), even) << "midpoint after code " << b;
  }
  EXPECT_EQ(float(F8(max_finite)), max_finite);
  float over = max_finite * 1.2f;
  if (overflow_to_nan) EXPECT_TRUE(std::isnan(float(F8(over))));
  else EXPECT_TRUE(std::isinf(float(F8(over))));
}

TEST(Numeric, Float8E4M3) {
  check_float8<Float8E4M3>(448.0f, true);
  EXPECT_EQ(float(Float8E4M3(464.0f)), 448.0f);  // halfway to 480: ties to even keeps 448
  EXPECT_TRUE(std::isnan(float(Float8E4M3(470.0f))));
  EXPECT_EQ(float(Float8E4M3(std::ldexp(1.0f, -9))), std::ldexp(1.0f, -9));  // smallest subnormal
}

TEST(Numeric, Float8E5M2) {
  check_float8<Float8E5M2>(57344.0f, false);
  EXPECT_TRUE(std::isinf(float(Float8E5M2(61440.0f))));  // halfway rounds to even = inf
  EXPECT_EQ(float(Float8E5M2(61439.0f)), 57344.0f);
}

TEST(Rng, PhiloxKnownAnswer) {
  // Random123 known-answer test for philox4x32-10 with zero counter and key.
  auto r = philox4x32(0, 0, 0);
  EXPECT_EQ(r[0], 0x6627e8d5u);
  EXPECT_EQ(r[1], 0xe169c58du);
  EXPECT_EQ(r[2], 0xbc57ac4cu);
  EXPECT_EQ(r[3], 0x9b00dbd8u);
}

TEST(Rng, SameNumbersForAnyThreadCount) {
  int saved = get_num_threads();
  set_num_threads(1);
  manual_seed(42);
  Tensor a = randn({100000});
  set_num_threads(2);
  manual_seed(42);
  Tensor b = randn({100000});
  set_num_threads(saved);
  EXPECT_TRUE(equal(a, b));
  manual_seed(42);
  Tensor c = randn({100000});
  EXPECT_TRUE(equal(a, c));
  EXPECT_NEAR(mean(a).item<double>(), 0.0, 0.02);
  EXPECT_NEAR(foundry::std(a).item<double>(), 1.0, 0.02);
}

TEST(Allocator, CachesAndReportsStats) {
  allocator::empty_cache();
  auto before = allocator::stats();
  {
    Tensor t = empty({1000}, DType::Float32);
    auto during = allocator::stats();
    EXPECT_GE(during.current_bytes, before.current_bytes + 4000);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data_ptr()) % 64, 0u);
  }
  auto after = allocator::stats();
  EXPECT_GT(after.cached_bytes, 0);
  Tensor again = empty({1000}, DType::Float32);
  EXPECT_GT(allocator::stats().num_cache_hits, after.num_cache_hits);
  allocator::empty_cache();
  EXPECT_EQ(allocator::stats().cached_bytes, 0);
  EXPECT_EQ(allocator::size_class(1), 64u);
  EXPECT_EQ(allocator::size_class(1025), 1280u);
}

TEST(Allocator, HugeMissHandsCachedBlocksBack) {
  allocator::empty_cache();
  { Tensor a = empty({4 << 20}, DType::Float32), b = empty({3 << 20}, DType::Float32); }  // 16 + 12 MiB cached
  EXPECT_GE(allocator::stats().cached_bytes, int64_t(28) << 20);
  // The first miss of the (otherwise unused) 96 MiB class evicts up to as many cached bytes.
  const int64_t n = (21 << 20) + 8;  // even: exact as a float32 sum
  Tensor huge = empty({n}, DType::Float32);
  EXPECT_EQ(allocator::stats().cached_bytes, 0);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(huge.data_ptr()) % (2 << 20), 0u);  // huge-page aligned
  huge.fill_(1.0);
  EXPECT_EQ(huge.sum().item<double>(), double(n));
  // Later misses of the same class don't: a training loop would refault the evicted blocks each step.
  { Tensor a = empty({4 << 20}, DType::Float32), again = empty({n}, DType::Float32); }
  EXPECT_GE(allocator::stats().cached_bytes, int64_t(16) << 20);
}

TEST(ObjectCache, TensorObjectsAreReusedOnTheirThread) {
  if (!detail::objects_recycled()) GTEST_SKIP() << "objects are not recycled under AddressSanitizer";
  void* a = detail::object_allocate(sizeof(TensorImpl));
  detail::object_free(a, sizeof(TensorImpl));
  void* b = detail::object_allocate(sizeof(TensorImpl));  // the same size class: the block just freed
  EXPECT_EQ(a, b);
  detail::object_free(b, sizeof(TensorImpl));
  void* big = detail::object_allocate(4096);  // past the classes: the heap's
  detail::object_free(big, 4096);
}

TEST(ObjectCache, TensorsDroppedOnAnotherThreadOrAtItsExitStayIntact) {
  // Tensors made on one thread and dropped on another (the recycling thread keeps their objects),
  // a thread that exits holding cached objects, then more tensors here: values stay intact.
  std::vector<Tensor> made;
  for (int i = 0; i < 1000; ++i) made.push_back(full({3}, double(i), DType::Float32));
  std::thread other([&] {
    for (int i = 0; i < 500; ++i) made[size_t(i)] = Tensor();
    std::vector<Tensor> own;
    for (int i = 0; i < 300; ++i) own.push_back(arange(i + 1, DType::Int64));
    for (int i = 0; i < 300; ++i) EXPECT_EQ(own[size_t(i)].sum().item<int64_t>(), int64_t(i) * (i + 1) / 2);
  });
  other.join();
  for (int i = 500; i < 1000; ++i) EXPECT_EQ(made[size_t(i)].sum().item<double>(), 3.0 * i);
  std::vector<Tensor> more;
  for (int i = 0; i < 600; ++i) more.push_back(full({2}, double(i), DType::Float64));
  for (int i = 0; i < 600; ++i) EXPECT_EQ(more[size_t(i)].sum().item<double>(), 2.0 * i);
}

TEST(InPlace, BinaryOpsWriteIntoSelfWithoutATemporary) {
  Tensor x = full({1 << 20}, 1.0, DType::Float32), y = full({1 << 20}, 2.0, DType::Float32);
  const void* where = x.data_ptr();
  uint32_t version = x.version();
  allocator::reset_peak();
  int64_t live = allocator::stats().current_bytes;
  x.add_(y, 3.0).mul_(y);  // (1 + 3*2) * 2
  EXPECT_LT(allocator::stats().peak_bytes - live, int64_t(1) << 20);  // no 4 MiB result buffer
  EXPECT_EQ(x.data_ptr(), where);
  EXPECT_EQ(x.version(), version + 2);
  EXPECT_EQ(x.index({7}).item<float>(), 14.0f);
  // Broadcast operand, the same tensor on both sides, and a partly overlapping view (which must
  // be computed out of place first, as PyTorch requires) all give the out-of-place answer.
  Tensor m = arange(12, DType::Float32).reshape({3, 4});
  m.add_(tensor<float>({1, 2, 3, 4}, {4}), -1.0);
  EXPECT_EQ(m.index({2}).to_vector<float>(), (std::vector<float>{7, 7, 7, 7}));
  m.mul_(m);
  EXPECT_EQ(m.index({2}).to_vector<float>(), (std::vector<float>{49, 49, 49, 49}));
  Tensor r = arange(6, DType::Float32);
  Tensor expected = r + flip(r, {0});
  r.add_(flip(r, {0}));
  EXPECT_EQ(r.to_vector<float>(), expected.to_vector<float>());
  // Promotion rules still apply: a float result can't be written into an integer tensor.
  Tensor i = arange(4);
  EXPECT_THROW(i.add_(full({4}, 0.5, DType::Float32)), TypeError);
  i.add_(i);
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{0, 2, 4, 6}));
}

TEST(Tensor, ViewsShareStorage) {
  Tensor x = arange(24).reshape({2, 3, 4});
  Tensor v = x.transpose(0, 2);
  EXPECT_FALSE(v.is_contiguous());
  EXPECT_EQ(v.storage().get(), x.storage().get());
  Tensor s = x.slice(2, None, None, -1);  // reversed: negative stride
  EXPECT_EQ(s.stride(2), -1);
  EXPECT_EQ(s.index({0, 0, 0}).item<int64_t>(), 3);
  EXPECT_EQ(x.expand({5, 2, 3, 4}).stride(0), 0);
  EXPECT_THROW(x.view({5, 5}), ValueError);
  EXPECT_THROW(x.transpose(0, 1).view({6, 4}), Error);
  EXPECT_EQ(Shape(x.transpose(0, 1).reshape({6, 4}).sizes()), (Shape{6, 4}));
  Tensor d = diagonal(arange(9).reshape({3, 3}));
  EXPECT_EQ(d.to_vector<int64_t>(), (std::vector<int64_t>{0, 4, 8}));
}

TEST(Tensor, MakeTensorChecksBounds) {
  Tensor x = zeros({4});
  EXPECT_THROW(make_tensor(x.storage(), {5}, {1}, 0, DType::Float32), Error);
  EXPECT_THROW(make_tensor(x.storage(), {2}, {-1}, 0, DType::Float32), Error);
  EXPECT_NO_THROW(make_tensor(x.storage(), {2}, {-1}, 1, DType::Float32));
}

TEST(Tensor, CopyConvertsAndBroadcasts) {
  Tensor dst = zeros({2, 3}, DType::Int32);
  dst.copy_(tensor<double>({1.7, -2.2, 3.9}, {3}));
  EXPECT_EQ(dst.to_vector<int32_t>(), (std::vector<int32_t>{1, -2, 3, 1, -2, 3}));
  Tensor bf = tensor<float>({1.0f, 3.14159f}, {2}).to(DType::BFloat16);
  EXPECT_FLOAT_EQ(bf.to(DType::Float32).to_vector<float>()[1], 3.140625f);
}

// x.t().contiguous() (and a narrowed matrix's) takes copy_into's tiled transpose for every element
// size; the dtype-converting copy of the same view takes the strided loop: both must agree, at
// shapes that are not multiples of the 16 x 16 tiles.
TEST(Tensor, TransposedCopyMatchesTheStridedLoopForEveryElementSize) {
  for (DType dt : {DType::UInt8, DType::Float16, DType::Float32, DType::Float64}) {
    for (auto [rows, cols, spare] : {std::tuple<int64_t, int64_t, int64_t>{37, 53, 0}, {130, 17, 0}, {70, 300, 9}}) {
      // [cols, rows + spare] stored row-major, narrowed to [cols, rows], viewed as [rows, cols].
      Tensor base = remainder(arange((rows + spare) * cols), full({}, 251.0)).reshape({cols, rows + spare}).to(dt);
      Tensor src = base.narrow(1, 0, rows).t();
      ASSERT_EQ(src.stride(0), 1);
      Tensor tiled = src.contiguous();
      ASSERT_TRUE(tiled.is_contiguous());
      EXPECT_TRUE(equal(tiled.to(DType::Float64), src.to(DType::Float64)))
          << dtype_name(dt) << " " << rows << "x" << cols << " spare " << spare;
    }
  }
}

TEST(Tensor, ReprIsReadable) {
  EXPECT_EQ(arange(3).str(), "tensor([0, 1, 2])");
  EXPECT_EQ(tensor<float>({1.5f}, {1}).str(), "tensor([1.5000])");
}

TEST(Tensor, IsCloseNumPySemantics) {
  Tensor a = tensor<double>({1.0, std::nan(""), 1e10, 0.0}, {4});
  Tensor b = tensor<double>({1.0 + 1e-9, std::nan(""), 1.00001e10, 1e-7}, {4});
  EXPECT_EQ(isclose(a, b).to_vector<uint8_t>(), (std::vector<uint8_t>{1, 0, 1, 0}));
  EXPECT_EQ(isclose(a, b, 1e-5, 1e-8, true).to_vector<uint8_t>(), (std::vector<uint8_t>{1, 1, 1, 0}));
  // No overflow for integers: |127 - (-128)| = 255.
  Tensor i = tensor<int8_t>({127}, {1}), j = tensor<int8_t>({-128}, {1});
  EXPECT_FALSE(isclose(i, j, 0.0, 254.0).item<bool>());
  EXPECT_TRUE(isclose(i, j, 0.0, 255.0).item<bool>());
  EXPECT_TRUE(allclose(ones({3}), ones({1})));
}

TEST(Errors, ClearMessages) {
  try {
    add(ones({2, 3}), ones({4}));
    FAIL();
  } catch (const ValueError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("add"), std::string::npos) << m;
    EXPECT_NE(m.find("[2, 3]"), std::string::npos) << m;
  }
  EXPECT_THROW(sum(ones({2}), {3}), IndexError);
  EXPECT_THROW(exp(ones({2}, DType::Float8E4M3)), TypeError);
  EXPECT_THROW(bitwise_and(ones({2}), ones({2})), TypeError);
  EXPECT_THROW(ones({2}).index({0, 1}), IndexError);
  EXPECT_THROW(ones({2}).index({5}), IndexError);
  EXPECT_THROW(gather(ones({2, 2}), 0, tensor<int64_t>({5, 0}, {1, 2})), IndexError);
  EXPECT_THROW(floor_divide(ones({2}, DType::Int64), zeros({2}, DType::Int64)), Error);
}

TEST(Storage, MemoryMappedIsReadOnlyAndZeroCopy) {
  std::string path = ::testing::TempDir() + "/foundry_map_test.bin";
  {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    float vals[6] = {1, 2, 3, 4, 5, 6};
    std::fwrite(vals, sizeof(float), 6, f);
    std::fclose(f);
  }
  Storage s = map_file_storage(path);
  EXPECT_TRUE(s->read_only());
  Tensor t = make_tensor(s, {2, 3}, {3, 1}, 0, DType::Float32);
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(sum(t).item<float>(), 21.0f);
  EXPECT_THROW(t.fill_(0), Error);
  EXPECT_THROW(t.add_(ones({2, 3})), Error);
  EXPECT_THROW(map_file_storage(path + ".missing"), IOError);
}

// Long float32 sums keep float32 accuracy: 8M uniform values, whole and per row, against the
// double sum of the same values (the flat float accumulation it replaced was 1.3e-6 off here).
TEST(Reduce, LongFloatSumsStayAccurate) {
  manual_seed(3);
  Tensor x = rand({1 << 23});
  double exact = sum(x.to(DType::Float64)).item<double>();
  for (int threads : {1, 2}) {
    int saved = get_num_threads();
    set_num_threads(threads);
    double got = sum(x).item<double>();
    double rows = sum(sum(x.view({64, -1}), {1}).to(DType::Float64)).item<double>();
    set_num_threads(saved);
    EXPECT_LT(std::fabs(got - exact) / exact, 2e-7) << threads << " threads";
    EXPECT_LT(std::fabs(rows - exact) / exact, 2e-7) << threads << " threads";
  }
}

// ---- leak report (foundry/core/leak_report.h) ----

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FOUNDRY_TEST_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(FOUNDRY_TEST_ASAN)
// The death test below leaks on purpose in a forked child of a threaded process, where
// LeakSanitizer's exit check is unreliable ("False leaks are possible"): that child turns it off.
static bool leak_check_off = false;
extern "C" int __lsan_is_turned_off() { return leak_check_off; }
static void lsan_turn_off() { leak_check_off = true; }
#else
static void lsan_turn_off() {}
#endif

TEST(LeakReport, LiveTensorsAreListedWithShapeDtypeAndCreationSite) {
  bool was = foundry::debug::tensor_tracking_enabled();
  foundry::debug::set_tensor_tracking(true);
  int64_t before = foundry::debug::live_tensor_count();
  {
    foundry::Tensor kept = foundry::zeros({3, 4});
    foundry::Tensor view = kept.reshape({12});
    EXPECT_EQ(foundry::debug::live_tensor_count(), before + 2);
    std::string report = foundry::debug::live_tensors_report();
    EXPECT_NE(report.find("float32 [3, 4] (48 bytes), created at:"), std::string::npos) << report;
    EXPECT_NE(report.find("foundry::zeros"), std::string::npos) << report;
    EXPECT_NE(report.find("float32 [12]"), std::string::npos) << report;
  }
  EXPECT_EQ(foundry::debug::live_tensor_count(), before);
  foundry::debug::set_tensor_tracking(was);
}

TEST(LeakReport, ALeakedTensorIsReportedAtExit) {
  EXPECT_EXIT(
      {
        foundry::debug::set_tensor_tracking(true);
        lsan_turn_off();
        new foundry::Tensor(foundry::ones({5, 7}, foundry::DType::Float64));  // never freed
        std::exit(0);
      },
      // Other tests of a shared process (the sanitizer tree runs shards) may leave tensors too.
      ::testing::ExitedWithCode(0), "still alive at exit.*live tensor.*1 x float64 \\[5, 7\\] \\(280 bytes\\), created at:.*foundry::ones");
}
