// Views of the op registry for tools: the JSON catalogue (`foundry ops --json`), the generated
// docs (`foundry ops --markdown` -> docs/ops.md), and the sample dump the parity fixtures are
// made from (`foundry ops --dump-samples DIR`, then tools/gen_fixtures.py runs PyTorch on it).
#pragma once

#include <string>
#include <vector>

#include "foundry/ops/registry.h"

namespace foundry::ops {

/// The dtypes the parity fixtures cover for an op: float32 and float64 with every sample, and
/// the first samples of its other dtypes that PyTorch 1.13 supports.
std::vector<DType> fixture_dtypes(const OpDef& op);

/// Generates an op's samples for a dtype (deterministic: the generator is seeded from the op
/// name and dtype).
std::vector<Sample> generate_samples(const OpDef& op, DType dtype);

/// Writes DIR/samples.json and one DIR/<op>.npz with the sample tensors, for every op whose
/// name matches `only` (empty: all).
void dump_samples(const std::string& dir, const std::vector<std::string>& only = {});

/// JSON array describing every op (name, schema, family, kind, differentiable, dtypes,
/// second_order, fixture and gradcheck coverage given the fixture manifest, if found).
std::string catalog_json(const std::string& fixture_manifest = "");
/// Markdown document of the registry (docs/ops.md).
std::string catalog_markdown(const std::string& fixture_manifest = "");

}  // namespace foundry::ops
