// The trainer's experiment-tracking callback (foundry train records runs by default).
#include <cmath>
#include <filesystem>

#include "foundry/core/error.h"
#include "foundry/track/track.h"
#include "foundry/train/trainer.h"

namespace fs = std::filesystem;

namespace foundry::train {

namespace {

class TrackingCallback : public Callback {
 public:
  TrackingCallback(const TrainConfig& c, const std::string& config_path) : cfg_(c), config_path_(config_path) {}

  ~TrackingCallback() override {
    if (run_ && !run_->finished()) {
      try {
        run_->finish(1);  // training did not reach its end (an exception, an interruption)
      } catch (const std::exception& e) {
        std::fprintf(stderr, "foundry: tracking: %s\n", e.what());
      }
    }
  }

  void on_train_begin(Trainer& t) override {
    track::InitOptions o;
    o.dir = cfg_.track_dir;
    o.project = !cfg_.track_project.empty() ? cfg_.track_project
                : !config_path_.empty()     ? fs::path(config_path_).stem().string()
                                            : "train";
    std::string out_name = fs::path(cfg_.out_dir).lexically_normal().filename().string();
    o.name = !cfg_.track_name.empty() ? cfg_.track_name : out_name.empty() ? "" : out_name;
    TrainConfig seen = t.config();
    o.config_json = train_config_json(seen);
    o.tags = {seen.model.architecture};
    // A run continued from a checkpoint continues its tracked run.
    run_ = track::init_for_folder(o, (fs::path(cfg_.out_dir) / "track_run_id").string(), cfg_.resume);
    std::printf("tracking: run %s (%s) in %s/foundry.db\n", run_->id().c_str(), run_->name().c_str(),
                cfg_.track_dir.c_str());
    std::fflush(stdout);
  }

  void on_step_end(Trainer& t, const StepInfo& s) override {
    std::map<std::string, double> m{{"loss", s.loss}, {"lr", s.lr}, {"tokens_per_sec", s.tokens_per_second},
                                    {"step_ms", s.ms}};
    if (t.config().grad_clip > 0) m["grad_norm"] = s.grad_norm;
    run_->log(m, s.step);
    run_->add_tokens(int64_t(t.config().batch_size * t.config().grad_accum_steps * t.config().model.block_size));
  }

  void on_eval(Trainer&, const EvalInfo& e) override {
    run_->log({{"val_loss", e.val_loss}, {"val_perplexity", e.val_perplexity}}, e.step);
    if (e.val_loss < best_val_) {
      best_val_ = e.val_loss;
      run_->set_summary("best_val_loss", e.val_loss);
    }
  }

  void on_checkpoint(Trainer&, int64_t, const std::string& path) override { last_checkpoint_ = path; }

  void on_train_end(Trainer& t) override {
    const TrainResult& r = t.result();
    run_->log({{"val_loss", r.final_val_loss}, {"val_perplexity", std::exp(r.final_val_loss)}}, r.steps);
    run_->set_summary("final_train_loss", r.final_train_loss);
    run_->set_summary("final_val_loss", r.final_val_loss);
    run_->set_summary("unigram_val_loss", r.unigram_val_loss);
    run_->set_summary("steps", double(r.steps));
    if (r.final_val_loss < best_val_) run_->set_summary("best_val_loss", r.final_val_loss);
    if (!r.sample.empty()) run_->log_text("sample", r.sample, r.steps);
    if (!last_checkpoint_.empty() && fs::exists(last_checkpoint_)) {
      if (fs::is_regular_file(last_checkpoint_)) {
        run_->log_artifact(last_checkpoint_, "checkpoint");
      } else {
        for (auto& e : fs::directory_iterator(last_checkpoint_))
          if (e.is_regular_file())
            run_->log_artifact(e.path().string(), "checkpoint",
                               fs::path(last_checkpoint_).filename().string() + "/" + e.path().filename().string());
      }
    }
    if (!t.config().export_dir.empty() && fs::exists(fs::path(t.config().export_dir) / "model.safetensors"))
      run_->log_artifact((fs::path(t.config().export_dir) / "model.safetensors").string(), "model");
    run_->finish(0);
  }

 private:
  TrainConfig cfg_;
  std::string config_path_, last_checkpoint_;
  std::unique_ptr<track::Run> run_;
  double best_val_ = INFINITY;
};

}  // namespace

std::shared_ptr<Callback> make_tracking_callback(const TrainConfig& config, const std::string& config_path) {
  return std::make_shared<TrackingCallback>(config, config_path);
}

}  // namespace foundry::train
