// BPE model (HF models/bpe): vocab + ranked merges, applied lowest rank first (leftmost on ties)
// with a linked list of symbols and a binary heap, as HF's Word::merge_all does. Options:
// continuing_subword_prefix, end_of_word_suffix, unk_token with fuse_unk, byte_fallback,
// ignore_merges, dropout. Results of whole pre-tokens are cached per thread.
#include <algorithm>
#include <atomic>
#include <list>
#include <mutex>
#include <random>

#include "text/components.h"
#include "text/model_cache.h"

namespace foundry::text {
namespace {

class Bpe final : public Model {
 public:
  explicit Bpe(BpeConfig cfg) : cfg_(std::move(cfg)), serial_(next_model_serial()) {
    uint32_t max_id = 0;
    for (auto& [tok, id] : cfg_.vocab) max_id = std::max(max_id, id);
    if (static_cast<size_t>(max_id) > 16 * cfg_.vocab.size() + 4096)
      raise<ValueError>("tokenizer: vocabulary ids are too sparse (max id {} for {} tokens)", max_id, cfg_.vocab.size());
    if (!cfg_.vocab.empty()) vocab_r_.resize(static_cast<size_t>(max_id) + 1);
    has_id_.assign(vocab_r_.size(), false);
    vocab_.reserve(cfg_.vocab.size() * 2);
    for (auto& [tok, id] : cfg_.vocab) {
      vocab_[tok] = id;
      vocab_r_[id] = tok;
      has_id_[id] = true;
    }
    if (cfg_.unk_token) {
      auto it = vocab_.find(*cfg_.unk_token);
      if (it != vocab_.end()) unk_id_ = it->second;
    }
    for (int c = 0; c < 128; ++c) {
      auto it = vocab_.find(std::string(1, static_cast<char>(c)));
      ascii_ids_[c] = it == vocab_.end() ? -1 : static_cast<int64_t>(it->second);
    }
    // Single-char tokens by code point (the first lookups of every word).
    for (auto& [tok, id] : vocab_) {
      if (tok.size() < 2 || tok.size() > 4 || !uni::is_valid_utf8(tok)) continue;
      size_t i = 0;
      char32_t c = uni::decode(tok, i);
      if (i == tok.size()) char_ids_.insert_or_assign(c, id);
    }
    if (cfg_.byte_fallback) {
      for (int b = 0; b < 256; ++b) {
        auto it = vocab_.find(fmt::format("<0x{:02X}>", b));
        byte_ids_[b] = it == vocab_.end() ? -1 : static_cast<int64_t>(it->second);
      }
    }
    split_metaspace_ = !cfg_.continuing_subword_prefix && !cfg_.end_of_word_suffix && vocab_.count(kMeta);
    for (auto& [tok, id] : vocab_) {
      if (!split_metaspace_) break;
      for (size_t i = 1; i + 3 <= tok.size(); ++i)
        if (metaspace_boundary(tok, i)) {
          split_metaspace_ = false;  // a token holds "\u2581" after another char
          break;
        }
    }
    size_t prefix_len = cfg_.continuing_subword_prefix ? cfg_.continuing_subword_prefix->size() : 0;
    merges_.reserve(cfg_.merges.size() + 16);
    for (size_t i = 0; i < cfg_.merges.size(); ++i) {
      const auto& [a, b] = cfg_.merges[i];
      auto ia = vocab_.find(a);
      auto ib = vocab_.find(b);
      if (ia == vocab_.end()) raise<ValueError>("tokenizer: BPE merge {} uses '{}', which is not in the vocabulary", i + 1, a);
      if (ib == vocab_.end()) raise<ValueError>("tokenizer: BPE merge {} uses '{}', which is not in the vocabulary", i + 1, b);
      std::string merged = a + (prefix_len <= b.size() ? b.substr(prefix_len) : std::string());
      auto in = vocab_.find(merged);
      if (in == vocab_.end())
        raise<ValueError>("tokenizer: BPE merge {} makes '{}', which is not in the vocabulary", i + 1, merged);
      uint32_t rank = cfg_.merge_ranks.empty() ? static_cast<uint32_t>(i) : cfg_.merge_ranks[i];
      merges_.insert_or_assign(key(ia->second, ib->second), MergeInfo{rank, in->second});
    }
  }

  void tokenize(std::string_view s, std::vector<Token>& out) const override {
    if (s.empty()) return;
    if (split_metaspace_ && s.size() > 3) {
      // No token spans a boundary just before a "\u2581" that follows another char, so words
      // can be merged independently (same result) and cached: SentencePiece-style models have
      // no pre-tokenizer and would otherwise run BPE over whole sentences.
      size_t start = 0;
      for (size_t i = 1; i + 3 <= s.size(); ++i) {
        if (metaspace_boundary(s, i)) {
          tokenize_word(s.substr(start, i - start), start, out);
          start = i;
          i += 2;
        }
      }
      tokenize_word(s.substr(start), start, out);
      return;
    }
    tokenize_word(s, 0, out);
  }

  void tokenize_word(std::string_view s, size_t base, std::vector<Token>& out) const {
    if (s.empty()) return;
    if (cfg_.ignore_merges) {
      auto it = vocab_.find(s);
      if (it != vocab_.end()) {
        out.push_back(Token{it->second, std::string(s), {base, base + s.size()}});
        return;
      }
    }
    bool use_dropout = cfg_.dropout && *cfg_.dropout > 0.0;
    if (!use_dropout) {
      ModelCache& cache = thread_cache(serial_);
      ModelCache::View hit;
      if (cache.find(s, hit)) {
        emit(hit, base, out);
        return;
      }
      std::vector<uint32_t> word;
      merge_word(s, word, false);
      emit(ModelCache::View{word.data(), word.size()}, base, out);
      // Long pre-tokens (whole sentences without pre-tokenizer) rarely repeat: not cached.
      if (s.size() <= 64) cache.insert(s, word);
      return;
    }
    std::vector<uint32_t> word;
    merge_word(s, word, true);
    emit(ModelCache::View{word.data(), word.size()}, base, out);
  }

  bool supports_raw_bytes() const override { return !(cfg_.dropout && *cfg_.dropout > 0.0); }

  // Same tokens as tokenize(bytes_to_byte_level(raw)), with offsets in raw bytes. The cache is
  // keyed by the raw bytes and stores [id, raw_len, ...].
  void tokenize_raw_ids(std::string_view raw, std::vector<uint32_t>& out) const override {
    if (raw.empty()) return;
    ModelCache::View hit;
    if (!thread_cache(serial_ ^ (1ULL << 63)).find(raw, hit)) {
      std::vector<Token> toks;
      tokenize_raw_bytes(raw, 0, toks);
      for (auto& t : toks) out.push_back(t.id);
      return;
    }
    for (size_t k = 0; k < hit.size; k += 2) out.push_back(hit[k]);
  }

  void tokenize_raw_bytes(std::string_view raw, size_t base, std::vector<Token>& out) const override {
    if (raw.empty()) return;
    ModelCache& cache = thread_cache(serial_ ^ (1ULL << 63));
    ModelCache::View hit;
    std::vector<uint32_t> word;
    if (!cache.find(raw, hit)) {
      std::string bl = bytes_to_byte_level(raw);
      std::vector<Token> toks;
      tokenize(bl, toks);
      word.reserve(toks.size() * 2);
      for (auto& t : toks) {
        word.push_back(t.id);
        // Every byte-level char stands for one raw byte.
        word.push_back(static_cast<uint32_t>(uni::char_count(std::string_view(bl).substr(t.offsets.first, t.offsets.second - t.offsets.first))));
      }
      if (raw.size() <= 64) cache.insert(raw, word);
      hit = ModelCache::View{word.data(), word.size()};
    }
    emit(hit, base, out);
  }

  std::optional<uint32_t> token_to_id(std::string_view t) const override {
    auto it = vocab_.find(t);
    if (it == vocab_.end()) return std::nullopt;
    return it->second;
  }
  std::optional<std::string> id_to_token(uint32_t id) const override {
    if (id < vocab_r_.size() && has_id_[id]) return vocab_r_[id];
    return std::nullopt;
  }
  size_t vocab_size() const override { return vocab_.size(); }
  std::unordered_map<std::string, uint32_t> get_vocab() const override {
    return {vocab_.begin(), vocab_.end()};
  }

  json to_json() const override {
    json j;
    j["type"] = "BPE";
    j["dropout"] = cfg_.dropout ? json(*cfg_.dropout) : json(nullptr);
    j["unk_token"] = cfg_.unk_token ? json(*cfg_.unk_token) : json(nullptr);
    j["continuing_subword_prefix"] = cfg_.continuing_subword_prefix ? json(*cfg_.continuing_subword_prefix) : json(nullptr);
    j["end_of_word_suffix"] = cfg_.end_of_word_suffix ? json(*cfg_.end_of_word_suffix) : json(nullptr);
    j["fuse_unk"] = cfg_.fuse_unk;
    j["byte_fallback"] = cfg_.byte_fallback;
    j["ignore_merges"] = cfg_.ignore_merges;
    json v = json::object();
    std::vector<std::pair<uint32_t, const std::string*>> order;
    for (auto& [tok, id] : vocab_) order.emplace_back(id, &tok);
    std::sort(order.begin(), order.end(), [](auto& x, auto& y) { return x.first < y.first || (x.first == y.first && *x.second < *y.second); });
    for (auto& [id, tok] : order) v[*tok] = id;
    j["vocab"] = std::move(v);
    // Merges in rank order (stable for equal ranks, which tiktoken-derived merges have).
    std::vector<size_t> idx(cfg_.merges.size());
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
    if (!cfg_.merge_ranks.empty())
      std::stable_sort(idx.begin(), idx.end(), [&](size_t x, size_t y) { return cfg_.merge_ranks[x] < cfg_.merge_ranks[y]; });
    json m = json::array();
    for (size_t i : idx) m.push_back(json::array({cfg_.merges[i].first, cfg_.merges[i].second}));
    j["merges"] = std::move(m);
    return j;
  }

 private:
  struct MergeInfo {
    uint32_t rank;
    uint32_t new_id;
  };
  struct Symbol {
    uint32_t id;
    int prev, next;
    uint32_t len;  // bytes; 0 = merged away
  };
  struct Candidate {
    uint32_t rank;
    uint32_t pos;
    uint32_t new_id;
    uint32_t left, right;  // the pair when queued; stale if the symbols changed since
    bool operator<(const Candidate& o) const {  // max-heap on "better"
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };

  // True when s has "\u2581" at byte i and the char before it is not "\u2581".
  static bool metaspace_boundary(std::string_view s, size_t i) {
    if (s.compare(i, 3, kMeta) != 0) return false;
    return !(i >= 3 && s.compare(i - 3, 3, kMeta) == 0);
  }

  static uint64_t key(uint32_t a, uint32_t b) { return (static_cast<uint64_t>(a) << 32) | b; }

  const MergeInfo* find_merge(uint32_t a, uint32_t b) const { return merges_.find(key(a, b)); }

  void emit(ModelCache::View word, size_t base, std::vector<Token>& out) const {
    size_t off = base;
    for (size_t k = 0; k + 1 < word.size; k += 2) {
      uint32_t id = word[k], len = word[k + 1];
      out.push_back(Token{id, vocab_r_[id], {off, off + len}});
      off += len;
    }
  }

  // Produces [id, byte_len, id, byte_len, ...].
  void merge_word(std::string_view w, std::vector<uint32_t>& result, bool dropout) const {
    std::vector<Symbol> syms;
    syms.reserve(w.size());
    auto add = [&](uint32_t id, uint32_t len) {
      int idx = static_cast<int>(syms.size());
      syms.push_back(Symbol{id, idx - 1, -1, len});
      if (idx > 0) syms[idx - 1].next = idx;
    };
    bool has_unk = false;
    uint32_t unk_tok = 0, unk_len = 0;
    std::string buf;
    size_t i = 0;
    while (i < w.size()) {
      size_t start = i;
      size_t clen = uni::utf8_len(static_cast<unsigned char>(w[i]));
      i = std::min(w.size(), i + clen);
      bool first = start == 0, last = i >= w.size();
      std::string_view piece = w.substr(start, i - start);
      std::string_view lookup = piece;
      if ((!first && cfg_.continuing_subword_prefix) || (last && cfg_.end_of_word_suffix)) {
        buf.clear();
        if (!first && cfg_.continuing_subword_prefix) buf += *cfg_.continuing_subword_prefix;
        buf += piece;
        if (last && cfg_.end_of_word_suffix) buf += *cfg_.end_of_word_suffix;
        lookup = buf;
      }
      int64_t known = -1;
      if (lookup.size() == 1 && static_cast<unsigned char>(lookup[0]) < 128) {
        known = ascii_ids_[static_cast<unsigned char>(lookup[0])];
      } else if (lookup.size() == piece.size()) {  // the bare char (no prefix/suffix added)
        size_t k = 0;
        if (const uint32_t* id = char_ids_.find(uni::decode(lookup, k))) known = *id;
      } else {
        auto it = vocab_.find(lookup);
        if (it != vocab_.end()) known = it->second;
      }
      if (known >= 0) {
        if (has_unk) {
          add(unk_tok, unk_len);
          has_unk = false;
        }
        add(static_cast<uint32_t>(known), static_cast<uint32_t>(piece.size()));
        continue;
      }
      if (cfg_.byte_fallback) {
        bool all = true;
        for (unsigned char b : lookup) all &= byte_ids_[b] >= 0;
        if (all) {
          // HF does not flush a pending unk here; it stays pending until the next known char.
          for (unsigned char b : lookup) add(static_cast<uint32_t>(byte_ids_[b]), 1);
          continue;
        }
      }
      if (cfg_.unk_token) {
        if (!unk_id_) raise<ValueError>("tokenizer: BPE unk_token '{}' is not in the vocabulary", *cfg_.unk_token);
        if (has_unk && cfg_.fuse_unk) {
          unk_len += static_cast<uint32_t>(piece.size());
        } else {
          if (has_unk) add(unk_tok, unk_len);
          has_unk = true;
          unk_tok = *unk_id_;
          unk_len = static_cast<uint32_t>(piece.size());
        }
      }
    }
    if (has_unk) add(unk_tok, unk_len);

    std::vector<Candidate> heap;
    heap.reserve(syms.size());
    // The merge table is large and lookups are memory-bound: prefetch all initial pairs first.
    for (size_t k = 0; k + 1 < syms.size(); ++k) merges_.prefetch(key(syms[k].id, syms[k + 1].id));
    for (size_t k = 0; k + 1 < syms.size(); ++k)
      if (auto m = find_merge(syms[k].id, syms[k + 1].id))
        heap.push_back(Candidate{m->rank, static_cast<uint32_t>(k), m->new_id, syms[k].id, syms[k + 1].id});
    std::make_heap(heap.begin(), heap.end());
    std::vector<Candidate> skipped;
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end());
      Candidate top = heap.back();
      heap.pop_back();
      if (dropout && random_unit() < *cfg_.dropout) {
        skipped.push_back(top);
        continue;
      }
      for (auto& c : skipped) {
        heap.push_back(c);
        std::push_heap(heap.begin(), heap.end());
      }
      skipped.clear();
      Symbol& cur = syms[top.pos];
      if (cur.len == 0 || cur.next == -1) continue;
      int next_pos = cur.next;
      Symbol right = syms[next_pos];
      if (cur.id != top.left || right.id != top.right) {
        // Stale entry; HF still applies it when the current pair makes the same token.
        auto m = find_merge(cur.id, right.id);
        if (!m || m->new_id != top.new_id) continue;
      }
      cur.id = top.new_id;
      cur.len += right.len;
      cur.next = right.next;
      syms[next_pos].len = 0;
      if (right.next >= 0 && right.next < static_cast<int>(syms.size())) syms[right.next].prev = static_cast<int>(top.pos);
      if (cur.prev >= 0) {
        if (auto pm = find_merge(syms[cur.prev].id, cur.id)) {
          heap.push_back(Candidate{pm->rank, static_cast<uint32_t>(cur.prev), pm->new_id, syms[cur.prev].id, cur.id});
          std::push_heap(heap.begin(), heap.end());
        }
      }
      if (cur.next >= 0) {
        if (auto nm = find_merge(cur.id, syms[cur.next].id)) {
          heap.push_back(Candidate{nm->rank, top.pos, nm->new_id, cur.id, syms[cur.next].id});
          std::push_heap(heap.begin(), heap.end());
        }
      }
    }
    result.clear();
    for (auto& s : syms) {
      if (s.len == 0) continue;
      result.push_back(s.id);
      result.push_back(s.len);
    }
  }

  double random_unit() const {
    std::lock_guard<std::mutex> lock(rng_mu_);
    return std::uniform_real_distribution<double>(0.0, 1.0)(rng_);
  }

  static constexpr const char* kMeta = "\xE2\x96\x81";  // U+2581
  BpeConfig cfg_;
  uint64_t serial_;
  bool split_metaspace_ = false;
  StringMap<uint32_t> vocab_;
  std::vector<std::string> vocab_r_;
  std::vector<bool> has_id_;
  std::optional<uint32_t> unk_id_;
  int64_t byte_ids_[256] = {};
  FlatMap64<MergeInfo> merges_;
  int64_t ascii_ids_[128];  // id of each single ASCII char token (-1 if none)
  FlatMap64<uint32_t> char_ids_;  // code point -> id of the one-char token
  mutable std::mutex rng_mu_;
  mutable std::mt19937_64 rng_{0x5eed};
};

}  // namespace

ModelPtr make_bpe(BpeConfig config) { return std::make_shared<Bpe>(std::move(config)); }

ModelPtr bpe_from_json(const json& j) {
  BpeConfig cfg;
  const json& vocab = json_field(j, "vocab", "BPE model");
  FOUNDRY_CHECK_AS(ValueError, vocab.is_object(), "tokenizer.json: BPE vocab must be an object");
  cfg.vocab.reserve(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    FOUNDRY_CHECK_AS(ValueError, it.value().is_number_unsigned() || it.value().is_number_integer(),
                     "tokenizer.json: BPE vocab id of '{}' must be an integer", it.key());
    cfg.vocab.emplace_back(it.key(), it.value().get<uint32_t>());
  }
  if (j.contains("merges")) {
    const json& merges = j["merges"];
    FOUNDRY_CHECK_AS(ValueError, merges.is_array(), "tokenizer.json: BPE merges must be an array");
    size_t line = 0;
    for (const auto& m : merges) {
      ++line;
      if (m.is_string()) {
        const std::string& s = m.get_ref<const std::string&>();
        size_t sp = s.find(' ');
        if (sp == std::string::npos)
          raise<ValueError>("tokenizer.json: BPE merge {} ('{}') is not of the form \"a b\"", line, s);
        cfg.merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        cfg.merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
      } else {
        raise<ValueError>("tokenizer.json: BPE merge {} must be \"a b\" or [\"a\", \"b\"]", line);
      }
    }
  }
  auto opt_str = [&](const char* k) -> std::optional<std::string> {
    if (j.contains(k) && j[k].is_string()) return j[k].get<std::string>();
    return std::nullopt;
  };
  cfg.unk_token = opt_str("unk_token");
  cfg.continuing_subword_prefix = opt_str("continuing_subword_prefix");
  cfg.end_of_word_suffix = opt_str("end_of_word_suffix");
  if (j.contains("dropout") && j["dropout"].is_number()) {
    double d = j["dropout"].get<double>();
    FOUNDRY_CHECK_AS(ValueError, d >= 0.0 && d <= 1.0, "tokenizer.json: BPE dropout must be in [0, 1]");
    cfg.dropout = d;
  }
  cfg.fuse_unk = j.value("fuse_unk", false);
  cfg.byte_fallback = j.value("byte_fallback", false);
  cfg.ignore_merges = j.value("ignore_merges", false);
  return make_bpe(std::move(cfg));
}

}  // namespace foundry::text
