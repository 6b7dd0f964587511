// Unigram model (HF models/unigram, SentencePiece unigram_model.cc): best segmentation by
// Viterbi over a trie of the pieces, unknown characters scored min_score - 10 and fused,
// byte_fallback to <0xXX> pieces.
#include <algorithm>
#include <cmath>
#include <limits>

#include "text/byte_trie.h"
#include "text/components.h"
#include "text/model_cache.h"

namespace foundry::text {
namespace {

constexpr uint32_t kNotInVocab = 0xFFFFFFFFu;

class Unigram final : public Model {
 public:
  Unigram(std::vector<std::pair<std::string, double>> vocab, std::optional<size_t> unk_id, bool byte_fallback,
          std::vector<bool> matchable = {}, std::optional<double> min_score = std::nullopt, bool unk_as_piece = false)
      : vocab_(std::move(vocab)), unk_id_(unk_id), byte_fallback_(byte_fallback), unk_as_piece_(unk_as_piece),
        serial_(next_model_serial()) {
    if (unk_id_) {
      FOUNDRY_CHECK_AS(ValueError, !vocab_.empty(), "tokenizer: Unigram vocabulary is empty but unk_id is set");
      FOUNDRY_CHECK_AS(ValueError, *unk_id_ < vocab_.size(), "tokenizer: Unigram unk_id {} is out of the vocabulary ({})",
                       *unk_id_, vocab_.size());
    }
    min_score_ = std::numeric_limits<double>::infinity();
    for (size_t id = 0; id < vocab_.size(); ++id) {
      ids_[vocab_[id].first] = static_cast<uint32_t>(id);
      min_score_ = std::min(min_score_, vocab_[id].second);
    }
    if (min_score) min_score_ = *min_score;
    // The trie maps each piece to its id in token_to_ids (the last duplicate wins, as in HF).
    for (auto& [piece, id] : ids_)
      if (matchable.empty() || matchable[id]) trie_.value_at(piece) = id;
    for (int b = 0; b < 256; ++b) {
      auto it = ids_.find(fmt::format("<0x{:02X}>", b));
      byte_ids_[b] = it == ids_.end() ? kNotInVocab : it->second;
    }
  }

  void tokenize(std::string_view s, std::vector<Token>& out) const override {
    if (s.empty()) return;
    ModelCache& cache = thread_cache(serial_);
    ModelCache::View pieces;
    std::vector<uint32_t> computed;
    if (!cache.find(s, pieces)) {
      encode(s, computed);
      if (s.size() < 256) cache.insert(s, computed);
      pieces = ModelCache::View{computed.data(), computed.size()};
    }
    size_t off = 0;
    for (size_t k = 0; k + 1 < pieces.size; k += 2) {
      uint32_t id = pieces[k];
      size_t len = pieces[k + 1];
      std::string_view str = s.substr(off, len);
      if (id == kNotInVocab) {
        auto it = ids_.find(str);
        if (it != ids_.end()) id = it->second;
      }
      if (id != kNotInVocab) {
        out.push_back(Token{id, std::string(str), {off, off + len}});
      } else {
        bool done = false;
        if (byte_fallback_) {
          bool all = true;
          for (unsigned char b : str) all &= byte_ids_[b] != kNotInVocab;
          if (all) {
            for (unsigned char b : str)
              out.push_back(Token{byte_ids_[b], fmt::format("<0x{:02X}>", b), {off, off + len}});
            done = true;
          }
        }
        if (!done) {
          if (!unk_id_) raise<ValueError>("tokenizer: Unigram met an unknown piece but unk_id is not set");
          // HF reports the unknown text itself; SentencePiece reports the unk piece.
          out.push_back(Token{static_cast<uint32_t>(*unk_id_), unk_as_piece_ ? vocab_[*unk_id_].first : std::string(str),
                              {off, off + len}});
        }
      }
      off += len;
    }
  }

  std::optional<uint32_t> token_to_id(std::string_view t) const override {
    auto it = ids_.find(t);
    if (it == ids_.end()) return std::nullopt;
    return it->second;
  }
  std::optional<std::string> id_to_token(uint32_t id) const override {
    if (id < vocab_.size()) return vocab_[id].first;
    return std::nullopt;
  }
  size_t vocab_size() const override { return vocab_.size(); }
  std::unordered_map<std::string, uint32_t> get_vocab() const override { return {ids_.begin(), ids_.end()}; }
  json to_json() const override {
    json v = json::array();
    for (auto& [p, sc] : vocab_) v.push_back(json::array({p, sc}));
    json j{{"type", "Unigram"}};
    j["unk_id"] = unk_id_ ? json(*unk_id_) : json(nullptr);
    j["vocab"] = std::move(v);
    j["byte_fallback"] = byte_fallback_;
    return j;
  }

 private:
  // HF encode_optimized; output [id or kNotInVocab, byte_len, ...] with unknown runs fused.
  void encode(std::string_view s, std::vector<uint32_t>& out) const {
    struct Node {
      uint32_t id = 0;
      double score = 0.0;
      long start = -1;
    };
    const double unk_score = min_score_ - 10.0;
    std::vector<Node> best(s.size() + 1);
    size_t pos = 0;
    while (pos < s.size()) {
      double here = best[pos].score;
      size_t mblen = std::min<size_t>(uni::utf8_len(static_cast<unsigned char>(s[pos])), s.size() - pos);
      bool single = false;
      trie_.each_prefix(s, pos, [&](size_t len, uint32_t id) {
        Node& t = best[pos + len];
        // SentencePiece (0.1.97) adds the score to the float path score in double precision,
        // compares with the float stored so far and stores the sum rounded to float; HF works
        // in double throughout. The rounding decides near-ties, so emulate it exactly.
        double cand = vocab_[id].second + here;
        if (t.start < 0 || cand > t.score) {
          t.score = unk_as_piece_ ? static_cast<double>(static_cast<float>(cand)) : cand;
          t.start = static_cast<long>(pos);
          t.id = id;
        }
        if (len == mblen) single = true;
      });
      if (!single) {
        Node& t = best[pos + mblen];
        double cand = unk_as_piece_ ? static_cast<double>(static_cast<float>(unk_score)) + here : unk_score + here;
        if (t.start < 0 || cand > t.score) {
          if (!unk_id_) raise<ValueError>("tokenizer: Unigram met an unknown character but unk_id is not set");
          t.score = unk_as_piece_ ? static_cast<double>(static_cast<float>(cand)) : cand;
          t.start = static_cast<long>(pos);
          t.id = static_cast<uint32_t>(*unk_id_);
        }
      }
      pos += mblen;
    }
    // Backtrack; fuse consecutive unknowns.
    std::vector<std::pair<uint32_t, uint32_t>> rev;
    size_t end = s.size();
    size_t unk_end = 0;
    bool in_unk = false;
    while (end > 0) {
      const Node& n = best[end];
      size_t start = static_cast<size_t>(n.start);
      if (unk_id_ && n.id == *unk_id_) {
        if (!in_unk) {
          in_unk = true;
          unk_end = end;
        }
      } else {
        if (in_unk) {
          rev.push_back({kNotInVocab, static_cast<uint32_t>(unk_end - end)});
          in_unk = false;
        }
        rev.push_back({n.id, static_cast<uint32_t>(end - start)});
      }
      end = start;
    }
    if (in_unk) rev.push_back({kNotInVocab, static_cast<uint32_t>(unk_end)});
    out.clear();
    for (size_t k = rev.size(); k-- > 0;) {
      out.push_back(rev[k].first);
      out.push_back(rev[k].second);
    }
  }

  std::vector<std::pair<std::string, double>> vocab_;
  StringMap<uint32_t> ids_;
  ByteTrie trie_;  // piece -> id
  double min_score_;
  std::optional<size_t> unk_id_;
  bool byte_fallback_;
  bool unk_as_piece_ = false;
  uint32_t byte_ids_[256];
  uint64_t serial_;
};

}  // namespace

ModelPtr make_unigram(std::vector<std::pair<std::string, double>> vocab, std::optional<size_t> unk_id,
                      bool byte_fallback) {
  return std::make_shared<Unigram>(std::move(vocab), unk_id, byte_fallback);
}

ModelPtr make_spm_unigram(std::vector<std::pair<std::string, double>> vocab, std::vector<bool> matchable,
                          std::optional<size_t> unk_id, bool byte_fallback, double min_score) {
  return std::make_shared<Unigram>(std::move(vocab), unk_id, byte_fallback, std::move(matchable), min_score, true);
}

ModelPtr unigram_from_json(const json& j) {
  const json& v = json_field(j, "vocab", "Unigram model");
  FOUNDRY_CHECK_AS(ValueError, v.is_array(), "tokenizer.json: Unigram vocab must be an array of [piece, score]");
  std::vector<std::pair<std::string, double>> vocab;
  vocab.reserve(v.size());
  for (auto& e : v) {
    FOUNDRY_CHECK_AS(ValueError, e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_number(),
                     "tokenizer.json: Unigram vocab entries must be [piece, score]");
    vocab.emplace_back(e[0].get<std::string>(), e[1].get<double>());
  }
  std::optional<size_t> unk;
  if (j.contains("unk_id") && j["unk_id"].is_number_integer()) unk = j["unk_id"].get<size_t>();
  return make_unigram(std::move(vocab), unk, j.value("byte_fallback", false));
}

}  // namespace foundry::text
