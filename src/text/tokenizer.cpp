// Tokenizer: the pipeline (HF tokenizer/mod.rs), truncation and padding (HF utils/), batch
// encoding on a small thread pool, decoding, and tokenizer.json reading and writing.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <condition_variable>
#include <fstream>
#include <functional>
#include <mutex>
#include <sstream>
#include <thread>

#include "text/tokenizer_impl.h"
#include "foundry/io/json_depth.h"

namespace foundry::text {

// ---------------------------------------------------------------------------------------------
// Thread pool: a fixed set of workers running index ranges of one job at a time.

namespace {

class ThreadPool {
 public:
  static ThreadPool& instance() {
    static ThreadPool pool;
    return pool;
  }
  size_t size() const { return workers_.size() + 1; }

  /// Runs fn(i) for i in [0, n) on up to `threads` threads (the caller included).
  void parallel_for(size_t n, size_t threads, const std::function<void(size_t)>& fn) {
    threads = std::min({threads, n, size()});
    if (threads <= 1) {
      for (size_t i = 0; i < n; ++i) fn(i);
      return;
    }
    std::lock_guard<std::mutex> job_lock(job_mu_);  // one job at a time
    std::atomic<size_t> next{0};
    std::exception_ptr error;
    std::mutex err_mu;
    std::function<void()> work = [&]() {
      while (true) {
        size_t i = next.fetch_add(1);
        if (i >= n) break;
        try {
          fn(i);
        } catch (...) {
          std::lock_guard<std::mutex> l(err_mu);
          if (!error) error = std::current_exception();
        }
      }
    };
    {
      std::unique_lock<std::mutex> l(mu_);
      job_ = &work;
      helpers_wanted_ = threads - 1;
      active_ = 0;
      ++generation_;
    }
    cv_.notify_all();
    work();
    std::unique_lock<std::mutex> l(mu_);
    done_cv_.wait(l, [&] { return helpers_wanted_ == 0 && active_ == 0; });
    job_ = nullptr;
    if (error) std::rethrow_exception(error);
  }

 private:
  ThreadPool() {
    size_t hw = std::max<unsigned>(1, std::thread::hardware_concurrency());
    for (size_t i = 0; i + 1 < hw; ++i) workers_.emplace_back([this] { loop(); });
  }
  ~ThreadPool() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& w : workers_) w.join();
  }
  void loop() {
    uint64_t seen = 0;
    while (true) {
      std::function<void()>* job;
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [&] { return stop_ || (generation_ != seen && helpers_wanted_ > 0); });
        if (stop_) return;
        seen = generation_;
        --helpers_wanted_;
        ++active_;
        job = job_;
      }
      (*job)();
      {
        std::lock_guard<std::mutex> l(mu_);
        --active_;
      }
      done_cv_.notify_all();
    }
  }
  std::vector<std::thread> workers_;
  std::mutex mu_, job_mu_;
  std::condition_variable cv_, done_cv_;
  std::function<void()>* job_ = nullptr;
  size_t helpers_wanted_ = 0, active_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

// Byte offset -> char offset, as HF's BytesToCharOffsetConverter.
class CharOffsets {
 public:
  explicit CharOffsets(const std::string& s) : n_(s.size()) {
    bool ascii = true;
    for (unsigned char c : s)
      if (c >= 0x80) {
        ascii = false;
        break;
      }
    if (ascii) return;
    map_.resize(s.size());
    uint32_t ci = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      if (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) ++ci;
      map_[i] = ci;
    }
  }
  Span convert(Span b) const {
    if (map_.empty()) return b;  // ASCII: chars == bytes
    if (b.first >= n_) return b;
    size_t s = map_[b.first];
    size_t e;
    if (b.second < n_) {
      e = map_[b.second];
    } else {
      e = (b.second > 0 ? map_[b.second - 1] : s) + 1;
    }
    return {s, e};
  }

 private:
  size_t n_;
  std::vector<uint32_t> map_;
};

// One model token into a single sequence's encoding, at byte span `bo` of word `word`.
void append_token(Encoding& e, Token& t, Span bo, const CharOffsets& conv, size_t word) {
  e.ids.push_back(t.id);
  e.tokens.push_back(std::move(t.value));
  e.byte_offsets.push_back(bo);
  e.offsets.push_back(conv.convert(bo));
  e.word_ids.push_back(static_cast<int32_t>(word));
}

// The per-token fields a single sequence has before post-processing.
void finish_single(Encoding& e, uint32_t type_id) {
  const size_t m = e.ids.size();
  e.type_ids.assign(m, type_id);
  e.sequence_ids.assign(m, 0);
  e.special_tokens_mask.assign(m, 0);
  e.attention_mask.assign(m, 1);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Pipeline

void TokenizerImpl::prepare() {
  fast_regex = nullptr;
  if (!normalizer && pre_tokenizer && model && model->supports_raw_bytes())
    fast_regex = pre_tokenizer->byte_level_split_regex();
}

Encoding TokenizerImpl::encode_single_fast(const std::string& text, uint32_t type_id) const {
  PreTokenizedString pts = added.extract_and_normalize(nullptr, text);
  // Pieces of the original text: regex matches and the gaps between them (Isolated split),
  // or whole added-token splits.
  struct Piece {
    size_t a, b;
    const Split* added;
  };
  thread_local std::vector<Piece> pieces;
  thread_local std::vector<Offsets> ms;
  pieces.clear();
  for (const Split& sp : pts.splits) {
    size_t base = sp.normalized.original_shift();
    if (sp.tokens) {
      pieces.push_back({base, base + sp.normalized.len_original(), &sp});
      continue;
    }
    const std::string& s = sp.normalized.get();
    ms.clear();
    fast_regex->find_all(s, ms);
    size_t prev = 0;
    for (auto [a, b] : ms) {
      if (prev < a) pieces.push_back({base + prev, base + a, nullptr});
      if (a < b) pieces.push_back({base + a, base + b, nullptr});
      prev = b;
    }
    if (prev < s.size()) pieces.push_back({base + prev, base + s.size(), nullptr});
  }
  size_t n = pieces.size();
  thread_local std::vector<Token> flat;
  thread_local std::vector<std::pair<uint32_t, uint32_t>> ranges;
  flat.clear();
  ranges.assign(n, {0, 0});
  size_t first = 0, last = n;
  size_t limit = truncation ? truncation->max_length : SIZE_MAX;
  bool left = truncation && truncation->direction == Direction::Left;
  size_t count = 0;
  for (size_t k = 0; k < n; ++k) {
    size_t idx = left ? n - 1 - k : k;
    if (count >= limit) {
      if (left) first = idx + 1;
      else last = idx;
      break;
    }
    const Piece& p = pieces[idx];
    size_t begin = flat.size();
    if (p.added) {
      size_t shift = p.added->normalized.original_shift();
      for (const Token& t : *p.added->tokens) {
        Token c = t;
        if (auto r = p.added->normalized.normalized_to_original(t.offsets.first, t.offsets.second))
          c.offsets = {shift + r->first, shift + r->second};
        flat.push_back(std::move(c));
      }
    } else {
      model->tokenize_raw_bytes(std::string_view(text).substr(p.a, p.b - p.a), p.a, flat);
    }
    ranges[idx] = {static_cast<uint32_t>(begin), static_cast<uint32_t>(flat.size())};
    count += flat.size() - begin;
  }
  Encoding e;
  e.ids.reserve(count);
  e.tokens.reserve(count);
  e.offsets.reserve(count);
  e.byte_offsets.reserve(count);
  e.word_ids.reserve(count);
  CharOffsets conv(text);
  auto is_cont = [&](size_t i) { return i < text.size() && (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80; };
  for (size_t idx = first; idx < last; ++idx) {
    bool raw = pieces[idx].added == nullptr;
    for (uint32_t ti = ranges[idx].first; ti < ranges[idx].second; ++ti) {
      Token& t = flat[ti];
      Span bo = t.offsets;
      if (raw) {
        // A token holding part of a char covers the whole char (byte-level alignments).
        while (bo.first > 0 && is_cont(bo.first)) --bo.first;
        while (is_cont(bo.second)) ++bo.second;
      }
      append_token(e, t, bo, conv, idx - first);
    }
  }
  finish_single(e, type_id);
  return e;
}

bool TokenizerImpl::encode_ids_fast(std::string_view text_in, std::vector<uint32_t>& out) const {
  if (!fast_regex || truncation || padding) return false;
  std::string cleaned;
  std::string_view text = text_in;
  if (!uni::is_valid_utf8(text)) {
    cleaned = uni::sanitize_utf8(text);
    text = cleaned;
  }
  thread_local std::vector<Offsets> ms;
  auto run = [&](std::string_view s) {
    ms.clear();
    fast_regex->find_all(s, ms);
    size_t prev = 0;
    for (auto [a, b] : ms) {
      if (prev < a) model->tokenize_raw_ids(s.substr(prev, a - prev), out);
      if (a < b) model->tokenize_raw_ids(s.substr(a, b - a), out);
      prev = b;
    }
    if (prev < s.size()) model->tokenize_raw_ids(s.substr(prev), out);
  };
  if (added.size() == 0) {
    run(text);
    return true;
  }
  PreTokenizedString pts = added.extract_and_normalize(nullptr, std::string(text));
  for (const Split& sp : pts.splits) {
    if (sp.tokens) {
      for (auto& t : *sp.tokens) out.push_back(t.id);
    } else {
      run(sp.normalized.get());
    }
  }
  return true;
}

Encoding TokenizerImpl::encode_single(const std::string& text, uint32_t type_id) const {
  if (fast_regex) return encode_single_fast(text, type_id);
  PreTokenizedString pts = added.extract_and_normalize(normalizer.get(), text);
  if (pre_tokenizer) pre_tokenizer->pre_tokenize(pts);
  // Tokenize every split. With truncation, HF tokenizers 0.23 stops once max_length tokens are
  // reached (whole splits, from the end for left truncation) and numbers words from the first
  // split it kept; the pair truncation then works on that. Reproduce it so ids, word ids and
  // overflowing parts match.
  size_t n = pts.splits.size();
  // All tokens in one flat vector; ranges[idx] = [begin, end) of split idx.
  thread_local std::vector<Token> flat;
  thread_local std::vector<std::pair<uint32_t, uint32_t>> ranges;
  flat.clear();
  ranges.assign(n, {0, 0});
  size_t first = 0, last = n;  // kept splits [first, last)
  size_t limit = truncation ? truncation->max_length : SIZE_MAX;
  bool left = truncation && truncation->direction == Direction::Left;
  size_t count = 0;
  for (size_t k = 0; k < n; ++k) {
    size_t idx = left ? n - 1 - k : k;
    if (count >= limit) {
      if (left) first = idx + 1;
      else last = idx;
      break;
    }
    Split& sp = pts.splits[idx];
    size_t begin = flat.size();
    if (sp.tokens) {
      for (auto& t : *sp.tokens) flat.push_back(std::move(t));
    } else {
      model->tokenize(sp.normalized.get(), flat);
    }
    ranges[idx] = {static_cast<uint32_t>(begin), static_cast<uint32_t>(flat.size())};
    count += flat.size() - begin;
  }
  Encoding e;
  e.ids.reserve(count);
  e.tokens.reserve(count);
  e.offsets.reserve(count);
  e.byte_offsets.reserve(count);
  e.word_ids.reserve(count);
  CharOffsets conv(text);
  for (size_t idx = first; idx < last; ++idx) {
    const Split& sp = pts.splits[idx];
    size_t shift = sp.normalized.original_shift();
    for (uint32_t ti = ranges[idx].first; ti < ranges[idx].second; ++ti) {
      Token& t = flat[ti];
      Span bo;
      if (auto r = sp.normalized.normalized_to_original(t.offsets.first, t.offsets.second))
        bo = {shift + r->first, shift + r->second};
      else
        bo = t.offsets;
      append_token(e, t, bo, conv, idx - first);
    }
  }
  finish_single(e, type_id);
  return e;
}

namespace {

void truncate_encodings(Encoding& a, std::optional<Encoding>& b, const TruncationParams& p) {
  if (p.max_length == 0) {
    encoding_truncate(a, 0, p.stride, p.direction);
    if (b) encoding_truncate(*b, 0, p.stride, p.direction);
    return;
  }
  size_t total = a.ids.size() + (b ? b->ids.size() : 0);
  if (total <= p.max_length) return;
  size_t to_remove = total - p.max_length;
  if (p.strategy == TruncationStrategy::LongestFirst) {
    if (b) {
      size_t n1 = a.ids.size(), n2 = b->ids.size();
      bool swap = false;
      if (n1 > n2) {
        swap = true;
        std::swap(n1, n2);
      }
      if (n1 > p.max_length)
        n2 = n1;
      else
        n2 = std::max(n1, p.max_length - n1);
      if (n1 + n2 > p.max_length) {
        n1 = p.max_length / 2;
        n2 = n1 + p.max_length % 2;
      }
      if (swap) std::swap(n1, n2);
      encoding_truncate(a, n1, p.stride, p.direction);
      encoding_truncate(*b, n2, p.stride, p.direction);
    } else {
      encoding_truncate(a, total - to_remove, p.stride, p.direction);
    }
    return;
  }
  Encoding* target = &a;
  if (p.strategy == TruncationStrategy::OnlySecond) {
    if (!b) raise<ValueError>("tokenizer: truncation strategy only_second needs a pair");
    target = &*b;
  }
  size_t len = target->ids.size();
  if (len <= to_remove)
    raise<ValueError>("tokenizer: cannot truncate: the sequence to truncate ({} tokens) is shorter than what must be "
                      "removed ({})",
                      len, to_remove);
  encoding_truncate(*target, len - to_remove, p.stride, p.direction);
}

}  // namespace

void pad_encodings(std::vector<Encoding>& encs, const PaddingParams& p) {
  if (encs.empty()) return;
  size_t len = 0;
  if (p.fixed_length) {
    len = *p.fixed_length;
  } else {
    for (auto& e : encs) len = std::max(len, e.ids.size());
  }
  if (p.pad_to_multiple_of && *p.pad_to_multiple_of > 0 && len % *p.pad_to_multiple_of)
    len += *p.pad_to_multiple_of - len % *p.pad_to_multiple_of;
  for (auto& e : encs) encoding_pad(e, len, p.pad_id, p.pad_type_id, p.pad_token, p.direction);
}

Encoding TokenizerImpl::post_process(Encoding a, std::optional<Encoding> b, bool add_special) const {
  if (truncation) {
    TruncationParams p = *truncation;
    size_t n_added = post_processor ? post_processor->added_tokens(b.has_value()) : 0;
    if (add_special && n_added > 0) {
      if (p.max_length < n_added)
        raise<ValueError>("tokenizer: truncation max_length {} is smaller than the {} special tokens", p.max_length,
                          n_added);
      p.max_length -= n_added;
    }
    truncate_encodings(a, b, p);
  }
  std::vector<Encoding> encs;
  encs.push_back(std::move(a));
  if (b) encs.push_back(std::move(*b));
  Encoding out;
  if (post_processor) {
    for (size_t i = 0; i < encs.size(); ++i) encoding_set_sequence_id(encs[i], static_cast<int32_t>(i));
    post_processor->process_encodings(encs, add_special);
    for (auto& e : encs) encoding_merge_with(out, std::move(e), false);
  } else if (encs.size() == 1) {
    out = std::move(encs[0]);
  } else {
    for (size_t i = 0; i < encs.size(); ++i) {
      encoding_set_sequence_id(encs[i], static_cast<int32_t>(i));
      encoding_merge_with(out, std::move(encs[i]), false);
    }
  }
  if (padding) {
    std::vector<Encoding> one;
    one.push_back(std::move(out));
    pad_encodings(one, *padding);
    out = std::move(one[0]);
  }
  return out;
}

static std::string clean_input(std::string_view s) {
  if (uni::is_valid_utf8(s)) return std::string(s);
  return uni::sanitize_utf8(s);
}

Encoding TokenizerImpl::encode(std::string_view a, std::optional<std::string_view> b, bool add_special) const {
  Encoding ea = encode_single(clean_input(a), 0);
  std::optional<Encoding> eb;
  if (b) eb = encode_single(clean_input(*b), 1);
  return post_process(std::move(ea), std::move(eb), add_special);
}

std::string TokenizerImpl::decode(const std::vector<uint32_t>& ids, bool skip_special) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (uint32_t id : ids) {
    auto t = added.id_to_token(id, *model);
    if (!t) raise<IndexError>("tokenizer: decode got id {}, which is not in the vocabulary", id);
    if (skip_special && added.is_special(*t)) continue;
    tokens.push_back(std::move(*t));
  }
  if (!decoder) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i) out += ' ';
      out += tokens[i];
    }
    return out;
  }
  decoder->decode_chain(tokens);
  std::string out;
  for (auto& t : tokens) out += t;
  return out;
}

// ---------------------------------------------------------------------------------------------
// tokenizer.json

namespace {

Direction direction_from(const json& j, const char* key) {
  std::string d = j.value(key, std::string("Right"));
  if (d == "Right" || d == "right") return Direction::Right;
  if (d == "Left" || d == "left") return Direction::Left;
  raise<ValueError>("tokenizer.json: direction must be Left or Right, not '{}'", d);
}

std::optional<TruncationParams> truncation_from_json(const json& j) {
  if (j.is_null()) return std::nullopt;
  TruncationParams p;
  p.max_length = j.value("max_length", size_t{512});
  p.stride = j.value("stride", size_t{0});
  p.direction = direction_from(j, "direction");
  std::string s = j.value("strategy", std::string("LongestFirst"));
  if (s == "LongestFirst" || s == "longest_first") p.strategy = TruncationStrategy::LongestFirst;
  else if (s == "OnlyFirst" || s == "only_first") p.strategy = TruncationStrategy::OnlyFirst;
  else if (s == "OnlySecond" || s == "only_second") p.strategy = TruncationStrategy::OnlySecond;
  else raise<ValueError>("tokenizer.json: unknown truncation strategy '{}'", s);
  return p;
}

json truncation_to_json(const std::optional<TruncationParams>& p) {
  if (!p) return nullptr;
  const char* s = p->strategy == TruncationStrategy::LongestFirst ? "LongestFirst"
                  : p->strategy == TruncationStrategy::OnlyFirst  ? "OnlyFirst"
                                                                  : "OnlySecond";
  return json{{"direction", p->direction == Direction::Left ? "Left" : "Right"},
              {"max_length", p->max_length},
              {"strategy", s},
              {"stride", p->stride}};
}

std::optional<PaddingParams> padding_from_json(const json& j) {
  if (j.is_null()) return std::nullopt;
  PaddingParams p;
  if (j.contains("strategy")) {
    const json& s = j["strategy"];
    if (s.is_object() && s.contains("Fixed")) p.fixed_length = s["Fixed"].get<size_t>();
    else if (!(s.is_string() && s.get<std::string>() == "BatchLongest"))
      raise<ValueError>("tokenizer.json: padding strategy must be \"BatchLongest\" or {{\"Fixed\": n}}");
  }
  p.direction = direction_from(j, "direction");
  if (j.contains("pad_to_multiple_of") && j["pad_to_multiple_of"].is_number()) p.pad_to_multiple_of = j["pad_to_multiple_of"].get<size_t>();
  p.pad_id = j.value("pad_id", 0u);
  p.pad_type_id = j.value("pad_type_id", 0u);
  p.pad_token = j.value("pad_token", std::string("[PAD]"));
  return p;
}

json padding_to_json(const std::optional<PaddingParams>& p) {
  if (!p) return nullptr;
  json j;
  j["strategy"] = p->fixed_length ? json{{"Fixed", *p->fixed_length}} : json("BatchLongest");
  j["direction"] = p->direction == Direction::Left ? "Left" : "Right";
  j["pad_to_multiple_of"] = p->pad_to_multiple_of ? json(*p->pad_to_multiple_of) : json(nullptr);
  j["pad_id"] = p->pad_id;
  j["pad_type_id"] = p->pad_type_id;
  j["pad_token"] = p->pad_token;
  return j;
}

}  // namespace

std::shared_ptr<TokenizerImpl> tokenizer_from_json(const json& j) {
  FOUNDRY_CHECK_AS(ValueError, j.is_object(), "tokenizer.json: the top level must be an object");
  auto impl = std::make_shared<TokenizerImpl>();
  if (j.contains("version") && j["version"].is_string() && j["version"].get<std::string>() != "1.0")
    raise<ValueError>("tokenizer.json: unsupported version '{}' (expected \"1.0\")", j["version"].get<std::string>());
  if (!j.contains("model")) raise<ValueError>("tokenizer.json: missing \"model\"");
  impl->model = model_from_json(j["model"]);
  if (j.contains("normalizer")) impl->normalizer = normalizer_from_json(j["normalizer"]);
  if (j.contains("pre_tokenizer")) impl->pre_tokenizer = pre_tokenizer_from_json(j["pre_tokenizer"]);
  if (j.contains("post_processor")) impl->post_processor = post_processor_from_json(j["post_processor"]);
  if (j.contains("decoder")) impl->decoder = decoder_from_json(j["decoder"]);
  if (j.contains("truncation")) impl->truncation = truncation_from_json(j["truncation"]);
  if (j.contains("padding")) impl->padding = padding_from_json(j["padding"]);
  if (j.contains("added_tokens") && !j["added_tokens"].is_null()) {
    FOUNDRY_CHECK_AS(ValueError, j["added_tokens"].is_array(), "tokenizer.json: added_tokens must be an array");
    std::vector<AddedToken> toks;
    for (auto& t : j["added_tokens"]) {
      AddedToken a;
      a.content = json_string(t, "content", "added token");
      a.special = t.value("special", false);
      a.single_word = t.value("single_word", false);
      a.lstrip = t.value("lstrip", false);
      a.rstrip = t.value("rstrip", false);
      a.normalized = t.value("normalized", !a.special);
      toks.push_back(std::move(a));
    }
    impl->added.add_tokens(toks, *impl->model, impl->normalizer.get());
  }
  return impl;
}

json TokenizerImpl::to_json() const {
  json j;
  j["version"] = "1.0";
  j["truncation"] = truncation_to_json(truncation);
  j["padding"] = padding_to_json(padding);
  std::vector<std::pair<uint32_t, AddedToken>> toks(added.by_id().begin(), added.by_id().end());
  std::sort(toks.begin(), toks.end(), [](auto& a, auto& b) { return a.first < b.first; });
  json at = json::array();
  for (auto& [id, t] : toks)
    at.push_back(json{{"id", id}, {"content", t.content}, {"single_word", t.single_word}, {"lstrip", t.lstrip},
                      {"rstrip", t.rstrip}, {"normalized", t.normalized}, {"special", t.special}});
  j["added_tokens"] = at;
  j["normalizer"] = normalizer ? normalizer->to_json() : json(nullptr);
  j["pre_tokenizer"] = pre_tokenizer ? pre_tokenizer->to_json() : json(nullptr);
  j["post_processor"] = post_processor ? post_processor->to_json() : json(nullptr);
  j["decoder"] = decoder ? decoder->to_json() : json(nullptr);
  j["model"] = model->to_json();
  return j;
}

// ---------------------------------------------------------------------------------------------
// Public API

Tokenizer::Tokenizer(std::shared_ptr<TokenizerImpl> impl) : impl_(std::move(impl)) { impl_->prepare(); }

Tokenizer tokenizer_from_impl(std::shared_ptr<TokenizerImpl> impl) { return Tokenizer::from_impl(std::move(impl)); }
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::Tokenizer(const Tokenizer& o) : impl_(std::make_shared<TokenizerImpl>(*o.impl_)) {}
Tokenizer& Tokenizer::operator=(const Tokenizer& o) {
  if (this != &o) impl_ = std::make_shared<TokenizerImpl>(*o.impl_);
  return *this;
}
Tokenizer::~Tokenizer() = default;

static std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) raise<IOError>("tokenizer: cannot open '{}'", path);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

Tokenizer Tokenizer::from_json(std::string_view text) {
  io::check_json_depth(text, "tokenizer.json");  // the pipeline's readers recurse once per level
  json j;
  try {
    j = json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    raise<ValueError>("tokenizer.json: not valid JSON: {}", e.what());
  }
  try {
    return Tokenizer(tokenizer_from_json(j));
  } catch (const json::exception& e) {
    raise<ValueError>("tokenizer.json: bad field: {}", e.what());
  }
}

namespace {
// tiktoken's encoding names; p50k_edit before p50k_base, since a file name is matched by stem.
constexpr std::pair<const char*, TiktokenEncoding> kTiktokenNames[] = {
    {"r50k_base", TiktokenEncoding::R50kBase},     {"p50k_edit", TiktokenEncoding::P50kEdit},
    {"p50k_base", TiktokenEncoding::P50kBase},     {"cl100k_base", TiktokenEncoding::Cl100kBase},
    {"o200k_base", TiktokenEncoding::O200kBase}};
}  // namespace

TiktokenEncoding tiktoken_encoding(std::string_view name) {
  for (const auto& [n, e] : kTiktokenNames)
    if (name == n) return e;
  raise<ValueError>("unknown tiktoken encoding '{}': r50k_base, p50k_base, p50k_edit, cl100k_base or o200k_base", name);
}

Tokenizer Tokenizer::from_file(const std::string& path) {
  auto ends = [&](const char* suf) {
    size_t n = std::strlen(suf);
    return path.size() >= n && path.compare(path.size() - n, n, suf) == 0;
  };
  if (ends(".model")) return from_sentencepiece(path);
  if (ends(".tiktoken")) {
    // The encoding is guessed from the file name ("cl100k_base.tiktoken"), else cl100k_base.
    for (const auto& [name, enc] : kTiktokenNames) {
      std::string_view n(name), stem = n.substr(0, n.rfind("_base"));
      if (path.find(stem) != std::string::npos) return from_tiktoken(path, enc);
    }
    return from_tiktoken(path, TiktokenEncoding::Cl100kBase);
  }
  std::string text = read_file(path);
  std::string dir = path.substr(0, path.rfind('/') + 1);
  auto exists = [](const std::string& p) { return static_cast<bool>(std::ifstream(p)); };
  if (ends("encoder.json") || ends("vocab.json")) {
    // GPT-2 style vocabulary + merges pair (encoder.json/vocab.bpe or vocab.json/merges.txt).
    for (const char* merges : {"vocab.bpe", "merges.txt"})
      if (exists(dir + merges)) return from_gpt2_files(path, dir + merges);
    raise<IOError>("tokenizer: '{}' needs vocab.bpe or merges.txt beside it", path);
  }
  if (!text.empty() && text[0] != '{' && text[0] != ' ' && text[0] != '\n') return from_sentencepiece_bytes(text);
  return from_json(text);
}

Encoding Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  return impl_->for_special(add_special_tokens).encode(text, std::nullopt, add_special_tokens);
}

Encoding Tokenizer::encode_pair(std::string_view text, std::string_view pair, bool add_special_tokens) const {
  return impl_->for_special(add_special_tokens).encode(text, pair, add_special_tokens);
}

std::vector<uint32_t> Tokenizer::encode_ids(std::string_view text, bool add_special_tokens) const {
  const TokenizerImpl& im = impl_->for_special(add_special_tokens);
  bool no_specials = !add_special_tokens || !im.post_processor || im.post_processor->added_tokens(false) == 0;
  if (no_specials) {
    std::vector<uint32_t> ids;
    if (im.encode_ids_fast(text, ids)) return ids;
  }
  return im.encode(text, std::nullopt, add_special_tokens).ids;
}

std::vector<Encoding> Tokenizer::encode_batch(const std::vector<std::string>& texts, bool add_special_tokens,
                                              size_t num_threads) const {
  std::vector<Encoding> out(texts.size());
  if (num_threads == 0) num_threads = ThreadPool::instance().size();
  ThreadPool::instance().parallel_for(texts.size(), num_threads, [&](size_t i) {
    out[i] = impl_->for_special(add_special_tokens).encode(texts[i], std::nullopt, add_special_tokens);
  });
  if (impl_->padding) pad_encodings(out, *impl_->padding);
  return out;
}

std::vector<Encoding> Tokenizer::encode_batch_pairs(const std::vector<std::pair<std::string, std::string>>& pairs,
                                                    bool add_special_tokens, size_t num_threads) const {
  std::vector<Encoding> out(pairs.size());
  if (num_threads == 0) num_threads = ThreadPool::instance().size();
  ThreadPool::instance().parallel_for(pairs.size(), num_threads, [&](size_t i) {
    out[i] = impl_->for_special(add_special_tokens).encode(pairs[i].first, std::string_view(pairs[i].second),
                                                           add_special_tokens);
  });
  if (impl_->padding) pad_encodings(out, *impl_->padding);
  return out;
}

std::string Tokenizer::decode(const std::vector<uint32_t>& ids, bool skip_special_tokens) const {
  return impl_->decode(ids, skip_special_tokens);
}

std::vector<std::string> Tokenizer::decode_batch(const std::vector<std::vector<uint32_t>>& ids,
                                                 bool skip_special_tokens, size_t num_threads) const {
  std::vector<std::string> out(ids.size());
  if (num_threads == 0) num_threads = ThreadPool::instance().size();
  ThreadPool::instance().parallel_for(ids.size(), num_threads,
                                      [&](size_t i) { out[i] = impl_->decode(ids[i], skip_special_tokens); });
  return out;
}

std::optional<uint32_t> Tokenizer::token_to_id(std::string_view token) const {
  return impl_->added.token_to_id(token, *impl_->model);
}

std::optional<std::string> Tokenizer::id_to_token(uint32_t id) const { return impl_->added.id_to_token(id, *impl_->model); }

std::unordered_map<std::string, uint32_t> Tokenizer::get_vocab(bool with_added_tokens) const {
  auto v = impl_->model->get_vocab();
  if (with_added_tokens)
    for (auto& [t, id] : impl_->added.by_content()) v[t] = id;
  return v;
}

size_t Tokenizer::vocab_size(bool with_added_tokens) const {
  if (!with_added_tokens) return impl_->model->vocab_size();
  size_t n = impl_->model->vocab_size();
  for (auto& [t, id] : impl_->added.by_content())
    if (!impl_->model->token_to_id(t)) ++n;
  return n;
}

size_t Tokenizer::add_tokens(const std::vector<AddedToken>& tokens) {
  return impl_->added.add_tokens(tokens, *impl_->model, impl_->normalizer.get());
}

size_t Tokenizer::add_special_tokens(const std::vector<std::string>& tokens) {
  std::vector<AddedToken> t;
  for (auto& s : tokens) t.push_back(AddedToken::make(s, true));
  return add_tokens(t);
}

void Tokenizer::set_encode_special_tokens(bool value) { impl_->added.encode_special_tokens = value; }
bool Tokenizer::encode_special_tokens() const { return impl_->added.encode_special_tokens; }
void Tokenizer::set_truncation(std::optional<TruncationParams> params) { impl_->truncation = std::move(params); }
void Tokenizer::set_padding(std::optional<PaddingParams> params) { impl_->padding = std::move(params); }
const std::optional<TruncationParams>& Tokenizer::truncation() const { return impl_->truncation; }
const std::optional<PaddingParams>& Tokenizer::padding() const { return impl_->padding; }

std::string Tokenizer::to_json(bool pretty) const {
  return impl_->to_json().dump(pretty ? 2 : -1, ' ', false, json::error_handler_t::replace);
}

void Tokenizer::save(const std::string& path, bool pretty) const {
  std::ofstream f(path, std::ios::binary);
  if (!f) raise<IOError>("tokenizer: cannot write '{}'", path);
  f << to_json(pretty);
  if (!f) raise<IOError>("tokenizer: failed writing '{}'", path);
}

}  // namespace foundry::text
