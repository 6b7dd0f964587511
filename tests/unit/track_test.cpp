// The tracker's building blocks against published test vectors: SHA-256 (FIPS 180-4 examples),
// CRC-32C (RFC 3720's check value), base64 (RFC 4648 section 10), histograms, PNG headers.
#include <gtest/gtest.h>

#include <cmath>

#include "foundry/core/error.h"
#include "foundry/track/track.h"
#include "track/png.h"
#include "track/sha256.h"
#include "track/tb_events.h"
#include "track/util.h"

using namespace foundry::track;

TEST(Track, Sha256MatchesFipsExamples) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Track, Crc32cAndTfrecordMask) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  std::string zeros(32, '\0');
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);  // RFC 3720 B.4
  uint32_t crc = crc32c("abc", 3);
  EXPECT_EQ(tfrecord_masked_crc("abc"), ((crc >> 15) | (crc << 17)) + 0xa282ead8u);
}

TEST(Track, Base64RoundTripsAndRejectsGarbage) {
  const char* plain[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
  const char* coded[] = {"", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
  for (int i = 0; i < 7; ++i) {
    EXPECT_EQ(base64_encode(plain[i]), coded[i]);
    EXPECT_EQ(base64_decode(coded[i]), plain[i]);
  }
  EXPECT_THROW(base64_decode("Zm9"), foundry::ValueError);
  EXPECT_THROW(base64_decode("Zm!v"), foundry::ValueError);
  EXPECT_THROW(base64_decode("Z=9v"), foundry::ValueError);
}

TEST(Track, JsonNumbersSpellNonFiniteValues) {
  EXPECT_EQ(json_number(NAN), "NaN");
  EXPECT_EQ(json_number(-INFINITY), "-Infinity");
  EXPECT_EQ(json_number(1.5), 1.5);
  EXPECT_TRUE(std::isnan(json_to_double("NaN")));
  EXPECT_EQ(json_to_double("Infinity"), INFINITY);
  EXPECT_THROW(json_to_double("many"), foundry::ValueError);
}

TEST(Track, HistogramBucketsFollowHistogramProto) {
  std::vector<float> v = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, NAN, INFINITY};
  Histogram h = make_histogram(v.data(), v.size(), 3);
  EXPECT_EQ(h.num, 12);  // every value counted; non-finite ones are not bucketed
  EXPECT_EQ(h.min, 0);
  EXPECT_EQ(h.max, 9);
  EXPECT_EQ(h.sum, 45);
  EXPECT_EQ(h.sum_squares, 285);
  ASSERT_EQ(h.bucket_limits.size(), 3u);
  EXPECT_EQ(h.bucket_limits[0], 3);
  EXPECT_EQ(h.bucket_limits[2], 9);
  // (min, 3], (3, 6], (6, 9]: the minimum joins the first bucket.
  EXPECT_EQ(h.bucket_counts, (std::vector<double>{4, 3, 3}));
  std::vector<float> same = {2, 2, 2};
  Histogram c = make_histogram(same.data(), same.size(), 8);
  EXPECT_EQ(c.bucket_counts, (std::vector<double>{3}));
  EXPECT_THROW(make_histogram(same.data(), same.size(), 0), foundry::ValueError);
}

TEST(Track, PngEncodesAndHeadersAreChecked) {
  std::vector<uint8_t> px(6 * 5 * 3, 7);
  std::string png = encode_png(px.data(), 5, 6, 3);
  int64_t h = 0, w = 0;
  int c = 0;
  std::string err;
  ASSERT_TRUE(png_size(png, &h, &w, &c, &err)) << err;
  EXPECT_EQ(h, 5);
  EXPECT_EQ(w, 6);
  EXPECT_EQ(c, 3);
  EXPECT_FALSE(png_size("GIF89a", &h, &w, &c, &err));
  EXPECT_NE(err.find("not a PNG"), std::string::npos);
  EXPECT_THROW(encode_png(px.data(), 5, 6, 2), foundry::ValueError);
}
