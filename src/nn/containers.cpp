// Sequential, ModuleList and ModuleDict (torch/nn/modules/container.py, 1.13).
#include "foundry/nn/containers.h"

#include <algorithm>

namespace foundry::nn {

namespace {
size_t wrap_index(int64_t i, size_t n, const char* what) {
  const int64_t m = int64_t(n);
  if (i < -m || i >= m) raise<IndexError>("{}: index {} is out of range for {} modules", what, i, n);
  return size_t(i < 0 ? i + m : i);
}
}  // namespace

// ---- Sequential --------------------------------------------------------------------------------

Sequential::Sequential(std::initializer_list<std::shared_ptr<Module>> modules)
    : Sequential(std::vector<std::shared_ptr<Module>>(modules)) {}

Sequential::Sequential(std::vector<std::shared_ptr<Module>> modules) {
  for (auto& m : modules) push_back(std::move(m));
}

Sequential::Sequential(std::vector<std::pair<std::string, std::shared_ptr<Module>>> modules) {
  for (auto& [name, m] : modules) {
    FOUNDRY_CHECK_AS(ValueError, m != nullptr, "Sequential: module \"{}\" is null", name);
    register_module(name, m);
    items_.push_back(m);
  }
}

void Sequential::push_back(std::shared_ptr<Module> m) {
  FOUNDRY_CHECK_AS(ValueError, m != nullptr, "Sequential: can't add a null module");
  register_module(std::to_string(items_.size()), m);
  items_.push_back(std::move(m));
}

std::shared_ptr<Module> Sequential::operator[](int64_t i) const { return items_[wrap_index(i, items_.size(), "Sequential")]; }

Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  for (auto& m : items_) y = m->forward(y);
  return y;
}

// ---- ModuleList --------------------------------------------------------------------------------

ModuleList::ModuleList(std::initializer_list<std::shared_ptr<Module>> modules)
    : ModuleList(std::vector<std::shared_ptr<Module>>(modules)) {}

ModuleList::ModuleList(std::vector<std::shared_ptr<Module>> modules) { extend(modules); }

void ModuleList::push_back(std::shared_ptr<Module> m) {
  FOUNDRY_CHECK_AS(ValueError, m != nullptr, "ModuleList: can't add a null module");
  register_module(std::to_string(items_.size()), m);
  items_.push_back(std::move(m));
}

void ModuleList::extend(const std::vector<std::shared_ptr<Module>>& modules) {
  for (const auto& m : modules) push_back(m);
}

std::shared_ptr<Module> ModuleList::operator[](int64_t i) const { return items_[wrap_index(i, items_.size(), "ModuleList")]; }

// ---- ModuleDict --------------------------------------------------------------------------------

ModuleDict::ModuleDict(std::vector<std::pair<std::string, std::shared_ptr<Module>>> modules) {
  for (auto& [k, m] : modules) insert_impl(k, m);
}

void ModuleDict::insert_impl(const std::string& key, std::shared_ptr<Module> m) {
  FOUNDRY_CHECK_AS(ValueError, m != nullptr, "ModuleDict: module \"{}\" is null", key);
  register_module(key, m);
  if (!contains(key)) keys_.push_back(key);
}

std::shared_ptr<Module> ModuleDict::operator[](const std::string& key) const {
  FOUNDRY_CHECK_AS(IndexError, contains(key), "ModuleDict: no module named \"{}\"", key);
  return child(key);
}

bool ModuleDict::contains(const std::string& key) const {
  return std::find(keys_.begin(), keys_.end(), key) != keys_.end();
}

std::vector<std::string> ModuleDict::keys() const { return keys_; }

}  // namespace foundry::nn
