// Pre-tokenizers (HF tokenizers' pre_tokenizers/*.rs): ByteLevel, Split, Whitespace,
// WhitespaceSplit, Punctuation, Digits, Metaspace, CharDelimiterSplit, BertPreTokenizer,
// UnicodeScripts, Sequence.
#include <array>

#include "text/components.h"

namespace foundry::text {

// GPT-2's pre-tokenization pattern (HF pre_tokenizers/byte_level.rs).
const char* const kGpt2Pattern = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

namespace {

bool is_bert_punc(char32_t c) {
  if (c < 0x80) return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126);
  return uni::is_punctuation(c);
}

class ByteLevelPre final : public PreTokenizer {
 public:
  ByteLevelPre(bool add_prefix_space, bool trim_offsets, bool use_regex)
      : add_prefix_space_(add_prefix_space), trim_offsets_(trim_offsets), use_regex_(use_regex) {
    static std::shared_ptr<const Regex> re = std::make_shared<Regex>(kGpt2Pattern);
    pattern_ = Pattern::re(re);
  }
  std::shared_ptr<const Regex> byte_level_split_regex() const override {
    return use_regex_ && !add_prefix_space_ ? pattern_.regex : nullptr;
  }
  /// Plain byte mapping (no regex, no prefix space): the second half of a Split+ByteLevel pair.
  bool is_plain_byte_map() const { return !use_regex_ && !add_prefix_space_; }
  void pre_tokenize(PreTokenizedString& pts) const override {
    pts.split([&](size_t, NormalizedString&& n, std::vector<NormalizedString>& out) {
      if (add_prefix_space_ && (n.get().empty() || n.get()[0] != ' ')) n.prepend(" ");
      if (use_regex_) {
        out = n.split(pattern_, SplitBehavior::Isolated);
      } else {
        out.push_back(std::move(n));
      }
    });
    static const std::array<std::string, 256> table = [] {
      std::array<std::string, 256> t;
      for (int b = 0; b < 256; ++b) t[b] = byte_to_unicode(static_cast<uint8_t>(b));
      return t;
    }();
    for (auto& sp : pts.splits)
      if (!sp.tokens) sp.normalized.map_bytes(table.data());
  }
  json to_json() const override {
    return json{{"type", "ByteLevel"}, {"add_prefix_space", add_prefix_space_}, {"trim_offsets", trim_offsets_},
                {"use_regex", use_regex_}};
  }

 private:
  bool add_prefix_space_, trim_offsets_, use_regex_;
  Pattern pattern_;
};

class SplitPre final : public PreTokenizer {
 public:
  SplitPre(std::string text, bool is_regex, SplitBehavior behavior, bool invert)
      : text_(std::move(text)), is_regex_(is_regex), behavior_(behavior), invert_(invert) {
    pattern_ = is_regex_ ? Pattern::re(std::make_shared<Regex>(text_)) : Pattern::literal(text_);
    pattern_.invert = invert_;
  }
  void pre_tokenize(PreTokenizedString& pts) const override {
    pts.split([&](size_t, NormalizedString&& n, std::vector<NormalizedString>& out) {
      out = n.split(pattern_, behavior_);
    });
  }
  /// The regex when this splits by a regex keeping matches and gaps (Isolated, not inverted).
  std::shared_ptr<const Regex> isolated_regex() const {
    return is_regex_ && behavior_ == SplitBehavior::Isolated && !invert_ ? pattern_.regex : nullptr;
  }
  json to_json() const override {
    return json{{"type", "Split"}, {"pattern", pattern_to_json(text_, is_regex_)},
                {"behavior", behavior_to_string(behavior_)}, {"invert", invert_}};
  }

 private:
  std::string text_;
  bool is_regex_;
  SplitBehavior behavior_;
  bool invert_;
  Pattern pattern_;
};

// Splits with a fixed Pattern and behavior; used for several simple pre-tokenizers.
class PatternPre final : public PreTokenizer {
 public:
  PatternPre(Pattern p, SplitBehavior b, json j) : pattern_(std::move(p)), behavior_(b), json_(std::move(j)) {}
  void pre_tokenize(PreTokenizedString& pts) const override {
    pts.split([&](size_t, NormalizedString&& n, std::vector<NormalizedString>& out) {
      out = n.split(pattern_, behavior_);
    });
  }
  json to_json() const override { return json_; }

 private:
  Pattern pattern_;
  SplitBehavior behavior_;
  json json_;
};

class BertPre final : public PreTokenizer {
 public:
  void pre_tokenize(PreTokenizedString& pts) const override {
    static const Pattern ws = Pattern::predicate(uni::is_whitespace);
    static const Pattern punc = Pattern::predicate(is_bert_punc);
    pts.split([&](size_t, NormalizedString&& n, std::vector<NormalizedString>& out) {
      out = n.split(ws, SplitBehavior::Removed);
    });
    pts.split([&](size_t, NormalizedString&& n, std::vector<NormalizedString>& out) {
      out = n.split(punc, SplitBehavior::Isolated);
    });
  }
  json to_json() const override { return json{{"type", "BertPreTokenizer"}}; }
};

class Metaspace final : public PreTokenizer {
 public:
  Metaspace(char32_t replacement, std::string scheme, bool split)
      : replacement_(replacement), rep_(uni::to_utf8(replacement)), scheme_(std::move(scheme)), split_(split) {
    FOUNDRY_CHECK_AS(ValueError, scheme_ == "always" || scheme_ == "first" || scheme_ == "never",
                     "tokenizer.json: Metaspace prepend_scheme must be always, first or never, not '{}'", scheme_);
  }
  void pre_tokenize(PreTokenizedString& pts) const override {
    const Pattern space = Pattern::character(U' ');
    const Pattern rep = Pattern::character(replacement_);
    pts.split([&](size_t, NormalizedString&& n, std::vector<NormalizedString>& out) {
      n.replace(space, rep_);
      bool starts = n.get().compare(0, rep_.size(), rep_) == 0;
      if (scheme_ == "always") {
        if (!starts) n.prepend(rep_);
      } else if (scheme_ == "first") {
        if (!starts && n.offsets_original().first == 0) n.prepend(rep_);
      }
      if (split_) {
        out = n.split(rep, SplitBehavior::MergedWithNext);
      } else {
        out.push_back(std::move(n));
      }
    });
  }
  json to_json() const override {
    return json{{"type", "Metaspace"}, {"replacement", rep_}, {"prepend_scheme", scheme_}, {"split", split_}};
  }

 private:
  char32_t replacement_;
  std::string rep_;
  std::string scheme_;
  bool split_;
};

class UnicodeScripts final : public PreTokenizer {
 public:
  void pre_tokenize(PreTokenizedString& pts) const override {
    pts.split([&](size_t, NormalizedString&& n, std::vector<NormalizedString>& out) {
      const std::string& s = n.get();
      std::vector<size_t> ranges;
      int last = -100;  // none
      size_t i = 0;
      while (i < s.size()) {
        size_t b = i;
        char32_t c = uni::decode(s, i);
        int sc = fixed_script(c);
        if (sc != kAny && last != kAny && last != sc) ranges.push_back(b);
        if (sc != kAny) last = sc;
      }
      ranges.push_back(s.size());
      for (size_t k = 0; k + 1 < ranges.size(); ++k) {
        auto p = n.slice(ranges[k], ranges[k + 1]);
        FOUNDRY_CHECK(p.has_value(), "tokenizer: UnicodeScripts bad split");
        out.push_back(std::move(*p));
      }
    });
  }
  json to_json() const override { return json{{"type", "UnicodeScripts"}}; }

 private:
  static constexpr int kAny = -1;
  static int fixed_script(char32_t c) {
    if (c == 0x30FC) return han();
    if (c == U' ') return kAny;
    int s = uni::script_of(c);
    static const int hira = script_id("Hiragana"), kata = script_id("Katakana");
    if (s == hira || s == kata) return han();
    return s;
  }
  static int han() {
    static const int h = script_id("Han");
    return h;
  }
  static int script_id(const char* name) {
    // Scripts are identified by a sample character.
    if (std::string(name) == "Han") return uni::script_of(0x4E00);
    if (std::string(name) == "Hiragana") return uni::script_of(0x3042);
    return uni::script_of(0x30A2);
  }
};

// Splits into pieces of `length` chars (HF pre_tokenizers/fixed_length.rs).
class FixedLength final : public PreTokenizer {
 public:
  explicit FixedLength(size_t length) : length_(length) {
    FOUNDRY_CHECK_AS(ValueError, length_ > 0, "tokenizer.json: FixedLength length must be positive");
  }
  void pre_tokenize(PreTokenizedString& pts) const override {
    pts.split([&](size_t, NormalizedString&& n, std::vector<NormalizedString>& out) {
      const std::string& s = n.get();
      size_t start = 0, i = 0, chars = 0;
      while (i < s.size()) {
        i += uni::utf8_len(static_cast<unsigned char>(s[i]));
        if (++chars == length_ || i >= s.size()) {
          auto p = n.slice(start, std::min(i, s.size()));
          FOUNDRY_CHECK(p.has_value(), "tokenizer: FixedLength bad split");
          out.push_back(std::move(*p));
          start = i;
          chars = 0;
        }
      }
    });
  }
  json to_json() const override { return json{{"type", "FixedLength"}, {"length", length_}}; }

 private:
  size_t length_;
};

class SequencePre final : public PreTokenizer {
 public:
  explicit SequencePre(std::vector<PreTokenizerPtr> items) : items_(std::move(items)) {}
  std::shared_ptr<const Regex> byte_level_split_regex() const override {
    if (items_.size() == 1) return items_[0]->byte_level_split_regex();
    if (items_.size() != 2) return nullptr;
    auto* split = dynamic_cast<const SplitPre*>(items_[0].get());
    auto* bl = dynamic_cast<const ByteLevelPre*>(items_[1].get());
    if (!split || !bl || !bl->is_plain_byte_map()) return nullptr;
    return split->isolated_regex();
  }
  void pre_tokenize(PreTokenizedString& pts) const override {
    for (auto& p : items_) p->pre_tokenize(pts);
  }
  json to_json() const override {
    json arr = json::array();
    for (auto& p : items_) arr.push_back(p->to_json());
    return json{{"type", "Sequence"}, {"pretokenizers", arr}};
  }

 private:
  std::vector<PreTokenizerPtr> items_;
};

char32_t single_char(const std::string& s, const char* what) {
  size_t i = 0;
  FOUNDRY_CHECK_AS(ValueError, !s.empty(), "tokenizer.json: {} must be one character", what);
  char32_t c = uni::decode(s, i);
  FOUNDRY_CHECK_AS(ValueError, i == s.size(), "tokenizer.json: {} must be one character, got '{}'", what, s);
  return c;
}

}  // namespace

PreTokenizerPtr make_byte_level_pre(bool add_prefix_space, bool trim_offsets, bool use_regex) {
  return std::make_shared<ByteLevelPre>(add_prefix_space, trim_offsets, use_regex);
}
PreTokenizerPtr make_split(std::string pattern, bool is_regex, SplitBehavior behavior, bool invert) {
  return std::make_shared<SplitPre>(std::move(pattern), is_regex, behavior, invert);
}
PreTokenizerPtr make_metaspace(char32_t replacement, std::string prepend_scheme, bool split) {
  return std::make_shared<Metaspace>(replacement, std::move(prepend_scheme), split);
}
PreTokenizerPtr make_sequence_pre(std::vector<PreTokenizerPtr> items) {
  return std::make_shared<SequencePre>(std::move(items));
}

std::string metaspace_scheme_from_json(const json& j) {
  if (j.contains("prepend_scheme") && j["prepend_scheme"].is_string()) return j["prepend_scheme"].get<std::string>();
  return j.value("add_prefix_space", true) ? "always" : "never";
}

PreTokenizerPtr pre_tokenizer_from_json(const json& j) {
  if (j.is_null()) return nullptr;
  FOUNDRY_CHECK_AS(ValueError, j.is_object(), "tokenizer.json: pre_tokenizer must be an object");
  std::string type = json_string(j, "type", "pre_tokenizer");
  if (type == "ByteLevel")
    return make_byte_level_pre(j.value("add_prefix_space", true), j.value("trim_offsets", true),
                               j.value("use_regex", true));
  if (type == "Split") {
    bool is_regex;
    std::string text;
    json_pattern(json_field(j, "pattern", "Split pre-tokenizer"), is_regex, text, "Split pre-tokenizer");
    return make_split(text, is_regex, behavior_from_string(json_string(j, "behavior", "Split pre-tokenizer")),
                      j.value("invert", false));
  }
  if (type == "Whitespace") {
    static std::shared_ptr<const Regex> re = std::make_shared<Regex>("\\w+|[^\\w\\s]+");
    Pattern p = Pattern::re(re);
    p.invert = true;
    return std::make_shared<PatternPre>(p, SplitBehavior::Removed, json{{"type", "Whitespace"}});
  }
  if (type == "WhitespaceSplit")
    return std::make_shared<PatternPre>(Pattern::predicate(uni::is_whitespace), SplitBehavior::Removed,
                                        json{{"type", "WhitespaceSplit"}});
  if (type == "Punctuation") {
    std::string b = j.value("behavior", std::string("Isolated"));
    return std::make_shared<PatternPre>(Pattern::predicate(is_bert_punc), behavior_from_string(b),
                                        json{{"type", "Punctuation"}, {"behavior", b}});
  }
  if (type == "Digits") {
    bool ind = j.value("individual_digits", false);
    return std::make_shared<PatternPre>(Pattern::predicate(uni::is_numeric),
                                        ind ? SplitBehavior::Isolated : SplitBehavior::Contiguous,
                                        json{{"type", "Digits"}, {"individual_digits", ind}});
  }
  if (type == "CharDelimiterSplit") {
    std::string d = json_string(j, "delimiter", "CharDelimiterSplit");
    return std::make_shared<PatternPre>(Pattern::character(single_char(d, "CharDelimiterSplit delimiter")),
                                        SplitBehavior::Removed, json{{"type", "CharDelimiterSplit"}, {"delimiter", d}});
  }
  if (type == "BertPreTokenizer") return std::make_shared<BertPre>();
  if (type == "Metaspace") {
    std::string rep = j.contains("replacement") ? json_string(j, "replacement", "Metaspace") : "\xE2\x96\x81";
    return make_metaspace(single_char(rep, "Metaspace replacement"), metaspace_scheme_from_json(j),
                          j.value("split", true));
  }
  if (type == "UnicodeScripts") return std::make_shared<UnicodeScripts>();
  if (type == "FixedLength") return std::make_shared<FixedLength>(j.value("length", size_t{5}));
  if (type == "Sequence") {
    std::vector<PreTokenizerPtr> items;
    for (auto& p : json_field(j, "pretokenizers", "Sequence pre-tokenizer")) {
      auto q = pre_tokenizer_from_json(p);
      if (q) items.push_back(q);
    }
    return make_sequence_pre(std::move(items));
  }
  raise<ValueError>("tokenizer.json: unknown pre_tokenizer type '{}'", type);
}

}  // namespace foundry::text
