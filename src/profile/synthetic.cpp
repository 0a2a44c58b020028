#include "perseus/profile/synthetic.hpp"

#include <fmt/format.h>

#include <random>

#include "perseus/util/error.hpp"

namespace perseus {

std::string synthetic_profile_csv(const SyntheticGpu& gpu) {
  if (gpu.num_stages < 1 || gpu.top_clock <= gpu.bottom_clock || gpu.bottom_clock <= 0 || gpu.clock_step <= 0 ||
      gpu.forward_time <= 0 || gpu.noise < 0 || gpu.noise >= 0.5 || gpu.backward_ratio <= 0 ||
      !(gpu.compute_share >= 0 && gpu.compute_share <= 1) || gpu.embedding_extra < 0 || gpu.head_extra < 0) {
    throw Error(
        "synthetic GPU: need stages >= 1, top clock > bottom clock > 0, step > 0, "
        "forward time > 0, 0 <= noise < 0.5, backward ratio > 0, 0 <= compute share <= 1 and extras >= 0",
        ErrorKind::bad_setting);
  }
  if (!gpu.stage_weights.empty() && gpu.stage_weights.size() != static_cast<std::size_t>(gpu.num_stages))
    throw Error(fmt::format("synthetic GPU: {} stage weights for {} stages", gpu.stage_weights.size(), gpu.num_stages),
                ErrorKind::bad_setting);
  for (double w : gpu.stage_weights)
    if (!(w > 0 && w < 1e6)) throw Error("synthetic GPU: stage weights must be positive", ErrorKind::bad_setting);
  std::mt19937_64 rng(gpu.seed);
  std::normal_distribution<double> jitter(1.0, gpu.noise);
  auto noisy = [&](double value) { return gpu.noise > 0 ? value * std::max(0.5, jitter(rng)) : value; };

  std::string csv = "stage,instruction,frequency,time,energy\n";
  for (int s = 0; s < gpu.num_stages; ++s) {
    double work = 1.0;
    if (s == 0) work += gpu.embedding_extra;
    if (s == gpu.num_stages - 1) work += gpu.head_extra;
    if (!gpu.stage_weights.empty()) work *= gpu.stage_weights[static_cast<std::size_t>(s)];
    for (const char* kind : {"forward", "backward"}) {
      const double top_time = gpu.forward_time * work * (kind[0] == 'b' ? gpu.backward_ratio : 1.0);
      for (int f = gpu.top_clock; f >= gpu.bottom_clock; f -= gpu.clock_step) {
        const double ratio = static_cast<double>(f) / gpu.top_clock;
        const double span = static_cast<double>(f - gpu.bottom_clock) / (gpu.top_clock - gpu.bottom_clock);
        const double voltage = gpu.bottom_voltage_ratio + (1.0 - gpu.bottom_voltage_ratio) * span;
        const double time = top_time * (gpu.compute_share / ratio + (1.0 - gpu.compute_share));
        const double power = gpu.idle_power + gpu.dynamic_power * ratio * voltage * voltage;
        csv += fmt::format("{},{},{},{},{}\n", s, kind, f, noisy(time), noisy(power * time));
      }
    }
  }
  return csv;
}

}  // namespace perseus
