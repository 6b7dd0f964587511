// Shared pieces of the tokenizer pipeline: Encoding operations (HF tokenizer/encoding.rs:
// merge_with, truncate, pad), the GPT-2 byte-level alphabet, and tokenizer.json helpers.
#include <array>

#include "text/components.h"

namespace foundry::text {

// ---------------------------------------------------------------------------------------------
// Byte-level alphabet (GPT-2 bytes_to_unicode)

namespace {
struct ByteTables {
  std::array<std::string, 256> to_uni;
  std::array<int, 512> from_uni;
  ByteTables() {
    from_uni.fill(-1);
    std::array<bool, 256> direct{};
    for (int b = '!'; b <= '~'; ++b) direct[b] = true;
    for (int b = 0xA1; b <= 0xAC; ++b) direct[b] = true;
    for (int b = 0xAE; b <= 0xFF; ++b) direct[b] = true;
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      char32_t c = direct[b] ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
      to_uni[b] = uni::to_utf8(c);
      from_uni[c] = b;
    }
  }
};
const ByteTables& byte_tables() {
  static const ByteTables t;
  return t;
}
}  // namespace

const std::string& byte_to_unicode(uint8_t b) { return byte_tables().to_uni[b]; }

int unicode_to_byte(char32_t c) { return c < 512 ? byte_tables().from_uni[c] : -1; }

std::string bytes_to_byte_level(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) out += byte_tables().to_uni[b];
  return out;
}

// ---------------------------------------------------------------------------------------------
// Encoding operations

void encoding_set_sequence_id(Encoding& e, int32_t id) { e.sequence_ids.assign(e.ids.size(), id); }

static void append_range(Encoding& dst, const Encoding& src, size_t a, size_t b) {
  dst.ids.insert(dst.ids.end(), src.ids.begin() + a, src.ids.begin() + b);
  dst.type_ids.insert(dst.type_ids.end(), src.type_ids.begin() + a, src.type_ids.begin() + b);
  dst.tokens.insert(dst.tokens.end(), src.tokens.begin() + a, src.tokens.begin() + b);
  dst.offsets.insert(dst.offsets.end(), src.offsets.begin() + a, src.offsets.begin() + b);
  dst.byte_offsets.insert(dst.byte_offsets.end(), src.byte_offsets.begin() + a, src.byte_offsets.begin() + b);
  dst.word_ids.insert(dst.word_ids.end(), src.word_ids.begin() + a, src.word_ids.begin() + b);
  dst.sequence_ids.insert(dst.sequence_ids.end(), src.sequence_ids.begin() + a, src.sequence_ids.begin() + b);
  dst.special_tokens_mask.insert(dst.special_tokens_mask.end(), src.special_tokens_mask.begin() + a,
                                 src.special_tokens_mask.begin() + b);
  dst.attention_mask.insert(dst.attention_mask.end(), src.attention_mask.begin() + a, src.attention_mask.begin() + b);
}

void encoding_merge_with(Encoding& self, Encoding pair, bool growing_offsets) {
  std::vector<Encoding> overflowings;
  for (const auto& so : self.overflowing) {
    Encoding n = so;
    encoding_merge_with(n, pair, growing_offsets);
    overflowings.push_back(std::move(n));
    for (const auto& po : pair.overflowing) {
      Encoding m = so;
      encoding_merge_with(m, po, growing_offsets);
      overflowings.push_back(std::move(m));
    }
  }
  for (const auto& po : pair.overflowing) {
    Encoding n = self;
    n.overflowing.clear();
    encoding_merge_with(n, po, growing_offsets);
    overflowings.push_back(std::move(n));
  }
  size_t start_char = growing_offsets && !self.offsets.empty() ? self.offsets.back().second : 0;
  size_t start_byte = growing_offsets && !self.byte_offsets.empty() ? self.byte_offsets.back().second : 0;
  size_t base = self.ids.size();
  append_range(self, pair, 0, pair.ids.size());
  if (growing_offsets) {
    for (size_t k = base; k < self.ids.size(); ++k) {
      self.offsets[k].first += start_char;
      self.offsets[k].second += start_char;
      self.byte_offsets[k].first += start_byte;
      self.byte_offsets[k].second += start_byte;
    }
  }
  self.overflowing = std::move(overflowings);
}

void encoding_truncate(Encoding& e, size_t max_len, size_t stride, Direction direction) {
  size_t n = e.ids.size();
  if (max_len >= n) return;
  if (max_len == 0) {
    Encoding o = std::move(e);
    e = Encoding();
    e.overflowing.push_back(std::move(o));
    return;
  }
  FOUNDRY_CHECK_AS(ValueError, stride < max_len,
                   "tokenizer: truncation stride ({}) must be strictly less than max_length ({}) after removing "
                   "the special tokens",
                   stride, max_len);
  size_t step = max_len - stride;
  std::vector<std::pair<size_t, size_t>> parts;
  if (direction == Direction::Right) {
    for (size_t start = 0; start < n; start += step) {
      size_t stop = std::min(start + max_len, n);
      parts.emplace_back(start, stop);
      if (stop == n) break;
    }
  } else {
    // (0..n).rev().step_by(step): stop = n-1, n-1-step, ...
    for (long long s = static_cast<long long>(n) - 1; s >= 0; s -= static_cast<long long>(step)) {
      size_t stop = static_cast<size_t>(s) + 1;
      size_t start = stop > max_len ? stop - max_len : 0;
      if (start < stop) parts.emplace_back(start, stop);
      if (start == 0) break;
    }
  }
  Encoding out;
  append_range(out, e, parts[0].first, parts[0].second);
  for (size_t k = 1; k < parts.size(); ++k) {
    Encoding o;
    append_range(o, e, parts[k].first, parts[k].second);
    out.overflowing.push_back(std::move(o));
  }
  e = std::move(out);
}

void encoding_pad(Encoding& e, size_t target, uint32_t pad_id, uint32_t pad_type_id, const std::string& pad_token,
                  Direction direction) {
  for (auto& o : e.overflowing) encoding_pad(o, target, pad_id, pad_type_id, pad_token, direction);
  if (e.ids.size() >= target) return;
  size_t n = target - e.ids.size();
  auto pad = [&](auto& v, auto value) {
    using T = typename std::decay_t<decltype(v)>::value_type;
    if (direction == Direction::Left)
      v.insert(v.begin(), n, T(value));
    else
      v.insert(v.end(), n, T(value));
  };
  pad(e.ids, pad_id);
  pad(e.type_ids, pad_type_id);
  pad(e.tokens, pad_token);
  pad(e.offsets, Span{0, 0});
  pad(e.byte_offsets, Span{0, 0});
  pad(e.word_ids, -1);
  pad(e.sequence_ids, -1);
  pad(e.special_tokens_mask, 1u);
  pad(e.attention_mask, 0u);
}

// ---------------------------------------------------------------------------------------------
// JSON helpers

const json& json_field(const json& j, const char* key, const char* what) {
  auto it = j.find(key);
  if (it == j.end()) raise<ValueError>("tokenizer.json: {} is missing the field '{}'", what, key);
  return *it;
}

std::string json_string(const json& j, const char* key, const char* what) {
  const json& v = json_field(j, key, what);
  if (!v.is_string()) raise<ValueError>("tokenizer.json: {} field '{}' must be a string", what, key);
  return v.get<std::string>();
}

std::shared_ptr<const Regex> json_pattern(const json& j, bool& is_regex, std::string& text, const char* what) {
  if (j.is_object() && j.contains("String") && j["String"].is_string()) {
    is_regex = false;
    text = j["String"].get<std::string>();
    return nullptr;
  }
  if (j.is_object() && j.contains("Regex") && j["Regex"].is_string()) {
    is_regex = true;
    text = j["Regex"].get<std::string>();
    return nullptr;
  }
  if (j.is_string()) {  // legacy form
    is_regex = false;
    text = j.get<std::string>();
    return nullptr;
  }
  raise<ValueError>("tokenizer.json: {} pattern must be {{\"String\": ...}} or {{\"Regex\": ...}}", what);
}

json pattern_to_json(const std::string& text, bool is_regex) {
  return is_regex ? json{{"Regex", text}} : json{{"String", text}};
}

SplitBehavior behavior_from_string(const std::string& s) {
  if (s == "Removed" || s == "removed") return SplitBehavior::Removed;
  if (s == "Isolated" || s == "isolated") return SplitBehavior::Isolated;
  if (s == "MergedWithPrevious" || s == "merged_with_previous") return SplitBehavior::MergedWithPrevious;
  if (s == "MergedWithNext" || s == "merged_with_next") return SplitBehavior::MergedWithNext;
  if (s == "Contiguous" || s == "contiguous") return SplitBehavior::Contiguous;
  raise<ValueError>("tokenizer.json: unknown split behavior '{}'", s);
}

std::string behavior_to_string(SplitBehavior b) {
  switch (b) {
    case SplitBehavior::Removed: return "Removed";
    case SplitBehavior::Isolated: return "Isolated";
    case SplitBehavior::MergedWithPrevious: return "MergedWithPrevious";
    case SplitBehavior::MergedWithNext: return "MergedWithNext";
    case SplitBehavior::Contiguous: return "Contiguous";
  }
  return "Isolated";
}

}  // namespace foundry::text
