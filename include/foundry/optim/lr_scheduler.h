// Learning-rate schedulers with torch.optim.lr_scheduler 1.13 semantics. A scheduler changes the
// "lr" option of every parameter group of its optimizer; call step() after optimizer.step().
// Construction performs torch's initial step (last_epoch becomes 0 and the groups get the
// epoch-0 learning rate). The formulas are torch's chainable forms, evaluated in double exactly as
// torch does, so learning-rate sequences match torch to the last bit in practice.
//
// Resuming: construct the optimizer and the scheduler as at the start, then load the optimizer's
// state (it restores each group's "lr" and "initial_lr") and the scheduler's state_dict().
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace foundry::optim {

class Optimizer;

class LRScheduler {
 public:
  virtual ~LRScheduler();
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  /// Advances one epoch/iteration and sets the groups' learning rates.
  virtual void step();
  /// ReduceLROnPlateau steps on a metric; other schedulers ignore the value and step().
  virtual void step(double metric);
  /// True for schedulers that must be stepped with a metric (ReduceLROnPlateau).
  virtual bool needs_metric() const { return false; }

  /// The learning rate the last step() set for a group (torch's get_last_lr()).
  double last_lr(size_t group = 0) const { return last_lr_.at(group); }
  const std::vector<double>& last_lrs() const { return last_lr_; }
  int64_t last_epoch() const { return last_epoch_; }
  const std::vector<double>& base_lrs() const { return base_lrs_; }

  /// The scheduler's counters and learning rates as a JSON object (what checkpoints store).
  virtual std::string state_dict() const;
  virtual void load_state_dict(const std::string& json);

 protected:
  /// Records base learning rates from each group's "initial_lr" (set to "lr" when absent).
  explicit LRScheduler(Optimizer& optimizer);
  /// torch's _initial_step(): derived constructors call it once they are complete.
  void initial_step();
  /// The new learning rate of every group for last_epoch_ (torch's chainable get_lr()).
  virtual std::vector<double> get_lr() = 0;
  double group_lr(size_t group) const;

  Optimizer& optimizer_;
  std::vector<double> base_lrs_;
  int64_t last_epoch_ = -1;
  int64_t step_count_ = 0;
  std::vector<double> last_lr_;
};

/// lr *= gamma every step_size steps.
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);

 protected:
  std::vector<double> get_lr() override;
  int64_t step_size_;
  double gamma_;
};

/// lr *= gamma at each milestone (a milestone listed k times multiplies by gamma^k).
class MultiStepLR : public LRScheduler {
 public:
  MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma = 0.1);

 protected:
  std::vector<double> get_lr() override;
  std::vector<int64_t> milestones_;
  double gamma_;
};

/// lr *= gamma every step.
class ExponentialLR : public LRScheduler {
 public:
  ExponentialLR(Optimizer& optimizer, double gamma);

 protected:
  std::vector<double> get_lr() override;
  double gamma_;
};

/// Cosine from the base lr down to eta_min over T_max steps, then back up (period 2 T_max).
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min = 0.0);

 protected:
  std::vector<double> get_lr() override;
  int64_t T_max_;
  double eta_min_;
};

/// Multiplies the base lr by a factor going linearly from start_factor to end_factor over
/// total_iters steps, then keeps end_factor.
class LinearLR : public LRScheduler {
 public:
  LinearLR(Optimizer& optimizer, double start_factor = 1.0 / 3, double end_factor = 1.0, int64_t total_iters = 5);

 protected:
  std::vector<double> get_lr() override;
  double start_factor_, end_factor_;
  int64_t total_iters_;
};

/// Linear warmup, then cosine decay to min_lr (not in torch; the usual LLM schedule, as nanoGPT):
///   t < warmup_steps:                 base_lr * (t + 1) / warmup_steps
///   warmup_steps <= t < total_steps:  min_lr + (1 + cos(pi * (t - warmup) / (total - warmup))) / 2
///                                              * (base_lr - min_lr)
///   t >= total_steps:                 min_lr
/// where t = last_epoch (0 for the first optimizer step). min_lr is absolute, for every group.
class WarmupCosine : public LRScheduler {
 public:
  WarmupCosine(Optimizer& optimizer, int64_t warmup_steps, int64_t total_steps, double min_lr = 0.0);

 protected:
  std::vector<double> get_lr() override;
  int64_t warmup_steps_, total_steps_;
  double min_lr_;
};

/// torch.optim.lr_scheduler.OneCycleLR options (total_steps is required).
struct OneCycleOptions {
  std::vector<double> max_lr;  ///< one value for all groups, or one per group
  int64_t total_steps = 0;
  double pct_start = 0.3;
  std::string anneal_strategy = "cos";  ///< "cos" or "linear"
  bool cycle_momentum = true;           ///< cycles "momentum" (SGD) or "beta1" (Adam-like)
  double base_momentum = 0.85;
  double max_momentum = 0.95;
  double div_factor = 25.0;
  double final_div_factor = 1e4;
  bool three_phase = false;
};

/// The 1cycle policy: lr from max_lr/div_factor up to max_lr (pct_start of the steps), then down
/// to initial_lr/final_div_factor; momentum moves the opposite way. Stepping past total_steps
/// raises ValueError. Stores initial_lr, max_lr, min_lr (and momentum bounds) in the groups.
class OneCycleLR : public LRScheduler {
 public:
  OneCycleLR(Optimizer& optimizer, OneCycleOptions options);

 protected:
  std::vector<double> get_lr() override;
  double anneal(double start, double end, double pct) const;
  struct Phase {
    double end_step;
    const char *start_lr, *end_lr, *start_momentum, *end_momentum;
  };
  OneCycleOptions options_;
  std::vector<Phase> phases_;
  bool use_beta1_ = false;
};

/// lr = base_lr * fn(epoch), with one function for all groups or one per group.
class LambdaLR : public LRScheduler {
 public:
  using Fn = std::function<double(int64_t)>;
  LambdaLR(Optimizer& optimizer, Fn fn);
  LambdaLR(Optimizer& optimizer, std::vector<Fn> fns);

 protected:
  std::vector<double> get_lr() override;
  std::vector<Fn> fns_;
};

/// torch.optim.lr_scheduler.ReduceLROnPlateau options.
struct PlateauOptions {
  std::string mode = "min";  ///< "min" or "max"
  double factor = 0.1;
  int64_t patience = 10;
  double threshold = 1e-4;
  std::string threshold_mode = "rel";  ///< "rel" or "abs"
  int64_t cooldown = 0;
  std::vector<double> min_lr = {0.0};  ///< one value for all groups, or one per group
  double eps = 1e-8;
};

/// Multiplies the learning rates by `factor` when the metric has not improved for `patience`
/// steps. Step it with step(metric); step() without a metric raises ValueError.
class ReduceLROnPlateau : public LRScheduler {
 public:
  ReduceLROnPlateau(Optimizer& optimizer, PlateauOptions options = {});
  void step() override;
  void step(double metric) override;
  bool needs_metric() const override { return true; }
  double best() const { return best_; }
  int64_t num_bad_epochs() const { return num_bad_epochs_; }
  std::string state_dict() const override;
  void load_state_dict(const std::string& json) override;

 protected:
  std::vector<double> get_lr() override;
  bool is_better(double a, double best) const;
  PlateauOptions options_;
  double best_;
  int64_t num_bad_epochs_ = 0;
  int64_t cooldown_counter_ = 0;
};

}  // namespace foundry::optim
