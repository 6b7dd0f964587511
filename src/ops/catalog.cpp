#include "foundry/ops/catalog.h"

#include <filesystem>
#include <fstream>
#include <functional>
#include <set>

#include <nlohmann/json.hpp>

#include "foundry/autograd/grad_mode.h"
#include "foundry/io/npy.h"
#include "foundry/ops/ops.h"

namespace foundry::ops {

using json = nlohmann::json;

namespace {

const char* param_type_name(Param::Type t) {
  switch (t) {
    case Param::Type::Tensor: return "Tensor";
    case Param::Type::TensorList: return "Tensor[]";
    case Param::Type::Scalar: return "Scalar";
    case Param::Type::Int: return "int";
    case Param::Type::Float: return "float";
    case Param::Type::Bool: return "bool";
    case Param::Type::IntList: return "int[]";
    case Param::Type::FloatList: return "float[]";
    case Param::Type::Str: return "str";
    case Param::Type::DType: return "ScalarType";
  }
  return "?";
}

uint64_t seed_of(const std::string& name, DType dt) {
  uint64_t h = 1469598103934665603ull;
  for (char c : name) h = (h ^ uint8_t(c)) * 1099511628211ull;
  return h ^ (uint64_t(dt) * 0x9E3779B97F4A7C15ull);
}

// bfloat16 and float8 have no NumPy dtype: stored as float32 and tagged.
Tensor storable(const Tensor& t) {
  if (t.dtype() == DType::BFloat16 || is_float8(t.dtype())) return t.to(DType::Float32);
  return t;
}

json scalar_json(const Scalar& s) {
  if (s.is_bool()) return {{"kind", "bool"}, {"value", s.to_bool()}};
  if (s.is_int()) return {{"kind", "int"}, {"value", s.to_int()}};
  double d = s.to_double();
  if (std::isinf(d)) return {{"kind", "float"}, {"value", d > 0 ? "inf" : "-inf"}};
  if (std::isnan(d)) return {{"kind", "float"}, {"value", "nan"}};
  return {{"kind", "float"}, {"value", d}};
}

}  // namespace

std::vector<DType> fixture_dtypes(const OpDef& op) {
  static const std::set<DType> torch_dtypes = {DType::Bool,    DType::UInt8,    DType::Int8,    DType::Int16,
                                               DType::Int32,   DType::Int64,    DType::Float16, DType::BFloat16,
                                               DType::Float32, DType::Float64};
  std::vector<DType> out;
  auto has = [&](DType d) { return std::find(op.dtypes.begin(), op.dtypes.end(), d) != op.dtypes.end(); };
  if (has(DType::Float32)) out.push_back(DType::Float32);
  if (has(DType::Float64)) out.push_back(DType::Float64);
  for (DType d : op.dtypes)
    if (d != DType::Float32 && d != DType::Float64 && torch_dtypes.count(d)) out.push_back(d);
  return out;
}

std::vector<Sample> generate_samples(const OpDef& op, DType dtype) {
  if (!op.samples) return {};
  Generator g(seed_of(op.name(), dtype));
  autograd::NoGradGuard ng;
  return op.samples(dtype, g);
}

void dump_samples(const std::string& dir, const std::vector<std::string>& only) {
  for (const std::string& name : only)
    FOUNDRY_CHECK_AS(ValueError, Registry::instance().find(name) != nullptr,
                     "dump_samples: no op named '{}' in the registry (foundry ops lists them)", name);
  std::filesystem::create_directories(dir);
  json manifest = json::object();
  manifest["ops"] = json::array();
  for (const auto& opp : Registry::instance().all()) {
    const OpDef& op = *opp;
    if (!only.empty() && std::find(only.begin(), only.end(), op.name()) == only.end()) continue;
    json jop;
    jop["name"] = op.name();
    jop["ref"] = op.ref;
    jop["differentiable"] = op.differentiable;
    jop["random"] = op.random;
    jop["nondiff_params"] = op.nondiff_params;
    jop["params"] = json::array();
    for (const Param& p : op.schema.params)
      jop["params"].push_back({{"name", p.name}, {"type", param_type_name(p.type)}, {"kwarg_only", p.kwarg_only}});
    jop["samples"] = json::array();
    std::map<std::string, Tensor> arrays;
    int sid = 0;
    std::vector<DType> dts = fixture_dtypes(op);
    for (DType dt : dts) {
      std::vector<Sample> samples = generate_samples(op, dt);
      // Every sample for float32/float64; the first two for other dtypes (fixtures stay small).
      size_t keep = (dt == DType::Float32 || dt == DType::Float64) ? samples.size() : std::min<size_t>(2, samples.size());
      for (size_t si = 0; si < keep; ++si) {
        const Sample& s = samples[si];
        std::string id = "s" + std::to_string(sid++);
        json js;
        js["id"] = id;
        js["dtype"] = std::string(dtype_name(dt));
        js["note"] = s.note;
        js["gradcheck"] = s.gradcheck;
        js["rtol"] = s.rtol;
        js["atol"] = s.atol;
        js["args"] = json::array();
        int ai = 0;
        for (size_t pi = 0; pi < s.args.size(); ++pi) {
          const Value& v = s.args[pi];
          std::string key = id + "_a" + std::to_string(ai++);
          json ja;
          if (v.is_none()) {
            ja = {{"kind", "none"}};
          } else if (v.is_tensor()) {
            const Tensor& t = v.tensor();
            if (!t.defined()) {
              ja = {{"kind", "none"}};
            } else {
              arrays[key] = storable(t);
              ja = {{"kind", "tensor"}, {"key", key}, {"dtype", std::string(dtype_name(t.dtype()))},
                    {"wrapped", t.impl()->wrapped_number}};
            }
          } else if (v.is_tensor_list()) {
            json keys = json::array(), dtypes = json::array();
            int k = 0;
            for (const Tensor& t : v.tensor_list()) {
              std::string kk = key + "_" + std::to_string(k++);
              if (t.defined()) {
                arrays[kk] = storable(t);
                keys.push_back(kk);
                dtypes.push_back(std::string(dtype_name(t.dtype())));
              } else {
                keys.push_back(nullptr);
                dtypes.push_back(nullptr);
              }
            }
            ja = {{"kind", "tensor_list"}, {"keys", keys}, {"dtypes", dtypes}};
          } else if (v.is_scalar()) {
            ja = {{"kind", "scalar"}, {"scalar", scalar_json(v.scalar())}};
          } else if (v.is_int()) {
            ja = {{"kind", "int"}, {"value", v.to_int()}};
          } else if (v.is_double()) {
            ja = {{"kind", "float"}, {"scalar", scalar_json(Scalar(v.to_double()))}};
          } else if (v.is_bool()) {
            ja = {{"kind", "bool"}, {"value", v.to_bool()}};
          } else if (v.is_int_list()) {
            ja = {{"kind", "int_list"}, {"value", v.int_list()}};
          } else if (v.is_string()) {
            ja = {{"kind", "str"}, {"value", v.str()}};
          } else if (v.is_dtype()) {
            ja = {{"kind", "dtype"}, {"value", std::string(dtype_name(v.dtype()))}};
          } else {
            ja = {{"kind", "float_list"}, {"value", v.double_list()}};
          }
          js["args"].push_back(ja);
        }
        jop["samples"].push_back(js);
      }
    }
    io::save_npz(dir + "/" + op.name() + ".npz", arrays);
    manifest["ops"].push_back(jop);
  }
  io::write_file_atomic(dir + "/samples.json", manifest.dump(1));
}

namespace {

json load_manifest(const std::string& path) {
  if (path.empty() || !std::filesystem::exists(path)) return json::object();
  try {
    return json::parse(io::read_file(path));
  } catch (const json::exception& e) {
    raise<IOError>("fixture manifest '{}' is not valid JSON: {}", path, e.what());
  }
}

struct Coverage {
  bool fixture = false;
  int cases = 0;
};

std::map<std::string, Coverage> coverage_of(const json& manifest) {
  std::map<std::string, Coverage> out;
  if (!manifest.contains("ops")) return out;
  for (const auto& op : manifest["ops"]) {
    Coverage c;
    c.fixture = true;
    c.cases = int(op["samples"].size());
    out[op["name"].get<std::string>()] = c;
  }
  return out;
}

std::string kind_name(OpDef::Kind k) {
  return k == OpDef::Kind::Primitive ? "primitive" : k == OpDef::Kind::View ? "view" : "composite";
}

}  // namespace

std::string catalog_json(const std::string& fixture_manifest) {
  auto cov = coverage_of(load_manifest(fixture_manifest));
  json arr = json::array();
  for (const auto& opp : Registry::instance().all()) {
    const OpDef& op = *opp;
    json j;
    j["name"] = op.name();
    j["schema"] = op.schema_text;
    j["family"] = op.family;
    j["kind"] = kind_name(op.kind);
    j["doc"] = op.doc;
    j["differentiable"] = op.differentiable;
    j["second_order"] = op.differentiable && op.second_order;
    j["random"] = op.random;
    json dts = json::array();
    for (DType d : op.dtypes) dts.push_back(std::string(dtype_name(d)));
    j["dtypes"] = dts;
    j["has_samples"] = bool(op.samples);
    auto it = cov.find(op.name());
    j["parity_fixture"] = it != cov.end() && it->second.fixture;
    j["parity_cases"] = it != cov.end() ? it->second.cases : 0;
    j["gradcheck"] = op.differentiable && bool(op.samples);
    arr.push_back(j);
  }
  return arr.dump(1);
}

std::string catalog_markdown(const std::string& fixture_manifest) {
  auto cov = coverage_of(load_manifest(fixture_manifest));
  std::map<std::string, std::vector<const OpDef*>> by_family;
  int total = 0, differentiable = 0, with_fixture = 0;
  for (const auto& opp : Registry::instance().all()) {
    by_family[opp->family].push_back(opp.get());
    total++;
    differentiable += opp->differentiable;
    with_fixture += cov.count(opp->name()) > 0;
  }
  std::string md;
  md += "# Foundry ops\n\n";
  md += "Generated from the op registry by `build/bin/foundry ops --markdown`; do not edit by hand.\n\n";
  md += fmt::format("{} ops; {} differentiable (each passes float64 gradcheck in `tests/ops`); {} with a PyTorch "
                    "1.13 parity fixture.\n\n",
                    total, differentiable, with_fixture);
  md += "Kinds: *primitive* (own kernel and backward), *view* (shares storage), *composite* (written in other ops; "
        "gradients flow through them).\n\n";
  for (const auto& [family, ops] : by_family) {
    md += "## " + family + "\n\n| op | schema | kind | grad | dtypes | parity cases | notes |\n|---|---|---|---|---|---|---|\n";
    for (const OpDef* op : ops) {
      std::string dts;
      for (DType d : op->dtypes) dts += std::string(dtype_name(d)) + " ";
      auto it = cov.find(op->name());
      std::string grad = !op->differentiable ? "no" : op->second_order ? "yes (2nd order)" : "yes";
      std::string notes = op->doc + (op->notes.empty() ? "" : " " + op->notes);
      md += fmt::format("| `{}` | `{}` | {} | {} | {} | {} | {} |\n", op->name(), op->schema_text, kind_name(op->kind),
                        grad, dts, it != cov.end() ? std::to_string(it->second.cases) : "-", notes);
    }
    md += "\n";
  }
  return md;
}

}  // namespace foundry::ops
