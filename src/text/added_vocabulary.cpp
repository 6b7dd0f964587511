// Added tokens (see added_vocabulary.h).
#include "text/added_vocabulary.h"

#include <algorithm>

namespace foundry::text {

void TokenMatcher::build(const std::vector<std::pair<std::string, uint32_t>>& patterns) {
  trie_ = ByteTrie();
  std::fill(std::begin(first_), std::end(first_), false);
  patterns_ = 0;
  for (auto& [p, id] : patterns) {
    if (p.empty()) continue;
    ++patterns_;
    first_[static_cast<unsigned char>(p[0])] = true;
    // The first pattern added with this content wins (Aho-Corasick keeps the lowest index).
    if (std::optional<uint32_t>& value = trie_.value_at(p); !value) value = id;
  }
}

size_t TokenMatcher::longest_at(std::string_view s, size_t pos, uint32_t& id) const {
  size_t best = 0;
  trie_.each_prefix(s, pos, [&](size_t length, uint32_t value) {
    best = length;
    id = value;
  });
  return best;
}

size_t AddedVocabulary::add_tokens(const std::vector<AddedToken>& tokens, const Model& model,
                                   const Normalizer* normalizer) {
  for (const auto& t : tokens) {
    if (t.special && !t.content.empty() && !special_set_.count(t.content)) {
      special_.push_back(t);
      special_set_.insert(t.content);
    }
  }
  size_t ignored = 0;
  auto same = [](const AddedToken& a, const AddedToken& b) {
    return a.content == b.content && a.special == b.special && a.single_word == b.single_word && a.lstrip == b.lstrip &&
           a.rstrip == b.rstrip && a.normalized == b.normalized;
  };
  for (const auto& t : tokens) {
    bool exists = false;
    for (auto& [id, v] : map_r_)
      if (same(v, t)) exists = true;
    if (t.content.empty() || exists) {
      ++ignored;
      continue;
    }
    uint32_t new_id;
    if (auto id = token_to_id(t.content, model)) {
      new_id = *id;
    } else {
      uint32_t vs = static_cast<uint32_t>(model.vocab_size());
      if (map_.empty()) {
        new_id = vs;
      } else {
        uint32_t mx = 0;
        for (auto& [c, id2] : map_) mx = std::max(mx, id2);
        new_id = (mx >= vs || vs == 0) ? mx + 1 : vs;
      }
    }
    map_[t.content] = new_id;
    map_r_[new_id] = t;
    if (!special_set_.count(t.content)) added_.push_back(t);
  }
  refresh(model, normalizer);
  return tokens.size() - ignored;
}

void AddedVocabulary::refresh(const Model& model, const Normalizer* normalizer) {
  std::vector<std::pair<std::string, uint32_t>> plain, norm;
  auto visit = [&](const AddedToken& t) {
    auto id = token_to_id(t.content, model);
    if (!id) return;
    if (t.normalized) {
      NormalizedString ns(t.content);
      if (normalizer) normalizer->normalize(ns);
      norm.emplace_back(ns.get(), *id);
    } else {
      plain.emplace_back(t.content, *id);
    }
  };
  for (auto& t : special_) visit(t);
  for (auto& t : added_) visit(t);
  plain_.build(plain);
  normalized_.build(norm);
}

std::optional<uint32_t> AddedVocabulary::token_to_id(std::string_view t, const Model& model) const {
  auto it = map_.find(t);
  if (it != map_.end()) return it->second;
  return model.token_to_id(t);
}

std::optional<std::string> AddedVocabulary::id_to_token(uint32_t id, const Model& model) const {
  auto it = map_r_.find(id);
  if (it != map_r_.end()) return it->second.content;
  return model.id_to_token(id);
}

namespace {
size_t last_non_space_end(std::string_view s) {
  // Start of the trailing run of whitespace (regex \s*$).
  size_t end = s.size();
  while (end > 0) {
    size_t b = end - 1;
    while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
    size_t i = b;
    if (!uni::is_whitespace(uni::decode(s, i))) break;
    end = b;
  }
  return end;
}
size_t leading_space_end(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    size_t b = i;
    if (!uni::is_whitespace(uni::decode(s, i))) return b;
  }
  return s.size();
}
bool ends_with_word(std::string_view s) {
  if (s.empty()) return false;
  size_t b = s.size() - 1;
  while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
  return uni::is_word_char(uni::decode(s, b));
}
bool starts_with_word(std::string_view s) {
  if (s.empty()) return false;
  size_t i = 0;
  return uni::is_word_char(uni::decode(s, i));
}
}  // namespace

void AddedVocabulary::split_with(PreTokenizedString& pts, const TokenMatcher& matcher, const Normalizer* normalizer,
                                 bool normalize_first) const {
  std::vector<Split> out;
  out.reserve(pts.splits.size() + 4);
  struct Hit {
    size_t a, b;
    std::optional<uint32_t> id;
  };
  std::vector<Hit> hits;
  for (auto& sp : pts.splits) {
    if (sp.tokens) {
      out.push_back(std::move(sp));
      continue;
    }
    NormalizedString& n = sp.normalized;
    if (normalize_first && normalizer) normalizer->normalize(n);
    const std::string& s = n.get();
    hits.clear();
    size_t start_offset = 0;
    size_t pos = 0;
    if (!matcher.empty()) {
      while (pos < s.size()) {
        if (!matcher.can_start(static_cast<unsigned char>(s[pos]))) {
          ++pos;
          continue;
        }
        uint32_t id = 0;
        size_t len = matcher.longest_at(s, pos, id);
        if (len == 0) {
          ++pos;
          continue;
        }
        size_t start = pos, stop = pos + len;
        pos = stop;
        const AddedToken& tok = map_r_.at(id);
        if (encode_special_tokens && special_set_.count(tok.content)) continue;
        if (tok.single_word) {
          bool start_space = start == 0 || !ends_with_word(std::string_view(s).substr(0, start));
          bool stop_space = stop == s.size() || !starts_with_word(std::string_view(s).substr(stop));
          if (!start_space || !stop_space) continue;
        }
        if (tok.lstrip) start = std::max(last_non_space_end(std::string_view(s).substr(0, start)), start_offset);
        if (tok.rstrip) stop += leading_space_end(std::string_view(s).substr(stop));
        if (start_offset < start) hits.push_back({start_offset, start, std::nullopt});
        hits.push_back({start, stop, id});
        // The next search starts after the raw match, not after what rstrip swallowed: HF's
        // Aho-Corasick iterator does the same, so splits may overlap.
        start_offset = stop;
      }
    }
    if (hits.empty()) {
      if (!n.empty()) out.push_back(Split{std::move(n), std::nullopt});
      continue;
    }
    if (start_offset != s.size()) hits.push_back({start_offset, s.size(), std::nullopt});
    for (auto& h : hits) {
      auto piece = n.slice(h.a, h.b);
      FOUNDRY_CHECK(piece.has_value(), "tokenizer: added-token split at [{}, {}) is not on char boundaries", h.a, h.b);
      if (piece->empty()) continue;
      if (h.id) {
        std::string value = piece->get();
        size_t len = value.size();
        std::vector<Token> toks{Token{*h.id, std::move(value), {0, len}}};
        out.push_back(Split{std::move(*piece), std::move(toks)});
      } else {
        out.push_back(Split{std::move(*piece), std::nullopt});
      }
    }
  }
  pts.splits = std::move(out);
}

PreTokenizedString AddedVocabulary::extract_and_normalize(const Normalizer* normalizer, std::string text) const {
  PreTokenizedString pts;
  pts.splits.push_back(Split{NormalizedString(std::move(text)), std::nullopt});
  split_with(pts, plain_, normalizer, false);
  split_with(pts, normalized_, normalizer, true);
  return pts;
}

}  // namespace foundry::text
