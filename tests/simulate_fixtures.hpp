#pragma once
// The simulated cluster most tests run: GPT-3 175B on A100s (the Perseus authors' profile), 8
// stages, 12 microbatches, against a server at `url`.
#include <string>

#include "perseus/profile/blocking_power.hpp"
#include "perseus/profile/profile.hpp"
#include "perseus/simulate/cluster.hpp"

namespace perseus::testing {

// A profile the Perseus authors measured: GPT-3 175B on A100 ships in examples/ (byte for byte);
// the others come from ../shared beside the checkout.
inline std::string shared_profile_path(const std::string& name) {
  if (name == "gpt3-175b+a100_sxm_bf16.csv") return std::string(PERSEUS_SOURCE_DIR) + "/examples/gpt3-175b-a100.csv";
  return std::string(PERSEUS_SHARED_DIR) + "/data/sosp24/stage_profile/" + name;
}

inline simulate::SimulationConfig gpt3_cluster(const std::string& url, int pipelines, int iterations) {
  simulate::SimulationConfig c;
  c.profile = read_profile(shared_profile_path("gpt3-175b+a100_sxm_bf16.csv"));
  c.num_stages = 8;
  c.num_microbatches = 12;
  c.pipelines = pipelines;
  c.p2p_power = kA100BlockingPowerW;
  c.server_url = url;
  c.iterations = iterations;
  c.report_every = 10;
  c.model_name = "gpt3";
  return c;
}

}  // namespace perseus::testing
