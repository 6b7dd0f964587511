// Decoders (HF decoders/*.rs): ByteLevel, Metaspace, WordPiece, BPEDecoder, ByteFallback, Fuse,
// Strip, Replace, CTC, Sequence. Each turns the list of token strings into a new list; the
// tokenizer joins the final list.
#include "text/components.h"

namespace foundry::text {
namespace {

std::string replace_all(std::string s, std::string_view from, std::string_view to) {
  if (from.empty()) return s;
  std::string out;
  size_t pos = 0;
  while (true) {
    size_t f = s.find(from, pos);
    if (f == std::string::npos) break;
    out.append(s, pos, f - pos);
    out.append(to);
    pos = f + from.size();
  }
  out.append(s, pos, std::string::npos);
  return out;
}

std::string wordpiece_cleanup(std::string s) {
  s = replace_all(std::move(s), " .", ".");
  s = replace_all(std::move(s), " ?", "?");
  s = replace_all(std::move(s), " !", "!");
  s = replace_all(std::move(s), " ,", ",");
  s = replace_all(std::move(s), " ' ", "'");
  s = replace_all(std::move(s), " n't", "n't");
  s = replace_all(std::move(s), " 'm", "'m");
  s = replace_all(std::move(s), " do not", " don't");
  s = replace_all(std::move(s), " 's", "'s");
  s = replace_all(std::move(s), " 've", "'ve");
  s = replace_all(std::move(s), " 're", "'re");
  return s;
}

class ByteLevelDec final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (auto& t : tokens) {
      std::string tb;
      bool ok = true;
      size_t i = 0;
      while (i < t.size()) {
        int b = unicode_to_byte(uni::decode(t, i));
        if (b < 0) {
          ok = false;
          break;
        }
        tb += static_cast<char>(b);
      }
      bytes += ok ? tb : t;
    }
    tokens.assign(1, uni::sanitize_utf8(bytes));
  }
  json to_json() const override {
    return json{{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  }
};

class MetaspaceDec final : public Decoder {
 public:
  MetaspaceDec(char32_t rep, std::string scheme, bool split) : rep_(rep), scheme_(std::move(scheme)), split_(split) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string out;
      const std::string& t = tokens[i];
      size_t k = 0;
      while (k < t.size()) {
        char32_t c = uni::decode(t, k);
        if (c == rep_) {
          if (!(i == 0 && scheme_ != "never")) out += ' ';
        } else {
          uni::append_utf8(out, c);
        }
      }
      tokens[i] = std::move(out);
    }
  }
  json to_json() const override {
    return json{{"type", "Metaspace"}, {"replacement", uni::to_utf8(rep_)}, {"prepend_scheme", scheme_}, {"split", split_}};
  }

 private:
  char32_t rep_;
  std::string scheme_;
  bool split_;
};

class WordPieceDec final : public Decoder {
 public:
  WordPieceDec(std::string prefix, bool cleanup) : prefix_(std::move(prefix)), cleanup_(cleanup) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string& t = tokens[i];
      if (i != 0) {
        if (t.compare(0, prefix_.size(), prefix_) == 0) {
          // HF: token.replacen(prefix, "", 1) -- removes the first occurrence, i.e. the prefix.
          t.erase(0, prefix_.size());
        } else {
          t = " " + t;
        }
      }
      if (cleanup_) t = wordpiece_cleanup(std::move(t));
    }
  }
  json to_json() const override { return json{{"type", "WordPiece"}, {"prefix", prefix_}, {"cleanup", cleanup_}}; }

 private:
  std::string prefix_;
  bool cleanup_;
};

class BpeDec final : public Decoder {
 public:
  explicit BpeDec(std::string suffix) : suffix_(std::move(suffix)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i)
      tokens[i] = replace_all(std::move(tokens[i]), suffix_, i + 1 == tokens.size() ? "" : " ");
  }
  json to_json() const override { return json{{"type", "BPEDecoder"}, {"suffix", suffix_}}; }

 private:
  std::string suffix_;
};

class ByteFallbackDec final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string pending;
    auto flush = [&]() {
      if (pending.empty()) return;
      if (uni::is_valid_utf8(pending)) {
        out.push_back(pending);
      } else {
        for (size_t k = 0; k < pending.size(); ++k) out.push_back("\xEF\xBF\xBD");
      }
      pending.clear();
    };
    for (auto& t : tokens) {
      int byte = -1;
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>') {
        auto hex = [](char c) -> int {
          if (c >= '0' && c <= '9') return c - '0';
          if (c >= 'a' && c <= 'f') return c - 'a' + 10;
          if (c >= 'A' && c <= 'F') return c - 'A' + 10;
          return -1;
        };
        int h = hex(t[3]), l = hex(t[4]);
        if (h >= 0 && l >= 0) byte = h * 16 + l;
      }
      if (byte >= 0) {
        pending += static_cast<char>(byte);
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    tokens = std::move(out);
  }
  json to_json() const override { return json{{"type", "ByteFallback"}}; }
};

class FuseDec final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string s;
    for (auto& t : tokens) s += t;
    tokens.assign(1, std::move(s));
  }
  json to_json() const override { return json{{"type", "Fuse"}}; }
};

class StripDec final : public Decoder {
 public:
  StripDec(char32_t content, size_t start, size_t stop) : content_(content), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (auto& t : tokens) {
      std::u32string chars = uni::to_u32(t);
      size_t start_cut = 0;
      for (size_t i = 0; i < std::min(start_, chars.size()); ++i) {
        if (chars[i] == content_) start_cut = i + 1;
        else break;
      }
      size_t stop_cut = chars.size();
      for (size_t i = 0; i < stop_ && i < chars.size(); ++i) {
        size_t idx = chars.size() - i - 1;
        if (chars[idx] == content_) stop_cut = idx;
        else break;
      }
      if (stop_cut < start_cut) stop_cut = start_cut;
      t = uni::from_u32(std::u32string_view(chars).substr(start_cut, stop_cut - start_cut));
    }
  }
  json to_json() const override {
    return json{{"type", "Strip"}, {"content", uni::to_utf8(content_)}, {"start", start_}, {"stop", stop_}};
  }

 private:
  char32_t content_;
  size_t start_, stop_;
};

class ReplaceDec final : public Decoder {
 public:
  ReplaceDec(std::string text, bool is_regex, std::string content)
      : text_(std::move(text)), is_regex_(is_regex), content_(std::move(content)) {
    if (is_regex_) regex_ = std::make_shared<Regex>(text_);
  }
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (auto& t : tokens) {
      if (!is_regex_) {
        t = replace_all(std::move(t), text_, content_);
      } else {
        std::vector<Offsets> ms;
        regex_->find_all(t, ms);
        std::string out;
        size_t prev = 0;
        for (auto [a, b] : ms) {
          out.append(t, prev, a - prev);
          out += content_;
          prev = b;
        }
        out.append(t, prev, std::string::npos);
        t = std::move(out);
      }
    }
  }
  json to_json() const override {
    return json{{"type", "Replace"}, {"pattern", pattern_to_json(text_, is_regex_)}, {"content", content_}};
  }

 private:
  std::string text_;
  bool is_regex_;
  std::string content_;
  std::shared_ptr<const Regex> regex_;
};

class CtcDec final : public Decoder {
 public:
  CtcDec(std::string pad, std::string delim, bool cleanup) : pad_(std::move(pad)), delim_(std::move(delim)), cleanup_(cleanup) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0 && tokens[i] == tokens[i - 1]) continue;
      std::string r = replace_all(tokens[i], pad_, "");
      if (cleanup_) r = replace_all(wordpiece_cleanup(std::move(r)), delim_, " ");
      if (!r.empty()) out.push_back(std::move(r));
    }
    tokens = std::move(out);
  }
  json to_json() const override {
    return json{{"type", "CTC"}, {"pad_token", pad_}, {"word_delimiter_token", delim_}, {"cleanup", cleanup_}};
  }

 private:
  std::string pad_, delim_;
  bool cleanup_;
};

class SequenceDec final : public Decoder {
 public:
  explicit SequenceDec(std::vector<DecoderPtr> items) : items_(std::move(items)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (auto& d : items_) d->decode_chain(tokens);
  }
  json to_json() const override {
    json arr = json::array();
    for (auto& d : items_) arr.push_back(d->to_json());
    return json{{"type", "Sequence"}, {"decoders", arr}};
  }

 private:
  std::vector<DecoderPtr> items_;
};

char32_t one_char(const std::string& s, const char* what) {
  size_t i = 0;
  FOUNDRY_CHECK_AS(ValueError, !s.empty(), "tokenizer.json: {} must be one character", what);
  char32_t c = uni::decode(s, i);
  FOUNDRY_CHECK_AS(ValueError, i == s.size(), "tokenizer.json: {} must be one character", what);
  return c;
}

}  // namespace

std::string metaspace_scheme_from_json(const json& j);

DecoderPtr make_byte_level_decoder() { return std::make_shared<ByteLevelDec>(); }
DecoderPtr make_decoder_sequence(std::vector<DecoderPtr> items) { return std::make_shared<SequenceDec>(std::move(items)); }
DecoderPtr make_replace_decoder(std::string pattern, std::string content) {
  return std::make_shared<ReplaceDec>(std::move(pattern), false, std::move(content));
}
DecoderPtr make_byte_fallback_decoder() { return std::make_shared<ByteFallbackDec>(); }
DecoderPtr make_fuse_decoder() { return std::make_shared<FuseDec>(); }
DecoderPtr make_strip_decoder(char32_t content, size_t start, size_t stop) {
  return std::make_shared<StripDec>(content, start, stop);
}
DecoderPtr make_metaspace_decoder(char32_t replacement, std::string prepend_scheme, bool split) {
  return std::make_shared<MetaspaceDec>(replacement, std::move(prepend_scheme), split);
}

DecoderPtr decoder_from_json(const json& j) {
  if (j.is_null()) return nullptr;
  FOUNDRY_CHECK_AS(ValueError, j.is_object(), "tokenizer.json: decoder must be an object");
  std::string type = json_string(j, "type", "decoder");
  if (type == "ByteLevel") return std::make_shared<ByteLevelDec>();
  if (type == "Metaspace") {
    std::string rep = j.contains("replacement") ? json_string(j, "replacement", "Metaspace decoder") : "\xE2\x96\x81";
    return std::make_shared<MetaspaceDec>(one_char(rep, "Metaspace replacement"), metaspace_scheme_from_json(j),
                                          j.value("split", true));
  }
  if (type == "WordPiece")
    return std::make_shared<WordPieceDec>(j.value("prefix", std::string("##")), j.value("cleanup", true));
  if (type == "BPEDecoder") return std::make_shared<BpeDec>(j.value("suffix", std::string("</w>")));
  if (type == "ByteFallback") return std::make_shared<ByteFallbackDec>();
  if (type == "Fuse") return std::make_shared<FuseDec>();
  if (type == "Strip")
    return std::make_shared<StripDec>(one_char(json_string(j, "content", "Strip decoder"), "Strip content"),
                                      j.value("start", size_t{0}), j.value("stop", size_t{0}));
  if (type == "Replace") {
    bool is_regex;
    std::string text;
    json_pattern(json_field(j, "pattern", "Replace decoder"), is_regex, text, "Replace decoder");
    return std::make_shared<ReplaceDec>(text, is_regex, json_string(j, "content", "Replace decoder"));
  }
  if (type == "CTC")
    return std::make_shared<CtcDec>(j.value("pad_token", std::string("<pad>")),
                                    j.value("word_delimiter_token", std::string("|")), j.value("cleanup", true));
  if (type == "Sequence") {
    std::vector<DecoderPtr> items;
    for (auto& d : json_field(j, "decoders", "Sequence decoder")) {
      auto p = decoder_from_json(d);
      if (p) items.push_back(p);
    }
    return std::make_shared<SequenceDec>(std::move(items));
  }
  raise<ValueError>("tokenizer.json: unknown decoder type '{}'", type);
}

}  // namespace foundry::text
