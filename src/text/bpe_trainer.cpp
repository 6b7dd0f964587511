// BPE trainer (HF models/bpe/trainer.rs): count words after normalization and
// pre-tokenization, then repeatedly merge the most frequent pair (ties: the smallest pair of
// ids), updating pair counts incrementally in the words that contain the merged pair.
#include "foundry/text/trainer.h"

#include <algorithm>
#include <fstream>
#include <limits>
#include <map>
#include <queue>
#include <unordered_set>

#include "text/tokenizer_impl.h"

namespace foundry::text {

Tokenizer tokenizer_from_impl(std::shared_ptr<TokenizerImpl> impl);

namespace {

struct Word {
  std::vector<uint32_t> syms;
  uint64_t count;
};

uint64_t pair_key(uint32_t a, uint32_t b) { return (static_cast<uint64_t>(a) << 32) | b; }

struct QueueItem {
  uint64_t count;
  uint32_t a, b;
  bool operator<(const QueueItem& o) const {
    if (count != o.count) return count < o.count;
    // Ascending pair order on ties (HF: other.pair.cmp(&self.pair)).
    return std::make_pair(a, b) > std::make_pair(o.a, o.b);
  }
};

Tokenizer train(const std::vector<std::string>& texts, const BpeTrainerOptions& opt) {
  auto impl = std::make_shared<TokenizerImpl>();
  if (opt.byte_level) {
    impl->pre_tokenizer = make_byte_level_pre(false, true, true);
  } else {
    impl->pre_tokenizer = pre_tokenizer_from_json(json{{"type", "Whitespace"}});
  }
  // 1. Word counts.
  std::map<std::string, uint64_t> word_counts;  // ordered: deterministic ids
  for (const auto& text : texts) {
    std::string clean = uni::is_valid_utf8(text) ? text : uni::sanitize_utf8(text);
    PreTokenizedString pts;
    pts.splits.push_back(Split{NormalizedString(clean), std::nullopt});
    impl->pre_tokenizer->pre_tokenize(pts);
    for (auto& sp : pts.splits) word_counts[sp.normalized.get()] += 1;
  }
  // 2. Alphabet.
  std::map<char32_t, uint64_t> alphabet;
  for (auto& [w, c] : word_counts) {
    size_t i = 0;
    while (i < w.size()) alphabet[uni::decode(w, i)] += c;
  }
  std::unordered_set<char32_t> forced;
  for (auto& s : opt.initial_alphabet)
    if (!s.empty()) {
      size_t i = 0;
      forced.insert(uni::decode(s, i));
    }
  if (opt.byte_level)
    for (int b = 0; b < 256; ++b) {
      size_t i = 0;
      forced.insert(uni::decode(byte_to_unicode(static_cast<uint8_t>(b)), i));
    }
  for (char32_t c : forced) alphabet[c] = std::numeric_limits<uint64_t>::max();
  std::vector<std::pair<char32_t, uint64_t>> kept(alphabet.begin(), alphabet.end());
  if (opt.limit_alphabet && kept.size() > *opt.limit_alphabet) {
    std::stable_sort(kept.begin(), kept.end(), [](auto& x, auto& y) { return x.second > y.second; });
    kept.resize(std::max(*opt.limit_alphabet, forced.size()));
  }
  std::sort(kept.begin(), kept.end(), [](auto& x, auto& y) { return x.first < y.first; });

  std::vector<std::string> id_to_tok;
  StringMap<uint32_t> tok_to_id;
  auto add_token = [&](const std::string& t) -> uint32_t {
    auto it = tok_to_id.find(t);
    if (it != tok_to_id.end()) return it->second;
    uint32_t id = static_cast<uint32_t>(id_to_tok.size());
    id_to_tok.push_back(t);
    tok_to_id.emplace(t, id);
    return id;
  };
  for (auto& s : opt.special_tokens) add_token(s);
  for (auto& [c, n] : kept) add_token(uni::to_utf8(c));

  // 3. Words as symbol ids (with prefix/suffix variants added to the vocabulary).
  std::vector<Word> words;
  words.reserve(word_counts.size());
  for (auto& [w, c] : word_counts) {
    Word word{{}, c};
    size_t i = 0;
    bool ok = true;
    while (i < w.size()) {
      size_t b = i;
      uni::decode(w, i);
      std::string piece = w.substr(b, i - b);
      if (!tok_to_id.count(piece)) {  // char dropped by limit_alphabet
        ok = false;
        continue;
      }
      if (b > 0 && opt.continuing_subword_prefix) piece = *opt.continuing_subword_prefix + piece;
      if (i >= w.size() && opt.end_of_word_suffix) piece += *opt.end_of_word_suffix;
      word.syms.push_back(add_token(piece));
    }
    (void)ok;
    if (!word.syms.empty()) words.push_back(std::move(word));
  }

  // 4. Pair counts and where they occur.
  std::unordered_map<uint64_t, int64_t> pair_counts;
  std::unordered_map<uint64_t, std::unordered_set<uint32_t>> where;
  for (uint32_t wi = 0; wi < words.size(); ++wi) {
    const auto& s = words[wi].syms;
    for (size_t k = 0; k + 1 < s.size(); ++k) {
      uint64_t key = pair_key(s[k], s[k + 1]);
      pair_counts[key] += static_cast<int64_t>(words[wi].count);
      where[key].insert(wi);
    }
  }
  std::priority_queue<QueueItem> queue;
  for (auto& [key, c] : pair_counts)
    if (c > 0) queue.push({static_cast<uint64_t>(c), static_cast<uint32_t>(key >> 32), static_cast<uint32_t>(key)});

  size_t prefix_len = opt.continuing_subword_prefix ? opt.continuing_subword_prefix->size() : 0;
  std::vector<std::pair<std::string, std::string>> merges;
  while (id_to_tok.size() < opt.vocab_size && !queue.empty()) {
    QueueItem top = queue.top();
    queue.pop();
    uint64_t key = pair_key(top.a, top.b);
    int64_t current = pair_counts[key];
    if (current <= 0) continue;
    if (static_cast<uint64_t>(current) != top.count) {
      queue.push({static_cast<uint64_t>(current), top.a, top.b});
      continue;
    }
    if (static_cast<uint64_t>(current) < opt.min_frequency) break;
    const std::string& left = id_to_tok[top.a];
    const std::string& right = id_to_tok[top.b];
    std::string merged = left + (prefix_len && right.compare(0, prefix_len, *opt.continuing_subword_prefix) == 0
                                     ? right.substr(prefix_len)
                                     : right);
    if (opt.max_token_length && uni::char_count(merged) > opt.max_token_length) {
      pair_counts[key] = 0;
      continue;
    }
    merges.emplace_back(left, right);
    uint32_t new_id = add_token(merged);
    // Apply the merge in every word holding the pair; update neighbouring pair counts.
    std::vector<uint32_t> touched(where[key].begin(), where[key].end());
    std::sort(touched.begin(), touched.end());
    std::unordered_map<uint64_t, int64_t> delta;
    for (uint32_t wi : touched) {
      auto& s = words[wi].syms;
      int64_t c = static_cast<int64_t>(words[wi].count);
      std::vector<uint32_t> out;
      out.reserve(s.size());
      for (size_t k = 0; k < s.size(); ++k) {
        if (k + 1 < s.size() && s[k] == top.a && s[k + 1] == top.b) {
          if (!out.empty()) {
            delta[pair_key(out.back(), s[k])] -= c;
            delta[pair_key(out.back(), new_id)] += c;
            where[pair_key(out.back(), new_id)].insert(wi);
          }
          if (k + 2 < s.size()) {
            delta[pair_key(s[k + 1], s[k + 2])] -= c;
            delta[pair_key(new_id, s[k + 2])] += c;
            where[pair_key(new_id, s[k + 2])].insert(wi);
          }
          out.push_back(new_id);
          ++k;
        } else {
          out.push_back(s[k]);
        }
      }
      s = std::move(out);
    }
    pair_counts[key] = 0;
    where.erase(key);
    for (auto& [k2, d] : delta) {
      if (k2 == key) continue;
      int64_t& v = pair_counts[k2];
      v += d;
      if (d > 0 && v > 0) queue.push({static_cast<uint64_t>(v), static_cast<uint32_t>(k2 >> 32), static_cast<uint32_t>(k2)});
    }
  }

  BpeConfig cfg;
  for (uint32_t id = 0; id < id_to_tok.size(); ++id) cfg.vocab.emplace_back(id_to_tok[id], id);
  cfg.merges = std::move(merges);
  cfg.continuing_subword_prefix = opt.continuing_subword_prefix;
  cfg.end_of_word_suffix = opt.end_of_word_suffix;
  impl->model = make_bpe(std::move(cfg));
  if (opt.byte_level) {
    impl->decoder = make_byte_level_decoder();
    impl->post_processor = make_byte_level_processor(false, false);
  }
  std::vector<AddedToken> specials;
  for (auto& s : opt.special_tokens) specials.push_back(AddedToken::make(s, true));
  impl->added.add_tokens(specials, *impl->model, nullptr);
  return tokenizer_from_impl(std::move(impl));
}

}  // namespace

Tokenizer train_bpe_from_texts(const std::vector<std::string>& texts, const BpeTrainerOptions& options) {
  FOUNDRY_CHECK_AS(ValueError, options.vocab_size > 0, "train_bpe: vocab_size must be positive");
  return train(texts, options);
}

Tokenizer train_bpe(const std::vector<std::string>& files, const BpeTrainerOptions& options) {
  std::vector<std::string> texts;
  for (auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    if (!in) raise<IOError>("train_bpe: cannot open '{}'", f);
    std::string line;
    while (std::getline(in, line)) texts.push_back(line);
  }
  return train_bpe_from_texts(texts, options);
}

}  // namespace foundry::text
