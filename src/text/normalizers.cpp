// Normalizers (HF tokenizers' normalizers/*.rs): NFC/NFD/NFKC/NFKD, Lowercase, Strip,
// StripAccents, Replace, Prepend, BertNormalizer, Precompiled (SentencePiece charsmap), Nmt,
// ByteLevel, Sequence; plus SentencePiece's own normalizer for .model files.
#include <cstring>

#include "text/base64.h"
#include "text/components.h"

namespace foundry::text {
namespace {

class UnicodeNorm final : public Normalizer {
 public:
  UnicodeNorm(uni::NormForm f, const char* name) : form_(f), name_(name) {}
  void normalize(NormalizedString& s) const override { s.normalize_unicode(form_); }
  json to_json() const override { return json{{"type", name_}}; }

 private:
  uni::NormForm form_;
  const char* name_;
};

class Lowercase final : public Normalizer {
 public:
  void normalize(NormalizedString& s) const override { s.lowercase(); }
  json to_json() const override { return json{{"type", "Lowercase"}}; }
};

class Strip final : public Normalizer {
 public:
  Strip(bool l, bool r) : left_(l), right_(r) {}
  void normalize(NormalizedString& s) const override { s.lrstrip(left_, right_); }
  json to_json() const override { return json{{"type", "Strip"}, {"strip_left", left_}, {"strip_right", right_}}; }

 private:
  bool left_, right_;
};

class StripAccents final : public Normalizer {
 public:
  void normalize(NormalizedString& s) const override {
    s.filter([](char32_t c) { return !uni::is_mark(c); });
  }
  json to_json() const override { return json{{"type", "StripAccents"}}; }
};

class Replace final : public Normalizer {
 public:
  Replace(std::string text, bool is_regex, std::string content)
      : text_(std::move(text)), is_regex_(is_regex), content_(std::move(content)) {
    pattern_ = is_regex_ ? Pattern::re(std::make_shared<Regex>(text_)) : Pattern::literal(text_);
  }
  void normalize(NormalizedString& s) const override { s.replace(pattern_, content_); }
  json to_json() const override {
    return json{{"type", "Replace"}, {"pattern", pattern_to_json(text_, is_regex_)}, {"content", content_}};
  }

 private:
  std::string text_;
  bool is_regex_;
  std::string content_;
  Pattern pattern_;
};

class Prepend final : public Normalizer {
 public:
  explicit Prepend(std::string p) : prepend_(std::move(p)) {}
  void normalize(NormalizedString& s) const override {
    if (!s.empty()) s.prepend(prepend_);
  }
  json to_json() const override { return json{{"type", "Prepend"}, {"prepend", prepend_}}; }

 private:
  std::string prepend_;
};

bool is_chinese_char(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

bool bert_is_whitespace(char32_t c) { return c == '\t' || c == '\n' || c == '\r' || uni::is_whitespace(c); }
bool bert_is_control(char32_t c) {
  if (c == '\t' || c == '\n' || c == '\r') return false;
  return uni::is_other(c);
}

class BertNormalizer final : public Normalizer {
 public:
  BertNormalizer(bool clean, bool chinese, std::optional<bool> strip, bool lower)
      : clean_(clean), chinese_(chinese), strip_(strip), lower_(lower) {}
  void normalize(NormalizedString& s) const override {
    if (clean_) {
      s.filter([](char32_t c) { return !(c == 0 || c == 0xFFFD || bert_is_control(c)); });
      s.map([](char32_t c) -> char32_t { return bert_is_whitespace(c) ? U' ' : c; });
    }
    if (chinese_) {
      std::vector<uni::CharChange> tr;
      bool any = false;
      const std::string& str = s.get();
      size_t i = 0;
      while (i < str.size()) {
        char32_t c = uni::decode(str, i);
        if (is_chinese_char(c)) {
          tr.push_back({U' ', 0});
          tr.push_back({c, 1});
          tr.push_back({U' ', 1});
          any = true;
        } else {
          tr.push_back({c, 0});
        }
      }
      if (any) s.transform(tr, 0);
    }
    if (strip_.value_or(lower_)) {
      s.normalize_unicode(uni::NormForm::NFD);
      s.filter([](char32_t c) { return !uni::is_mark_nonspacing(c); });
    }
    if (lower_) s.lowercase();
  }
  json to_json() const override {
    json j{{"type", "BertNormalizer"}, {"clean_text", clean_}, {"handle_chinese_chars", chinese_}};
    j["strip_accents"] = strip_ ? json(*strip_) : json(nullptr);
    j["lowercase"] = lower_;
    return j;
  }

 private:
  bool clean_, chinese_;
  std::optional<bool> strip_;
  bool lower_;
};

class Nmt final : public Normalizer {
 public:
  void normalize(NormalizedString& s) const override {
    s.filter([](char32_t c) {
      return !((c >= 0x1 && c <= 0x8) || c == 0xB || (c >= 0xE && c <= 0x1F) || c == 0x7F || c == 0x8F || c == 0x9F);
    });
    s.map([](char32_t c) -> char32_t {
      switch (c) {
        case 0x9: case 0xA: case 0xC: case 0xD: case 0x1680: case 0x2028: case 0x2029: case 0x2581:
        case 0xFEFF: case 0xFFFD:
          return U' ';
        default:
          return (c >= 0x200B && c <= 0x200F) ? U' ' : c;
      }
    });
  }
  json to_json() const override { return json{{"type", "Nmt"}}; }
};

class ByteLevelNorm final : public Normalizer {
 public:
  void normalize(NormalizedString& s) const override {
    const std::string& str = s.get();
    if (str.empty()) return;
    std::vector<uni::CharChange> tr;
    tr.reserve(str.size());
    size_t i = 0;
    while (i < str.size()) {
      size_t n = uni::utf8_len(static_cast<unsigned char>(str[i]));
      for (size_t k = 0; k < n; ++k) {
        size_t p = 0;
        const std::string& bl = byte_to_unicode(static_cast<uint8_t>(str[i + k]));
        tr.push_back({uni::decode(bl, p), k > 0 ? 1 : 0});
      }
      i += n;
    }
    s.transform(tr, 0);
  }
  json to_json() const override { return json{{"type", "ByteLevel"}}; }
};

class Sequence final : public Normalizer {
 public:
  explicit Sequence(std::vector<NormalizerPtr> items) : items_(std::move(items)) {}
  void normalize(NormalizedString& s) const override {
    for (auto& n : items_) n->normalize(s);
  }
  json to_json() const override {
    json arr = json::array();
    for (auto& n : items_) arr.push_back(n->to_json());
    return json{{"type", "Sequence"}, {"normalizers", arr}};
  }

 private:
  std::vector<NormalizerPtr> items_;
};

// ---------------------------------------------------------------------------------------------
// SentencePiece precompiled charsmap: [u32 trie size][darts-clone double array][normalized blob]

class CharsMap {
 public:
  explicit CharsMap(std::string blob) : blob_(std::move(blob)) {
    if (blob_.empty()) return;
    FOUNDRY_CHECK_AS(ValueError, blob_.size() >= 4, "tokenizer: precompiled_charsmap is truncated");
    uint32_t trie_size;
    std::memcpy(&trie_size, blob_.data(), 4);
    FOUNDRY_CHECK_AS(ValueError, trie_size % 4 == 0 && 4 + static_cast<size_t>(trie_size) <= blob_.size(),
                     "tokenizer: precompiled_charsmap has a bad trie size {}", trie_size);
    // Before the copy: an empty vector's data() may be null, and memcpy to null is undefined even for
    // 0 bytes (fuzz_sentencepiece found a model with a 0-byte trie).
    FOUNDRY_CHECK_AS(ValueError, trie_size > 0, "tokenizer: precompiled_charsmap has an empty trie");
    array_.resize(trie_size / 4);
    std::memcpy(array_.data(), blob_.data() + 4, trie_size);
    normalized_ = std::string_view(blob_).substr(4 + trie_size);
  }
  bool empty() const { return array_.empty(); }
  const std::string& blob() const { return blob_; }

  /// All prefix matches (length, value) of key, shortest first (darts commonPrefixSearch).
  template <typename F>
  void prefixes(std::string_view key, F&& on_match) const {
    size_t node = 0;
    uint32_t unit = array_[node];
    node ^= offset(unit);
    for (size_t i = 0; i < key.size(); ++i) {
      auto c = static_cast<unsigned char>(key[i]);
      if (c == 0) break;
      node ^= c;
      if (node >= array_.size()) return;
      unit = array_[node];
      if (label(unit) != c) return;
      node ^= offset(unit);
      if (node >= array_.size()) return;
      if (has_leaf(unit)) on_match(i + 1, value(array_[node]));
    }
  }
  std::optional<std::string_view> transform_first(std::string_view chunk) const {
    std::optional<std::string_view> r;
    bool done = false;
    prefixes(chunk, [&](size_t, uint32_t v) {
      if (!done) {
        r = at(v);
        done = true;
      }
    });
    return r;
  }
  /// Longest prefix: (length, replacement).
  std::optional<std::pair<size_t, std::string_view>> longest(std::string_view chunk) const {
    std::optional<std::pair<size_t, std::string_view>> r;
    prefixes(chunk, [&](size_t len, uint32_t v) {
      auto s = at(v);
      if (s) r = std::make_pair(len, *s);
    });
    return r;
  }
  std::optional<std::string_view> at(uint32_t index) const {
    if (index > normalized_.size()) return std::nullopt;
    size_t end = normalized_.find('\0', index);
    if (end == std::string_view::npos) end = normalized_.size();
    return normalized_.substr(index, end - index);
  }

 private:
  static bool has_leaf(uint32_t u) { return (u >> 8) & 1; }
  static uint32_t value(uint32_t u) { return u & ((1u << 31) - 1); }
  static uint32_t label(uint32_t u) { return u & ((1u << 31) | 0xFF); }
  static uint32_t offset(uint32_t u) { return (u >> 10) << ((u & (1u << 9)) >> 6); }
  std::string blob_;
  std::vector<uint32_t> array_;
  std::string_view normalized_;
};

class Precompiled final : public Normalizer {
 public:
  explicit Precompiled(std::string blob) : map_(std::move(blob)) {}
  void normalize(NormalizedString& s) const override {
    if (map_.empty()) return;
    const std::string& str = s.get();
    std::vector<uni::CharChange> tr;
    tr.reserve(str.size());
    bool modified = false;
    // HF's replace(): the new chars replace the old ones one for one; extra new chars are
    // insertions (+1), missing ones are removals folded into the last char.
    auto push_norm = [&](std::string_view old_part, std::string_view norm) {
      long old_count = static_cast<long>(uni::char_count(old_part));
      long new_count = static_cast<long>(uni::char_count(norm));
      size_t begin = tr.size();
      size_t k = 0;
      while (k < norm.size()) tr.push_back({uni::decode(norm, k), 0});
      long diff = new_count - old_count;
      if (diff > 0) {
        for (long d = 0; d < diff && tr.size() - begin > static_cast<size_t>(d); ++d) tr[tr.size() - 1 - d].second = 1;
      } else if (diff < 0 && !tr.empty()) {
        tr.back().second += static_cast<int>(diff);
      }
    };
    std::vector<size_t> starts = uni::grapheme_starts(str);
    for (size_t g = 0; g < starts.size(); ++g) {
      size_t gs = starts[g], ge = g + 1 < starts.size() ? starts[g + 1] : str.size();
      std::string_view grapheme(str.data() + gs, ge - gs);
      if (grapheme.size() < 6) {
        if (auto norm = map_.transform_first(grapheme)) {
          modified = true;
          push_norm(grapheme, *norm);
          continue;
        }
      }
      size_t i = 0;
      while (i < grapheme.size()) {
        size_t b = i;
        char32_t c = uni::decode(grapheme, i);
        std::string_view part = grapheme.substr(b, i - b);
        if (auto norm = map_.transform_first(part)) {
          modified = true;
          push_norm(part, *norm);
        } else {
          tr.push_back({c, 0});
        }
      }
    }
    if (modified) s.transform(tr, 0);
  }
  json to_json() const override {
    return json{{"type", "Precompiled"}, {"precompiled_charsmap", base64_encode(map_.blob())}};
  }
  const CharsMap& map() const { return map_; }

 private:
  CharsMap map_;
};

// SentencePiece normalizer.cc Normalize(), with the alignment of every output byte.
class SpmNormalizer final : public Normalizer {
 public:
  SpmNormalizer(std::string charsmap, bool dummy, bool remove_extra, bool escape)
      : map_(std::move(charsmap)), dummy_(dummy), remove_extra_(remove_extra), escape_(escape) {}

  void normalize(NormalizedString& s) const override {
    const std::string& in = s.get();
    std::string out;
    std::vector<std::pair<uint32_t, uint32_t>> al;
    out.reserve(in.size() + 8);
    al.reserve(in.size() + 8);
    size_t pos = 0;
    auto prefix = [&](size_t at, std::string_view& norm) -> size_t {
      std::string_view rest(in.data() + at, in.size() - at);
      if (!map_.empty()) {
        if (auto m = map_.longest(rest)) {
          norm = m->second;
          return m->first;
        }
      }
      size_t n = uni::utf8_len(static_cast<unsigned char>(rest[0]));
      norm = rest.substr(0, n);
      return n;
    };
    if (remove_extra_) {
      while (pos < in.size()) {
        std::string_view norm;
        size_t n = prefix(pos, norm);
        if (norm != " ") break;
        pos += n;
      }
    }
    if (pos >= in.size()) {
      s.set_normalized(std::string(), {});
      return;
    }
    const std::string_view space = escape_ ? std::string_view("\xE2\x96\x81") : std::string_view(" ");
    if (dummy_) {
      // Aligned with the first consumed chunk (like HF's Prepend normalizer).
      std::string_view norm;
      size_t n = prefix(pos, norm);
      for (char c : space) {
        out += c;
        al.push_back({static_cast<uint32_t>(pos), static_cast<uint32_t>(pos + n)});
      }
    }
    bool is_prev_space = remove_extra_;
    while (pos < in.size()) {
      std::string_view sp;
      size_t n = prefix(pos, sp);
      while (is_prev_space && !sp.empty() && sp[0] == ' ') sp.remove_prefix(1);
      if (!sp.empty()) {
        for (char c : sp) {
          if (escape_ && c == ' ') {
            for (char e : space) {
              out += e;
              al.push_back({static_cast<uint32_t>(pos), static_cast<uint32_t>(pos + n)});
            }
          } else {
            out += c;
            al.push_back({static_cast<uint32_t>(pos), static_cast<uint32_t>(pos + n)});
          }
        }
        is_prev_space = sp.back() == ' ';
      }
      pos += n;
      if (!remove_extra_) is_prev_space = false;
    }
    if (remove_extra_) {
      while (out.size() >= space.size() && std::string_view(out).substr(out.size() - space.size()) == space) {
        out.resize(out.size() - space.size());
        al.resize(out.size());
      }
    }
    // Chunks whose replacement is not valid UTF-8 on its own cannot occur in well-formed maps.
    s.set_normalized(std::move(out), al);
  }
  json to_json() const override {
    // HF has no exact equivalent; write what HF's SentencePiece converters write.
    json arr = json::array();
    if (!map_.empty())
      arr.push_back(json{{"type", "Precompiled"}, {"precompiled_charsmap", base64_encode(map_.blob())}});
    if (remove_extra_)
      arr.push_back(json{{"type", "Replace"}, {"pattern", pattern_to_json(" {2,}", true)}, {"content", " "}});
    if (dummy_) arr.push_back(json{{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}});
    if (escape_) arr.push_back(json{{"type", "Replace"}, {"pattern", pattern_to_json(" ", false)}, {"content", "\xE2\x96\x81"}});
    return json{{"type", "Sequence"}, {"normalizers", arr}};
  }

 private:
  CharsMap map_;
  bool dummy_, remove_extra_, escape_;
};

}  // namespace


NormalizerPtr make_precompiled(std::string charsmap) { return std::make_shared<Precompiled>(std::move(charsmap)); }
NormalizerPtr make_spm_normalizer(std::string charsmap, bool add_dummy_prefix, bool remove_extra_whitespaces,
                                  bool escape_whitespaces) {
  return std::make_shared<SpmNormalizer>(std::move(charsmap), add_dummy_prefix, remove_extra_whitespaces,
                                         escape_whitespaces);
}
NormalizerPtr make_sequence_normalizer(std::vector<NormalizerPtr> items) {
  return std::make_shared<Sequence>(std::move(items));
}
NormalizerPtr make_prepend(std::string prepend) { return std::make_shared<Prepend>(std::move(prepend)); }
NormalizerPtr make_replace(std::string pattern, bool is_regex, std::string content) {
  return std::make_shared<Replace>(std::move(pattern), is_regex, std::move(content));
}

NormalizerPtr normalizer_from_json(const json& j) {
  if (j.is_null()) return nullptr;
  FOUNDRY_CHECK_AS(ValueError, j.is_object(), "tokenizer.json: normalizer must be an object");
  std::string type = json_string(j, "type", "normalizer");
  if (type == "NFC") return std::make_shared<UnicodeNorm>(uni::NormForm::NFC, "NFC");
  if (type == "NFD") return std::make_shared<UnicodeNorm>(uni::NormForm::NFD, "NFD");
  if (type == "NFKC") return std::make_shared<UnicodeNorm>(uni::NormForm::NFKC, "NFKC");
  if (type == "NFKD") return std::make_shared<UnicodeNorm>(uni::NormForm::NFKD, "NFKD");
  if (type == "Lowercase") return std::make_shared<Lowercase>();
  if (type == "StripAccents") return std::make_shared<StripAccents>();
  if (type == "Nmt") return std::make_shared<Nmt>();
  if (type == "ByteLevel") return std::make_shared<ByteLevelNorm>();
  if (type == "Strip")
    return std::make_shared<Strip>(j.value("strip_left", true), j.value("strip_right", true));
  if (type == "Prepend") return std::make_shared<Prepend>(json_string(j, "prepend", "Prepend normalizer"));
  if (type == "Replace") {
    bool is_regex;
    std::string text;
    json_pattern(json_field(j, "pattern", "Replace normalizer"), is_regex, text, "Replace normalizer");
    return std::make_shared<Replace>(text, is_regex, json_string(j, "content", "Replace normalizer"));
  }
  if (type == "BertNormalizer") {
    std::optional<bool> strip;
    if (j.contains("strip_accents") && !j["strip_accents"].is_null()) strip = j["strip_accents"].get<bool>();
    return std::make_shared<BertNormalizer>(j.value("clean_text", true), j.value("handle_chinese_chars", true), strip,
                                            j.value("lowercase", true));
  }
  if (type == "Precompiled") {
    const json& cm = json_field(j, "precompiled_charsmap", "Precompiled normalizer");
    std::string blob;
    if (cm.is_string()) {
      try {
        blob = base64_decode(cm.get<std::string>());
      } catch (const ValueError& e) {
        raise<ValueError>("tokenizer: precompiled_charsmap: {}", e.what());
      }
    } else if (cm.is_array()) {
      for (auto& b : cm) blob += static_cast<char>(b.get<int>());
    } else if (!cm.is_null()) {
      raise<ValueError>("tokenizer.json: Precompiled normalizer has a bad precompiled_charsmap");
    }
    return std::make_shared<Precompiled>(std::move(blob));
  }
  if (type == "Sequence") {
    std::vector<NormalizerPtr> items;
    for (auto& n : json_field(j, "normalizers", "Sequence normalizer")) {
      auto p = normalizer_from_json(n);
      if (p) items.push_back(p);
    }
    return std::make_shared<Sequence>(std::move(items));
  }
  raise<ValueError>("tokenizer.json: unknown normalizer type '{}'", type);
}

}  // namespace foundry::text
