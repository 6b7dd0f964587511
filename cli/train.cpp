// foundry train: train a causal language model of any registered architecture from a TOML config
// (see examples/shakespeare_char.toml and docs/training.md).
#include <cmath>
#include <cstdio>

#include "commands.h"
#include "foundry/train/trainer.h"

namespace foundry::cli {

void add_train_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("train", "Train a causal language model (gpt2, llama, mistral, qwen2, ... or a pretrained folder) from a TOML config");
  auto config = std::make_shared<std::string>();
  auto data = std::make_shared<std::string>();
  auto steps = std::make_shared<int64_t>(0);
  auto out = std::make_shared<std::string>();
  auto fresh = std::make_shared<bool>(false);
  auto threads = std::make_shared<int>(0);
  auto precision = std::make_shared<std::string>();
  cmd->add_option("--config", *config, "TOML run configuration")->required();
  cmd->add_option("--data", *data, "text file to train on (overrides data.path)");
  cmd->add_option("--max-steps", *steps, "overrides train.max_steps")->check(CLI::PositiveNumber);
  cmd->add_option("--out-dir", *out, "overrides train.out_dir");
  cmd->add_option("--threads", *threads, "threads (default: all cores)")->check(thread_count());
  cmd->add_option("--precision", *precision, "float32 or bfloat16 (autocast); checked with the TOML's values");
  cmd->add_flag("--fresh", *fresh, "ignore existing checkpoints in out_dir");
  auto export_dir = std::make_shared<std::string>();
  cmd->add_option("--export", *export_dir, "after training, write the model as a Hugging Face folder here (config.json, model.safetensors, tokenizer files)");
  auto track_dir = std::make_shared<std::string>();
  auto no_track = std::make_shared<bool>(false);
  cmd->add_option("--track-dir", *track_dir, "record the run (config, metrics, checkpoint) in DIR/foundry.db (default: [track] dir, or runs)");
  cmd->add_flag("--no-track", *no_track, "do not record the run");
  cmd->callback([=] {
    train::TrainConfig c = train::load_train_config(*config);
    if (!data->empty()) c.data_path = *data;
    if (*steps > 0) c.max_steps = *steps;
    if (!out->empty()) c.out_dir = *out;
    if (*threads > 0) c.threads = *threads;
    if (!precision->empty()) c.precision = *precision;
    if (*fresh) c.resume = false;
    if (!export_dir->empty()) c.export_dir = *export_dir;
    if (!track_dir->empty()) c.track_dir = *track_dir;
    if (*no_track) c.track = false;
    train::Trainer trainer(c);
    if (c.track) trainer.add_callback(train::make_tracking_callback(c, *config));
    if (c.early_stopping_patience > 0) trainer.add_callback(std::make_shared<train::EarlyStopping>(c.early_stopping_patience));
    std::printf("model: %s\n%lld parameters, vocabulary %lld (%s), block %lld\n", trainer.model().type_name().c_str(),
                (long long)trainer.model().num_parameters(), (long long)trainer.config().model.vocab_size, c.tokenizer.c_str(),
                (long long)c.model.block_size);
    std::fflush(stdout);
    train::TrainResult r = trainer.run();
    if (r.resumed_from >= 0) std::printf("resumed from step %lld\n", (long long)r.resumed_from);
    std::printf("steps %lld in %.1f s; train loss %.4f; validation loss %.4f (perplexity %.2f); unigram baseline %.4f\n",
                (long long)r.steps, r.seconds, r.final_train_loss, r.final_val_loss, std::exp(r.final_val_loss),
                r.unigram_val_loss);
    if (!r.sample.empty()) std::printf("\n--- sample ---\n%s\n--------------\n", r.sample.c_str());
  });
}

}  // namespace foundry::cli
