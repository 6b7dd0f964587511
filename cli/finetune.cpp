// `foundry finetune` (LoRA / QLoRA on a Hugging Face folder, adapters in PEFT's layout) and
// `foundry merge` (an adapter merged into its base, written as an ordinary HF folder).
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "commands.h"
#include "foundry/core/error.h"
#include "foundry/models/tokenizer_files.h"
#include "foundry/train/finetune.h"

namespace foundry::cli {

namespace {

void add_finetune(CLI::App& app) {
  auto c = std::make_shared<train::FinetuneConfig>();
  auto targets = std::make_shared<std::string>();
  auto no_progress = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand("finetune", "LoRA / QLoRA fine-tuning of a Hugging Face model on JSONL data; "
                                                 "the adapter is saved in PEFT's layout");
  cmd->add_option("--model", c->model, "Hugging Face model folder (the frozen base)")->required();
  cmd->add_option("--data", c->data,
                  "JSONL, one example per line: {\"text\"}, {\"prompt\", \"completion\"}, {\"messages\"} (chat "
                  "template) or {\"input_ids\"}")
      ->required();
  cmd->add_option("--out", c->out, "adapter folder (adapter_config.json, adapter_model.safetensors, metrics.jsonl, "
                                   "checkpoints/)")
      ->required();
  cmd->add_option("--eval-data", c->eval_data, "held-out JSONL (default: --eval-fraction of --data)");
  cmd->add_option("--eval-fraction", c->eval_fraction, "share of --data held out for the eval loss (default 0.1)");
  cmd->add_option("--eval-every", c->eval_every, "steps between evaluations (default: before and after only)");
  cmd->add_option("--lora-r", c->lora_r, "LoRA rank (default 8)");
  cmd->add_option("--lora-alpha", c->lora_alpha, "LoRA alpha (default 16; scaling alpha / r)");
  cmd->add_option("--lora-dropout", c->lora_dropout, "dropout on the LoRA branch's input (default 0.05)");
  cmd->add_option("--target-modules", *targets,
                  "comma-separated module names (suffixes), or all-linear (default: PEFT's for the architecture, "
                  "e.g. q_proj,v_proj; c_attn for GPT-2)");
  cmd->add_flag("--use-rslora", c->use_rslora, "scaling alpha / sqrt(r) (rank-stabilised LoRA)");
  cmd->add_option("--quantize", c->quantize,
                  "QLoRA: keep the frozen base quantized: nf4 (bitsandbytes, double quantization), int8, or a GGML "
                  "format (q4_0, q8_0, q4_K, ...)");
  cmd->add_option("--lr", c->lr, "peak learning rate (default 2e-4)");
  auto* steps = cmd->add_option("--steps", c->steps, "optimizer steps")->check(CLI::PositiveNumber);
  auto* epochs = cmd->add_option("--epochs", c->epochs, "passes over the data (default 1)")->check(CLI::PositiveNumber);
  steps->excludes(epochs);
  cmd->add_option("--batch-size", c->batch_size, "examples per micro-batch (default 4)");
  cmd->add_option("--grad-accum", c->grad_accum, "micro-batches per optimizer step (default 1)");
  cmd->add_option("--seq-len", c->seq_len, "longest example in tokens; longer ones are cut (default 512)");
  cmd->add_option("--warmup", c->warmup, "linear warmup steps (default 0)");
  cmd->add_option("--schedule", c->schedule, "learning-rate schedule after warmup: cosine, linear or constant")
      ->check(CLI::IsMember({"cosine", "linear", "constant"}));
  cmd->add_option("--weight-decay", c->weight_decay, "AdamW weight decay (default 0)");
  cmd->add_option("--grad-clip", c->grad_clip, "clip the gradient norm to this (0: off; default 1)");
  cmd->add_option("--precision", c->precision, "float32 or bfloat16 (autocast)")
      ->check(CLI::IsMember({"float32", "bfloat16"}));
  cmd->add_flag("--gradient-checkpointing", c->gradient_checkpointing, "recompute activations in backward");
  cmd->add_option("--seed", c->seed, "seed of the data order, split, dropout and LoRA init (default 42)");
  cmd->add_flag("--resume", c->resume, "continue from the newest checkpoint in OUT/checkpoints (bit-exact)");
  cmd->add_option("--checkpoint-every", c->checkpoint_every, "steps between checkpoints (default 50)");
  cmd->add_option("--threads", c->threads, "threads (default: all cores)")->check(thread_count());
  cmd->add_flag("--no-progress", *no_progress, "no progress bar");
  auto no_track = std::make_shared<bool>(false);
  cmd->add_option("--track-dir", c->track_dir, "record the run (config, metrics, adapter) in DIR/foundry.db (default: runs)");
  cmd->add_flag("--no-track", *no_track, "do not record the run");
  cmd->callback([c, targets, no_progress, no_track] {
    c->track = !*no_track;
    train::FinetuneConfig config = *c;
    config.target_modules = split_list(*targets);
    config.progress = !*no_progress;
    const train::FinetuneResult r = train::finetune(config);
    if (r.resumed_from >= 0) std::printf("resumed from step %lld\n", static_cast<long long>(r.resumed_from));
    std::printf("examples: %lld train, %lld held out; trainable parameters %lld of %lld (%.3f%%)%s\n",
                static_cast<long long>(r.train_examples), static_cast<long long>(r.eval_examples),
                static_cast<long long>(r.trainable_parameters), static_cast<long long>(r.total_parameters),
                100.0 * double(r.trainable_parameters) / double(std::max<int64_t>(r.total_parameters, 1)),
                r.quantized_layers ? (", " + std::to_string(r.quantized_layers) + " base layers in " + config.quantize).c_str()
                                   : "");
    std::printf("steps %lld in %.1f s; train loss %.4f -> %.4f; eval loss %.4f -> %.4f\n",
                static_cast<long long>(r.steps), r.seconds, r.first_loss, r.final_loss, r.eval_loss_before,
                r.eval_loss_after);
    std::printf("adapter saved in %s\n", config.out.c_str());
  });
}

void add_merge(CLI::App& app) {
  auto model = std::make_shared<std::string>(), adapter = std::make_shared<std::string>(),
       out = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("merge", "merge a LoRA adapter (PEFT layout) into its base and write an HF folder");
  cmd->add_option("--model", *model, "Hugging Face folder of the base model")->required();
  cmd->add_option("--adapter", *adapter, "adapter folder (adapter_config.json + adapter_model.safetensors)")->required();
  cmd->add_option("--out", *out, "output folder (config.json, model.safetensors, tokenizer files)")->required();
  cmd->callback([=] {
    // Written over the base (or into the adapter's folder), a failed or unwanted merge loses the
    // original; `quantize` refuses the same.
    std::error_code ec;
    for (const std::string* source : {model.get(), adapter.get()})
      if (std::filesystem::equivalent(*source, *out, ec))
        raise<ValueError>("merge: --out {} is the {} folder; write the merged model elsewhere", *out,
                          source == model.get() ? "--model" : "--adapter");
    models::LoadOptions o;
    o.dtype = std::nullopt;  // merged in the checkpoint's own dtype, written in it
    auto merged = load_model(*model, o, *adapter, /*merge=*/true);
    models::save_pretrained(*merged, *out, models::folder_tokenizer_file_paths(*model), /*keep_dtype=*/true);
    std::printf("merged %s into %s: wrote %s\n", adapter->c_str(), model->c_str(), out->c_str());
  });
}

}  // namespace

void add_finetune_commands(CLI::App& app) {
  add_finetune(app);
  add_merge(app);
}

}  // namespace foundry::cli
