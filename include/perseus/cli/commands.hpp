#pragma once
// Subcommands of the `perseus` executable. Each registers its options on the app and returns
// the function that runs it (which returns the process exit code).
#include <CLI/CLI.hpp>
#include <functional>

#include "perseus/cli/exit_codes.hpp"

namespace perseus::cli {

using Runner = std::function<int()>;

Runner add_optimize_command(CLI::App& app);
Runner add_plans_command(CLI::App& app);
Runner add_synth_profile_command(CLI::App& app);
Runner add_emulate_command(CLI::App& app);
Runner add_baseline_command(CLI::App& app);
Runner add_whatif_command(CLI::App& app);
Runner add_plot_command(CLI::App& app);
Runner add_serve_command(CLI::App& app);
Runner add_gpu_command(CLI::App& app);
Runner add_gpud_command(CLI::App& app);
Runner add_status_command(CLI::App& app);
Runner add_simulate_command(CLI::App& app);
Runner add_straggler_command(CLI::App& app);

}  // namespace perseus::cli
