// Subcommands of the `foundry` program; each file registers one with CLI11.
#pragma once

#include <CLI/CLI.hpp>

namespace foundry::cli {

void add_ops_command(CLI::App& app);
void add_demo_command(CLI::App& app);
void add_tokenize_command(CLI::App& app);
void add_train_command(CLI::App& app);
void add_prepare_command(CLI::App& app);
void add_generate_commands(CLI::App& app);  ///< generate, forward, info, convert

}  // namespace foundry::cli
