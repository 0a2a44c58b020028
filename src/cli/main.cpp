// perseus: energy-optimal GPU clock plans for pipeline-parallel training.
#include <fmt/format.h>

#include <cstdio>
#include <string>
#include <vector>

#include "perseus/cli/arguments.hpp"
#include "perseus/cli/commands.hpp"
#include "perseus/cli/exit_codes.hpp"
#include "perseus/cli/setting_flags.hpp"
#include "perseus/util/error.hpp"

int main(int argc, char** argv) {
  using namespace perseus;
  CLI::App app{
      "perseus: removes energy bloat from pipeline-parallel training by planning GPU "
      "clocks per forward and backward"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "perseus " PERSEUS_VERSION);
  std::vector<std::pair<CLI::App*, cli::Runner>> commands;
  auto add = [&](auto adder) {
    const std::size_t before = app.get_subcommands({}).size();
    cli::Runner runner = adder(app);
    commands.emplace_back(app.get_subcommands({})[before], std::move(runner));
  };
  add(cli::add_optimize_command);
  add(cli::add_plans_command);
  add(cli::add_synth_profile_command);
  add(cli::add_emulate_command);
  add(cli::add_baseline_command);
  add(cli::add_whatif_command);
  add(cli::add_plot_command);
  add(cli::add_serve_command);
  add(cli::add_gpu_command);
  add(cli::add_gpud_command);
  add(cli::add_status_command);
  add(cli::add_simulate_command);
  add(cli::add_straggler_command);
  const std::string exit_codes =
      "Exit codes: 0 success, 1 the computation failed, 64 bad command line, 65 malformed input (the message names "
      "the file, line and field), 66 input missing or unreadable (or the server unreachable), 73 output not "
      "writable, 130 interrupted (after writing a valid, shorter result).";
  for (auto& [command, runner] : commands) command->footer(exit_codes);
  app.footer("Each command's flags: perseus COMMAND --help (docs/cli.md).\n" + exit_codes);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return cli::report_parse_error(app, e);
  }
  try {
    for (auto& [command, runner] : commands) {
      if (command->parsed()) return runner();
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "perseus: error: %s\n", cli::message_with_flags(e).c_str());
    return cli::exit_code(e.kind());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "perseus: internal error: %s\n", e.what());
    return cli::kExitFailure;
  }
  return cli::kExitUsage;
}
