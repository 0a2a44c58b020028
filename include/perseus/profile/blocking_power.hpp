#pragma once
// The blocking power P_block (W) of the GPUs the shipped profiles were measured on: what a GPU
// draws while it waits on communication, measured with the profiles (the Perseus artifact's
// --p2p-power). examples/gpt3-175b-a100.csv and the other A100 SXM profiles go with the first,
// the A40 profiles with the second.

namespace perseus {

inline constexpr double kA100BlockingPowerW = 83.64;
inline constexpr double kA40BlockingPowerW = 70.38;

}  // namespace perseus
