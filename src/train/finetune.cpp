// The LoRA / QLoRA fine-tuning loop behind `foundry finetune` (see finetune.h).
#include "foundry/train/finetune.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>

#include <nlohmann/json.hpp>

#include "foundry/autograd/grad_mode.h"
#include "foundry/core/error.h"
#include "foundry/core/parallel.h"
#include "foundry/core/rng.h"
#include "foundry/io/checkpoint.h"
#include "foundry/models/gguf.h"
#include "foundry/ops/autocast.h"
#include "foundry/ops/ops.h"
#include "foundry/optim/lr_scheduler.h"
#include "foundry/optim/optimizer.h"
#include "foundry/peft/lora.h"
#include "foundry/track/track.h"
#include "foundry/train/progress.h"

namespace foundry::train {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

void check_config(const FinetuneConfig& c) {
  FOUNDRY_CHECK_AS(ValueError, c.batch_size > 0 && c.grad_accum > 0, "finetune: --batch-size and --grad-accum must be positive");
  FOUNDRY_CHECK_AS(ValueError, c.seq_len > 1, "finetune: --seq-len must be at least 2");
  FOUNDRY_CHECK_AS(ValueError, std::isfinite(c.lr) && c.lr > 0, "finetune: --lr must be positive and finite, got {}", c.lr);
  FOUNDRY_CHECK_AS(ValueError, std::isfinite(c.grad_clip) && c.grad_clip >= 0,
                   "finetune: --grad-clip must be 0 (off) or positive, got {}", c.grad_clip);
  FOUNDRY_CHECK_AS(ValueError, std::isfinite(c.lora_alpha) && c.lora_alpha > 0 && c.lora_dropout >= 0 && c.lora_dropout < 1,
                   "finetune: --lora-alpha must be positive and finite (got {}), --lora-dropout in [0, 1) (got {})",
                   c.lora_alpha, c.lora_dropout);
  FOUNDRY_CHECK_AS(ValueError, c.steps >= 0 && std::isfinite(c.epochs) && c.epochs >= 0,
                   "finetune: --steps ({}) and --epochs ({}) must be positive", c.steps, c.epochs);
  FOUNDRY_CHECK_AS(ValueError, c.steps > 0 || c.epochs > 0, "finetune: give --steps or --epochs");
  FOUNDRY_CHECK_AS(ValueError, c.warmup >= 0 && c.eval_every >= 0 && c.checkpoint_every >= 0,
                   "finetune: --warmup, --eval-every and --checkpoint-every must be 0 or more");
  FOUNDRY_CHECK_AS(ValueError, c.schedule == "cosine" || c.schedule == "linear" || c.schedule == "constant",
                   "finetune: --schedule must be cosine, linear or constant, got '{}'", c.schedule);
  FOUNDRY_CHECK_AS(ValueError, c.precision == "float32" || c.precision == "bfloat16",
                   "finetune: --precision must be float32 or bfloat16, got '{}'", c.precision);
  FOUNDRY_CHECK_AS(ValueError, c.eval_fraction >= 0 && c.eval_fraction < 1, "finetune: eval fraction must be in [0, 1)");
  FOUNDRY_CHECK_AS(ValueError, !c.model.empty() && !c.data.empty() && !c.out.empty(),
                   "finetune: --model, --data and --out are required");
}

// transformers' get_{cosine,linear,constant}_schedule_with_warmup multipliers.
double schedule_factor(const std::string& kind, int64_t step, int64_t warmup, int64_t total) {
  if (step < warmup) return double(step) / double(std::max<int64_t>(1, warmup));
  if (kind == "constant") return 1.0;
  const double rest = double(std::max<int64_t>(1, total - warmup));
  if (kind == "linear") return std::max(0.0, double(total - step) / rest);
  const double progress = double(step - warmup) / rest;
  return std::max(0.0, 0.5 * (1.0 + std::cos(M_PI * progress)));
}

struct Batch {
  Tensor ids, mask, labels;
  int64_t label_tokens = 0;  // labels[:, 1:] that are not ignored (what the loss averages over)
};

Batch make_batch(const std::vector<const SftExample*>& examples, int64_t pad_id) {
  size_t T = 0;
  for (const SftExample* e : examples) T = std::max(T, e->input_ids.size());
  const int64_t B = int64_t(examples.size());
  std::vector<int64_t> ids(size_t(B) * T, pad_id), labels(size_t(B) * T, -100), mask(size_t(B) * T, 0);
  bool padded = false;
  Batch b;
  for (int64_t r = 0; r < B; ++r) {
    const SftExample& e = *examples[size_t(r)];
    padded |= e.input_ids.size() != T;
    for (size_t t = 0; t < e.input_ids.size(); ++t) {
      ids[size_t(r) * T + t] = e.input_ids[t];
      labels[size_t(r) * T + t] = e.labels[t];
      mask[size_t(r) * T + t] = 1;
      if (t > 0 && e.labels[t] != -100) ++b.label_tokens;
    }
  }
  b.ids = tensor<int64_t>(ids, {B, int64_t(T)});
  b.labels = tensor<int64_t>(labels, {B, int64_t(T)});
  if (padded) b.mask = tensor<int64_t>(mask, {B, int64_t(T)});  // right padding; no mask when none
  return b;
}

// Example order of each epoch: a permutation drawn from the seed and the epoch, so a resumed run
// sees the same batches.
class BatchOrder {
 public:
  BatchOrder(int64_t examples, int64_t batch, uint64_t seed) : n_(examples), batch_(batch), seed_(seed) {}
  int64_t batches_per_epoch() const { return (n_ + batch_ - 1) / batch_; }
  std::vector<int64_t> indices(int64_t micro_batch) {
    const int64_t epoch = micro_batch / batches_per_epoch(), b = micro_batch % batches_per_epoch();
    if (epoch != epoch_) {
      perm_.resize(size_t(n_));
      std::iota(perm_.begin(), perm_.end(), 0);
      std::mt19937_64 rng(seed_ * 1000003ULL + uint64_t(epoch));
      std::shuffle(perm_.begin(), perm_.end(), rng);
      epoch_ = epoch;
    }
    const int64_t lo = b * batch_, hi = std::min(n_, lo + batch_);
    return std::vector<int64_t>(perm_.begin() + lo, perm_.begin() + hi);
  }

 private:
  int64_t n_, batch_;
  uint64_t seed_;
  int64_t epoch_ = -1;
  std::vector<int64_t> perm_;
};

// The run's record in the tracking directory: the whole configuration as its config; a run resumed
// from a checkpoint continues its tracked run (id kept in OUT/track_run_id). An exception out of
// finetune() unwinds the Run, whose destructor records the failure.
std::unique_ptr<track::Run> start_tracking(const FinetuneConfig& c, const FinetuneResult& res) {
  json cfg = {{"model", c.model}, {"data", c.data}, {"eval_data", c.eval_data}, {"eval_fraction", c.eval_fraction},
              {"lora_r", c.lora_r}, {"lora_alpha", c.lora_alpha}, {"lora_dropout", c.lora_dropout},
              {"target_modules", c.target_modules}, {"use_rslora", c.use_rslora}, {"quantize", c.quantize},
              {"lr", c.lr}, {"steps", c.steps}, {"epochs", c.epochs}, {"batch_size", c.batch_size},
              {"grad_accum", c.grad_accum}, {"seq_len", c.seq_len}, {"warmup", c.warmup}, {"schedule", c.schedule},
              {"weight_decay", c.weight_decay}, {"grad_clip", c.grad_clip}, {"precision", c.precision},
              {"gradient_checkpointing", c.gradient_checkpointing}, {"seed", c.seed},
              {"train_examples", res.train_examples}, {"eval_examples", res.eval_examples}};
  track::InitOptions o;
  o.dir = c.track_dir;
  o.project = c.track_project;
  o.name = !c.track_name.empty() ? c.track_name : fs::path(c.out).lexically_normal().filename().string();
  o.config_json = cfg.dump();
  o.tags = {"lora"};
  if (!c.quantize.empty()) o.tags.push_back("qlora-" + c.quantize);
  return track::init_for_folder(o, (fs::path(c.out) / "track_run_id").string(), c.resume);
}

}  // namespace

FinetuneResult finetune(const FinetuneConfig& c, const std::function<bool(int64_t, double)>& on_step) {
  check_config(c);
  const auto t_start = std::chrono::steady_clock::now();
  if (c.threads > 0) set_num_threads(c.threads);
  if (models::is_gguf_file(c.model))
    raise<ValueError>("finetune: '{}' is a GGUF file; give the Hugging Face folder (use --quantize for QLoRA)", c.model);
  std::shared_ptr<models::CausalLM> model = models::load_pretrained(c.model);
  if (model->has_adopted_quantized_weights())
    raise<ValueError>("finetune: '{}' holds quantized weights; give the float checkpoint and --quantize", c.model);
  FinetuneResult res;

  // Data.
  const SftFormat format = sft_format_for(c.model, model->config(), c.seq_len);
  std::vector<SftExample> train = load_sft_jsonl(c.data, format), eval;
  if (!c.eval_data.empty()) {
    eval = load_sft_jsonl(c.eval_data, format);
  } else if (c.eval_fraction > 0 && train.size() >= 2) {
    std::vector<size_t> order(train.size());
    std::iota(order.begin(), order.end(), 0);
    std::mt19937_64 rng(c.seed);
    std::shuffle(order.begin(), order.end(), rng);
    const size_t held = std::clamp<size_t>(size_t(std::llround(double(train.size()) * c.eval_fraction)), 1, train.size() - 1);
    std::vector<SftExample> kept;
    for (size_t i = 0; i < order.size(); ++i) (i < held ? eval : kept).push_back(std::move(train[order[i]]));
    train = std::move(kept);
  }
  res.train_examples = int64_t(train.size());
  res.eval_examples = int64_t(eval.size());
  const int64_t pad_id = model->config().pad_token_id.value_or(std::max<int64_t>(format.eos_id, 0));

  // Model: the quantized frozen base (QLoRA), then the adapter.
  manual_seed(c.seed);
  if (!c.quantize.empty()) res.quantized_layers = peft::quantize_base(*model, c.quantize);
  peft::LoraConfig lc;
  lc.r = c.lora_r;
  lc.lora_alpha = c.lora_alpha;
  lc.lora_dropout = c.lora_dropout;
  lc.target_modules = c.target_modules;
  if (lc.target_modules.size() == 1 && lc.target_modules[0] == "all-linear") {
    lc.target_modules.clear();
    lc.all_linear = true;
  }
  lc.use_rslora = c.use_rslora;
  lc.base_model_name_or_path = fs::absolute(c.model).lexically_normal().string();
  auto peft_model = std::make_shared<peft::PeftModel>(model, lc);
  model->set_gradient_checkpointing(c.gradient_checkpointing);
  peft_model->train();
  std::tie(res.trainable_parameters, res.total_parameters) = peft_model->trainable_parameters();
  nn::NamedTensors trainable;
  for (auto& [name, p] : peft_model->named_parameters())
    if (p.requires_grad()) trainable.emplace_back(name, p);
  std::vector<Tensor> params;
  for (auto& [name, p] : trainable) params.push_back(p);

  BatchOrder order(int64_t(train.size()), c.batch_size, c.seed);
  const int64_t total = c.steps > 0 ? c.steps
                                    : std::max<int64_t>(1, int64_t(std::ceil(c.epochs * double(order.batches_per_epoch()) /
                                                                             double(c.grad_accum))));
  optim::AdamW opt(params, optim::AdamWOptions{.lr = c.lr, .weight_decay = c.weight_decay});
  const std::string schedule = c.schedule;
  const int64_t warmup = c.warmup;
  optim::LambdaLR scheduler(opt, [schedule, warmup, total](int64_t step) {
    return schedule_factor(schedule, step, warmup, total);
  });
  fs::create_directories(c.out);
  io::CheckpointManager checkpoints((fs::path(c.out) / "checkpoints").string(), c.keep_checkpoints);

  auto evaluate = [&]() {
    if (eval.empty()) return std::nan("");
    autograd::NoGradGuard no_grad;
    peft_model->eval();
    double nll = 0;
    int64_t tokens = 0;
    for (size_t i = 0; i < eval.size(); i += size_t(c.batch_size)) {
      std::vector<const SftExample*> part;
      for (size_t k = i; k < std::min(eval.size(), i + size_t(c.batch_size)); ++k) part.push_back(&eval[k]);
      Batch b = make_batch(part, pad_id);
      if (b.label_tokens == 0) continue;
      autocast::AutocastGuard ac(c.precision == "bfloat16");
      nll += (*peft_model)(b.ids, b.mask, b.labels).loss.item<double>() * double(b.label_tokens);
      tokens += b.label_tokens;
    }
    peft_model->train();
    return tokens ? nll / double(tokens) : std::nan("");
  };

  int64_t step = 0;
  if (c.resume) {
    io::resume_note(checkpoints.root(), "finetune");
    if (auto latest = checkpoints.load_latest()) {
      io::CheckpointState& s = latest->second;
      nn::NamedTensors adapter;
      for (auto& [k, v] : s.at("adapter").tensors) adapter.emplace_back(k, v);
      const std::map<std::string, Tensor> saved(adapter.begin(), adapter.end());
      autograd::NoGradGuard no_grad;
      for (auto& [name, p] : trainable) {
        auto it = saved.find(name);
        if (it == saved.end() || !(Shape(it->second.sizes()) == Shape(p.sizes())))
          raise<ValueError>("finetune --resume: the checkpoint in {} was made with other LoRA settings ('{}')",
                            checkpoints.root(), name);
        p.copy_(it->second);
      }
      opt.load_state_dict({s.at("optimizer").tensors, s.at("optimizer").json});
      scheduler.load_state_dict(s.at("scheduler").json);
      const json rng = json::parse(s.at("rng").json);
      default_generator().set_state(rng.at("seed").get<uint64_t>(), rng.at("offset").get<uint64_t>());
      step = json::parse(s.at("trainer").json).at("step").get<int64_t>();
      res.resumed_from = step;
    }
  }
  auto save_checkpoint = [&]() {
    io::CheckpointState s;
    for (auto& [name, p] : trainable) s["adapter"].tensors[name] = p.detach().contiguous();
    const optim::OptimizerState os = opt.state_dict();
    s["optimizer"] = {os.tensors, os.json};
    s["scheduler"].json = scheduler.state_dict();
    s["rng"].json = json{{"seed", default_generator().seed()}, {"offset", default_generator().offset()}}.dump();
    s["trainer"].json = json{{"step", step}, {"total_steps", total}}.dump();
    checkpoints.save(step, s);
  };

  std::ofstream metrics(fs::path(c.out) / "metrics.jsonl", std::ios::app);
  std::unique_ptr<track::Run> tracked = c.track ? start_tracking(c, res) : nullptr;
  auto log = [&](const json& j) {
    metrics << j.dump() << "\n";
    metrics.flush();
    if (!tracked) return;
    std::map<std::string, double> values;
    for (auto it = j.begin(); it != j.end(); ++it)
      if (it.key() != "step" && it.value().is_number()) values[it.key() == "tokens_per_s" ? "tokens_per_sec" : it.key()] = it.value().get<double>();
    tracked->log(values, j.at("step").get<int64_t>());
  };
  res.eval_loss_before = evaluate();
  if (step == 0 && !std::isnan(res.eval_loss_before)) log({{"step", 0}, {"eval_loss", res.eval_loss_before}});

  std::unique_ptr<ProgressBar> bar;
  if (c.progress) {
    ProgressBar::Options o;
    o.desc = "finetune";
    o.unit = "step";
    bar = std::make_unique<ProgressBar>(total, o);
    bar->update(step);
  }
  bool stopped = false;
  while (step < total && !stopped) {
    const auto t0 = std::chrono::steady_clock::now();
    double loss_sum = 0;
    int64_t tokens = 0;
    for (int64_t micro = 0; micro < c.grad_accum; ++micro) {
      std::vector<const SftExample*> part;
      for (int64_t i : order.indices(step * c.grad_accum + micro)) part.push_back(&train[size_t(i)]);
      Batch b = make_batch(part, pad_id);
      tokens += int64_t(b.ids.numel());
      Tensor loss;
      {
        autocast::AutocastGuard ac(c.precision == "bfloat16");
        loss = (*peft_model)(b.ids, b.mask, b.labels).loss;
      }
      loss_sum += loss.item<double>();
      (c.grad_accum > 1 ? loss / double(c.grad_accum) : loss).backward();
    }
    FOUNDRY_CHECK_AS(ValueError, std::isfinite(loss_sum),
                     "finetune: the loss is {} at step {}: training diverged (lower --lr, or keep --grad-clip on); "
                     "stopped before the update", loss_sum, step + 1);
    const double grad_norm = c.grad_clip > 0 ? optim::clip_grad_norm_(params, c.grad_clip) : 0.0;
    const double lr = opt.lr(0);
    opt.step();
    scheduler.step();
    opt.zero_grad(true);
    ++step;
    const double loss = loss_sum / double(c.grad_accum);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (res.losses.empty()) res.first_loss = loss;
    res.losses.push_back(loss);
    res.final_loss = loss;
    if (c.log_every > 0 && step % c.log_every == 0)
      log({{"step", step}, {"loss", loss}, {"lr", lr}, {"grad_norm", grad_norm}, {"ms", ms},
           {"tokens_per_s", double(tokens) / (ms / 1000)}});
    if (bar) {
      bar->set_postfix("loss", loss);
      bar->set_postfix("lr", lr);
      bar->update(1);
    }
    if (c.eval_every > 0 && step % c.eval_every == 0 && step < total) {
      const double e = evaluate();
      if (!std::isnan(e)) log({{"step", step}, {"eval_loss", e}});
    }
    if (c.checkpoint_every > 0 && step % c.checkpoint_every == 0) save_checkpoint();
    if (on_step && !on_step(step, loss)) stopped = true;
  }
  if (bar) bar->close();
  res.steps = step;
  if (!stopped) {
    if (c.checkpoint_every <= 0 || step % c.checkpoint_every != 0) save_checkpoint();
    res.eval_loss_after = evaluate();
    if (!std::isnan(res.eval_loss_after)) log({{"step", step}, {"eval_loss", res.eval_loss_after}});
    peft_model->save_pretrained(c.out);
  }
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  if (tracked) {
    tracked->set_summary("first_loss", res.first_loss);
    tracked->set_summary("final_loss", res.final_loss);
    tracked->set_summary("eval_loss_before", res.eval_loss_before);
    if (!stopped) tracked->set_summary("eval_loss_after", res.eval_loss_after);
    tracked->set_summary("trainable_parameters", double(res.trainable_parameters));
    tracked->set_summary("steps", double(res.steps));
    const fs::path adapter = fs::path(c.out) / "adapter_model.safetensors";
    if (!stopped && fs::exists(adapter)) tracked->log_artifact(adapter.string(), "adapter");
    tracked->finish(stopped ? 1 : 0);
  }
  return res;
}

}  // namespace foundry::train
