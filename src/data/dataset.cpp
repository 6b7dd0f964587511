#include "foundry/data/dataset.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "foundry/core/rng.h"
#include "foundry/io/npy.h"
#include "foundry/text/tokenizer.h"
#include "foundry/io/atomic_file.h"
#include "foundry/io/json_depth.h"
#include "text/unicode.h"

namespace foundry::data {

using json = nlohmann::json;

void for_each_line(const std::string& path, const std::function<void(std::string_view)>& fn) {
  io::refuse_directory(path);  // "produced no tokens" otherwise
  std::ifstream f(path, std::ios::binary);
  if (!f) raise<IOError>("cannot open '{}': {}", path, std::strerror(errno));
  std::string carry;
  std::vector<char> block(1 << 20);
  while (f) {
    f.read(block.data(), std::streamsize(block.size()));
    std::streamsize got = f.gcount();
    if (got <= 0) break;
    size_t start = 0;
    for (size_t i = 0; i < size_t(got); ++i) {
      if (block[i] != '\n') continue;
      if (carry.empty()) {
        fn(std::string_view(block.data() + start, i - start));
      } else {
        carry.append(block.data() + start, i - start);
        fn(carry);
        carry.clear();
      }
      start = i + 1;
    }
    carry.append(block.data() + start, size_t(got) - start);
  }
  if (!carry.empty()) fn(carry);
}

void for_each_jsonl(const std::string& path, const std::string& field, const std::function<void(const std::string&)>& fn) {
  int64_t line_no = 0;
  for_each_line(path, [&](std::string_view line) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) return;
    io::check_json_depth(line, path + ":" + std::to_string(line_no));
    json rec;
    try {
      rec = json::parse(line);
    } catch (const json::exception& e) {
      raise<IOError>("{}:{}: malformed JSON: {}", path, line_no, e.what());
    }
    const json* cur = &rec;
    size_t pos = 0;
    while (pos <= field.size()) {
      size_t dot = field.find('.', pos);
      std::string key = field.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
      if (!cur->is_object() || !cur->contains(key)) return;
      cur = &(*cur)[key];
      if (dot == std::string::npos) break;
      pos = dot + 1;
    }
    if (!cur->is_string()) raise<IOError>("{}:{}: field '{}' is not a string", path, line_no, field);
    fn(cur->get<std::string>());
  });
}

// ---- encoders ------------------------------------------------------------------------------

namespace {
// Splits UTF-8 text into characters (invalid bytes become single-byte "characters").
std::vector<std::string> utf8_chars(std::string_view s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if (i + len > s.size()) len = 1;
    out.emplace_back(s.substr(i, len));
    i += len;
  }
  return out;
}
// The offset of the first byte that does not start a well-formed UTF-8 sequence (s.size(): none).
size_t first_ill_formed_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const size_t len = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (len == 0 || i + len > s.size() || (len > 1 && !text::uni::is_valid_utf8(s.substr(i, len)))) return i;
    i += len;
  }
  return s.size();
}

}  // namespace

struct TextEncoder::Impl {
  std::string kind;
  std::vector<std::string> chars;  // char kind: id -> character
  std::map<std::string, uint32_t> char_ids;
  std::string tokenizer_path;
  std::optional<text::Tokenizer> tokenizer;
};

TextEncoder::TextEncoder() : impl_(std::make_unique<Impl>()) {}
TextEncoder::~TextEncoder() = default;
TextEncoder::TextEncoder(TextEncoder&&) noexcept = default;
TextEncoder& TextEncoder::operator=(TextEncoder&&) noexcept = default;

TextEncoder TextEncoder::bytes() {
  TextEncoder e;
  e.impl_->kind = "byte";
  return e;
}

TextEncoder TextEncoder::chars_of(const std::string& corpus) {
  // Its characters are stored as JSON (meta.json), which must be UTF-8: name the first bad byte
  // here rather than fail in the JSON writer after the shards were written.
  if (const size_t bad = first_ill_formed_utf8(corpus); bad < corpus.size())
    raise<ValueError>("the char tokenizer needs UTF-8 text; the corpus has an ill-formed byte 0x{:02X} at offset {} "
                      "(convert it to UTF-8, or use tokenizer = \"byte\")",
                      static_cast<unsigned char>(corpus[bad]), bad);
  TextEncoder e;
  e.impl_->kind = "char";
  std::set<std::string> set;
  for (auto& c : utf8_chars(corpus)) set.insert(c);
  e.impl_->chars.assign(set.begin(), set.end());
  for (size_t i = 0; i < e.impl_->chars.size(); ++i) e.impl_->char_ids[e.impl_->chars[i]] = uint32_t(i);
  return e;
}

TextEncoder TextEncoder::from_tokenizer_file(const std::string& path) {
  TextEncoder e;
  e.impl_->kind = "tokenizer";
  e.impl_->tokenizer_path = std::filesystem::absolute(path).string();
  e.impl_->tokenizer = text::Tokenizer::from_file(path);
  return e;
}

TextEncoder TextEncoder::from_description(const std::string& text) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& ex) {
    raise<IOError>("encoder description is not valid JSON: {}", ex.what());
  }
  std::string kind = j.value("kind", "");
  if (kind == "byte") return bytes();
  if (kind == "tokenizer") return from_tokenizer_file(j.at("path").get<std::string>());
  if (kind == "char") {
    TextEncoder e;
    e.impl_->kind = "char";
    e.impl_->chars = j.at("chars").get<std::vector<std::string>>();
    for (size_t i = 0; i < e.impl_->chars.size(); ++i) e.impl_->char_ids[e.impl_->chars[i]] = uint32_t(i);
    return e;
  }
  raise<ValueError>("unknown encoder kind '{}' (expected byte, char or tokenizer)", kind);
}

std::vector<uint32_t> TextEncoder::encode(std::string_view text) const {
  std::vector<uint32_t> ids;
  if (impl_->kind == "byte") {
    for (unsigned char c : text) ids.push_back(c);
  } else if (impl_->kind == "char") {
    for (auto& c : utf8_chars(text)) {
      auto it = impl_->char_ids.find(c);
      if (it == impl_->char_ids.end())
        raise<ValueError>("character '{}' is not in the character vocabulary ({} characters)", c, impl_->chars.size());
      ids.push_back(it->second);
    }
  } else {
    ids = impl_->tokenizer->encode_ids(text, /*add_special_tokens=*/false);
  }
  return ids;
}

std::string TextEncoder::decode(const std::vector<uint32_t>& ids) const {
  std::string out;
  if (impl_->kind == "byte") {
    for (uint32_t id : ids) {
      FOUNDRY_CHECK_AS(IndexError, id < 256, "byte decoder: id {} is not a byte", id);
      out += char(id);
    }
  } else if (impl_->kind == "char") {
    for (uint32_t id : ids) {
      FOUNDRY_CHECK_AS(IndexError, id < impl_->chars.size(), "char decoder: id {} outside the {}-character vocabulary",
                       id, impl_->chars.size());
      out += impl_->chars[id];
    }
  } else {
    out = impl_->tokenizer->decode(ids, /*skip_special_tokens=*/false);
  }
  return out;
}

int64_t TextEncoder::vocab_size() const {
  if (impl_->kind == "byte") return 256;
  if (impl_->kind == "char") return int64_t(impl_->chars.size());
  return int64_t(impl_->tokenizer->vocab_size(true));
}

std::string TextEncoder::describe() const {
  json j;
  j["kind"] = impl_->kind;
  j["vocab_size"] = vocab_size();
  if (impl_->kind == "char") j["chars"] = impl_->chars;
  if (impl_->kind == "tokenizer") j["path"] = impl_->tokenizer_path;
  return j.dump();
}

const std::string& TextEncoder::kind() const { return impl_->kind; }

PreparedDataset prepare_dataset(const std::string& input, const std::string& out_dir, const TextEncoder& encoder,
                                double val_fraction, const std::string& jsonl_field) {
  FOUNDRY_CHECK_AS(ValueError, val_fraction >= 0 && val_fraction < 1, "prepare: val_fraction must be in [0, 1), got {}",
                   val_fraction);
  std::filesystem::create_directories(out_dir);
  std::vector<uint32_t> tokens;
  auto add = [&](std::string_view text) {
    auto ids = encoder.encode(text);
    tokens.insert(tokens.end(), ids.begin(), ids.end());
  };
  if (!jsonl_field.empty()) {
    for_each_jsonl(input, jsonl_field, [&](const std::string& t) { add(t); });
  } else {
    // Lines keep their newline so that the text round-trips.
    for_each_line(input, [&](std::string_view line) {
      add(line);
      add("\n");
    });
  }
  FOUNDRY_CHECK_AS(ValueError, !tokens.empty(), "prepare: '{}' produced no tokens", input);
  int64_t n_val = int64_t(double(tokens.size()) * val_fraction);
  std::vector<uint32_t> train(tokens.begin(), tokens.end() - n_val), val(tokens.end() - n_val, tokens.end());
  PreparedDataset p;
  p.train_path = out_dir + "/train.bin";
  p.val_path = out_dir + "/val.bin";
  p.meta_path = out_dir + "/meta.json";
  write_token_shard(p.train_path, train);
  write_token_shard(p.val_path, val);
  json meta = json::parse(encoder.describe());
  meta["source"] = input;
  meta["field"] = jsonl_field;
  meta["val_fraction"] = val_fraction;
  meta["train_tokens"] = train.size();
  meta["val_tokens"] = val.size();
  io::write_file_atomic(p.meta_path, meta.dump(1));
  p.train_tokens = int64_t(train.size());
  p.val_tokens = int64_t(val.size());
  p.vocab_size = encoder.vocab_size();
  return p;
}

// ---- batches -------------------------------------------------------------------------------

LMBatches::LMBatches(std::shared_ptr<const TokenShard> shard, int64_t batch, int64_t block, uint64_t seed, int64_t begin,
                     int64_t end)
    : shard_(std::move(shard)), batch_(batch), block_(block), begin_(begin), end_(end < 0 ? shard_->size() : end),
      seed_(seed) {
  FOUNDRY_CHECK_AS(ValueError, batch > 0 && block > 0, "batches: batch and block sizes must be positive");
  FOUNDRY_CHECK_AS(ValueError, end_ - begin_ > block_,
                   "batches: the token range ({} tokens of '{}') must be longer than block_size + 1 = {}",
                   end_ - begin_, shard_->path(), block_ + 1);
}

namespace {
std::pair<Tensor, Tensor> windows(const TokenShard& shard, const std::vector<int64_t>& starts, int64_t block) {
  int64_t B = int64_t(starts.size());
  Tensor x = empty({B, block}, DType::Int64), y = empty({B, block}, DType::Int64);
  std::vector<uint32_t> buf(size_t(block + 1));
  int64_t* xp = x.data<int64_t>();
  int64_t* yp = y.data<int64_t>();
  for (int64_t b = 0; b < B; ++b) {
    shard.copy(starts[size_t(b)], block + 1, buf.data());
    for (int64_t t = 0; t < block; ++t) {
      xp[b * block + t] = buf[size_t(t)];
      yp[b * block + t] = buf[size_t(t + 1)];
    }
  }
  return {x, y};
}
}  // namespace

std::pair<Tensor, Tensor> LMBatches::get(int64_t index) const {
  std::vector<int64_t> starts(static_cast<size_t>(batch_));
  uint64_t span = uint64_t(end_ - begin_ - block_);  // valid starts: [begin, end - block - 1]
  for (int64_t b = 0; b < batch_; ++b) {
    auto r = philox4x32(uint64_t(index) * uint64_t(batch_) + uint64_t(b), 0x4c4d42ull, seed_);
    uint64_t bits = (uint64_t(r[0]) << 32) | r[1];
    starts[size_t(b)] = begin_ + int64_t(bits % span);
  }
  return windows(*shard_, starts, block_);
}

int64_t LMBatches::sequential_count() const { return (end_ - begin_ - 1) / (block_ * batch_); }

std::pair<Tensor, Tensor> LMBatches::sequential(int64_t index) const {
  FOUNDRY_CHECK_AS(IndexError, index >= 0 && index < sequential_count(), "sequential batch {} out of range ({})", index,
                   sequential_count());
  std::vector<int64_t> starts;
  for (int64_t b = 0; b < batch_; ++b) starts.push_back(begin_ + (index * batch_ + b) * block_);
  return windows(*shard_, starts, block_);
}

}  // namespace foundry::data
