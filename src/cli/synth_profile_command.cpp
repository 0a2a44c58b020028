// `perseus synth-profile`: write a stage profile from the documented synthetic GPU model.
#include <fmt/format.h>

#include <cstdio>

#include "perseus/cli/arguments.hpp"
#include "perseus/cli/commands.hpp"
#include "perseus/profile/backward_split.hpp"
#include "perseus/profile/synthetic.hpp"
#include "perseus/util/atomic_file.hpp"
#include "perseus/util/error.hpp"

namespace perseus::cli {

namespace {

// The rows of `stages` (in that order), renumbered 0, 1, ...; Error (usage) for a stage the profile lacks.
Profile pick_stages(const Profile& profile, const std::vector<int>& stages) {
  if (profile.has_chunks)
    throw Error("--pick-stages: the profile has model chunks; pick from one without", ErrorKind::bad_setting);
  Profile out;
  out.source = profile.source;
  for (std::size_t i = 0; i < stages.size(); ++i) {
    bool found = false;
    for (const auto& row : profile.rows)
      if (row.stage == stages[i]) {
        ProfileRow copy = row;
        copy.stage = static_cast<int>(i);
        out.rows.push_back(copy);
        found = true;
      }
    if (!found)
      throw Error(fmt::format("--pick-stages: {} has no stage {}", profile.source, stages[i]), ErrorKind::bad_setting);
  }
  return out;
}

}  // namespace

Runner add_synth_profile_command(CLI::App& app) {
  auto gpu = std::make_shared<SyntheticGpu>();
  auto out = std::make_shared<std::string>();
  auto from = std::make_shared<std::string>();
  auto split = std::make_shared<double>(0);
  auto pick = std::make_shared<std::vector<int>>();
  auto* cmd = app.add_subcommand("synth-profile",
                                 "Generate a stage profile from a small GPU model (for trying perseus without GPUs)");
  cmd->add_option("--stages", gpu->num_stages, "Pipeline stages")->capture_default_str()->check(positive());
  cmd->add_option("--forward-time", gpu->forward_time, "Seconds per forward of a middle stage at the top clock")
      ->capture_default_str();
  cmd->add_option("--top-clock", gpu->top_clock, "Highest SM clock, MHz")->capture_default_str();
  cmd->add_option("--bottom-clock", gpu->bottom_clock, "Lowest SM clock, MHz")->capture_default_str();
  cmd->add_option("--clock-step", gpu->clock_step, "Clock step, MHz")->capture_default_str();
  cmd->add_option("--backward-ratio", gpu->backward_ratio, "A backward's work in forwards")->capture_default_str();
  cmd->add_option("--compute-share", gpu->compute_share,
                  "Share of an instruction's time that scales with the clock (the rest is memory-bound)")
      ->capture_default_str();
  cmd->add_option("--embedding-extra", gpu->embedding_extra, "Extra work of stage 0 (the embedding), a fraction")
      ->capture_default_str();
  cmd->add_option("--head-extra", gpu->head_extra, "Extra work of the last stage (the LM head), a fraction")
      ->capture_default_str();
  cmd->add_option("--idle-power", gpu->idle_power, "Static power, W")->capture_default_str();
  cmd->add_option("--dynamic-power", gpu->dynamic_power, "Dynamic power at the top clock and voltage, W")
      ->capture_default_str();
  cmd->add_option("--stage-weights", gpu->stage_weights,
                  "Per stage, a factor on its work (an uneven partition), comma-separated; one per stage")
      ->delimiter(',');
  cmd->add_option("--noise", gpu->noise, "Relative measurement noise (0 = none)")->capture_default_str();
  cmd->add_option("--seed", gpu->seed, "Noise seed")->capture_default_str();
  cmd->add_option("--split-backward", *split,
                  "Split every backward into backward_input (this share of its time and energy) and backward_weight "
                  "(the rest), as zero-bubble schedules run them; e.g. 0.5")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--from", *from,
                  "Instead of the GPU model, read this profile (use with --split-backward to split a measured profile)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--pick-stages", *pick,
                  "With --from: keep only these stages of the profile, in this order, numbered 0, 1, ... (a shorter "
                  "or uneven pipeline from a measured one), comma-separated")
      ->delimiter(',');
  cmd->add_option("--out", *out, "Output CSV (default: standard output)");
  return [gpu, out, from, split, pick] {
    if (!pick->empty() && from->empty()) throw Error("--pick-stages needs --from", ErrorKind::bad_setting);
    std::string csv = from->empty() ? synthetic_profile_csv(*gpu) : std::string();
    if (!from->empty() || *split != 0) {
      Profile profile = from->empty() ? parse_profile(csv, "synthetic profile") : read_profile(*from);
      if (!pick->empty()) profile = pick_stages(profile, *pick);
      if (*split != 0) profile = split_backward(profile, *split);
      csv = profile_csv(profile);
    }
    if (out->empty()) std::fputs(csv.c_str(), stdout);
    else write_file_atomic(*out, csv);
    return kExitOk;
  };
}

}  // namespace perseus::cli
