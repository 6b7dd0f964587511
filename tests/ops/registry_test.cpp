// Registry sweeps: every op has samples and a gradient story; every differentiable op passes
// float64 gradcheck on its samples; the elementwise/reduction/matmul/norm/softmax families pass
// gradgradcheck; bad input raises foundry errors.
#include <gtest/gtest.h>

#include <set>

#include "foundry/autograd/autograd.h"
#include "foundry/ops/catalog.h"
#include "foundry/ops/ops.h"
#include "op_test_util.h"

using namespace foundry;
using foundry::ops::OpDef;
using foundry::ops::Value;

namespace {

const OpDef& op_named(const std::string& name) { return ops::find_op(name); }

// Tensor arguments that gradcheck differentiates: floating, not wrapped numbers, not marked
// non-differentiable. Returns (argument index, element index or -1).
std::vector<std::pair<size_t, int>> diff_slots(const OpDef& op, const std::vector<Value>& args) {
  std::vector<std::pair<size_t, int>> out;
  for (size_t i = 0; i < args.size() && i < op.schema.params.size(); ++i) {
    const std::string& pname = op.schema.params[i].name;
    if (std::find(op.nondiff_params.begin(), op.nondiff_params.end(), pname) != op.nondiff_params.end()) continue;
    auto ok = [](const Tensor& t) {
      return t.defined() && t.dtype() == DType::Float64 && !t.impl()->wrapped_number && t.numel() > 0;
    };
    if (args[i].is_tensor() && ok(args[i].tensor())) out.push_back({i, -1});
    if (args[i].is_tensor_list())
      for (size_t k = 0; k < args[i].tensor_list().size(); ++k)
        if (ok(args[i].tensor_list()[k])) out.push_back({i, int(k)});
  }
  return out;
}

struct Prepared {
  std::vector<Tensor> inputs;
  std::function<std::vector<Tensor>(const std::vector<Tensor>&)> fn;
};

Prepared prepare(const OpDef& op, const std::vector<Value>& args) {
  auto slots = diff_slots(op, args);
  Prepared p;
  for (auto [i, k] : slots) {
    Tensor t = (k < 0 ? args[i].tensor() : args[i].tensor_list()[size_t(k)]).detach().clone();
    p.inputs.push_back(t.requires_grad_());
  }
  p.fn = [&op, args, slots](const std::vector<Tensor>& xs) {
    std::vector<Value> a = args;
    for (size_t s = 0; s < slots.size(); ++s) {
      auto [i, k] = slots[s];
      if (k < 0) a[i] = xs[s];
      else a[i].tensor_list()[size_t(k)] = xs[s];
    }
    return ops::call(op, a);
  };
  return p;
}

bool all_float64_outputs(const OpDef& op, const std::vector<Value>& args) {
  autograd::NoGradGuard ng;
  for (const Tensor& o : ops::call(op, args))
    if (o.defined() && is_floating(o.dtype()) && o.dtype() != DType::Float64) return false;
  return true;
}

class OpTest : public ::testing::TestWithParam<std::string> {};

std::string param_name(const ::testing::TestParamInfo<std::string>& info) { return info.param; }

}  // namespace

TEST(Registry, AtLeast200OpsEachWithSamplesAndAGradientStory) {
  const auto& all = ops::Registry::instance().all();
  EXPECT_GE(all.size(), 200u);
  for (const auto& op : all) {
    EXPECT_TRUE(bool(op->samples)) << op->name() << " has no sample generator";
    size_t n = 0;
    for (DType dt : op->dtypes) n += ops::generate_samples(*op, dt).size();
    EXPECT_GT(n, 0u) << op->name() << " generates no samples";
    EXPECT_FALSE(op->dtypes.empty()) << op->name();
    if (op->differentiable && op->kind != OpDef::Kind::Composite)
      EXPECT_TRUE(bool(op->backward)) << op->name() << " is differentiable but has no backward";
    EXPECT_FALSE(op->doc.empty()) << op->name() << " has no doc line";
  }
}

TEST(Registry, CatalogJsonListsEveryOp) {
  std::string j = ops::catalog_json();
  for (const auto& op : ops::Registry::instance().all())
    EXPECT_NE(j.find("\"name\": \"" + op->name() + "\""), std::string::npos) << op->name();
}

TEST_P(OpTest, Gradcheck) {
  const OpDef& op = op_named(GetParam());
  if (!op.differentiable || op.random) GTEST_SKIP() << "not differentiable";
  auto samples = ops::generate_samples(op, DType::Float64);
  ASSERT_FALSE(samples.empty()) << op.name() << " is differentiable but has no float64 samples";
  int checked = 0;
  for (size_t i = 0; i < samples.size(); ++i) {
    const auto& s = samples[i];
    if (!s.gradcheck) continue;
    if (!all_float64_outputs(op, s.args)) continue;
    Prepared p = prepare(op, s.args);
    if (p.inputs.empty()) continue;
    autograd::GradcheckOptions opt;
    opt.atol = 1e-5;
    opt.rtol = 1e-3;
    try {
      EXPECT_TRUE(autograd::gradcheck(p.fn, p.inputs, opt));
    } catch (const Error& e) {
      ADD_FAILURE() << op.name() << " sample " << i << " (" << s.note << "): " << e.what();
    }
    checked++;
  }
  EXPECT_GT(checked, 0) << op.name() << ": no sample could be gradchecked";
}

// Second order is claimed (and tested) for every differentiable op unless its OpDef says
// second_order = false.
TEST_P(OpTest, Gradgradcheck) {
  const OpDef& op = op_named(GetParam());
  if (!op.differentiable || op.random || !op.second_order) GTEST_SKIP();
  auto samples = ops::generate_samples(op, DType::Float64);
  for (size_t i = 0; i < samples.size(); ++i) {
    const auto& s = samples[i];
    if (!s.gradcheck || !all_float64_outputs(op, s.args)) continue;
    Prepared p = prepare(op, s.args);
    if (p.inputs.empty()) continue;
    autograd::GradcheckOptions opt;
    opt.atol = 1e-4;
    opt.rtol = 1e-3;
    try {
      EXPECT_TRUE(autograd::gradgradcheck(p.fn, p.inputs, opt));
    } catch (const Error& e) {
      ADD_FAILURE() << op.name() << " sample " << i << " (" << s.note << "): " << e.what();
    }
    return;  // one sample per op keeps the suite fast
  }
}

// Every sample also runs on non-contiguous and negative-stride layouts of the same values and
// must give the same result (parity with PyTorch is checked separately from fixtures).
TEST_P(OpTest, LayoutsAgree) {
  const OpDef& op = op_named(GetParam());
  if (op.random || op.layout_sensitive) GTEST_SKIP();
  for (DType dt : ops::fixture_dtypes(op)) {
    auto samples = ops::generate_samples(op, dt);
    for (size_t i = 0; i < samples.size(); ++i) {
      const auto& s = samples[i];
      std::vector<Tensor> expected;
      try {
        expected = ops::call(op, s.args);
      } catch (const Error& e) {
        ADD_FAILURE() << op.name() << " " << dtype_name(dt) << " sample " << i << " raised: " << e.what();
        continue;
      }
      for (int layout = 0; layout < 2; ++layout) {
        std::vector<Value> args = s.args;
        for (Value& v : args) {
          auto re = [&](const Tensor& t) {
            if (!t.defined() || t.impl()->wrapped_number) return t;
            return layout == 0 ? optest::as_transposed_layout(t) : optest::as_negative_stride_layout(t);
          };
          if (v.is_tensor()) v = re(v.tensor());
          if (v.is_tensor_list())
            for (Tensor& t : v.tensor_list()) t = re(t);
        }
        auto got = ops::call(op, args);
        ASSERT_EQ(got.size(), expected.size());
        for (size_t k = 0; k < got.size(); ++k) {
          std::string diff = optest::compare(got[k], expected[k], optest::tolerance_for(got[k].dtype()));
          EXPECT_EQ(diff, "") << op.name() << " " << dtype_name(dt) << " sample " << i << " output " << k
                              << (layout == 0 ? " (transposed layout)" : " (negative strides)");
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllOps, OpTest, ::testing::ValuesIn(optest::all_op_names()), param_name);

// Bad input never crashes: each sample is mutated (a tensor replaced by one of an unrelated shape,
// by a float8 tensor, an int argument by an out-of-range value) and the op must either succeed or
// raise a foundry::Error whose message names the op or the problem; any other exception fails.
TEST_P(OpTest, BadInputsRaiseFoundryErrors) {
  const OpDef& op = op_named(GetParam());
  auto samples = ops::generate_samples(op, op.dtypes.empty() ? DType::Float32 : op.dtypes.front());
  if (samples.empty()) GTEST_SKIP();
  const auto& base = samples.front().args;
  std::vector<std::vector<Value>> variants;
  for (size_t i = 0; i < base.size(); ++i) {
    if (base[i].is_tensor() && base[i].tensor().defined()) {
      auto v = base;
      v[i] = ones({7, 11}, base[i].tensor().dtype());
      variants.push_back(v);
      v[i] = zeros({2, 3}, DType::Float8E4M3);
      variants.push_back(v);
      v[i] = zeros({0}, base[i].tensor().dtype());
      variants.push_back(v);
    } else if (base[i].is_int()) {
      auto v = base;
      v[i] = int64_t(99);
      variants.push_back(v);
      v[i] = int64_t(-99);
      variants.push_back(v);
    } else if (base[i].is_int_list()) {
      auto v = base;
      v[i] = std::vector<int64_t>{99, -99};
      variants.push_back(v);
    } else if (base[i].is_string()) {
      auto v = base;
      v[i] = std::string("no-such-mode");
      variants.push_back(v);
    }
  }
  for (size_t k = 0; k < variants.size(); ++k) {
    try {
      ops::call(op, variants[k]);
    } catch (const Error& e) {
      EXPECT_FALSE(std::string(e.what()).empty());
    } catch (const std::exception& e) {
      ADD_FAILURE() << op.name() << " variant " << k << " raised a non-foundry exception: " << e.what();
    }
  }
}
