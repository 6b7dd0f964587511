// Containers: Sequential (chains forward), ModuleList (indexed, "0", "1", ...) and ModuleDict
// (keyed, insertion order). Children are named as PyTorch names them, so parameters are
// "0.weight", "layers.3.attn.in_proj_weight", ...
#pragma once

#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "foundry/nn/module.h"

namespace foundry::nn {

class Sequential : public Module {
 public:
  Sequential() = default;
  Sequential(std::initializer_list<std::shared_ptr<Module>> modules);  // NOLINT
  explicit Sequential(std::vector<std::shared_ptr<Module>> modules);
  /// std::make_shared<Sequential>(a, b, c).
  template <class... Ms>
  explicit Sequential(std::shared_ptr<Ms>... modules)
      : Sequential(std::vector<std::shared_ptr<Module>>{std::static_pointer_cast<Module>(modules)...}) {}
  /// Named children (PyTorch's OrderedDict form).
  explicit Sequential(std::vector<std::pair<std::string, std::shared_ptr<Module>>> modules);
  std::string type_name() const override { return "Sequential"; }
  /// Runs each child's forward on the previous output.
  Tensor forward(const Tensor& x) override;
  /// Appends a child named by its index.
  template <class M>
  std::shared_ptr<M> append(std::shared_ptr<M> m) {
    push_back(std::static_pointer_cast<Module>(m));
    return m;
  }
  void push_back(std::shared_ptr<Module> m);
  /// Child i (negative counts from the end).
  std::shared_ptr<Module> operator[](int64_t i) const;
  template <class M>
  std::shared_ptr<M> at(int64_t i) const {
    return std::dynamic_pointer_cast<M>((*this)[i]);
  }
  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }

 private:
  std::vector<std::shared_ptr<Module>> items_;
};

class ModuleList : public Module {
 public:
  ModuleList() = default;
  ModuleList(std::initializer_list<std::shared_ptr<Module>> modules);  // NOLINT
  explicit ModuleList(std::vector<std::shared_ptr<Module>> modules);
  template <class... Ms>
  explicit ModuleList(std::shared_ptr<Ms>... modules)
      : ModuleList(std::vector<std::shared_ptr<Module>>{std::static_pointer_cast<Module>(modules)...}) {}
  std::string type_name() const override { return "ModuleList"; }
  template <class M>
  std::shared_ptr<M> append(std::shared_ptr<M> m) {
    push_back(std::static_pointer_cast<Module>(m));
    return m;
  }
  void push_back(std::shared_ptr<Module> m);
  void extend(const std::vector<std::shared_ptr<Module>>& modules);
  std::shared_ptr<Module> operator[](int64_t i) const;
  template <class M>
  std::shared_ptr<M> at(int64_t i) const {
    return std::dynamic_pointer_cast<M>((*this)[i]);
  }
  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }

 private:
  std::vector<std::shared_ptr<Module>> items_;
};

class ModuleDict : public Module {
 public:
  ModuleDict() = default;
  explicit ModuleDict(std::vector<std::pair<std::string, std::shared_ptr<Module>>> modules);
  std::string type_name() const override { return "ModuleDict"; }
  /// Adds or replaces (keeping its position) the child `key`.
  template <class M>
  std::shared_ptr<M> insert(const std::string& key, std::shared_ptr<M> m) {
    insert_impl(key, std::static_pointer_cast<Module>(m));
    return m;
  }
  std::shared_ptr<Module> operator[](const std::string& key) const;
  template <class M>
  std::shared_ptr<M> at(const std::string& key) const {
    return std::dynamic_pointer_cast<M>((*this)[key]);
  }
  bool contains(const std::string& key) const;
  std::vector<std::string> keys() const;
  size_t size() const { return keys_.size(); }
  bool empty() const { return keys_.empty(); }

 private:
  void insert_impl(const std::string& key, std::shared_ptr<Module> m);
  std::vector<std::string> keys_;
};

}  // namespace foundry::nn
