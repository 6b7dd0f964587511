// Parser for op schemas in PyTorch's notation, and the registry itself.
#include <cctype>
#include <cmath>
#include <limits>

#include "foundry/ops/registry.h"

namespace foundry::ops {

namespace {

std::string trim(std::string s) {
  size_t b = s.find_first_not_of(" \t");
  size_t e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

// Splits on commas that are not inside brackets or quotes.
std::vector<std::string> split_top(const std::string& s) {
  std::vector<std::string> parts;
  int depth = 0;
  bool quote = false;
  std::string cur;
  for (char c : s) {
    if (c == '\'') quote = !quote;
    if (!quote && (c == '[' || c == '(')) depth++;
    if (!quote && (c == ']' || c == ')')) depth--;
    if (c == ',' && depth == 0 && !quote) {
      parts.push_back(trim(cur));
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!trim(cur).empty()) parts.push_back(trim(cur));
  return parts;
}

Value parse_number(const std::string& s, bool want_float) {
  if (s == "inf") return std::numeric_limits<double>::infinity();
  if (s == "-inf") return -std::numeric_limits<double>::infinity();
  bool is_float = s.find_first_of(".eE") != std::string::npos;
  if (is_float || want_float) return std::stod(s);
  return int64_t(std::stoll(s));
}

Value parse_default(const std::string& text, const Param& p) {
  if (text == "None") return Value();
  if (text == "True") return true;
  if (text == "False") return false;
  if (!text.empty() && text.front() == '\'') return text.substr(1, text.size() - 2);
  if (!text.empty() && text.front() == '[') {
    std::string inner = text.substr(1, text.size() - 2);
    auto items = split_top(inner);
    if (p.type == Param::Type::FloatList) {
      std::vector<double> v;
      for (auto& it : items) v.push_back(std::stod(it));
      return v;
    }
    std::vector<int64_t> v;
    for (auto& it : items) v.push_back(std::stoll(it));
    return v;
  }
  if (p.type == Param::Type::IntList) return std::vector<int64_t>{std::stoll(text)};
  Value v = parse_number(text, p.type == Param::Type::Float);
  if (p.type == Param::Type::Scalar) return v.scalar();
  return v;
}

Param::Type parse_type(const std::string& t, bool& optional, const std::string& schema) {
  std::string base = t;
  optional = false;
  if (!base.empty() && base.back() == '?') {
    optional = true;
    base.pop_back();
  }
  if (base == "Tensor") return Param::Type::Tensor;
  if (base == "Tensor[]" || base == "Tensor?[]") return Param::Type::TensorList;
  if (base == "Scalar") return Param::Type::Scalar;
  if (base == "int" || base == "SymInt") return Param::Type::Int;
  if (base == "float") return Param::Type::Float;
  if (base == "bool") return Param::Type::Bool;
  if (base == "int[]" || base == "SymInt[]") return Param::Type::IntList;
  if (base == "float[]") return Param::Type::FloatList;
  if (base == "str") return Param::Type::Str;
  if (base == "ScalarType") return Param::Type::DType;
  raise<Error>("schema '{}': unknown type '{}'", schema, t);
}

}  // namespace

Schema Schema::parse(const std::string& text) {
  Schema s;
  s.text = text;
  size_t open = text.find('(');
  size_t arrow = text.rfind("->");
  FOUNDRY_CHECK(open != std::string::npos && arrow != std::string::npos, "malformed schema '{}'", text);
  size_t close = text.rfind(')', arrow);
  s.name = trim(text.substr(0, open));
  bool kwarg_only = false;
  for (const std::string& part : split_top(text.substr(open + 1, close - open - 1))) {
    if (part == "*") {
      kwarg_only = true;
      continue;
    }
    Param p;
    std::string decl = part, def;
    size_t eq = part.find('=');
    if (eq != std::string::npos) {
      decl = trim(part.substr(0, eq));
      def = trim(part.substr(eq + 1));
    }
    size_t sp = decl.rfind(' ');
    FOUNDRY_CHECK(sp != std::string::npos, "schema '{}': parameter '{}' needs a type and a name", text, part);
    p.type_str = trim(decl.substr(0, sp));
    p.name = trim(decl.substr(sp + 1));
    p.type = parse_type(p.type_str, p.optional, text);
    p.kwarg_only = kwarg_only;
    if (eq != std::string::npos) {
      p.has_default = true;
      p.default_value = parse_default(def, p);
    }
    s.params.push_back(std::move(p));
  }
  std::string ret = trim(text.substr(arrow + 2));
  if (ret == "Tensor[]") {
    s.returns_list = true;
    s.returns = {"[]"};
  } else if (!ret.empty() && ret.front() == '(') {
    for (const std::string& r : split_top(ret.substr(1, ret.size() - 2))) {
      size_t sp = r.find(' ');
      s.returns.push_back(sp == std::string::npos ? "" : trim(r.substr(sp + 1)));
    }
  } else {
    size_t sp = ret.find(' ');
    s.returns.push_back(sp == std::string::npos ? "" : trim(ret.substr(sp + 1)));
  }
  return s;
}

int Schema::index_of(const std::string& param) const {
  for (size_t i = 0; i < params.size(); ++i)
    if (params[i].name == param) return int(i);
  return -1;
}

const Value& Args::get(const std::string& name) const {
  int i = schema_->index_of(name);
  FOUNDRY_CHECK(i >= 0, "{}: no parameter named '{}'", schema_->name, name);
  return values_[size_t(i)];
}
Value& Args::get(const std::string& name) {
  int i = schema_->index_of(name);
  FOUNDRY_CHECK(i >= 0, "{}: no parameter named '{}'", schema_->name, name);
  return values_[size_t(i)];
}

Registry& Registry::instance() {
  static Registry* r = [] {
    auto* reg = new Registry;
    register_all_ops(*reg);
    return reg;
  }();
  return *r;
}

const OpDef& Registry::add(OpDef def) {
  def.schema = Schema::parse(def.schema_text);
  const std::string name = def.schema.name;
  FOUNDRY_CHECK(!by_name_.count(name), "op '{}' registered twice", name);
  FOUNDRY_CHECK(bool(def.forward), "op '{}' has no forward", name);
  FOUNDRY_CHECK(!def.differentiable || def.kind == OpDef::Kind::Composite || bool(def.backward),
                "op '{}' is differentiable but has no backward", name);
  ops_.push_back(std::make_unique<OpDef>(std::move(def)));
  by_name_[name] = ops_.back().get();
  return *ops_.back();
}

const OpDef* Registry::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

const OpDef& Registry::get(const std::string& name) const {
  const OpDef* op = find(name);
  if (!op) raise<ValueError>("unknown op '{}'", name);
  return *op;
}

}  // namespace foundry::ops
