// Native loaders for non-HF formats, each turned into the equivalent HF pipeline:
//  - SentencePiece .model (protobuf ModelProto read with a minimal wire-format reader),
//  - tiktoken rank files (.tiktoken: "base64(token) rank" lines) with the r50k/p50k/cl100k/o200k
//    split patterns and special tokens,
//  - GPT-2 encoder.json + vocab.bpe.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "text/base64.h"
#include "text/numbers.h"
#include "text/tokenizer_impl.h"
#include "foundry/io/json_depth.h"

namespace foundry::text {

ModelPtr make_spm_unigram(std::vector<std::pair<std::string, double>> vocab, std::vector<bool> matchable,
                          std::optional<size_t> unk_id, bool byte_fallback, double min_score);

namespace {

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) raise<IOError>("tokenizer: cannot open '{}'", path);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// ---------------------------------------------------------------------------------------------
// Protobuf wire format

class Wire {
 public:
  explicit Wire(std::string_view d) : d_(d) {}
  bool done() const { return p_ >= d_.size(); }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p_ >= d_.size()) raise<ValueError>("sentencepiece model: truncated varint");
      auto b = static_cast<uint8_t>(d_[p_++]);
      v |= static_cast<uint64_t>(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
    raise<ValueError>("sentencepiece model: varint too long");
  }
  std::string_view bytes() {
    uint64_t n = varint();
    if (n > d_.size() - p_) raise<ValueError>("sentencepiece model: truncated field ({} bytes announced, {} left)", n, d_.size() - p_);
    std::string_view s = d_.substr(p_, n);
    p_ += n;
    return s;
  }
  uint32_t fixed32() {
    if (d_.size() - p_ < 4) raise<ValueError>("sentencepiece model: truncated fixed32");
    uint32_t v;
    std::memcpy(&v, d_.data() + p_, 4);
    p_ += 4;
    return v;
  }
  void skip(int wt) {
    switch (wt) {
      case 0: varint(); break;
      case 1:
        if (d_.size() - p_ < 8) raise<ValueError>("sentencepiece model: truncated fixed64");
        p_ += 8;
        break;
      case 2: bytes(); break;
      case 5: fixed32(); break;
      default: raise<ValueError>("sentencepiece model: bad wire type {}", wt);
    }
  }
  /// Reads a tag; returns false at the end.
  bool tag(uint32_t& field, int& wt) {
    if (done()) return false;
    uint64_t t = varint();
    field = static_cast<uint32_t>(t >> 3);
    wt = static_cast<int>(t & 7);
    if (field == 0) raise<ValueError>("sentencepiece model: field number 0");
    return true;
  }

 private:
  std::string_view d_;
  size_t p_ = 0;
};

struct SpmPiece {
  std::string piece;
  float score = 0;
  int type = 1;  // NORMAL=1 UNKNOWN=2 CONTROL=3 USER_DEFINED=4 UNUSED=5 BYTE=6
};

struct SpmModel {
  std::vector<SpmPiece> pieces;
  int model_type = 1;  // UNIGRAM=1 BPE=2 WORD=3 CHAR=4
  bool byte_fallback = false;
  bool treat_ws_as_suffix = false;
  std::string charsmap;
  std::string norm_name;
  bool add_dummy_prefix = true, remove_extra = true, escape_ws = true;
};

SpmModel parse_spm(std::string_view data) {
  SpmModel m;
  Wire w(data);
  uint32_t f;
  int wt;
  bool any = false;
  while (w.tag(f, wt)) {
    any = true;
    if (f == 1 && wt == 2) {
      Wire p(w.bytes());
      SpmPiece sp;
      uint32_t pf;
      int pwt;
      while (p.tag(pf, pwt)) {
        if (pf == 1 && pwt == 2) sp.piece = std::string(p.bytes());
        else if (pf == 2 && pwt == 5) {
          uint32_t bits = p.fixed32();
          std::memcpy(&sp.score, &bits, 4);
        } else if (pf == 3 && pwt == 0) sp.type = static_cast<int>(p.varint());
        else p.skip(pwt);
      }
      m.pieces.push_back(std::move(sp));
    } else if (f == 2 && wt == 2) {
      Wire t(w.bytes());
      uint32_t tf;
      int twt;
      while (t.tag(tf, twt)) {
        if (tf == 3 && twt == 0) m.model_type = static_cast<int>(t.varint());
        else if (tf == 35 && twt == 0) m.byte_fallback = t.varint() != 0;
        else if (tf == 24 && twt == 0) m.treat_ws_as_suffix = t.varint() != 0;
        else t.skip(twt);
      }
    } else if (f == 3 && wt == 2) {
      Wire n(w.bytes());
      uint32_t nf;
      int nwt;
      while (n.tag(nf, nwt)) {
        if (nf == 1 && nwt == 2) m.norm_name = std::string(n.bytes());
        else if (nf == 2 && nwt == 2) m.charsmap = std::string(n.bytes());
        else if (nf == 3 && nwt == 0) m.add_dummy_prefix = n.varint() != 0;
        else if (nf == 4 && nwt == 0) m.remove_extra = n.varint() != 0;
        else if (nf == 5 && nwt == 0) m.escape_ws = n.varint() != 0;
        else n.skip(nwt);
      }
    } else {
      w.skip(wt);
    }
  }
  if (!any || m.pieces.empty()) raise<ValueError>("sentencepiece model: no pieces (not a ModelProto?)");
  if (m.model_type != 1 && m.model_type != 2)
    raise<NotImplementedError>("sentencepiece model: model type {} (WORD/CHAR) is not supported", m.model_type);
  for (auto& p : m.pieces)
    if (!uni::is_valid_utf8(p.piece)) raise<ValueError>("sentencepiece model: a piece is not valid UTF-8");
  return m;
}

// ---------------------------------------------------------------------------------------------
// tiktoken

struct TiktokenSpec {
  const char* pattern;
  std::vector<std::pair<const char*, uint32_t>> specials;
};

const char* const kR50kPattern = "'(?:[sdmt]|ll|ve|re)| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
const char* const kCl100kPattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";
const char* const kO200kPattern =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

TiktokenSpec tiktoken_spec(TiktokenEncoding e) {
  switch (e) {
    case TiktokenEncoding::R50kBase: return {kR50kPattern, {{"<|endoftext|>", 50256}}};
    case TiktokenEncoding::P50kBase: return {kR50kPattern, {{"<|endoftext|>", 50256}}};
    case TiktokenEncoding::P50kEdit:
      return {kR50kPattern,
              {{"<|endoftext|>", 50256}, {"<|fim_prefix|>", 50281}, {"<|fim_middle|>", 50282}, {"<|fim_suffix|>", 50283}}};
    case TiktokenEncoding::Cl100kBase:
      return {kCl100kPattern,
              {{"<|endoftext|>", 100257},
               {"<|fim_prefix|>", 100258},
               {"<|fim_middle|>", 100259},
               {"<|fim_suffix|>", 100260},
               {"<|endofprompt|>", 100276}}};
    case TiktokenEncoding::O200kBase: return {kO200kPattern, {{"<|endoftext|>", 199999}, {"<|endofprompt|>", 200018}}};
  }
  return {kCl100kPattern, {}};
}

// Builds a byte-level BPE whose merge of (a, b) has the rank of the token a+b: applying the
// lowest-ranked pair first is then exactly tiktoken's byte_pair_merge.
std::shared_ptr<TokenizerImpl> tiktoken_impl(const std::vector<std::pair<std::string, uint32_t>>& ranks,
                                             const char* pattern,
                                             const std::vector<std::pair<std::string, uint32_t>>& specials) {
  StringMap<uint32_t> rank_of;
  rank_of.reserve(ranks.size() * 2);
  for (auto& [bytes, r] : ranks) rank_of[bytes] = r;
  BpeConfig cfg;
  cfg.vocab.reserve(ranks.size() + specials.size());
  for (auto& [bytes, r] : ranks) cfg.vocab.emplace_back(bytes_to_byte_level(bytes), r);
  for (auto& [tok, id] : specials) cfg.vocab.emplace_back(bytes_to_byte_level(tok), id);
  std::vector<std::pair<uint32_t, std::pair<std::string, std::string>>> merges;
  for (auto& [bytes, r] : ranks) {
    if (bytes.size() < 2) continue;
    for (size_t i = 1; i < bytes.size(); ++i) {
      std::string_view a(bytes.data(), i), b(bytes.data() + i, bytes.size() - i);
      auto ia = rank_of.find(a), ib = rank_of.find(b);
      if (ia == rank_of.end() || ib == rank_of.end()) continue;
      // A pair can only ever be merged once the halves exist, i.e. with lower ranks.
      if (ia->second >= r || ib->second >= r) continue;
      merges.push_back({r, {bytes_to_byte_level(a), bytes_to_byte_level(b)}});
    }
  }
  std::stable_sort(merges.begin(), merges.end(), [](auto& x, auto& y) { return x.first < y.first; });
  for (auto& [r, m] : merges) {
    cfg.merges.push_back(std::move(m));
    cfg.merge_ranks.push_back(r);
  }
  cfg.ignore_merges = true;
  auto impl = std::make_shared<TokenizerImpl>();
  impl->model = make_bpe(std::move(cfg));
  impl->pre_tokenizer = make_sequence_pre({make_split(pattern, true, SplitBehavior::Isolated, false),
                                           make_byte_level_pre(false, true, false)});
  impl->decoder = make_byte_level_decoder();
  impl->post_processor = make_byte_level_processor(false, false);
  std::vector<AddedToken> toks;
  for (auto& [t, id] : specials) toks.push_back(AddedToken::make(t, true));
  impl->added.add_tokens(toks, *impl->model, nullptr);
  // The vocabulary holds the byte-level form of the specials, so make their text map to the ids.
  return impl;
}

Tokenizer from_spm_model(SpmModel m);

}  // namespace

// Defined in tokenizer.cpp via the public API; these use the private constructor through a
// friend-less path: Tokenizer is constructed from TokenizerImpl in tokenizer_from_impl.
Tokenizer tokenizer_from_impl(std::shared_ptr<TokenizerImpl> impl);

Tokenizer Tokenizer::from_sentencepiece(const std::string& path) { return from_sentencepiece_bytes(slurp(path)); }

Tokenizer::SentencePieceVocab Tokenizer::read_sentencepiece_vocab(const std::string& path) {
  const SpmModel m = parse_spm(slurp(path));
  SentencePieceVocab v;
  for (const SpmPiece& p : m.pieces) {
    v.pieces.push_back(p.piece);
    v.scores.push_back(p.score);
    v.types.push_back(p.type);
  }
  v.model_type = m.model_type;
  v.add_dummy_prefix = m.add_dummy_prefix;
  return v;
}

Tokenizer Tokenizer::from_sentencepiece_vocab(const SentencePieceVocab& v) {
  if (v.pieces.empty() || v.scores.size() != v.pieces.size() || v.types.size() != v.pieces.size())
    raise<ValueError>("sentencepiece vocabulary: {} pieces, {} scores and {} types (all must be equal and non-zero)",
                      v.pieces.size(), v.scores.size(), v.types.size());
  if (v.model_type != 1 && v.model_type != 2)
    raise<NotImplementedError>("sentencepiece vocabulary: model type {} is not supported (1 unigram, 2 BPE)", v.model_type);
  SpmModel m;
  m.model_type = v.model_type;
  m.add_dummy_prefix = v.add_dummy_prefix;
  m.remove_extra = false;
  m.escape_ws = true;
  for (size_t i = 0; i < v.pieces.size(); ++i) {
    if (v.types[i] < 1 || v.types[i] > 6)
      raise<ValueError>("sentencepiece vocabulary: piece {} has type {} (1..6 expected)", i, v.types[i]);
    if (!uni::is_valid_utf8(v.pieces[i])) raise<ValueError>("sentencepiece vocabulary: piece {} is not valid UTF-8", i);
    m.pieces.push_back({v.pieces[i], v.scores[i], v.types[i]});
    if (v.types[i] == 6) m.byte_fallback = true;
  }
  return from_spm_model(std::move(m));
}

Tokenizer Tokenizer::from_sentencepiece_bytes(std::string_view bytes) { return from_spm_model(parse_spm(bytes)); }

namespace {

Tokenizer from_spm_model(SpmModel m) {
  auto impl = std::make_shared<TokenizerImpl>();
  std::optional<size_t> unk_id;
  for (size_t i = 0; i < m.pieces.size(); ++i)
    if (m.pieces[i].type == 2 && !unk_id) unk_id = i;
  // SentencePiece matches NORMAL, USER_DEFINED and UNUSED pieces in text; CONTROL, UNKNOWN and
  // BYTE pieces only come from ids. Give the latter a form no text can produce.
  if (m.model_type == 1) {
    float min_score = INFINITY, max_score = -INFINITY;
    for (auto& p : m.pieces)
      if (p.type == 1) {
        min_score = std::min(min_score, p.score);
        max_score = std::max(max_score, p.score);
      }
    std::vector<std::pair<std::string, double>> vocab;
    std::vector<bool> matchable;
    for (auto& p : m.pieces) {
      double score = p.score;
      if (p.type == 4) score = static_cast<double>(uni::char_count(p.piece)) * max_score - 0.1;
      vocab.emplace_back(p.piece, score);
      matchable.push_back(p.type == 1 || p.type == 4);
    }
    impl->model = make_spm_unigram(std::move(vocab), std::move(matchable), unk_id, m.byte_fallback, min_score);
  } else {
    BpeConfig cfg;
    StringMap<uint32_t> id_of;
    for (size_t i = 0; i < m.pieces.size(); ++i) {
      const auto& p = m.pieces[i];
      cfg.vocab.emplace_back(p.piece, static_cast<uint32_t>(i));
      if (p.type == 1 || p.type == 4 || p.type == 5) id_of.emplace(p.piece, static_cast<uint32_t>(i));
    }
    // Dense rank of the score (higher score merges first; equal scores tie on position).
    std::vector<float> scores;
    for (auto& p : m.pieces)
      if (p.type == 1 || p.type == 4 || p.type == 5) scores.push_back(p.score);
    std::sort(scores.begin(), scores.end(), std::greater<float>());
    scores.erase(std::unique(scores.begin(), scores.end()), scores.end());
    auto rank_of = [&](float s) {
      return static_cast<uint32_t>(std::lower_bound(scores.begin(), scores.end(), s, std::greater<float>()) - scores.begin());
    };
    std::vector<std::pair<uint32_t, std::pair<std::string, std::string>>> merges;
    for (auto& p : m.pieces) {
      if (!(p.type == 1 || p.type == 4 || p.type == 5)) continue;
      const std::string& s = p.piece;
      size_t i = 0;
      uni::decode(s, i);
      while (i < s.size()) {
        std::string_view a(s.data(), i), b(s.data() + i, s.size() - i);
        if (id_of.count(a) && id_of.count(b)) merges.push_back({rank_of(p.score), {std::string(a), std::string(b)}});
        uni::decode(s, i);
      }
    }
    std::stable_sort(merges.begin(), merges.end(), [](auto& x, auto& y) { return x.first < y.first; });
    for (auto& [r, mg] : merges) {
      cfg.merges.push_back(std::move(mg));
      cfg.merge_ranks.push_back(r);
    }
    if (unk_id) cfg.unk_token = m.pieces[*unk_id].piece;
    cfg.byte_fallback = m.byte_fallback;
    cfg.fuse_unk = true;
    impl->model = make_bpe(std::move(cfg));
  }
  impl->normalizer = make_spm_normalizer(m.charsmap, m.add_dummy_prefix, m.remove_extra, m.escape_ws);
  // Decoder as HF's converters write it.
  std::vector<DecoderPtr> dec;
  // SentencePiece renders the unknown piece as " \u2047 " when decoding.
  if (unk_id) dec.push_back(make_replace_decoder(m.pieces[*unk_id].piece, " \xE2\x81\x87 "));
  dec.push_back(make_replace_decoder("\xE2\x96\x81", " "));
  if (m.byte_fallback) dec.push_back(make_byte_fallback_decoder());
  dec.push_back(make_fuse_decoder());
  if (m.add_dummy_prefix) dec.push_back(make_strip_decoder(U' ', 1, 0));
  impl->decoder = make_decoder_sequence(std::move(dec));
  // Control and unknown pieces are special tokens (so decode can skip them); BOS is added for
  // BPE (Llama) models as HF's LlamaTokenizer does.
  std::vector<AddedToken> specials;
  std::optional<std::pair<std::string, uint32_t>> bos;
  for (size_t i = 0; i < m.pieces.size(); ++i) {
    const auto& p = m.pieces[i];
    if (p.type == 2 || p.type == 3) {
      AddedToken t = AddedToken::make(p.piece, true);
      specials.push_back(t);
      if (p.piece == "<s>") bos = std::make_pair(p.piece, static_cast<uint32_t>(i));
    }
  }
  impl->added.add_tokens(specials, *impl->model, impl->normalizer.get());
  // SentencePiece never matches control or unknown pieces in text.
  impl->added.encode_special_tokens = true;
  if (m.model_type == 2 && bos)
    impl->post_processor = make_template_processor(bos->first + ":0 $A:0", bos->first + ":0 $A:0 " + bos->first + ":1 $B:1",
                                                   {*bos});
  return tokenizer_from_impl(std::move(impl));
}

}  // namespace

Tokenizer Tokenizer::from_tiktoken(const std::string& path, TiktokenEncoding encoding) {
  std::string text = slurp(path);
  std::vector<std::pair<std::string, uint32_t>> ranks;
  std::istringstream in(text);
  std::string line;
  size_t lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    size_t sp = line.find(' ');
    if (sp == std::string::npos || sp + 1 >= line.size())
      raise<ValueError>("tiktoken file '{}': line {} is not \"<base64> <rank>\"", path, lineno);
    std::string rank_s = line.substr(sp + 1);
    std::optional<uint32_t> rank = parse_u32(rank_s);
    if (!rank) raise<ValueError>("tiktoken file '{}': line {} has a bad rank '{}'", path, lineno, rank_s);
    ranks.emplace_back(base64_decode(line.substr(0, sp)), *rank);
  }
  if (ranks.empty()) raise<ValueError>("tiktoken file '{}' has no ranks", path);
  TiktokenSpec spec = tiktoken_spec(encoding);
  std::vector<std::pair<std::string, uint32_t>> specials;
  for (auto& [t, id] : spec.specials) specials.emplace_back(t, id);
  std::shared_ptr<TokenizerImpl> impl = tiktoken_impl(ranks, spec.pattern, specials);
  auto ordinary = std::make_shared<TokenizerImpl>(*impl);
  ordinary->added.encode_special_tokens = true;
  ordinary->prepare();
  impl->ordinary = std::move(ordinary);
  return tokenizer_from_impl(std::move(impl));
}

Tokenizer Tokenizer::from_gpt2_files(const std::string& encoder_json, const std::string& vocab_bpe) {
  json enc;
  try {
    const std::string text = slurp(encoder_json);
    io::check_json_depth(text, "GPT-2 encoder.json '" + encoder_json + "'");
    enc = json::parse(text);
  } catch (const json::exception& e) {
    raise<ValueError>("GPT-2 encoder.json '{}': {}", encoder_json, e.what());
  }
  FOUNDRY_CHECK_AS(ValueError, enc.is_object(), "GPT-2 encoder.json '{}' must be an object", encoder_json);
  BpeConfig cfg;
  for (auto it = enc.begin(); it != enc.end(); ++it) {
    FOUNDRY_CHECK_AS(ValueError, it.value().is_number_integer(), "GPT-2 encoder.json: id of '{}' must be an integer", it.key());
    cfg.vocab.emplace_back(it.key(), it.value().get<uint32_t>());
  }
  std::istringstream in(slurp(vocab_bpe));
  std::string line;
  size_t lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.rfind("#version", 0) == 0 || line.empty()) continue;
    size_t sp = line.find(' ');
    if (sp == std::string::npos || line.find(' ', sp + 1) != std::string::npos)
      raise<ValueError>("GPT-2 vocab.bpe '{}': line {} is not \"a b\"", vocab_bpe, lineno);
    cfg.merges.emplace_back(line.substr(0, sp), line.substr(sp + 1));
  }
  auto impl = std::make_shared<TokenizerImpl>();
  impl->model = make_bpe(std::move(cfg));
  impl->pre_tokenizer = make_byte_level_pre(false, true, true);
  impl->decoder = make_byte_level_decoder();
  impl->post_processor = make_byte_level_processor(false, false);
  if (impl->model->token_to_id("<|endoftext|>"))
    impl->added.add_tokens({AddedToken::make("<|endoftext|>", true)}, *impl->model, nullptr);
  return tokenizer_from_impl(std::move(impl));
}

}  // namespace foundry::text
