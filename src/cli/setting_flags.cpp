#include "perseus/cli/setting_flags.hpp"

#include <array>
#include <cctype>
#include <utility>

namespace perseus::cli {

namespace {

constexpr std::array<std::pair<std::string_view, std::string_view>, 30> kFlags{{
    {"clock_latency", "--clock-latency"},
    {"cost_model", "--cost-model"},
    {"eta", "--eta"},
    {"gpu_speed_spread", "--gpu-speed-spread"},
    {"iterations", "--iterations"},
    {"max_clock", "--max-clock"},
    {"max_power", "--max-power"},
    {"metrics_address", "--metrics-address"},
    {"noise", "--noise"},
    {"noise_factor", "--noise-factor"},
    {"num_microbatches", "--microbatches"},
    {"num_stages", "--stages"},
    {"p2p_power", "--p2p-power"},
    {"pipelines", "--pipelines"},
    {"power_limit", "--power-limit"},
    {"recompute", "--recompute"},
    {"report_every", "--report-every"},
    {"request_timeout", "--request-timeout"},
    {"round_iterations", "--round-iterations"},
    {"schedule", "--schedule"},
    {"socket_group", "--socket-group"},
    {"socket_mode", "--socket-mode"},
    {"socket_path", "--socket"},
    {"split_backward", "--split-backward"},
    {"straggler", "--straggler"},
    {"tensor_parallel", "--tensor-parallel"},
    {"time_scale", "--time-scale"},
    {"unit_time", "--unit-time"},
    {"virtual_stages", "--virtual-stages"},
    {"weight", "--weight"},
}};

// A setting's name is a word of letters, digits and '_'; "noise" inside "noise_factor" or
// "--noise" is not a mention of it.
bool word_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '-'; }

std::string replace_word(const std::string& text, std::string_view word, std::string_view by) {
  std::string out;
  std::size_t from = 0;
  for (std::size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) {
    const std::size_t end = at + word.size();
    if ((at > 0 && word_char(text[at - 1])) || (end < text.size() && word_char(text[end]))) continue;
    out.append(text, from, at - from).append(by);
    from = end;
  }
  return out.append(text, from);
}

}  // namespace

std::string_view flag_of(std::string_view setting) {
  for (const auto& [name, flag] : kFlags)
    if (name == setting) return flag;
  return {};
}

std::string message_with_flags(const Error& error) {
  std::string message = error.what();
  for (const std::string& setting : error.settings())
    if (auto flag = flag_of(setting); !flag.empty()) message = replace_word(message, setting, flag);
  return message;
}

}  // namespace perseus::cli
