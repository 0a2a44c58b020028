#pragma once
// Which iterations of a round's results count: one rule for every reader of them (the server's
// per-round numbers, the turnkey controller's measurements). A round's clocks change as it begins
// (perseus's client: at its unmeasured switch-over iteration, or at its first measured one when the
// schedule came late; the artifact's client: at its first iteration), so its first measured
// iteration may run through a clock change while the GPU's clocks and power settle: warm-up, left
// out whenever the round has more.
#include <cstddef>
#include <vector>

namespace perseus::protocol {

// Iterations at the start of a round left out of its numbers, when it has more than these.
inline constexpr std::size_t kWarmUpIterations = 1;

// The first counted iteration of a round of `iterations`.
std::size_t first_counted_iteration(std::size_t iterations);
// The mean of a round's counted iterations; 0 for a round of none.
double round_mean(const std::vector<double>& per_iteration);

}  // namespace perseus::protocol
