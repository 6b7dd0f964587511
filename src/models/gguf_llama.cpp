// Llama-architecture GGUF files: converting an HF Llama folder to GGUF with llama.cpp's tensor
// names and hyper-parameter keys (Q and K projection rows permuted from HF's rotate-half layout
// back to the interleaved one, as llama.cpp's converter does), and loading such files into the
// shared decoder (the permutation undone, quantized tensors dequantized to the compute dtype).
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>

#include "foundry/autograd/grad_mode.h"
#include "foundry/core/error.h"
#include "foundry/core/parallel.h"
#include "foundry/io/gguf.h"
#include "foundry/io/safetensors.h"
#include "foundry/models/gguf.h"
#include "foundry/ops/ops.h"
#include "foundry/quant/block_formats.h"
#include "foundry/text/tokenizer.h"
#include "models/hf/blocks.h"
#include "models/hf/decoder.h"
#include "quant/q8_kernels.h"

#include <nlohmann/json.hpp>

namespace foundry::models {

namespace {

using io::GGUFValue;

// HF name -> GGUF name, and which rows need the rotary permutation (0 none, 1 q, 2 k).
std::pair<std::string, int> gguf_name(const std::string& hf) {
  static const std::regex layer(R"(model\.layers\.(\d+)\.(.+)\.weight)");
  static const std::map<std::string, std::pair<std::string, int>> per_layer = {
      {"input_layernorm", {"attn_norm", 0}},      {"post_attention_layernorm", {"ffn_norm", 0}},
      {"self_attn.q_proj", {"attn_q", 1}},        {"self_attn.k_proj", {"attn_k", 2}},
      {"self_attn.v_proj", {"attn_v", 0}},        {"self_attn.o_proj", {"attn_output", 0}},
      {"mlp.gate_proj", {"ffn_gate", 0}},         {"mlp.up_proj", {"ffn_up", 0}},
      {"mlp.down_proj", {"ffn_down", 0}}};
  if (hf == "model.embed_tokens.weight") return {"token_embd.weight", 0};
  if (hf == "model.norm.weight") return {"output_norm.weight", 0};
  if (hf == "lm_head.weight") return {"output.weight", 0};
  std::smatch m;
  if (std::regex_match(hf, m, layer)) {
    auto it = per_layer.find(m[2].str());
    if (it != per_layer.end()) return {"blk." + m[1].str() + "." + it->second.first + ".weight", it->second.second};
  }
  raise<NotImplementedError>("GGUF (llama): no llama.cpp name for tensor '{}'", hf);
}

// llama.cpp's permute: rows [heads, 2, D/2] -> [heads, D/2, 2] (rotate-half -> interleaved pairs).
Tensor permute_rows(const Tensor& w, int64_t heads, bool inverse) {
  const int64_t R = w.size(0), K = w.size(1), half = R / heads / 2;
  Tensor v = inverse ? w.reshape({heads, half, 2, K}) : w.reshape({heads, 2, half, K});
  return v.transpose(1, 2).contiguous().reshape({R, K});
}

GGUFValue str(const std::string& s) {
  GGUFValue v;
  v.type = GGUFValue::STRING;
  v.value = s;
  return v;
}
GGUFValue u32(int64_t x) {
  GGUFValue v;
  v.type = GGUFValue::UINT32;
  v.value = uint64_t(x);
  return v;
}
GGUFValue f32(double x) {
  GGUFValue v;
  v.type = GGUFValue::FLOAT32;
  v.value = x;
  return v;
}

const io::GGUFValue* find(const io::GGUFFile& f, const std::string& key) {
  auto it = f.metadata().find(key);
  return it == f.metadata().end() ? nullptr : &it->second;
}

GGUFValue string_array(std::vector<std::string> items) {
  GGUFValue v;
  v.type = GGUFValue::ARRAY;
  v.array_type = GGUFValue::STRING;
  std::vector<GGUFValue> out;
  for (auto& s : items) out.push_back(str(s));
  v.value = std::move(out);
  return v;
}

// The folder's tokenizer as GGUF metadata: llama.cpp's "gpt2" keys (tokens by id, token types,
// merges) for byte-level BPE tokenizers, plus the whole tokenizer.json under
// tokenizer.huggingface.json, which Foundry reads back for an exact round trip. Other tokenizer
// kinds get only the latter (false when the folder has no tokenizer).
// A SentencePiece tokenizer.model: llama.cpp's "llama" keys (pieces, scores, token types), as its
// converter writes them for Llama-family models.
void sentencepiece_metadata(const std::string& model_path, std::vector<std::pair<std::string, GGUFValue>>& md) {
  const text::Tokenizer::SentencePieceVocab v = text::Tokenizer::read_sentencepiece_vocab(model_path);
  if (v.model_type != 2) raise<NotImplementedError>("convert: SentencePiece model type {} (only BPE, as Llama's)", v.model_type);
  GGUFValue scores, types;
  scores.type = types.type = GGUFValue::ARRAY;
  scores.array_type = GGUFValue::FLOAT32;
  types.array_type = GGUFValue::INT32;
  std::vector<GGUFValue> sv, tv;
  for (size_t i = 0; i < v.pieces.size(); ++i) {
    sv.push_back(f32(v.scores[i]));
    GGUFValue t;
    t.type = GGUFValue::INT32;
    t.value = int64_t(v.types[i]);
    tv.push_back(t);
  }
  scores.value = std::move(sv);
  types.value = std::move(tv);
  GGUFValue prefix;
  prefix.type = GGUFValue::BOOL;
  prefix.value = v.add_dummy_prefix;
  md.push_back({"tokenizer.ggml.model", str("llama")});
  md.push_back({"tokenizer.ggml.tokens", string_array(std::vector<std::string>(v.pieces))});
  md.push_back({"tokenizer.ggml.scores", std::move(scores)});
  md.push_back({"tokenizer.ggml.token_type", std::move(types)});
  md.push_back({"tokenizer.ggml.add_space_prefix", std::move(prefix)});
}

// The split patterns of llama.cpp's pre-tokenizer types (llama-vocab.cpp), as Hugging Face's
// tokenizer.json files write them: Llama 3's (digits in runs of up to 3) and Qwen 2's (single digits).
constexpr const char* kLlama3Split =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr const char* kQwen2Split =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// llama.cpp's `tokenizer.ggml.pre` for a byte-level BPE tokenizer that splits text as one of its
// pre-tokenizer types does, or "" where none does (llama.cpp then could not load the file's
// vocabulary as this tokenizer encodes): GPT-2's ByteLevel regex ("gpt-2"), or a Split by Llama 3's
// pattern ("llama-bpe", which also takes whole pre-tokens found in the vocabulary, ignore_merges)
// or Qwen 2's ("qwen2") before a ByteLevel without one.
std::string llama_cpp_pre_tokenizer(const nlohmann::json& pre, const nlohmann::json& model) {
  const auto byte_level = [](const nlohmann::json& p, bool regex) {
    return p.is_object() && p.value("type", "") == "ByteLevel" && !p.value("add_prefix_space", false) &&
           p.value("use_regex", true) == regex;
  };
  if (byte_level(pre, true)) return "gpt-2";
  if (!pre.is_object() || pre.value("type", "") != "Sequence" || !pre.contains("pretokenizers")) return "";
  const nlohmann::json& steps = pre["pretokenizers"];
  if (!steps.is_array() || steps.size() != 2 || !byte_level(steps[1], false)) return "";
  const nlohmann::json& split = steps[0];
  if (!split.is_object() || split.value("type", "") != "Split" || split.value("behavior", "") != "Isolated" ||
      split.value("invert", false) || !split.contains("pattern") || !split["pattern"].is_object())
    return "";
  const std::string regex = split["pattern"].value("Regex", "");
  const bool ignore_merges = model.value("ignore_merges", false);
  if (regex == kLlama3Split && ignore_merges) return "llama-bpe";
  if (regex == kQwen2Split && !ignore_merges) return "qwen2";
  return "";
}

bool tokenizer_metadata(const std::string& dir, std::vector<std::pair<std::string, GGUFValue>>& md) {
  namespace fs = std::filesystem;
  std::unique_ptr<text::Tokenizer> tok;
  const fs::path d(dir);
  if (fs::exists(d / "tokenizer.model")) {
    sentencepiece_metadata((d / "tokenizer.model").string(), md);
    if (fs::exists(d / "tokenizer.json"))
      md.push_back({"tokenizer.huggingface.json",
                    str(text::Tokenizer::from_file((d / "tokenizer.json").string()).to_json())});
    return true;
  }
  if (fs::exists(d / "tokenizer.json")) tok = std::make_unique<text::Tokenizer>(text::Tokenizer::from_file((d / "tokenizer.json").string()));
  else if (fs::exists(d / "vocab.json") && fs::exists(d / "merges.txt"))
    tok = std::make_unique<text::Tokenizer>(
        text::Tokenizer::from_gpt2_files((d / "vocab.json").string(), (d / "merges.txt").string()));
  if (!tok) return false;
  const std::string json_text = tok->to_json();
  md.push_back({"tokenizer.huggingface.json", str(json_text)});
  const nlohmann::json j = nlohmann::json::parse(json_text);
  const auto& model = j["model"];
  const std::string pre = llama_cpp_pre_tokenizer(j["pre_tokenizer"], model);
  if (model.value("type", "") != "BPE" || model.value("byte_fallback", false) || pre.empty()) return true;
  std::map<int64_t, std::string> by_id;
  for (auto it = model["vocab"].begin(); it != model["vocab"].end(); ++it) by_id[it.value().get<int64_t>()] = it.key();
  std::map<int64_t, int64_t> types;
  if (j.contains("added_tokens"))
    for (const auto& a : j["added_tokens"]) {
      by_id[a["id"].get<int64_t>()] = a["content"].get<std::string>();
      types[a["id"].get<int64_t>()] = a.value("special", false) ? 3 : 4;  // control / user-defined
    }
  if (by_id.empty() || by_id.rbegin()->first + 1 != int64_t(by_id.size())) return true;  // ids with gaps
  std::vector<std::string> tokens, merges;
  GGUFValue token_type;
  token_type.type = GGUFValue::ARRAY;
  token_type.array_type = GGUFValue::INT32;
  std::vector<GGUFValue> tt;
  for (const auto& [id, t] : by_id) {
    tokens.push_back(t);
    GGUFValue v;
    v.type = GGUFValue::INT32;
    v.value = int64_t(types.count(id) ? types[id] : 1);
    tt.push_back(v);
  }
  token_type.value = std::move(tt);
  for (const auto& m : model["merges"])
    merges.push_back(m.is_string() ? m.get<std::string>() : m[0].get<std::string>() + " " + m[1].get<std::string>());
  // Whether encoding adds a BOS in front (a TemplateProcessing post-processor): llama.cpp's switch.
  const text::Encoding plain = tok->encode("a", false), special = tok->encode("a", true);
  GGUFValue add_bos;
  add_bos.type = GGUFValue::BOOL;
  add_bos.value = special.ids.size() == plain.ids.size() + 1 && special.ids.back() == plain.ids.back();
  md.push_back({"tokenizer.ggml.model", str("gpt2")});
  md.push_back({"tokenizer.ggml.pre", str(pre)});
  md.push_back({"tokenizer.ggml.tokens", string_array(std::move(tokens))});
  md.push_back({"tokenizer.ggml.token_type", std::move(token_type)});
  md.push_back({"tokenizer.ggml.merges", string_array(std::move(merges))});
  md.push_back({"tokenizer.ggml.add_bos_token", std::move(add_bos)});
  return true;
}

}  // namespace

std::unique_ptr<text::Tokenizer> load_gguf_tokenizer(const std::string& path) {
  io::GGUFFile f = io::GGUFFile::open(path);
  if (const GGUFValue* hf = find(f, "tokenizer.huggingface.json"))
    return std::make_unique<text::Tokenizer>(text::Tokenizer::from_json(hf->as_string()));
  const GGUFValue* model = find(f, "tokenizer.ggml.model");
  if (!model) return nullptr;
  if (model->as_string() == "llama") {
    const GGUFValue* tokens = find(f, "tokenizer.ggml.tokens");
    const GGUFValue* scores = find(f, "tokenizer.ggml.scores");
    const GGUFValue* types = find(f, "tokenizer.ggml.token_type");
    if (!tokens || !scores || !types) raise<ValueError>("{}: llama tokenizer without tokens, scores or token types", path);
    text::Tokenizer::SentencePieceVocab v;
    for (const auto& t : tokens->as_array()) v.pieces.push_back(t.as_string());
    for (const auto& s : scores->as_array()) v.scores.push_back(float(s.as_double()));
    for (const auto& t : types->as_array()) v.types.push_back(int(t.as_int()));
    if (const GGUFValue* p = find(f, "tokenizer.ggml.add_space_prefix"); p && p->type == GGUFValue::BOOL)
      v.add_dummy_prefix = std::get<bool>(p->value);
    return std::make_unique<text::Tokenizer>(text::Tokenizer::from_sentencepiece_vocab(v));
  }
  if (model->as_string() != "gpt2")
    raise<NotImplementedError>("{}: GGUF tokenizer model '{}' is not supported (gpt2 and llama are)", path,
                               model->as_string());
  const GGUFValue* tokens = find(f, "tokenizer.ggml.tokens");
  const GGUFValue* merges = find(f, "tokenizer.ggml.merges");
  if (!tokens || !merges) raise<ValueError>("{}: gpt2 tokenizer without tokens or merges", path);
  const GGUFValue* types = find(f, "tokenizer.ggml.token_type");
  // The pre-tokenizer llama.cpp's type names (llama-vocab.cpp): GPT-2's regex in ByteLevel, or a
  // Split by Llama 3's or Qwen 2's pattern first. A file without the key is one Foundry wrote before
  // it wrote the key, always GPT-2's.
  const GGUFValue* pre_key = find(f, "tokenizer.ggml.pre");
  const std::string pre = pre_key ? pre_key->as_string() : "gpt-2";
  const bool llama3 = pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3";
  const bool qwen2 = pre == "qwen2" || pre == "deepseek-r1-qwen";
  if (!llama3 && !qwen2 && pre != "gpt-2" && pre != "phi-2")
    raise<NotImplementedError>("{}: GGUF pre-tokenizer '{}' is not supported (gpt-2, phi-2, llama-bpe, llama3, qwen2 "
                               "are); put the model's tokenizer.json beside it and pass that instead",
                               path, pre);
  nlohmann::json vocab = nlohmann::json::object(), merge_list = nlohmann::json::array(),
                 added = nlohmann::json::array();
  const auto& tl = tokens->as_array();
  for (size_t i = 0; i < tl.size(); ++i) {
    const int64_t type = types && i < types->as_array().size() ? types->as_array()[i].as_int() : 1;
    if (type == 3 || type == 4)
      added.push_back({{"id", i}, {"content", tl[i].as_string()}, {"single_word", false}, {"lstrip", false},
                       {"rstrip", false}, {"normalized", type == 4}, {"special", type == 3}});
    vocab[tl[i].as_string()] = i;
  }
  for (const auto& m : merges->as_array()) merge_list.push_back(m.as_string());
  const nlohmann::json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true},
                                     {"use_regex", true}};
  nlohmann::json pre_tokenizer = byte_level;
  if (llama3 || qwen2) {
    nlohmann::json bytes = byte_level;
    bytes["use_regex"] = false;
    const nlohmann::json split = {{"type", "Split"},
                                  {"pattern", {{"Regex", llama3 ? kLlama3Split : kQwen2Split}}},
                                  {"behavior", "Isolated"},
                                  {"invert", false}};
    pre_tokenizer = {{"type", "Sequence"}, {"pretokenizers", nlohmann::json::array({split, bytes})}};
  }
  // BOS in front where llama.cpp adds it: the file's switch, else its default for the type (Llama 3's).
  nlohmann::json post_processor = nullptr;
  const GGUFValue* add_bos_key = find(f, "tokenizer.ggml.add_bos_token");
  const bool add_bos = add_bos_key && add_bos_key->type == GGUFValue::BOOL ? std::get<bool>(add_bos_key->value) : llama3;
  if (const GGUFValue* bos = find(f, "tokenizer.ggml.bos_token_id"); add_bos && bos && bos->as_int() >= 0 &&
                                                                      size_t(bos->as_int()) < tl.size()) {
    const std::string bos_text = tl[size_t(bos->as_int())].as_string();
    const nlohmann::json bos_piece = {{"SpecialToken", {{"id", bos_text}, {"type_id", 0}}}};
    post_processor = {
        {"type", "TemplateProcessing"},
        {"single", {bos_piece, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"pair", {bos_piece, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}, bos_piece,
                  {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}},
        {"special_tokens", {{bos_text, {{"id", bos_text}, {"ids", {bos->as_int()}}, {"tokens", {bos_text}}}}}}};
  }
  nlohmann::json j = {{"version", "1.0"},         {"truncation", nullptr},  {"padding", nullptr},
                      {"added_tokens", added},    {"normalizer", nullptr},  {"pre_tokenizer", pre_tokenizer},
                      {"post_processor", post_processor}, {"decoder", byte_level},
                      {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr},
                                 {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr},
                                 {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", llama3},
                                 {"vocab", vocab}, {"merges", merge_list}}}};
  return std::make_unique<text::Tokenizer>(text::Tokenizer::from_json(j.dump()));
}

namespace {

// Llama 3's RoPE scaling as llama.cpp stores it (its converter's rope_freqs.weight): each
// frequency's divisor (hf::llama3_rope_divisor).
io::GGUFTensorData rope_frequency_factors(const ModelConfig& c) {
  const int64_t half = c.head_dim / 2;
  std::vector<float> factors(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i)
    factors[size_t(i)] = float(hf::llama3_rope_divisor(c, 1.0 / std::pow(c.rope_theta, double(2 * i) / double(c.head_dim))));
  io::GGUFTensorData t{"rope_freqs.weight", {half}, 0, {}};
  t.bytes.assign(reinterpret_cast<const char*>(factors.data()), factors.size() * sizeof(float));
  return t;
}

}  // namespace

void convert_to_gguf(const std::string& dir, const std::string& out, const std::string& type) {
  autograd::NoGradGuard no_grad;
  {
    // A GGUF written over one of the folder's own files (--to DIR/model.safetensors) destroyed the source.
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec))
      FOUNDRY_CHECK_AS(ValueError, !std::filesystem::equivalent(entry.path(), out, ec),
                       "convert: --to {} is the model folder's own {}; write the GGUF elsewhere", out,
                       entry.path().filename().string());
    FOUNDRY_CHECK_AS(ValueError, !std::filesystem::equivalent(dir, out, ec), "convert: --to {} is the model folder", out);
  }
  const ModelConfig c = read_config(dir);
  if (c.architecture != "LlamaForCausalLM" && c.architecture != "MistralForCausalLM")
    raise<NotImplementedError>("convert: {} is not supported yet (Llama and Mistral are)", c.architecture);
  if (c.attention_bias || c.mlp_bias) raise<NotImplementedError>("convert: Llama with biases is not supported yet");
  // llama.cpp's file types (llama_ftype) of the whole-model types, for general.file_type.
  const std::map<std::string, uint32_t> file_types = {{"f32", 0},  {"f16", 1},  {"q4_0", 2},  {"q4_1", 3},
                                                      {"q8_0", 7}, {"q5_0", 8}, {"q5_1", 9},  {"q4_k", 14},
                                                      {"q5_k", 16}, {"q6_k", 18}, {"bf16", 32}};
  std::string lower(type);
  for (char& ch : lower) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  auto ft = file_types.find(lower);
  if (ft == file_types.end())
    raise<ValueError>("convert: --type must be one of f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q4_k, q5_k, "
                      "q6_k; got '{}'",
                      type);
  const quant::BlockFormatTraits* matrix_format = lower == "f32" ? nullptr : &quant::traits(lower);
  io::ShardedSafetensors st = io::ShardedSafetensors::open(dir);
  std::vector<std::pair<std::string, GGUFValue>> md = {
      {"general.architecture", str("llama")},
      {"general.name", str(std::filesystem::path(dir).filename().string())},
      {"general.file_type", u32(ft->second)},
      {"llama.vocab_size", u32(c.vocab_size)},
      {"llama.context_length", u32(c.max_positions)},
      {"llama.embedding_length", u32(c.hidden_size)},
      {"llama.block_count", u32(c.num_layers)},
      {"llama.feed_forward_length", u32(c.intermediate_size)},
      {"llama.attention.head_count", u32(c.num_heads)},
      {"llama.attention.head_count_kv", u32(c.num_kv_heads)},
      {"llama.rope.dimension_count", u32(c.head_dim)},
      {"llama.rope.freq_base", f32(c.rope_theta)},
      {"llama.attention.layer_norm_rms_epsilon", f32(c.norm_eps)},
  };
  std::vector<io::GGUFTensorData> tensors;
  if (c.rope_type == "linear") {
    md.push_back({"llama.rope.scaling.type", str("linear")});
    md.push_back({"llama.rope.scaling.factor", f32(c.rope_factor)});
  } else if (c.rope_type == "llama3") {
    tensors.push_back(rope_frequency_factors(c));
  } else if (!c.rope_type.empty()) {
    raise<NotImplementedError>("convert: rope_scaling '{}' is not supported yet", c.rope_type);
  }
  if (c.sliding_window > 0) raise<NotImplementedError>("convert: sliding-window attention is not supported yet");
  if (!c.eos_token_ids.empty()) md.push_back({"tokenizer.ggml.eos_token_id", u32(c.eos_token_ids[0])});
  if (c.bos_token_id) md.push_back({"tokenizer.ggml.bos_token_id", u32(*c.bos_token_id)});
  tokenizer_metadata(dir, md);
  for (const std::string& name : st.names()) {
    auto [gname, perm] = gguf_name(name);
    Tensor w = st.get(name).to(DType::Float32).contiguous();
    if (perm) w = permute_rows(w, perm == 1 ? c.num_heads : c.num_kv_heads, false);
    // Norms stay float32; matrices take the requested type, or llama.cpp's fallback when their rows
    // are not whole blocks of it (K-quants: q5_0 / q5_1 / q8_0; then f16).
    const quant::BlockFormatTraits* f = w.dim() == 1 ? nullptr : matrix_format;
    if (f && w.size(-1) % f->block_size != 0) {
      const quant::BlockFormat fallback = f->format == quant::BlockFormat::Q4_K   ? quant::BlockFormat::Q5_0
                                          : f->format == quant::BlockFormat::Q5_K ? quant::BlockFormat::Q5_1
                                                                                  : quant::BlockFormat::Q8_0;
      f = &quant::traits(fallback);
      if (w.size(-1) % f->block_size != 0) f = &quant::traits(quant::BlockFormat::F16);
    }
    io::GGUFTensorData t{gname, std::vector<int64_t>(w.sizes().begin(), w.sizes().end()), f ? f->ggml_type : 0, {}};
    if (!f) {
      t.bytes.assign(static_cast<const char*>(w.data_ptr()), size_t(w.nbytes()));
    } else {
      const int64_t K = w.size(-1), rows = w.numel() / K, row_bytes = quant::quantized_bytes(*f, 1, K);
      t.bytes.resize(size_t(quant::quantized_bytes(*f, rows, K)));
      char* dst = t.bytes.data();
      const float* src = w.data<float>();
      parallel_for(0, rows, 16, [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) f->quantize(src + r * K, dst + r * row_bytes, K);
      });
    }
    tensors.push_back(std::move(t));
  }
  io::write_gguf(out, md, tensors);
}

bool is_gguf_file(const std::string& path) {
  if (!std::filesystem::is_regular_file(path)) return false;
  std::ifstream f(path, std::ios::binary);
  char magic[4] = {};
  f.read(magic, 4);
  return f.gcount() == 4 && std::string(magic, 4) == "GGUF";
}

std::unique_ptr<CausalLM> load_gguf(const std::string& path, const LoadOptions& options) {
  autograd::NoGradGuard no_grad;
  io::GGUFFile f = io::GGUFFile::open(path);
  const GGUFValue* arch = find(f, "general.architecture");
  if (!arch) raise<ValueError>("{}: GGUF file has no general.architecture", path);
  if (arch->as_string() != "llama")
    raise<NotImplementedError>("{}: GGUF architecture '{}' is not supported yet (llama is)", path, arch->as_string());
  auto req = [&](const std::string& key) -> const GGUFValue& {
    const GGUFValue* v = find(f, key);
    if (!v) raise<ValueError>("{}: GGUF metadata lacks '{}'", path, key);
    return *v;
  };
  ModelConfig c;
  c.architecture = "LlamaForCausalLM";
  c.model_type = "llama";
  c.hidden_size = req("llama.embedding_length").as_int();
  c.num_layers = req("llama.block_count").as_int();
  c.num_heads = req("llama.attention.head_count").as_int();
  c.num_kv_heads = find(f, "llama.attention.head_count_kv") ? req("llama.attention.head_count_kv").as_int() : c.num_heads;
  c.intermediate_size = req("llama.feed_forward_length").as_int();
  c.max_positions = req("llama.context_length").as_int();
  c.norm_eps = req("llama.attention.layer_norm_rms_epsilon").as_double();
  c.rope_theta = find(f, "llama.rope.freq_base") ? req("llama.rope.freq_base").as_double() : 10000.0;
  FOUNDRY_CHECK_AS(ValueError, c.num_heads > 0 && c.num_kv_heads > 0 && c.hidden_size % c.num_heads == 0 &&
                                   c.num_heads % c.num_kv_heads == 0,
                   "{}: inconsistent head counts in the GGUF metadata", path);
  c.head_dim = c.hidden_size / c.num_heads;
  // What llama.cpp's llama files may carry that this loader does not compute: refused by name
  // rather than run as another model.
  if (const GGUFValue* rot = find(f, "llama.rope.dimension_count"); rot && rot->as_int() != c.head_dim)
    raise<NotImplementedError>("{}: rotary embedding over {} of each head's {} dimensions (llama.rope.dimension_count) "
                               "is not supported",
                               path, rot->as_int(), c.head_dim);
  for (const char* key : {"llama.attention.key_length", "llama.attention.value_length"})
    if (const GGUFValue* len = find(f, key); len && len->as_int() != c.head_dim)
      raise<NotImplementedError>("{}: heads of {} dimensions ({}) where embedding_length / head_count is {} are not "
                                 "supported",
                                 path, len->as_int(), key, c.head_dim);
  if (const GGUFValue* experts = find(f, "llama.expert_count"); experts && experts->as_int() > 0)
    raise<NotImplementedError>("{}: a mixture of experts in a llama GGUF ({} experts, llama.expert_count) is not "
                               "supported; load the Hugging Face folder (Mixtral is)",
                               path, experts->as_int());
  if (const GGUFValue* rs = find(f, "llama.rope.scaling.type"); rs && rs->as_string() != "none") {
    if (rs->as_string() != "linear") raise<NotImplementedError>("{}: rope scaling '{}' is not supported", path, rs->as_string());
    c.rope_type = "linear";
    c.rope_factor = req("llama.rope.scaling.factor").as_double();
  }
  if (f.contains("rope_freqs.weight")) {  // llama.cpp's per-frequency factors (Llama 3's RoPE scaling)
    Tensor factors = f.tensor("rope_freqs.weight").to(DType::Float32).contiguous();
    FOUNDRY_CHECK_AS(ValueError, factors.dim() == 1 && factors.size(0) == c.head_dim / 2,
                     "{}: rope_freqs.weight has shape {}, where head_dim {} has {} rotary frequencies", path,
                     shape_str(factors.sizes()), c.head_dim, c.head_dim / 2);
    c.rope_freq_factors.assign(factors.data<float>(), factors.data<float>() + factors.numel());
    for (float v : c.rope_freq_factors)
      FOUNDRY_CHECK_AS(ValueError, std::isfinite(v) && v > 0, "{}: rope_freqs.weight holds {}, not a positive factor",
                       path, v);
  }
  c.vocab_size = f.info("token_embd.weight").shape()[0];
  c.tie_word_embeddings = !f.contains("output.weight");
  // Values no model file can mean, which ran (a 0-layer model) or gave NaN.
  FOUNDRY_CHECK_AS(ValueError, c.num_layers > 0 && c.intermediate_size > 0 && c.max_positions > 0,
                   "{}: llama.block_count ({}), llama.feed_forward_length ({}) and llama.context_length ({}) must be "
                   "positive", path, c.num_layers, c.intermediate_size, c.max_positions);
  FOUNDRY_CHECK_AS(ValueError, std::isfinite(c.norm_eps) && c.norm_eps >= 0 && std::isfinite(c.rope_theta) &&
                                   c.rope_theta > 0 && std::isfinite(c.rope_factor) && c.rope_factor > 0,
                   "{}: llama.attention.layer_norm_rms_epsilon ({}) must be >= 0, llama.rope.freq_base ({}) and the "
                   "rope scaling factor ({}) > 0", path, c.norm_eps, c.rope_theta, c.rope_factor);
  if (const GGUFValue* v = find(f, "llama.vocab_size"); v && v->as_int() != c.vocab_size)
    raise<ValueError>("{}: llama.vocab_size is {} but token_embd.weight has {} rows", path, v->as_int(), c.vocab_size);
  if (const GGUFValue* e = find(f, "tokenizer.ggml.eos_token_id")) c.eos_token_ids = {e->as_int()};
  if (const GGUFValue* b = find(f, "tokenizer.ggml.bos_token_id")) c.bos_token_id = b->as_int();
  c.json = "{}";
  // Block-quantized matrices stay quantized: products use the file's bytes (rows of Q and K
  // un-permuted, a copy), and the model gets a placeholder for the dense tensor. The token
  // embedding too: its rows are dequantized as they are looked up (WeightProducts::adopted_rows;
  // a dense float32 copy of Llama-110M's was 98 MB of a q4_0 model's 260 MB peak), and a tied output head
  // reads the same bytes.
  struct Adopted {
    std::string name;
    std::string format;
    Tensor bytes;
  };
  std::vector<Adopted> adopted;
  // Matrices, quantized bytes included, are copied out of the mapping into chunks in huge pages as
  // a folder's are (hf::place_weight): the same memory as the folder quantized at load.
  const bool resident = hf::weights_resident(options.quantize);
  // LoadOptions::pack_bf16: bf16 matrices computed in bf16 are adopted as float32 ones' are, and
  // their bytes packed (WeightProducts::adopt); the model keeps computing in bf16.
  const bool pack_bf16 = hf::pack_bf16_requested(options);
  hf::HugePageChunks chunks;
  // Q and K rows back in HF's order: a copy, so the file's pages read to make it go back to the
  // kernel (kept mapped, 57 MB of Llama-110M's float32 file stayed resident beside the copies).
  auto unpermuted = [](const Tensor& mapped, int64_t heads) {
    // Block bytes are permuted as they are; 16-bit floats go through float32.
    Tensor rows = permute_rows(mapped.dtype() == DType::UInt8 ? mapped : mapped.to(DType::Float32), heads, true);
    hf::release_mapped_pages(mapped);
    return rows;
  };
  auto weight = [&](const std::string& name, const Shape& shape, const hf::Init&, hf::Layout) {
    auto [gname, perm] = gguf_name(name);
    const io::GGUFTensorInfo& info = f.info(gname);
    if (!(Shape(info.shape()) == shape))
      raise<ValueError>("{}: '{}' has shape {} but the metadata implies {}", path, gname, shape_str(info.shape()),
                        shape_str(shape));
    // 16-bit matrices stay 16-bit too when computing in float32 (as the folder's --quantize f16 /
    // bf16: products read the halves in place); with --dtype native they are the dense weights.
    const bool sixteen_bit_products = options.dtype == DType::Float32;
    const quant::BlockFormatTraits* q = nullptr;
    for (const auto& t : quant::block_formats())
      if (t.ggml_type == info.ggml_type &&
          (t.block_size > 1 ||
           (sixteen_bit_products && (t.format == quant::BlockFormat::F16 || t.format == quant::BlockFormat::BF16)) ||
           (pack_bf16 && t.format == quant::BlockFormat::BF16)))
        q = &t;
    const int64_t heads = perm == 1 ? c.num_heads : c.num_kv_heads;
    if (q && shape.size() == 2) {
      Tensor bytes = f.raw(gname);
      if (perm) bytes = unpermuted(bytes, heads);
      // The embedding's placeholder has the compute dtype: the model computes in its dtype.
      const DType dense = gname != "token_embd.weight" ? DType::Float32
                          : options.dtype.value_or(pack_bf16 && q->format == quant::BlockFormat::BF16 ? DType::BFloat16
                                                                                                   : DType::Float32);
      Tensor w = zeros({1}, dense).expand(IntList(shape));
      // bf16 rows to be packed are read from the mapping once (adopt packs them into its own memory).
      const bool packed_later = quant::preferred_layout(*q, shape[0], shape[1]) == quant::WeightLayout::PackedBF16;
      adopted.push_back({name, q->name, hf::place_weight(chunks, resident && !packed_later, bytes, DType::UInt8)});
      return w;
    }
    Tensor t = f.tensor(gname);
    const DType want = options.dtype.value_or(t.dtype());
    if (perm) t = unpermuted(t, heads);
    return hf::place_weight(chunks, resident, t, want);
  };
  auto has = [&](const std::string& name) { return f.contains(gguf_name(name).first); };
  hf::DecoderSpec spec;
  std::unique_ptr<CausalLM> model =
      hf::build_decoder(c, spec, hf::WeightSource(weight, has, std::make_shared<hf::WeightProducts>()));
  for (const Adopted& a : adopted) model->adopt_quantized(a.name, a.format, a.bytes);
  model->set_weight_quantization(options.quantize);
  model->set_kv_cache_format(options.kv_cache);
  model->set_quantized_prefill(options.quantized_prefill);
  model->eval();
  model->freeze_if_quantized();
  return model;
}

}  // namespace foundry::models
