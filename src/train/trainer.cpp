#include "foundry/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "foundry/autograd/grad_mode.h"
#include "foundry/core/parallel.h"
#include "foundry/core/rng.h"
#include "foundry/data/dataset.h"
#include "foundry/io/checkpoint.h"
#include "foundry/io/npy.h"
#include "foundry/models/gguf.h"
#include "foundry/models/tokenizer_files.h"
#include "foundry/ops/autocast.h"
#include "foundry/ops/ops.h"
#include "foundry/optim/optimizer.h"
#include "foundry/train/progress.h"
#include "text/unicode.h"

namespace foundry::train {

using json = nlohmann::json;

void EarlyStopping::on_eval(Trainer& t, const EvalInfo& e) {
  if (e.val_loss < best_ - min_delta_) {
    best_ = e.val_loss;
    bad_ = 0;
  } else if (++bad_ >= patience_) {
    t.request_stop();
  }
}

struct Trainer::State {
  data::TextEncoder encoder;
  std::shared_ptr<data::TokenShard> train, val;
  std::unique_ptr<data::LMBatches> train_batches, val_batches;
  std::unique_ptr<optim::AdamW> optimizer;
  std::unique_ptr<optim::WarmupCosine> scheduler;
  std::unique_ptr<io::CheckpointManager> checkpoints;
  std::ofstream metrics;
  int64_t step = 0;  // completed steps
  double unigram = 0;
};

namespace {

// Cross-entropy of the validation tokens under the training split's token frequencies (what a
// model that ignores context would reach).
double unigram_loss(const data::TokenShard& train, const data::TokenShard& val, int64_t vocab) {
  std::vector<double> counts(size_t(vocab), 1.0);  // add-one smoothing
  for (int64_t i = 0; i < train.size(); ++i) counts[train[i] < vocab ? train[i] : 0] += 1;
  double total = 0;
  for (double c : counts) total += c;
  double nll = 0;
  for (int64_t i = 0; i < val.size(); ++i) nll -= std::log(counts[val[i] < vocab ? val[i] : 0] / total);
  return val.size() ? nll / double(val.size()) : 0;
}

// Mean next-token cross-entropy of logits [B, T, V] against targets [B, T] (already shifted).
Tensor next_token_loss(const Tensor& logits, const Tensor& targets) {
  const int64_t V = logits.size(-1);
  return cross_entropy(logits.reshape({-1, V}), targets.reshape({-1}));
}

}  // namespace

std::pair<Tensor, Tensor> mask_tokens(const Tensor& ids, int64_t mask_token, int64_t vocab, double probability,
                                      Generator& gen) {
  FOUNDRY_CHECK_AS(ValueError, probability > 0 && probability <= 1, "mlm_probability must be in (0, 1], got {}",
                   probability);
  Tensor x = ids.to(DType::Int64).contiguous().clone();
  Tensor labels = empty(x.sizes(), DType::Int64);
  int64_t* xs = x.data<int64_t>();
  int64_t* ls = labels.data<int64_t>();
  Tensor u = rand({x.numel(), 3}, DType::Float64, &gen).contiguous();  // chosen?, masked?, random vs kept?
  Tensor r = randint(0, vocab, {x.numel()}, DType::Int64, &gen).contiguous();
  const double* us = u.data<double>();
  const int64_t* rs = r.data<int64_t>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    const bool chosen = us[3 * i] < probability;
    ls[i] = chosen ? xs[i] : -100;
    if (!chosen) continue;
    if (us[3 * i + 1] < 0.8) xs[i] = mask_token;
    else if (us[3 * i + 2] < 0.5) xs[i] = rs[i];
  }
  return {x, labels};
}

int64_t noise_spans(int64_t length, double noise_density, double mean_span_length) {
  const int64_t noise = std::clamp<int64_t>(int64_t(std::llround(double(length) * noise_density)), 1, length - 1);
  return std::clamp<int64_t>(int64_t(std::llround(double(noise) / mean_span_length)), 1, noise);
}

namespace {

// Lengths of `segments` random non-empty parts of `items` (transformers' _random_segmentation).
std::vector<int64_t> random_segmentation(int64_t items, int64_t segments, Generator& gen) {
  std::vector<int64_t> order = randperm(items - 1, DType::Int64, &gen).contiguous().to_vector<int64_t>();
  std::vector<bool> first(size_t(items), false);  // first[i]: item i starts a new segment (i >= 1)
  for (int64_t i = 0; i < items - 1; ++i) first[size_t(i + 1)] = order[size_t(i)] < segments - 1;
  std::vector<int64_t> lengths(size_t(segments), 0);
  int64_t seg = 0;
  for (int64_t i = 0; i < items; ++i) {
    if (first[size_t(i)]) ++seg;
    ++lengths[size_t(seg)];
  }
  return lengths;
}

}  // namespace

std::pair<Tensor, Tensor> span_corrupt(const Tensor& ids, int64_t first_sentinel, int64_t eos, double noise_density,
                                       double mean_span_length, Generator& gen) {
  FOUNDRY_CHECK_AS(ValueError, ids.dim() == 2 && ids.size(1) >= 2, "span_corrupt: ids must be [batch, length >= 2], got {}",
                   shape_str(ids.sizes()));
  FOUNDRY_CHECK_AS(ValueError, noise_density > 0 && noise_density < 1 && mean_span_length >= 1,
                   "span_corrupt: noise_density must be in (0, 1) and mean_noise_span_length >= 1 (got {}, {})",
                   noise_density, mean_span_length);
  const int64_t B = ids.size(0), L = ids.size(1);
  const int64_t noise = std::clamp<int64_t>(int64_t(std::llround(double(L) * noise_density)), 1, L - 1);
  const int64_t spans = noise_spans(L, noise_density, mean_span_length);
  std::vector<int64_t> x = ids.to(DType::Int64).contiguous().to_vector<int64_t>(), in, out;
  for (int64_t b = 0; b < B; ++b) {
    const std::vector<int64_t> noise_len = random_segmentation(noise, spans, gen);
    const std::vector<int64_t> keep_len = random_segmentation(L - noise, spans, gen);
    int64_t pos = b * L;
    for (int64_t s = 0; s < spans; ++s) {
      for (int64_t i = 0; i < keep_len[size_t(s)]; ++i) in.push_back(x[size_t(pos++)]);
      in.push_back(first_sentinel - s);
      out.push_back(first_sentinel - s);
      for (int64_t i = 0; i < noise_len[size_t(s)]; ++i) out.push_back(x[size_t(pos++)]);
    }
    in.push_back(eos);
    out.push_back(eos);
  }
  const int64_t Li = L - noise + spans + 1, Lt = noise + spans + 1;
  return {tensor<int64_t>(in, {B, Li}), tensor<int64_t>(out, {B, Lt})};
}

std::string model_config_json(const ModelSpec& spec) {
  json j = json::parse(spec.hf_config);
  if (models::is_encoder_architecture(spec.architecture)) {
    // A masked LM. Two ids past the tokenizer's: [MASK], and the padding id (an embedding row that
    // gets no gradient, so it must not be a real token; RoBERTa's positions also count from it).
    const bool type = spec.architecture == "bert" || spec.architecture == "roberta";
    if (type) j["model_type"] = spec.architecture;
    else j["architectures"] = {spec.architecture};
    if (!j.contains("vocab_size")) j["vocab_size"] = spec.vocab_size + 2;
    if (!j.contains("pad_token_id")) j["pad_token_id"] = spec.vocab_size + 1;
    const bool roberta = spec.architecture.rfind("roberta", 0) == 0 || spec.architecture.rfind("Roberta", 0) == 0;
    if (!j.contains("max_position_embeddings"))
      j["max_position_embeddings"] = spec.block_size + (roberta ? j["pad_token_id"].get<int64_t>() + 1 : 0);
    return j.dump();
  }
  const std::string arch = models::architecture_for(spec.architecture);
  j["architectures"] = {arch};
  if (arch == "T5ForConditionalGeneration") {
    // Span corruption: the padding / decoder-start id, EOS, then `extra_ids` sentinels past the tokenizer's.
    const int64_t extra = j.contains("extra_ids") ? j["extra_ids"].get<int64_t>() : 100;
    FOUNDRY_CHECK_AS(ValueError, extra >= 1, "[model] extra_ids must be positive, got {}", extra);
    j.erase("extra_ids");
    if (!j.contains("vocab_size")) j["vocab_size"] = spec.vocab_size + 2 + extra;
    if (!j.contains("pad_token_id")) j["pad_token_id"] = spec.vocab_size;
    if (!j.contains("decoder_start_token_id")) j["decoder_start_token_id"] = j["pad_token_id"];
    if (!j.contains("eos_token_id")) j["eos_token_id"] = spec.vocab_size + 1;
    return j.dump();
  }
  if (arch == "GPT2LMHeadModel") {
    // The GPT trainer's keys and defaults: a small GPT-2, dropout (0 unless given) on the
    // embeddings, attention weights and residual branches, positions for one block.
    const double p = j.contains("dropout") ? j["dropout"].get<double>() : 0.0;
    j.erase("dropout");
    for (const char* k : {"resid_pdrop", "embd_pdrop", "attn_pdrop"})
      if (!j.contains(k)) j[k] = p;
    if (!j.contains("n_layer")) j["n_layer"] = 4;
    if (!j.contains("n_head")) j["n_head"] = 4;
    if (!j.contains("n_embd")) j["n_embd"] = 128;
    if (!j.contains("n_positions")) j["n_positions"] = spec.block_size;
  } else if (j.contains("dropout") && arch != "OPTForCausalLM") {
    raise<ValueError>("[model] dropout is the GPT-2 trainer's key; {} names its dropouts itself (attention_dropout, "
                      "hidden_dropout, ...)",
                      arch);
  }
  if (!j.contains("vocab_size")) j["vocab_size"] = spec.vocab_size;
  FOUNDRY_CHECK_AS(ValueError, j["vocab_size"].is_number_integer() && j["vocab_size"].get<int64_t>() >= spec.vocab_size,
                   "[model] vocab_size {} must be an integer no smaller than the tokenizer's vocabulary ({})",
                   j["vocab_size"].dump(), spec.vocab_size);
  return j.dump();
}

namespace {

// "" when <out_dir>/data's meta.json records the recipe `c` asks for, else how it differs.
std::string prepared_from_elsewhere(const std::string& meta_text, const TrainConfig& c) {
  const json meta = json::parse(meta_text, nullptr, false);
  if (!meta.is_object()) return "by an unreadable meta.json";
  auto text = [&](const char* key) { return meta.contains(key) && meta[key].is_string() ? meta[key].get<std::string>() : ""; };
  if (text("source") != c.data_path) return fmt::format("from '{}', not data.path '{}'", text("source"), c.data_path);
  if (!meta.contains("field")) return "";  // written before the recipe was recorded in full
  if (text("field") != c.data_field) return fmt::format("from field '{}', not '{}'", text("field"), c.data_field);
  if (!meta["val_fraction"].is_number() || meta["val_fraction"].get<double>() != c.val_fraction)
    return fmt::format("with val_fraction {}, not {}", meta["val_fraction"].dump(), c.val_fraction);
  const std::string kind = text("kind");
  // A tokenizer file is recorded by its absolute path (TextEncoder::from_tokenizer_file).
  const bool same_tokenizer = c.tokenizer == "char" || c.tokenizer == "byte"
                                  ? kind == c.tokenizer
                                  : kind == "tokenizer" && text("path") == std::filesystem::absolute(c.tokenizer).string();
  if (!same_tokenizer)
    return fmt::format("with the {} tokenizer, not '{}'", kind == "tokenizer" ? "'" + text("path") + "'" : kind, c.tokenizer);
  return "";
}

}  // namespace

Trainer::Trainer(TrainConfig config) : cfg_(std::move(config)), st_(std::make_unique<State>()) {
  check_train_config(cfg_, "train");
  if (cfg_.threads > 0) set_num_threads(cfg_.threads);
  std::filesystem::create_directories(cfg_.out_dir);
  // Data: prepared once into <out_dir>/data (train.bin, val.bin, meta.json).
  std::string data_dir = cfg_.prepared_dir.empty() ? cfg_.out_dir + "/data" : cfg_.prepared_dir;
  std::string meta_path = data_dir + "/meta.json";
  if (!cfg_.prepared_dir.empty() && !std::filesystem::exists(meta_path))
    raise<IOError>("train: '{}' is not a prepared dataset (no meta.json; run foundry prepare)", cfg_.prepared_dir);
  if (std::filesystem::exists(meta_path) && cfg_.prepared_dir.empty() && !cfg_.data_path.empty()) {
    // The folder Foundry prepared on an earlier run: kept only if made from this config's data the
    // same way (a changed data.path, field, split or tokenizer was silently trained on the old data).
    const std::string stale = prepared_from_elsewhere(io::read_file(meta_path), cfg_);
    if (!stale.empty()) {
      std::fprintf(stderr, "train: %s was prepared %s; preparing it again\n", data_dir.c_str(), stale.c_str());
      std::filesystem::remove(meta_path);
    }
  }
  if (std::filesystem::exists(meta_path)) {
    st_->encoder = data::TextEncoder::from_description(io::read_file(meta_path));
  } else {
    FOUNDRY_CHECK_AS(ValueError, !cfg_.data_path.empty(), "train: no data path given (data.path)");
    if (cfg_.tokenizer == "char") {
      std::string corpus;
      if (cfg_.data_field.empty()) corpus = io::read_file(cfg_.data_path);
      else data::for_each_jsonl(cfg_.data_path, cfg_.data_field, [&](const std::string& t) { corpus += t; });
      st_->encoder = data::TextEncoder::chars_of(corpus + "\n");
    } else if (cfg_.tokenizer == "byte") {
      st_->encoder = data::TextEncoder::bytes();
    } else {
      st_->encoder = data::TextEncoder::from_tokenizer_file(cfg_.tokenizer);
    }
    data::prepare_dataset(cfg_.data_path, data_dir, st_->encoder, cfg_.val_fraction, cfg_.data_field);
  }
  st_->train = std::make_shared<data::TokenShard>(data::TokenShard::open(data_dir + "/train.bin"));
  st_->val = std::make_shared<data::TokenShard>(data::TokenShard::open(data_dir + "/val.bin"));
  cfg_.model.vocab_size = st_->encoder.vocab_size();
  manual_seed(cfg_.seed);
  if (models::is_encoder_architecture(cfg_.model.architecture) ||
      (!cfg_.model.init_from.empty() && models::is_encoder_folder(cfg_.model.init_from))) {
    encoder_ = cfg_.model.init_from.empty() ? models::create_encoder(model_config_json(cfg_.model))
                                            : models::load_encoder(cfg_.model.init_from);
    FOUNDRY_CHECK_AS(ValueError, encoder_->head() == "masked_lm",
                     "train: {} has no masked-LM head; foundry train trains encoders as masked language models",
                     encoder_->config().architecture);
    mask_token_ = cfg_.mask_token_id >= 0 ? cfg_.mask_token_id : cfg_.model.vocab_size;
    FOUNDRY_CHECK_AS(ValueError, mask_token_ < encoder_->config().vocab_size && cfg_.model.vocab_size <= encoder_->config().vocab_size,
                     "train: the [MASK] id {} and the tokenizer's {} ids must fit the model's vocabulary of {}",
                     mask_token_, cfg_.model.vocab_size, encoder_->config().vocab_size);
    FOUNDRY_CHECK_AS(ValueError, encoder_->config().max_positions >= cfg_.model.block_size,
                     "train: block_size {} is longer than the model's {} positions", cfg_.model.block_size,
                     encoder_->config().max_positions);
    module_ = encoder_;
  } else {
    if (!cfg_.model.init_from.empty()) {
      const std::string& from = cfg_.model.init_from;
      if (models::is_gguf_file(from))
        raise<ValueError>("train: init_from '{}' is a GGUF file, whose weights are quantized for inference; give the "
                          "Hugging Face folder it was converted from",
                          from);
      if (json::parse(models::read_config(from).json).contains("quantization_config"))
        raise<ValueError>("train: init_from '{}' is a quantized folder (config.json has quantization_config); give the "
                          "float checkpoint it was quantized from",
                          from);
      causal_ = models::load_pretrained(from);
      FOUNDRY_CHECK_AS(ValueError, causal_->config().vocab_size >= cfg_.model.vocab_size,
                       "train: the tokenizer's vocabulary ({}) is larger than {}'s ({}); train with the model's tokenizer",
                       cfg_.model.vocab_size, from, causal_->config().vocab_size);
    } else {
      causal_ = models::create_model(model_config_json(cfg_.model));
    }
    FOUNDRY_CHECK_AS(ValueError, causal_->config().max_positions <= 0 || causal_->config().max_positions >= cfg_.model.block_size,
                     "train: block_size {} is longer than the model's {} positions", cfg_.model.block_size,
                     causal_->config().max_positions);
    causal_->set_gradient_checkpointing(cfg_.model.gradient_checkpointing);
    module_ = causal_;
    seq2seq_ = std::dynamic_pointer_cast<models::Seq2SeqLM>(causal_);
    if (seq2seq_) {
      const models::ModelConfig& mc = seq2seq_->config();
      FOUNDRY_CHECK_AS(ValueError, !mc.eos_token_ids.empty(), "train: {} has no eos_token_id for span corruption",
                       mc.architecture);
      const int64_t spans = noise_spans(cfg_.model.block_size, cfg_.noise_density, cfg_.mean_noise_span_length);
      const int64_t reserved = std::max(mc.eos_token_ids[0], mc.pad_token_id.value_or(0));
      FOUNDRY_CHECK_AS(ValueError, mc.vocab_size - spans > std::max(reserved, cfg_.model.vocab_size - 1),
                       "train: {} sentinels ({} spans in {} tokens) don't fit above the tokenizer's ids and EOS in a "
                       "vocabulary of {}", spans, spans, cfg_.model.block_size, mc.vocab_size);
    }
  }
  module_->train();
  st_->train_batches = std::make_unique<data::LMBatches>(st_->train, cfg_.batch_size, cfg_.model.block_size, cfg_.seed);
  st_->val_batches = std::make_unique<data::LMBatches>(st_->val, cfg_.batch_size, cfg_.model.block_size, cfg_.seed + 1);
  st_->unigram = unigram_loss(*st_->train, *st_->val, cfg_.model.vocab_size);

  // Weight decay on matrices only (embeddings and linear weights), as GPT-2/nanoGPT.
  optim::ParamGroup decay, no_decay;
  for (auto& [name, p] : module_->named_parameters()) (p.dim() >= 2 ? decay : no_decay).params.push_back(p);
  decay.options["weight_decay"] = cfg_.weight_decay;
  no_decay.options["weight_decay"] = 0.0;
  st_->optimizer = std::make_unique<optim::AdamW>(
      std::vector<optim::ParamGroup>{decay, no_decay},
      optim::AdamWOptions{.lr = cfg_.lr, .betas = {cfg_.beta1, cfg_.beta2}, .weight_decay = cfg_.weight_decay});
  // Short runs (smoke tests, --max-steps) keep a warmup shorter than the run.
  int64_t warmup = std::min(cfg_.warmup_steps, std::max<int64_t>(cfg_.max_steps / 10, 0));
  st_->scheduler = std::make_unique<optim::WarmupCosine>(*st_->optimizer, warmup, cfg_.max_steps, cfg_.min_lr);
  st_->checkpoints = std::make_unique<io::CheckpointManager>(cfg_.out_dir + "/checkpoints", cfg_.keep_checkpoints);
}

Trainer::~Trainer() = default;

const data::TextEncoder& Trainer::encoder() const { return st_->encoder; }

std::vector<int64_t> Trainer::sample(std::vector<int64_t> ids, Generator& gen) {
  // The context is cropped to block_size (the positions the model was trained on), recomputed
  // for each token: models from scratch have no positions past it worth reading.
  FOUNDRY_CHECK_AS(ValueError, causal_ != nullptr, "train: a masked language model does not sample text");
  autograd::NoGradGuard ng;
  const bool was_training = causal_->is_training();
  causal_->eval();
  for (int64_t i = 0; i < cfg_.sample_tokens; ++i) {
    const int64_t n = std::min<int64_t>(int64_t(ids.size()), cfg_.model.block_size);
    Tensor ctx = tensor<int64_t>(std::vector<int64_t>(ids.end() - n, ids.end()), {1, n});
    Tensor logits = causal_->forward(ctx, Tensor(), nullptr, 1).select(1, 0);  // [1, V]
    Tensor next;
    if (cfg_.temperature <= 0) {
      next = argmax(logits, -1, true);
    } else {
      logits = logits / cfg_.temperature;
      if (cfg_.top_k > 0 && cfg_.top_k < logits.size(-1)) {
        Tensor kth = std::get<0>(topk(logits, cfg_.top_k, -1)).slice(1, cfg_.top_k - 1, cfg_.top_k);
        logits = masked_fill(logits, logits < kth, -INFINITY);
      }
      next = multinomial(softmax(logits, -1), 1, false, &gen);
    }
    ids.push_back(next.item<int64_t>());
  }
  causal_->train(was_training);
  return ids;
}

Tensor Trainer::batch_loss(const Tensor& x, const Tensor& y, Generator* gen) {
  if (seq2seq_) {
    const models::ModelConfig& mc = seq2seq_->config();
    auto [inputs, labels] = span_corrupt(x, mc.vocab_size - 1, mc.eos_token_ids[0], cfg_.noise_density,
                                         cfg_.mean_noise_span_length, gen ? *gen : default_generator());
    return seq2seq_->seq2seq(inputs, Tensor(), Tensor(), labels).loss;
  }
  if (causal_) return next_token_loss(causal_->forward(x), y);
  auto [inputs, labels] = mask_tokens(x, mask_token_, cfg_.model.vocab_size, cfg_.mlm_probability,
                                      gen ? *gen : default_generator());
  return (*encoder_)(inputs, Tensor(), Tensor(), labels).loss;
}

void Trainer::add_callback(std::shared_ptr<Callback> cb) { callbacks_.push_back(std::move(cb)); }

double Trainer::evaluate() {
  autograd::NoGradGuard ng;
  bool was = module_->is_training();
  module_->eval();
  Generator masking(cfg_.seed + 11);  // the same masked positions at every evaluation
  int64_t n = std::min<int64_t>(cfg_.eval_batches, st_->val_batches->sequential_count());
  FOUNDRY_CHECK_AS(ValueError, n > 0, "train: the validation split ({} tokens) is too small for one batch of {} x {}",
                   st_->val->size(), cfg_.batch_size, cfg_.model.block_size + 1);
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    auto [x, y] = st_->val_batches->sequential(i);
    total += batch_loss(x, y, &masking).item<double>();
  }
  module_->train(was);
  return total / double(n);
}

TrainResult Trainer::run(int64_t stop_after) {
  TrainResult result;
  result.unigram_val_loss = st_->unigram;
  auto t_start = std::chrono::steady_clock::now();
  // Resume.
  if (cfg_.resume) {
    io::resume_note(st_->checkpoints->root(), "train");
    if (auto latest = st_->checkpoints->latest()) {
      io::CheckpointState s = st_->checkpoints->load(*latest);
      nn::NamedTensors model_state(s.at("model").tensors.begin(), s.at("model").tensors.end());
      module_->load_state_dict(model_state);
      st_->optimizer->load_state_dict({s.at("optimizer").tensors, s.at("optimizer").json});
      st_->scheduler->load_state_dict(s.at("scheduler").json);
      json rng = json::parse(s.at("rng").json);
      default_generator().set_state(rng.at("seed").get<uint64_t>(), rng.at("offset").get<uint64_t>());
      st_->step = json::parse(s.at("trainer").json).at("step").get<int64_t>();
      result.resumed_from = st_->step;
    }
  }
  std::string metrics_path = cfg_.out_dir + "/metrics.jsonl";
  st_->metrics.open(metrics_path, std::ios::app);
  for (auto& cb : callbacks_) cb->on_train_begin(*this);

  auto save = [&]() {
    io::CheckpointState s;
    auto ms = module_->state_dict();
    for (auto& [k, v] : ms) s["model"].tensors[k] = v.detach().contiguous();
    auto os = st_->optimizer->state_dict();
    s["optimizer"] = {os.tensors, os.json};
    s["scheduler"].json = st_->scheduler->state_dict();
    s["rng"].json = json{{"seed", default_generator().seed()}, {"offset", default_generator().offset()}}.dump();
    s["trainer"].json = json{{"step", st_->step}, {"data_position", st_->step * cfg_.grad_accum_steps}}.dump();
    std::string path = st_->checkpoints->save(st_->step, s);
    for (auto& cb : callbacks_) cb->on_checkpoint(*this, st_->step, path);
  };

  std::unique_ptr<ProgressBar> bar;
  if (cfg_.progress) {
    ProgressBar::Options o;
    o.desc = "train";
    o.unit = "step";
    bar = std::make_unique<ProgressBar>(cfg_.max_steps, o);
    bar->update(st_->step);
  }
  std::vector<Tensor> params = module_->parameters();
  module_->train();
  int64_t ran = 0;
  double last_loss = 0;
  while (st_->step < cfg_.max_steps && !stop_ && (stop_after <= 0 || ran < stop_after)) {
    auto t0 = std::chrono::steady_clock::now();
    double loss_sum = 0;
    for (int64_t micro = 0; micro < cfg_.grad_accum_steps; ++micro) {
      auto [x, y] = st_->train_batches->get(st_->step * cfg_.grad_accum_steps + micro);
      Tensor loss;
      {
        autocast::AutocastGuard ac(cfg_.precision == "bfloat16");
        loss = batch_loss(x, y, nullptr);
      }
      loss_sum += loss.item<double>();
      (cfg_.grad_accum_steps > 1 ? loss / double(cfg_.grad_accum_steps) : loss).backward();
    }
    // Stopped before the update and before anything is saved or exported from the ruined weights.
    FOUNDRY_CHECK_AS(ValueError, std::isfinite(loss_sum),
                     "train: the loss is {} at step {}: training diverged (lower the learning rate, or set "
                     "train.grad_clip); stopped before the update", loss_sum, st_->step + 1);
    double grad_norm = cfg_.grad_clip > 0 ? optim::clip_grad_norm_(params, cfg_.grad_clip) : 0.0;
    double lr = st_->optimizer->lr(0);
    st_->optimizer->step();
    st_->scheduler->step();
    st_->optimizer->zero_grad(true);
    st_->step++;
    ran++;
    StepInfo info;
    info.step = st_->step;
    info.loss = loss_sum / double(cfg_.grad_accum_steps);
    info.lr = lr;
    info.grad_norm = grad_norm;
    info.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    info.tokens_per_second = double(cfg_.batch_size * cfg_.grad_accum_steps * cfg_.model.block_size) / (info.ms / 1000);
    last_loss = info.loss;
    result.losses.push_back(info.loss);
    if (bar) {
      bar->set_postfix("loss", info.loss);
      bar->set_postfix("lr", info.lr);
      bar->update(1);
    }
    if (cfg_.log_every > 0 && st_->step % cfg_.log_every == 0) {
      st_->metrics << json{{"step", info.step}, {"loss", info.loss}, {"lr", info.lr}, {"grad_norm", info.grad_norm},
                           {"tokens_per_s", info.tokens_per_second}, {"ms", info.ms}}
                          .dump()
                   << "\n";
      st_->metrics.flush();
    }
    for (auto& cb : callbacks_) cb->on_step_end(*this, info);
    if (cfg_.eval_every > 0 && st_->step % cfg_.eval_every == 0) {
      EvalInfo e;
      e.step = st_->step;
      e.val_loss = evaluate();
      e.val_perplexity = std::exp(e.val_loss);
      e.train_loss = info.loss;
      result.final_val_loss = e.val_loss;
      if (bar) bar->set_postfix("val", e.val_loss);
      st_->metrics << json{{"step", e.step}, {"val_loss", e.val_loss}, {"val_perplexity", e.val_perplexity}}.dump()
                   << "\n";
      st_->metrics.flush();
      for (auto& cb : callbacks_) cb->on_eval(*this, e);
    }
    if (cfg_.checkpoint_every > 0 && st_->step % cfg_.checkpoint_every == 0) save();
  }
  if (bar) bar->close();
  result.steps = st_->step;
  result.final_train_loss = last_loss;
  bool finished = st_->step >= cfg_.max_steps || stop_;
  if (finished) {
    if (cfg_.checkpoint_every > 0 && st_->step % cfg_.checkpoint_every != 0) save();
    result.final_val_loss = evaluate();
    if (!cfg_.export_dir.empty()) {
      std::vector<std::string> tokenizer_files;
      if (cfg_.tokenizer != "char" && cfg_.tokenizer != "byte") tokenizer_files.push_back(cfg_.tokenizer);
      else if (!cfg_.model.init_from.empty()) tokenizer_files = models::folder_tokenizer_file_paths(cfg_.model.init_from);
      if (causal_) models::save_pretrained(*causal_, cfg_.export_dir, tokenizer_files);
      else models::save_pretrained(*encoder_, cfg_.export_dir, tokenizer_files);
    }
    st_->metrics << json{{"step", st_->step}, {"val_loss", result.final_val_loss},
                         {"val_perplexity", std::exp(result.final_val_loss)},
                         {"unigram_val_loss", st_->unigram}}
                        .dump()
                 << "\n";
    if (cfg_.sample_tokens > 0 && causal_ && !seq2seq_) {
      std::vector<uint32_t> prompt_ids = st_->encoder.encode(cfg_.prompt);
      if (prompt_ids.empty()) prompt_ids = {0};
      std::vector<int64_t> ids(prompt_ids.begin(), prompt_ids.end());
      Generator g(cfg_.seed + 7);
      std::vector<int64_t> all = sample(ids, g);
      // Byte-level models can emit ill-formed UTF-8: replaced by U+FFFD, as HF's decode(errors="replace").
      result.sample = text::uni::sanitize_utf8(st_->encoder.decode(std::vector<uint32_t>(all.begin(), all.end())));
    }
    result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
    result_ = result;
    for (auto& cb : callbacks_) cb->on_train_end(*this);
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  return result;
}

}  // namespace foundry::train
