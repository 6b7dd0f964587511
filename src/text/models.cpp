// WordPiece and WordLevel models (HF models/wordpiece, models/wordlevel), and the model factory.
#include <algorithm>

#include "text/components.h"
#include "text/model_cache.h"

namespace foundry::text {

ModelPtr bpe_from_json(const json& j);
ModelPtr unigram_from_json(const json& j);

namespace {

using VocabList = std::vector<std::pair<std::string, uint32_t>>;

class VocabModel : public Model {
 public:
  explicit VocabModel(const VocabList& vocab) {
    uint32_t max_id = 0;
    for (auto& [t, id] : vocab) max_id = std::max(max_id, id);
    if (static_cast<size_t>(max_id) > 16 * vocab.size() + 4096)
      raise<ValueError>("tokenizer: vocabulary ids are too sparse (max id {} for {} tokens)", max_id, vocab.size());
    if (!vocab.empty()) vocab_r_.resize(static_cast<size_t>(max_id) + 1);
    has_.assign(vocab_r_.size(), false);
    for (auto& [t, id] : vocab) {
      vocab_[t] = id;
      vocab_r_[id] = t;
      has_[id] = true;
    }
  }
  std::optional<uint32_t> token_to_id(std::string_view t) const override {
    auto it = vocab_.find(t);
    if (it == vocab_.end()) return std::nullopt;
    return it->second;
  }
  std::optional<std::string> id_to_token(uint32_t id) const override {
    if (id < vocab_r_.size() && has_[id]) return vocab_r_[id];
    return std::nullopt;
  }
  size_t vocab_size() const override { return vocab_.size(); }
  std::unordered_map<std::string, uint32_t> get_vocab() const override { return {vocab_.begin(), vocab_.end()}; }

 protected:
  json vocab_json() const {
    std::vector<std::pair<uint32_t, const std::string*>> order;
    for (auto& [t, id] : vocab_) order.emplace_back(id, &t);
    std::sort(order.begin(), order.end(), [](auto& a, auto& b) { return a.first < b.first || (a.first == b.first && *a.second < *b.second); });
    json v = json::object();
    for (auto& [id, t] : order) v[*t] = id;
    return v;
  }
  StringMap<uint32_t> vocab_;
  std::vector<std::string> vocab_r_;
  std::vector<bool> has_;
};

class WordPiece final : public VocabModel {
 public:
  WordPiece(const VocabList& vocab, std::string unk, std::string prefix, size_t max_chars)
      : VocabModel(vocab), unk_(std::move(unk)), prefix_(std::move(prefix)), max_chars_(max_chars) {}

  void tokenize(std::string_view s, std::vector<Token>& out) const override {
    if (uni::char_count(s) > max_chars_) {
      out.push_back(Token{unk_id(), unk_, {0, s.size()}});
      return;
    }
    size_t first = out.size();
    size_t start = 0;
    std::string buf;
    while (start < s.size()) {
      size_t end = s.size();
      bool found = false;
      while (start < end) {
        std::string_view sub = s.substr(start, end - start);
        std::string_view key = sub;
        if (start > 0) {
          buf.assign(prefix_);
          buf.append(sub);
          key = buf;
        }
        auto it = vocab_.find(key);
        if (it != vocab_.end()) {
          out.push_back(Token{it->second, std::string(key), {start, end}});
          found = true;
          break;
        }
        // Step back one char (of the candidate, whose last char is the substring's last char).
        size_t e = end - 1;
        while (e > start && (static_cast<unsigned char>(s[e]) & 0xC0) == 0x80) --e;
        end = e;
      }
      if (!found) {
        out.resize(first);
        out.push_back(Token{unk_id(), unk_, {0, s.size()}});
        return;
      }
      start = end;
    }
  }
  json to_json() const override {
    return json{{"type", "WordPiece"}, {"unk_token", unk_}, {"continuing_subword_prefix", prefix_},
                {"max_input_chars_per_word", max_chars_}, {"vocab", vocab_json()}};
  }

 private:
  uint32_t unk_id() const {
    auto it = vocab_.find(unk_);
    if (it == vocab_.end()) raise<ValueError>("tokenizer: WordPiece unk_token '{}' is not in the vocabulary", unk_);
    return it->second;
  }
  std::string unk_, prefix_;
  size_t max_chars_;
};

class WordLevel final : public VocabModel {
 public:
  WordLevel(const VocabList& vocab, std::string unk) : VocabModel(vocab), unk_(std::move(unk)) {}
  void tokenize(std::string_view s, std::vector<Token>& out) const override {
    auto it = vocab_.find(s);
    if (it != vocab_.end()) {
      out.push_back(Token{it->second, std::string(s), {0, s.size()}});
      return;
    }
    auto u = vocab_.find(unk_);
    if (u == vocab_.end()) raise<ValueError>("tokenizer: WordLevel unk_token '{}' is not in the vocabulary", unk_);
    out.push_back(Token{u->second, unk_, {0, s.size()}});
  }
  json to_json() const override { return json{{"type", "WordLevel"}, {"vocab", vocab_json()}, {"unk_token", unk_}}; }

 private:
  std::string unk_;
};

VocabList vocab_from_json(const json& j, const char* what) {
  const json& v = json_field(j, "vocab", what);
  FOUNDRY_CHECK_AS(ValueError, v.is_object(), "tokenizer.json: {} vocab must be an object", what);
  VocabList out;
  out.reserve(v.size());
  for (auto it = v.begin(); it != v.end(); ++it) {
    FOUNDRY_CHECK_AS(ValueError, it.value().is_number_integer(), "tokenizer.json: {} id of '{}' must be an integer",
                     what, it.key());
    out.emplace_back(it.key(), it.value().get<uint32_t>());
  }
  return out;
}

}  // namespace

ModelPtr make_wordpiece(const std::vector<std::pair<std::string, uint32_t>>& vocab, std::string unk,
                        std::string prefix, size_t max_chars) {
  return std::make_shared<WordPiece>(vocab, std::move(unk), std::move(prefix), max_chars);
}

ModelPtr model_from_json(const json& j) {
  FOUNDRY_CHECK_AS(ValueError, j.is_object(), "tokenizer.json: model must be an object");
  std::string type;
  if (j.contains("type")) {
    type = json_string(j, "type", "model");
  } else if (j.contains("merges")) {
    type = "BPE";  // old files omit the type
  } else if (j.contains("vocab") && j["vocab"].is_array()) {
    type = "Unigram";
  } else if (j.contains("continuing_subword_prefix")) {
    type = "WordPiece";
  } else {
    type = "WordLevel";
  }
  if (type == "BPE") return bpe_from_json(j);
  if (type == "Unigram") return unigram_from_json(j);
  if (type == "WordPiece")
    return std::make_shared<WordPiece>(vocab_from_json(j, "WordPiece model"), j.value("unk_token", std::string("[UNK]")),
                                       j.value("continuing_subword_prefix", std::string("##")),
                                       j.value("max_input_chars_per_word", size_t{100}));
  if (type == "WordLevel")
    return std::make_shared<WordLevel>(vocab_from_json(j, "WordLevel model"), j.value("unk_token", std::string("<unk>")));
  raise<ValueError>("tokenizer.json: unknown model type '{}'", type);
}

}  // namespace foundry::text
