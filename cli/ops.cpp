// foundry ops: the op registry as JSON or Markdown, and the sample dump for parity fixtures.
#include <cstdio>
#include <iostream>

#include "commands.h"
#include "foundry/core/dtype.h"
#include "foundry/core/error.h"
#include "foundry/ops/catalog.h"

namespace foundry::cli {

void add_ops_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("ops", "List the op registry (JSON or Markdown) or dump test samples");
  auto json = std::make_shared<bool>(false);
  auto markdown = std::make_shared<bool>(false);
  auto dump_dir = std::make_shared<std::string>();
  auto fixtures = std::make_shared<std::string>("tests/parity/fixtures/manifest.json");
  auto only = std::make_shared<std::vector<std::string>>();
  auto promotion = std::make_shared<bool>(false);
  cmd->add_flag("--promotion-table", *promotion, "print the dtype promotion table (Markdown)");
  cmd->add_flag("--json", *json, "print every op as JSON (name, differentiable, dtypes, fixture and gradcheck coverage)");
  cmd->add_flag("--markdown", *markdown, "print docs/ops.md");
  cmd->add_option("--dump-samples", *dump_dir, "write each op's test samples to DIR (for tools/gen_fixtures.py)");
  cmd->add_option("--only", *only, "restrict --dump-samples to these ops");
  cmd->add_option("--fixtures", *fixtures, "fixture manifest used for coverage columns");
  // Every option's storage is captured so it outlives this function (CLI11 writes into it later).
  cmd->callback([json, markdown, dump_dir, fixtures, only, promotion] {
    (void)json;  // --json is the default output
    if (*promotion) {
      std::string header = "| | ", sep = "|---|";
      for (int j = 0; j < kNumDTypes; ++j) {
        header += std::string(dtype_name(DType(j))) + " | ";
        sep += "---|";
      }
      std::cout << header << "\n" << sep << "\n";
      for (int i = 0; i < kNumDTypes; ++i) {
        std::cout << "| **" << dtype_name(DType(i)) << "** | ";
        for (int j = 0; j < kNumDTypes; ++j) {
          std::string cell;
          try {
            cell = std::string(dtype_name(promote_types(DType(i), DType(j))));
          } catch (const TypeError&) {
            cell = "error";
          }
          std::cout << cell << " | ";
        }
        std::cout << "\n";
      }
    } else if (!dump_dir->empty()) {
      ops::dump_samples(*dump_dir, *only);
      std::fprintf(stderr, "wrote samples to %s\n", dump_dir->c_str());
    } else if (*markdown) {
      std::cout << ops::catalog_markdown(*fixtures);
    } else {
      std::cout << ops::catalog_json(*fixtures) << "\n";
    }
  });
}

}  // namespace foundry::cli
