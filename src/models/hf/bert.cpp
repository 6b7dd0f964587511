// BERT and RoBERTa (transformers v4.40): absolute positions + token types, post-LayerNorm blocks,
// bidirectional attention masked at padding keys; BertModel's pooler (tanh of the first token);
// heads: masked LM (transform + decoder tied to the word embeddings), sequence classification (on
// the pooler; RoBERTa: dense + tanh + out_proj on <s>) and token classification. RoBERTa's position
// ids count the non-padding tokens from padding_idx + 1.
#include <cmath>
#include <filesystem>
#include <limits>
#include <optional>

#include "foundry/autograd/grad_mode.h"
#include "foundry/io/atomic_file.h"
#include "foundry/io/safetensors.h"
#include "foundry/nn/init.h"
#include "foundry/models/encoder.h"
#include "foundry/ops/ops.h"
#include "models/hf/blocks.h"
#include "models/hf/common.h"
#include "foundry/io/json_depth.h"

namespace foundry::models {

namespace hf {
namespace {

struct BertOptions {
  bool roberta = false;
  std::string act = "gelu";
  int64_t type_vocab = 2, pad = 0, labels = 2;
  double hidden_dropout = 0.1, attention_dropout = 0.1;  // hidden_dropout_prob, attention_probs_dropout_prob
};

class BertEmbeddings : public nn::Module {
 public:
  BertEmbeddings(const WeightSource& ws, const ModelConfig& c, const BertOptions& o) : o_(o) {
    word_embeddings = add_block<Embedding>(*this, ws, "word_embeddings", c.vocab_size, c.hidden_size, o.pad);
    position_embeddings = add_block<Embedding>(*this, ws, "position_embeddings", c.max_positions, c.hidden_size);
    token_type_embeddings = add_block<Embedding>(*this, ws, "token_type_embeddings", o.type_vocab, c.hidden_size);
    LayerNorm = add_block<Norm>(*this, ws, "LayerNorm", c.hidden_size, Norm::Kind::LayerNorm, c.norm_eps);
    max_positions_ = c.max_positions;
  }
  std::string type_name() const override { return o_.roberta ? "RobertaEmbeddings" : "BertEmbeddings"; }
  Tensor forward(const Tensor& ids, const Tensor& types) {
    const int64_t B = ids.size(0), T = ids.size(1);
    Tensor positions;
    if (o_.roberta) {  // create_position_ids_from_input_ids: padding_idx + cumsum over non-padding
      Tensor keep = ne(ids, full({}, double(o_.pad), DType::Int64)).to(DType::Int64);
      positions = cumsum(keep, 1) * keep + full({}, double(o_.pad), DType::Int64);
    } else {
      positions = arange(0, T, 1, DType::Int64).unsqueeze(0).expand({B, T});
    }
    const int64_t last = amax(positions).item<int64_t>();
    if (last >= max_positions_)
      raise<ValueError>("{}: position {} is past max_position_embeddings ({})", type_name(), last, max_positions_);
    Tensor h = word_embeddings->forward(ids) + token_type_embeddings->forward(types) + position_embeddings->forward(positions);
    return LayerNorm->forward(h);
  }
  std::shared_ptr<Embedding> word_embeddings, position_embeddings, token_type_embeddings;
  std::shared_ptr<Norm> LayerNorm;

 private:
  BertOptions o_;
  int64_t max_positions_ = 0;
};

// The attention's and the feed-forward's output: dense, then LayerNorm(x + residual).
class DenseAddNorm : public nn::Module {
 public:
  DenseAddNorm(const WeightSource& ws, int64_t in, int64_t out, double eps, double dropout, std::string type)
      : dropout_(dropout), type_(std::move(type)) {
    dense = add_block<Linear>(*this, ws, "dense", in, out, true);
    LayerNorm = add_block<Norm>(*this, ws, "LayerNorm", out, Norm::Kind::LayerNorm, eps);
  }
  std::string type_name() const override { return type_; }
  Tensor forward(const Tensor& x, const Tensor& residual) {
    return LayerNorm->forward(maybe_dropout(*this, dense->forward(x), dropout_) + residual);
  }
  std::shared_ptr<Linear> dense;
  std::shared_ptr<Norm> LayerNorm;

 private:
  double dropout_;
  std::string type_;
};

class BertSelfAttention : public nn::Module {
 public:
  BertSelfAttention(const WeightSource& ws, const ModelConfig& c, double dropout) : H_(c.num_heads), dropout_(dropout) {
    query = add_block<Linear>(*this, ws, "query", c.hidden_size, c.hidden_size, true);
    key = add_block<Linear>(*this, ws, "key", c.hidden_size, c.hidden_size, true);
    value = add_block<Linear>(*this, ws, "value", c.hidden_size, c.hidden_size, true);
  }
  std::string type_name() const override { return "BertSelfAttention"; }
  Tensor forward(const Tensor& x, const Tensor& bias) {
    return attend(split_heads(query->forward(x), H_), split_heads(key->forward(x), H_), split_heads(value->forward(x), H_),
                  bias, is_training() ? dropout_ : 0.0);
  }
  std::shared_ptr<Linear> query, key, value;

 private:
  int64_t H_;
  double dropout_;
};

class BertAttention : public nn::Module {
 public:
  BertAttention(const WeightSource& ws, const ModelConfig& c, const BertOptions& o) {
    self = add_block<BertSelfAttention>(*this, ws, "self", c, o.attention_dropout);
    output = add_block<DenseAddNorm>(*this, ws, "output", c.hidden_size, c.hidden_size, c.norm_eps, o.hidden_dropout,
                                     "BertSelfOutput");
  }
  std::string type_name() const override { return "BertAttention"; }
  Tensor forward(const Tensor& x, const Tensor& bias) { return output->forward(self->forward(x, bias), x); }
  std::shared_ptr<BertSelfAttention> self;
  std::shared_ptr<DenseAddNorm> output;
};

class BertIntermediate : public nn::Module {
 public:
  BertIntermediate(const WeightSource& ws, const ModelConfig& c, std::string act) : act_(std::move(act)) {
    dense = add_block<Linear>(*this, ws, "dense", c.hidden_size, c.intermediate_size, true);
  }
  std::string type_name() const override { return "BertIntermediate"; }
  Tensor forward(const Tensor& x) override { return activation(act_, dense->forward(x)); }
  std::shared_ptr<Linear> dense;

 private:
  std::string act_;
};

class BertLayer : public nn::Module {
 public:
  BertLayer(const WeightSource& ws, const ModelConfig& c, const BertOptions& o) {
    attention = add_block<BertAttention>(*this, ws, "attention", c, o);
    intermediate = add_block<BertIntermediate>(*this, ws, "intermediate", c, o.act);
    output = add_block<DenseAddNorm>(*this, ws, "output", c.intermediate_size, c.hidden_size, c.norm_eps, o.hidden_dropout,
                                     "BertOutput");
  }
  std::string type_name() const override { return "BertLayer"; }
  Tensor forward(const Tensor& x, const Tensor& bias) {
    Tensor a = attention->forward(x, bias);
    return output->forward(intermediate->forward(a), a);
  }
  std::shared_ptr<BertAttention> attention;
  std::shared_ptr<BertIntermediate> intermediate;
  std::shared_ptr<DenseAddNorm> output;
};

class Bert : public EncoderModel {
 public:
  Bert(const ModelConfig& c, const WeightSource& ws, const BertOptions& o, const std::string& head) : o_(o) {
    config_ = c;
    head_ = head;
    const std::string trunk = o.roberta ? "roberta" : "bert";
    const WeightSource tws = ws.pp(trunk);
    model = register_module(trunk, std::make_shared<Scope>(o.roberta ? "RobertaModel" : "BertModel"));
    embeddings = add_block<BertEmbeddings>(*model, tws, "embeddings", c, o);
    auto enc = model->register_module("encoder", std::make_shared<Scope>("BertEncoder"));
    auto list = enc->register_module("layer", std::make_shared<Scope>("ModuleList"));
    for (int64_t i = 0; i < c.num_layers; ++i)
      layers.push_back(add_block<BertLayer>(*list, tws.pp("encoder").pp("layer"), std::to_string(i), c, o));
    // transformers builds the pooler for the base model and BERT's sequence classifier only.
    if (head == "base" ? tws.has("pooler.dense.weight") : (head == "sequence_classification" && !o.roberta)) {
      auto pool = model->register_module("pooler", std::make_shared<Scope>("BertPooler"));
      pooler = add_block<Linear>(*pool, tws.pp("pooler"), "dense", c.hidden_size, c.hidden_size, true);
    }
    const int64_t C = c.hidden_size;
    if (head == "masked_lm") {
      if (o.roberta) {
        auto lm = register_module("lm_head", std::make_shared<Scope>("RobertaLMHead"));
        const WeightSource lws = ws.pp("lm_head");
        transform = add_block<Linear>(*lm, lws, "dense", C, C, true);
        transform_norm = add_block<Norm>(*lm, lws, "layer_norm", C, Norm::Kind::LayerNorm, c.norm_eps);
        decoder = lws.has("decoder.weight") ? add_block<Linear>(*lm, lws, "decoder", C, c.vocab_size, false)
                                            : lm->register_module("decoder", std::make_shared<Linear>(lws.pp("decoder"), embeddings->word_embeddings->weight));
        decoder_bias = lm->register_parameter("bias", lws.get("bias", {c.vocab_size}, Init::zeros()));
      } else {
        auto cls = register_module("cls", std::make_shared<Scope>("BertOnlyMLMHead"));
        auto pred = cls->register_module("predictions", std::make_shared<Scope>("BertLMPredictionHead"));
        const WeightSource pws = ws.pp("cls").pp("predictions");
        auto tr = pred->register_module("transform", std::make_shared<Scope>("BertPredictionHeadTransform"));
        transform = add_block<Linear>(*tr, pws.pp("transform"), "dense", C, C, true);
        transform_norm = add_block<Norm>(*tr, pws.pp("transform"), "LayerNorm", C, Norm::Kind::LayerNorm, c.norm_eps);
        decoder = pws.has("decoder.weight") && !c.tie_word_embeddings
                      ? add_block<Linear>(*pred, pws, "decoder", C, c.vocab_size, false)
                      : pred->register_module("decoder", std::make_shared<Linear>(pws.pp("decoder"), embeddings->word_embeddings->weight));
        decoder_bias = pred->register_parameter("bias", pws.get("bias", {c.vocab_size}, Init::zeros()));
      }
    } else if (head == "sequence_classification" && o.roberta) {
      auto cls = register_module("classifier", std::make_shared<Scope>("RobertaClassificationHead"));
      classifier_dense = add_block<Linear>(*cls, ws.pp("classifier"), "dense", C, C, true);
      classifier = add_block<Linear>(*cls, ws.pp("classifier"), "out_proj", C, o.labels, true);
    } else if (head != "base") {
      classifier = add_block<Linear>(*this, ws, "classifier", C, o.labels, true);
    }
  }
  std::string type_name() const override { return config_.architecture; }

  EncoderOutput encode(const Tensor& input_ids, const Tensor& attention_mask, const Tensor& token_type_ids) override {
    std::optional<autograd::NoGradGuard> no_grad;
    if (!records_parameters(*this)) no_grad.emplace();
    FOUNDRY_CHECK_AS(ValueError, input_ids.dim() == 2, "{}: input_ids must be [batch, tokens], got {}",
                     config_.architecture, shape_str(input_ids.sizes()));
    const int64_t B = input_ids.size(0), T = input_ids.size(1);
    Tensor ids = input_ids.to(DType::Int64);
    Tensor mask = attention_mask.defined() ? attention_mask.to(DType::Int64) : ones({B, T}, DType::Int64);
    Tensor types = token_type_ids.defined() ? token_type_ids.to(DType::Int64) : zeros({B, T}, DType::Int64);
    FOUNDRY_CHECK_AS(ValueError, Shape(mask.sizes()) == Shape(ids.sizes()) && Shape(types.sizes()) == Shape(ids.sizes()),
                     "{}: attention_mask {} and token_type_ids {} must match input_ids {}", config_.architecture,
                     shape_str(mask.sizes()), shape_str(types.sizes()), shape_str(ids.sizes()));
    if (amax(ids).item<int64_t>() >= config_.vocab_size || amin(ids).item<int64_t>() < 0)
      raise<ValueError>("{}: input ids must be in [0, {})", config_.architecture, config_.vocab_size);
    if (amax(types).item<int64_t>() >= o_.type_vocab || amin(types).item<int64_t>() < 0)
      raise<ValueError>("{}: token_type_ids must be in [0, {})", config_.architecture, o_.type_vocab);
    // Keys at padding get the lowest float (transformers' extended attention mask).
    Tensor bias = (full({}, 1.0) - mask.to(DType::Float32)) * full({}, double(std::numeric_limits<float>::lowest()));
    bias = bias.reshape({B, 1, 1, T});
    Tensor h = maybe_dropout(*this, embeddings->forward(ids, types), o_.hidden_dropout);
    for (auto& layer : layers) h = layer->forward(h, bias);
    EncoderOutput out;
    out.last_hidden_state = h;
    Tensor first = h.select(1, 0);
    if (pooler) out.pooler_output = tanh(pooler->forward(first));
    if (head_ == "masked_lm") {
      Tensor t = transform_norm->forward(activation(o_.act, transform->forward(h)));
      out.logits = decoder->forward(t) + decoder_bias;
    } else if (head_ == "sequence_classification") {
      out.logits = o_.roberta ? classifier->forward(tanh(classifier_dense->forward(first))) : classifier->forward(out.pooler_output);
    } else if (head_ == "token_classification") {
      out.logits = classifier->forward(h);
    }
    return out;
  }

  std::shared_ptr<Scope> model;
  std::shared_ptr<BertEmbeddings> embeddings;
  std::vector<std::shared_ptr<BertLayer>> layers;
  std::shared_ptr<Linear> pooler, transform, decoder, classifier, classifier_dense;
  std::shared_ptr<Norm> transform_norm;
  Tensor decoder_bias;

 private:
  BertOptions o_;
};

}  // namespace
}  // namespace hf

namespace {

using hf::json;

json read_config_json(const std::string& dir) {
  if (!std::filesystem::exists(dir + "/config.json")) raise<IOError>("{}: no config.json", dir);
  const std::string text = io::read_file(dir + "/config.json");
  io::check_json_depth(text, dir + "/config.json");
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) raise<ValueError>("{}/config.json is not a JSON object", dir);
  return j;
}

std::string architecture_of(const json& j) {
  if (j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty() &&
      j["architectures"][0].is_string())
    return j["architectures"][0].get<std::string>();
  return "";
}

}  // namespace

bool is_encoder_architecture(const std::string& name) {
  return name == "bert" || name == "roberta" || name.rfind("Bert", 0) == 0 || name.rfind("Roberta", 0) == 0;
}

bool is_encoder_folder(const std::string& dir) {
  try {
    return is_encoder_architecture(architecture_of(read_config_json(dir)));
  } catch (const Error&) {
    return false;
  }
}

namespace {

// The encoder a config.json describes: sizes, options, and which head (from its `architectures`).
struct EncoderSpec {
  ModelConfig c;
  hf::BertOptions o;
  std::string head;
};

EncoderSpec encoder_spec(const json& j, const std::string& where) {
  EncoderSpec e;
  const std::string arch = architecture_of(j);
  hf::BertOptions& o = e.o;
  o.roberta = arch.rfind("Roberta", 0) == 0;
  for (const auto& [suffix, h] : {std::pair<const char*, const char*>{"Model", "base"}, {"ForMaskedLM", "masked_lm"},
                                  {"ForSequenceClassification", "sequence_classification"},
                                  {"ForTokenClassification", "token_classification"}})
    if (arch == std::string(o.roberta ? "Roberta" : "Bert") + suffix) e.head = h;
  if (e.head.empty()) raise<ValueError>("{}: architecture '{}' is not one Foundry loads (Bert/Roberta Model, ForMaskedLM, "
                                        "ForSequenceClassification, ForTokenClassification)", where, arch);
  ModelConfig& c = e.c;
  c.architecture = arch;
  c.model_type = hf::get_string(j, "model_type", o.roberta ? "roberta" : "bert");
  hf::parse_sizes(j, c, "hidden_size", "num_hidden_layers", "num_attention_heads");
  c.intermediate_size = hf::get_int(j, "intermediate_size");
  c.max_positions = hf::get_int(j, "max_position_embeddings");
  c.norm_eps = hf::get_double(j, "layer_norm_eps", 1e-12);
  c.tie_word_embeddings = hf::get_bool(j, "tie_word_embeddings", true);
  c.json = j.dump();
  o.act = hf::get_string(j, "hidden_act", "gelu");
  if (!hf::known_activation(o.act)) raise<ValueError>("{}: hidden_act '{}' is not supported", where, o.act);
  o.type_vocab = hf::get_int(j, "type_vocab_size", 2);
  o.pad = hf::get_int(j, "pad_token_id", o.roberta ? 1 : 0);
  o.hidden_dropout = hf::get_double(j, "hidden_dropout_prob", 0.1);
  o.attention_dropout = hf::get_double(j, "attention_probs_dropout_prob", 0.1);
  if (j.contains("position_embedding_type") && j["position_embedding_type"] != "absolute")
    raise<ValueError>("{}: position_embedding_type '{}' is not supported (absolute only)", where,
                      j["position_embedding_type"].dump());
  if (j.contains("id2label") && j["id2label"].is_object()) o.labels = int64_t(j["id2label"].size());
  o.labels = hf::get_int(j, "num_labels", o.labels);
  return e;
}

}  // namespace

std::unique_ptr<EncoderModel> load_encoder(const std::string& dir) {
  const EncoderSpec e = encoder_spec(read_config_json(dir), dir);
  io::ShardedSafetensors st;
  try {
    st = io::ShardedSafetensors::open(dir, /*copy_on_write=*/true);
  } catch (const Error& err) {
    raise<IOError>("{}: no loadable weights (model.safetensors): {}", dir, err.what());
  }
  autograd::NoGradGuard no_grad;
  auto fetch = [&](const std::string& name, const Shape& shape, const hf::Init&, hf::Layout) {
    if (!st.contains(name)) raise<ValueError>("{}: the checkpoint has no tensor '{}'", dir, name);
    Tensor t = st.get(name);
    if (!(Shape(t.sizes()) == shape))
      raise<ValueError>("{}: '{}' has shape {} but the config implies {}", dir, name, shape_str(t.sizes()), shape_str(shape));
    return t.to(DType::Float32);
  };
  auto has = [&](const std::string& name) { return st.contains(name); };
  auto model =
      std::make_unique<hf::Bert>(e.c, hf::WeightSource(fetch, has, std::make_shared<hf::WeightProducts>()), e.o, e.head);
  model->eval();
  return model;
}

std::unique_ptr<EncoderModel> create_encoder(const std::string& config_json) {
  io::check_json_depth(config_json, "model config");
  json j = json::parse(config_json, nullptr, false);
  if (j.is_discarded() || !j.is_object()) raise<ValueError>("model config: not a JSON object");
  if (architecture_of(j).empty()) {
    const std::string type = hf::get_string(j, "model_type", "");
    FOUNDRY_CHECK_AS(ValueError, type == "bert" || type == "roberta",
                     "model config: model_type '{}' is not an encoder (bert, roberta)", type);
    j["architectures"] = {type == "roberta" ? "RobertaForMaskedLM" : "BertForMaskedLM"};
  }
  const EncoderSpec e = encoder_spec(j, "model config");
  const double std_dev = hf::get_double(j, "initializer_range", 0.02);
  autograd::NoGradGuard no_grad;
  auto fetch = [std_dev](const std::string&, const Shape& shape, const hf::Init& init, hf::Layout) { return init.make(shape, std_dev); };
  auto has = [](const std::string&) { return false; };
  auto model =
      std::make_unique<hf::Bert>(e.c, hf::WeightSource(fetch, has, std::make_shared<hf::WeightProducts>()), e.o, e.head);
  model->train();
  return model;
}

EncoderOutput EncoderModel::operator()(const Tensor& input_ids, const Tensor& attention_mask,
                                       const Tensor& token_type_ids, const Tensor& labels) {
  EncoderOutput out = encode(input_ids, attention_mask, token_type_ids);
  if (!labels.defined()) return out;
  FOUNDRY_CHECK_AS(ValueError, out.logits.defined(), "{}: a base model has no head to compute a loss with",
                   config_.architecture);
  FOUNDRY_CHECK_AS(TypeError, !is_floating(labels.dtype()) || (head_ == "sequence_classification" && out.logits.size(-1) == 1),
                   "{}: labels must be integer ids, got {}", config_.architecture, dtype_name(labels.dtype()));
  const int64_t V = out.logits.size(-1);
  if (head_ == "sequence_classification") {
    FOUNDRY_CHECK_AS(ValueError, labels.dim() == 1 && labels.size(0) == out.logits.size(0),
                     "{}: labels must be [batch] = [{}], got {}", config_.architecture, out.logits.size(0),
                     shape_str(labels.sizes()));
    out.loss = V == 1 ? mse_loss(out.logits.reshape({-1}), labels.to(DType::Float32))
                      : cross_entropy(out.logits, labels.to(DType::Int64), Tensor(), -100);
    return out;
  }
  FOUNDRY_CHECK_AS(ValueError, labels.dim() == 2 && labels.size(0) == input_ids.size(0) && labels.size(1) == input_ids.size(1),
                   "{}: labels must be [batch, tokens] = {}, got {}", config_.architecture,
                   shape_str(input_ids.sizes()), shape_str(labels.sizes()));
  out.loss = cross_entropy(out.logits.reshape({-1, V}), labels.to(DType::Int64).reshape({-1}), Tensor(), -100);
  return out;
}

void save_pretrained(const EncoderModel& model, const std::string& dir, const std::vector<std::string>& tokenizer_files) {
  save_module_folder(model, model.config().json, dir, tokenizer_files, false, DType::Float32);
}

}  // namespace foundry::models
