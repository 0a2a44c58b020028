#include "perseus/profile/synthetic.hpp"

#include <fmt/format.h>

#include <random>

#include "perseus/util/error.hpp"

namespace perseus {

std::string synthetic_profile_csv(const SyntheticGpu& gpu) {
  if (gpu.num_stages < 1 || gpu.top_clock <= gpu.bottom_clock || gpu.bottom_clock <= 0 || gpu.clock_step <= 0 ||
      gpu.forward_time <= 0 || gpu.noise < 0 || gpu.noise >= 0.5) {
    throw Error(
        "synthetic GPU: need stages >= 1, top clock > bottom clock > 0, step > 0, "
        "forward time > 0 and 0 <= noise < 0.5",
        kExitUsage);
  }
  std::mt19937_64 rng(gpu.seed);
  std::normal_distribution<double> jitter(1.0, gpu.noise);
  auto noisy = [&](double value) { return gpu.noise > 0 ? value * std::max(0.5, jitter(rng)) : value; };

  std::string csv = "stage,instruction,frequency,time,energy\n";
  for (int s = 0; s < gpu.num_stages; ++s) {
    double work = 1.0;
    if (s == 0) work += gpu.embedding_extra;
    if (s == gpu.num_stages - 1) work += gpu.head_extra;
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
