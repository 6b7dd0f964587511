// LR schedulers: torch.optim.lr_scheduler 1.13's chainable get_lr() formulas, in double.
#include "foundry/optim/lr_scheduler.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <limits>

#include "foundry/core/error.h"
#include "foundry/optim/optimizer.h"

namespace foundry::optim {

using nlohmann::json;

namespace {

constexpr double kPi = 3.14159265358979323846;  // Python's math.pi

// JSON has no infinities or NaN: store them as strings.
json num(double v) {
  if (std::isfinite(v)) return v;
  return std::isnan(v) ? "nan" : v > 0 ? "inf" : "-inf";
}
double num(const json& j) {
  if (j.is_number()) return j.get<double>();
  const std::string s = j.get<std::string>();
  if (s == "inf") return std::numeric_limits<double>::infinity();
  if (s == "-inf") return -std::numeric_limits<double>::infinity();
  return std::numeric_limits<double>::quiet_NaN();
}

json parse_state(const std::string& text, const char* who) {
  try {
    json j = json::parse(text);
    if (!j.is_object()) raise<ValueError>("{}: load_state_dict: expected a JSON object", who);
    return j;
  } catch (const json::exception& e) {
    raise<ValueError>("{}: load_state_dict: malformed JSON: {}", who, e.what());
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Base
// ---------------------------------------------------------------------------------------------

LRScheduler::LRScheduler(Optimizer& optimizer) : optimizer_(optimizer) {
  for (auto& g : optimizer_.param_groups()) {
    g.options.emplace("initial_lr", g.options.at("lr"));
    base_lrs_.push_back(g.options.at("initial_lr"));
  }
}

LRScheduler::~LRScheduler() = default;

void LRScheduler::initial_step() {
  step_count_ = 0;
  step();
}

double LRScheduler::group_lr(size_t group) const { return optimizer_.param_groups()[group].options.at("lr"); }

void LRScheduler::step() {
  ++step_count_;
  ++last_epoch_;
  std::vector<double> values = get_lr();
  auto& groups = optimizer_.param_groups();
  FOUNDRY_CHECK(values.size() == groups.size(), "LRScheduler: {} learning rates for {} parameter groups", values.size(),
                groups.size());
  last_lr_.clear();
  for (size_t i = 0; i < groups.size(); ++i) {
    groups[i].options["lr"] = values[i];
    last_lr_.push_back(values[i]);
  }
}

void LRScheduler::step(double) { step(); }

std::string LRScheduler::state_dict() const {
  json j;
  j["last_epoch"] = last_epoch_;
  j["step_count"] = step_count_;
  j["base_lrs"] = json::array();
  for (double v : base_lrs_) j["base_lrs"].push_back(num(v));
  j["last_lr"] = json::array();
  for (double v : last_lr_) j["last_lr"].push_back(num(v));
  return j.dump();
}

void LRScheduler::load_state_dict(const std::string& text) {
  json j = parse_state(text, "LRScheduler");
  try {
    last_epoch_ = j.at("last_epoch").get<int64_t>();
    step_count_ = j.at("step_count").get<int64_t>();
    base_lrs_.clear();
    for (const auto& v : j.at("base_lrs")) base_lrs_.push_back(num(v));
    last_lr_.clear();
    for (const auto& v : j.at("last_lr")) last_lr_.push_back(num(v));
  } catch (const json::exception& e) {
    raise<ValueError>("LRScheduler: load_state_dict: {}", e.what());
  }
  if (base_lrs_.size() != optimizer_.param_groups().size())
    raise<ValueError>("LRScheduler: load_state_dict: {} base learning rates for {} parameter groups", base_lrs_.size(),
                      optimizer_.param_groups().size());
}

// ---------------------------------------------------------------------------------------------
// Schedules
// ---------------------------------------------------------------------------------------------

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  if (step_size <= 0) raise<ValueError>("StepLR: step_size must be positive, got {}", step_size);
  initial_step();
}

std::vector<double> StepLR::get_lr() {
  std::vector<double> out;
  for (size_t i = 0; i < base_lrs_.size(); ++i)
    out.push_back(last_epoch_ == 0 || last_epoch_ % step_size_ != 0 ? group_lr(i) : group_lr(i) * gamma_);
  return out;
}

MultiStepLR::MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma)
    : LRScheduler(optimizer), milestones_(std::move(milestones)), gamma_(gamma) {
  initial_step();
}

std::vector<double> MultiStepLR::get_lr() {
  const auto count = std::count(milestones_.begin(), milestones_.end(), last_epoch_);
  std::vector<double> out;
  for (size_t i = 0; i < base_lrs_.size(); ++i)
    out.push_back(count == 0 ? group_lr(i) : group_lr(i) * std::pow(gamma_, double(count)));
  return out;
}

ExponentialLR::ExponentialLR(Optimizer& optimizer, double gamma) : LRScheduler(optimizer), gamma_(gamma) {
  initial_step();
}

std::vector<double> ExponentialLR::get_lr() {
  std::vector<double> out;
  for (size_t i = 0; i < base_lrs_.size(); ++i) out.push_back(last_epoch_ == 0 ? group_lr(i) : group_lr(i) * gamma_);
  return out;
}

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min)
    : LRScheduler(optimizer), T_max_(T_max), eta_min_(eta_min) {
  if (T_max <= 0) raise<ValueError>("CosineAnnealingLR: T_max must be positive, got {}", T_max);
  initial_step();
}

std::vector<double> CosineAnnealingLR::get_lr() {
  std::vector<double> out;
  const double T = double(T_max_), e = double(last_epoch_);
  for (size_t i = 0; i < base_lrs_.size(); ++i) {
    const double lr = group_lr(i), base = base_lrs_[i];
    if (last_epoch_ == 0) {
      out.push_back(lr);
    } else if (step_count_ == 1 && last_epoch_ > 0) {
      out.push_back(eta_min_ + (base - eta_min_) * (1 + std::cos(e * kPi / T)) / 2);
    } else if ((last_epoch_ - 1 - T_max_) % (2 * T_max_) == 0) {
      out.push_back(lr + (base - eta_min_) * (1 - std::cos(kPi / T)) / 2);
    } else {
      out.push_back((1 + std::cos(kPi * e / T)) / (1 + std::cos(kPi * (e - 1) / T)) * (lr - eta_min_) + eta_min_);
    }
  }
  return out;
}

LinearLR::LinearLR(Optimizer& optimizer, double start_factor, double end_factor, int64_t total_iters)
    : LRScheduler(optimizer), start_factor_(start_factor), end_factor_(end_factor), total_iters_(total_iters) {
  if (start_factor > 1.0 || start_factor < 0)
    raise<ValueError>("LinearLR: starting multiplicative factor expected to be between 0 and 1");
  if (end_factor > 1.0 || end_factor < 0)
    raise<ValueError>("LinearLR: ending multiplicative factor expected to be between 0 and 1");
  initial_step();
}

std::vector<double> LinearLR::get_lr() {
  std::vector<double> out;
  for (size_t i = 0; i < base_lrs_.size(); ++i) {
    const double lr = group_lr(i);
    if (last_epoch_ == 0) out.push_back(lr * start_factor_);
    else if (last_epoch_ > total_iters_) out.push_back(lr);
    else
      out.push_back(lr * (1. + (end_factor_ - start_factor_) /
                                   (double(total_iters_) * start_factor_ +
                                    double(last_epoch_ - 1) * (end_factor_ - start_factor_))));
  }
  return out;
}

WarmupCosine::WarmupCosine(Optimizer& optimizer, int64_t warmup_steps, int64_t total_steps, double min_lr)
    : LRScheduler(optimizer), warmup_steps_(warmup_steps), total_steps_(total_steps), min_lr_(min_lr) {
  if (warmup_steps < 0 || total_steps <= warmup_steps)
    raise<ValueError>("WarmupCosine: need 0 <= warmup_steps < total_steps, got {} and {}", warmup_steps, total_steps);
  initial_step();
}

std::vector<double> WarmupCosine::get_lr() {
  std::vector<double> out;
  const int64_t t = last_epoch_;
  for (double base : base_lrs_) {
    if (t < warmup_steps_) {
      out.push_back(base * double(t + 1) / double(warmup_steps_));
    } else if (t >= total_steps_) {
      out.push_back(min_lr_);
    } else {
      const double ratio = double(t - warmup_steps_) / double(total_steps_ - warmup_steps_);
      out.push_back(min_lr_ + 0.5 * (1.0 + std::cos(kPi * ratio)) * (base - min_lr_));
    }
  }
  return out;
}

// OneCycleLR sets its group keys before the base class reads "initial_lr", so the base is given
// an optimizer whose groups are already prepared (torch does the same in its constructor).
static Optimizer& prepare_one_cycle(Optimizer& opt, const OneCycleOptions& o) {
  auto& groups = opt.param_groups();
  auto per_group = [&](const std::vector<double>& v, const char* what) {
    if (v.size() == 1) return std::vector<double>(groups.size(), v[0]);
    if (v.size() != groups.size())
      raise<ValueError>("OneCycleLR: expected {} values for {}, got {}", groups.size(), what, v.size());
    return v;
  };
  if (o.total_steps <= 0) raise<ValueError>("OneCycleLR: expected positive integer total_steps, but got {}", o.total_steps);
  if (o.pct_start < 0 || o.pct_start > 1)
    raise<ValueError>("OneCycleLR: expected float between 0 and 1 pct_start, but got {}", o.pct_start);
  if (o.anneal_strategy != "cos" && o.anneal_strategy != "linear")
    raise<ValueError>("OneCycleLR: anneal_strategy must be one of 'cos' or 'linear', instead got {}", o.anneal_strategy);
  std::vector<double> max_lrs = per_group(o.max_lr, "max_lr");
  for (size_t i = 0; i < groups.size(); ++i) {
    auto& g = groups[i].options;
    g["initial_lr"] = max_lrs[i] / o.div_factor;
    g["max_lr"] = max_lrs[i];
    g["min_lr"] = g["initial_lr"] / o.final_div_factor;
  }
  if (o.cycle_momentum) {
    const bool beta1 = opt.defaults().count("beta1") != 0;
    if (!beta1 && !opt.defaults().count("momentum"))
      raise<ValueError>("OneCycleLR: optimizer must support momentum with `cycle_momentum` option enabled");
    for (auto& group : groups) {
      auto& g = group.options;
      g[beta1 ? "beta1" : "momentum"] = o.max_momentum;
      g["max_momentum"] = o.max_momentum;
      g["base_momentum"] = o.base_momentum;
    }
  }
  return opt;
}

OneCycleLR::OneCycleLR(Optimizer& optimizer, OneCycleOptions options)
    : LRScheduler(prepare_one_cycle(optimizer, options)), options_(std::move(options)) {
  use_beta1_ = optimizer_.defaults().count("beta1") != 0;
  const double total = double(options_.total_steps);
  if (options_.three_phase) {
    phases_ = {{options_.pct_start * total - 1, "initial_lr", "max_lr", "max_momentum", "base_momentum"},
               {2 * options_.pct_start * total - 2, "max_lr", "initial_lr", "base_momentum", "max_momentum"},
               {total - 1, "initial_lr", "min_lr", "max_momentum", "max_momentum"}};
  } else {
    phases_ = {{options_.pct_start * total - 1, "initial_lr", "max_lr", "max_momentum", "base_momentum"},
               {total - 1, "max_lr", "min_lr", "base_momentum", "max_momentum"}};
  }
  initial_step();
}

double OneCycleLR::anneal(double start, double end, double pct) const {
  if (options_.anneal_strategy == "cos") {
    const double cos_out = std::cos(kPi * pct) + 1;
    return end + (start - end) / 2.0 * cos_out;
  }
  return (end - start) * pct + start;
}

std::vector<double> OneCycleLR::get_lr() {
  const int64_t step_num = last_epoch_;
  if (step_num > options_.total_steps)
    raise<ValueError>("OneCycleLR: tried to step {} times. The specified number of total steps is {}", step_num + 1,
                      options_.total_steps);
  std::vector<double> lrs;
  for (auto& group : optimizer_.param_groups()) {
    auto& g = group.options;
    double start_step = 0, lr = 0, momentum = 0;
    for (size_t i = 0; i < phases_.size(); ++i) {
      const Phase& ph = phases_[i];
      if (double(step_num) <= ph.end_step || i == phases_.size() - 1) {
        const double pct = (double(step_num) - start_step) / (ph.end_step - start_step);
        lr = anneal(g.at(ph.start_lr), g.at(ph.end_lr), pct);
        if (options_.cycle_momentum) momentum = anneal(g.at(ph.start_momentum), g.at(ph.end_momentum), pct);
        break;
      }
      start_step = ph.end_step;
    }
    lrs.push_back(lr);
    if (options_.cycle_momentum) g[use_beta1_ ? "beta1" : "momentum"] = momentum;
  }
  return lrs;
}

LambdaLR::LambdaLR(Optimizer& optimizer, Fn fn) : LRScheduler(optimizer) {
  fns_.assign(base_lrs_.size(), std::move(fn));
  initial_step();
}

LambdaLR::LambdaLR(Optimizer& optimizer, std::vector<Fn> fns) : LRScheduler(optimizer), fns_(std::move(fns)) {
  if (fns_.size() != base_lrs_.size())
    raise<ValueError>("LambdaLR: expected {} lr_lambdas, but got {}", base_lrs_.size(), fns_.size());
  initial_step();
}

std::vector<double> LambdaLR::get_lr() {
  std::vector<double> out;
  for (size_t i = 0; i < base_lrs_.size(); ++i) out.push_back(base_lrs_[i] * fns_[i](last_epoch_));
  return out;
}

// ---------------------------------------------------------------------------------------------
// ReduceLROnPlateau
// ---------------------------------------------------------------------------------------------

ReduceLROnPlateau::ReduceLROnPlateau(Optimizer& optimizer, PlateauOptions options)
    : LRScheduler(optimizer), options_(std::move(options)) {
  if (options_.factor >= 1.0) raise<ValueError>("ReduceLROnPlateau: factor should be < 1.0");
  if (options_.mode != "min" && options_.mode != "max")
    raise<ValueError>("ReduceLROnPlateau: mode {} is unknown!", options_.mode);
  if (options_.threshold_mode != "rel" && options_.threshold_mode != "abs")
    raise<ValueError>("ReduceLROnPlateau: threshold mode {} is unknown!", options_.threshold_mode);
  const size_t n = optimizer_.param_groups().size();
  if (options_.min_lr.size() == 1) options_.min_lr.assign(n, options_.min_lr[0]);
  if (options_.min_lr.size() != n)
    raise<ValueError>("ReduceLROnPlateau: expected {} min_lrs, got {}", n, options_.min_lr.size());
  best_ = options_.mode == "min" ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity();
  last_epoch_ = 0;
  for (size_t i = 0; i < n; ++i) last_lr_.push_back(group_lr(i));
}

std::vector<double> ReduceLROnPlateau::get_lr() {
  std::vector<double> out;
  for (size_t i = 0; i < optimizer_.param_groups().size(); ++i) out.push_back(group_lr(i));
  return out;
}

void ReduceLROnPlateau::step() {
  raise<ValueError>("ReduceLROnPlateau: step() needs the metric: call step(metric)");
}

bool ReduceLROnPlateau::is_better(double a, double best) const {
  const bool rel = options_.threshold_mode == "rel";
  if (options_.mode == "min") return rel ? a < best * (1. - options_.threshold) : a < best - options_.threshold;
  return rel ? a > best * (options_.threshold + 1.) : a > best + options_.threshold;
}

void ReduceLROnPlateau::step(double metric) {
  last_epoch_ += 1;
  if (is_better(metric, best_)) {
    best_ = metric;
    num_bad_epochs_ = 0;
  } else {
    num_bad_epochs_ += 1;
  }
  if (cooldown_counter_ > 0) {
    cooldown_counter_ -= 1;
    num_bad_epochs_ = 0;  // ignore any bad epochs in cooldown
  }
  if (num_bad_epochs_ > options_.patience) {
    auto& groups = optimizer_.param_groups();
    for (size_t i = 0; i < groups.size(); ++i) {
      const double old_lr = groups[i].options.at("lr");
      const double new_lr = std::max(old_lr * options_.factor, options_.min_lr[i]);
      if (old_lr - new_lr > options_.eps) groups[i].options["lr"] = new_lr;
    }
    cooldown_counter_ = options_.cooldown;
    num_bad_epochs_ = 0;
  }
  last_lr_.clear();
  for (size_t i = 0; i < optimizer_.param_groups().size(); ++i) last_lr_.push_back(group_lr(i));
}

std::string ReduceLROnPlateau::state_dict() const {
  json j = json::parse(LRScheduler::state_dict());
  j["best"] = num(best_);
  j["num_bad_epochs"] = num_bad_epochs_;
  j["cooldown_counter"] = cooldown_counter_;
  return j.dump();
}

void ReduceLROnPlateau::load_state_dict(const std::string& text) {
  LRScheduler::load_state_dict(text);
  json j = parse_state(text, "ReduceLROnPlateau");
  try {
    best_ = num(j.at("best"));
    num_bad_epochs_ = j.at("num_bad_epochs").get<int64_t>();
    cooldown_counter_ = j.at("cooldown_counter").get<int64_t>();
  } catch (const json::exception& e) {
    raise<ValueError>("ReduceLROnPlateau: load_state_dict: {}", e.what());
  }
}

}  // namespace foundry::optim
