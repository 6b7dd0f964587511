// foundry: the command-line front end of the framework.
#include <algorithm>
#include <cstdio>
#include <new>
#include <exception>
#include <string>

#include "commands.h"
#include "foundry/core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"Foundry: tensors, autograd, models, training and inference in C++"};
  app.require_subcommand(1);
  foundry::cli::add_ops_command(app);
  foundry::cli::add_demo_command(app);
  foundry::cli::add_tokenize_command(app);
  foundry::cli::add_train_command(app);
  foundry::cli::add_prepare_command(app);
  foundry::cli::add_generate_commands(app);
  foundry::cli::add_finetune_commands(app);
  foundry::cli::add_template_command(app);
  foundry::cli::add_eval_command(app);
  foundry::cli::add_forensics_commands(app);
  foundry::cli::add_serve_command(app);
  foundry::cli::add_chat_command(app);
  foundry::cli::add_embed_command(app);
  foundry::cli::add_runs_commands(app);
  // CLI11 answers an unknown first word with "A subcommand is required".
  const auto subcommands = app.get_subcommands([](CLI::App*) { return true; });
  if (argc > 1 && argv[1][0] != '-' &&
      std::none_of(subcommands.begin(), subcommands.end(), [&](const CLI::App* sub) { return sub->check_name(argv[1]); })) {
    std::fprintf(stderr, "foundry: error: unknown command '%s' (see `foundry --help`)\n", argv[1]);
    return 1;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    // A bad command line is an error like a bad file: one "foundry: error:" line and status 1 (CLI11's
    // own codes, 106 and up, told scripts nothing), naming the subcommand whose --help explains it.
    std::string command = "foundry";
    for (const CLI::App* sub = &app; !sub->get_subcommands().empty();) {
      sub = sub->get_subcommands().front();
      command += " " + sub->get_name();
    }
    std::fprintf(stderr, "foundry: error: %s (see `%s --help`)\n", e.what(), command.c_str());
    return 1;
  } catch (const foundry::Error& e) {
    std::fprintf(stderr, "foundry: error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "foundry: error: out of memory (the request needs more memory than the machine gives)\n");
    return 1;
  } catch (const std::exception& e) {  // a library's own exception (JSON, filesystem, ...): never terminate
    std::fprintf(stderr, "foundry: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
