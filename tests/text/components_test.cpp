// Each normalizer, pre-tokenizer and decoder on its own against HF tokenizers' own
// normalizeString / preTokenizeString / decode (components.jsonl, written by reference.js).
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "test_util.h"
#include "text/components.h"

using namespace foundry::text;

namespace {

std::vector<json> component_cases(const std::string& kind) {
  std::vector<json> v;
  std::ifstream f(ref_dir() + "/components.jsonl");
  std::string line;
  while (std::getline(f, line)) {
    json j = json::parse(line);
    if (j["kind"] == kind) v.push_back(std::move(j));
  }
  return v;
}

size_t char_index(const std::string& s, size_t byte) { return uni::char_count(std::string_view(s).substr(0, byte)); }

}  // namespace

TEST(Components, NormalizersMatchHF) {
  SKIP_WITHOUT_SHARED_DATA();
  auto cases = component_cases("normalizer");
  ASSERT_FALSE(cases.empty()) << "run the text_reference test first";
  std::map<std::string, size_t> bad;
  for (auto& c : cases) {
    auto n = normalizer_from_json(c["config"]);
    NormalizedString s(c["input"].get<std::string>());
    n->normalize(s);
    if (s.get() != c["output"].get<std::string>()) {
      if (bad[c["config"].dump()]++ < 2)
        ADD_FAILURE() << c["config"].dump() << " on " << c["input"].dump() << ": " << json(s.get()).dump() << " vs "
                      << c["output"].dump();
    }
  }
  EXPECT_TRUE(bad.empty());
}

TEST(Components, PreTokenizersMatchHF) {
  SKIP_WITHOUT_SHARED_DATA();
  auto cases = component_cases("pre_tokenizer");
  ASSERT_FALSE(cases.empty());
  std::map<std::string, size_t> bad;
  for (auto& c : cases) {
    auto p = pre_tokenizer_from_json(c["config"]);
    std::string in = c["input"];
    PreTokenizedString pts;
    pts.splits.push_back(Split{NormalizedString(in), std::nullopt});
    p->pre_tokenize(pts);
    json got = json::array();
    for (auto& sp : pts.splits) {
      auto [a, b] = sp.normalized.offsets_original();
      got.push_back(json::array({sp.normalized.get(), json::array({char_index(in, a), char_index(in, b)})}));
    }
    if (got != c["output"]) {
      if (bad[c["config"].dump()]++ < 2)
        ADD_FAILURE() << c["config"].dump() << " on " << c["input"].dump() << ":\n  " << got.dump() << "\n  vs "
                      << c["output"].dump();
    }
  }
  EXPECT_TRUE(bad.empty());
}

TEST(Components, DecodersMatchHF) {
  SKIP_WITHOUT_SHARED_DATA();
  auto cases = component_cases("decoder");
  ASSERT_FALSE(cases.empty());
  for (auto& c : cases) {
    auto d = decoder_from_json(c["config"]);
    std::vector<std::string> toks = c["input"];
    d->decode_chain(toks);
    std::string out;
    for (auto& t : toks) out += t;
    EXPECT_EQ(out, c["output"].get<std::string>()) << c["config"].dump() << " on " << c["input"].dump();
  }
}

TEST(Components, RoundTripThroughJson) {
  for (const char* kind : {"normalizer", "pre_tokenizer", "decoder"}) {
    for (auto& c : component_cases(kind)) {
      json j = c["config"];
      json again = std::string(kind) == "normalizer"      ? normalizer_from_json(j)->to_json()
                   : std::string(kind) == "pre_tokenizer" ? pre_tokenizer_from_json(j)->to_json()
                                                          : decoder_from_json(j)->to_json();
      EXPECT_EQ(again["type"], j["type"]) << j.dump();
    }
  }
}
