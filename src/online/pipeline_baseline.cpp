#include "perseus/online/pipeline_baseline.hpp"

#include <algorithm>
#include <cmath>

#include "perseus/online/statistics.hpp"

namespace perseus::online {

void PipelineBaseline::add(const RoundMeasurement& m, std::size_t capacity) {
  Sample s;
  s.compute_time = m.pipeline_time;
  s.energy = m.pipeline_energy;
  s.energy.resize(s.compute_time.size(), 0);
  s.top.resize(s.compute_time.size());
  for (std::size_t d = 0; d < s.top.size() && d < m.pipeline_instructions.size(); ++d)
    s.top[d] = m.pipeline_instructions[d];
  samples_.push_back(std::move(s));
  if (samples_.size() > std::max<std::size_t>(capacity, 1)) samples_.erase(samples_.begin());
}

void PipelineBaseline::estimate(const std::vector<bool>& kept) {
  std::size_t D = 0;
  for (std::size_t i = 0; i < samples_.size(); ++i)
    if (i < kept.size() && kept[i]) D = std::max(D, samples_[i].compute_time.size());
  if (D == 0) return;
  compute_time_.assign(D, 0);
  energy_.assign(D, 0);
  top_time_.assign(D, {});
  top_time_error_.assign(D, {});
  top_energy_.assign(D, {});
  for (std::size_t d = 0; d < D; ++d) {
    std::vector<double> times, energies;
    std::map<StageKind, std::vector<TimeEnergy>> tops;
    for (std::size_t i = 0; i < samples_.size(); ++i) {
      const Sample& s = samples_[i];
      if (i >= kept.size() || !kept[i] || d >= s.compute_time.size()) continue;
      times.push_back(s.compute_time[d]);
      energies.push_back(s.energy[d]);
      for (const auto& [key, instruction] : s.top[d]) tops[key].push_back(instruction);
    }
    compute_time_[d] = robust_mean(times).value;
    energy_[d] = robust_mean(energies).value;
    for (const auto& [key, rounds] : tops) {
      std::vector<double> values;
      for (const auto& r : rounds) values.push_back(r.time);
      std::vector<bool> used;
      const Estimate top = robust_mean(values, &used);
      top_time_[d][key] = top.value;
      // The interval's half-width is t * error over the rounds kept, not over all of them.
      const auto rounds_used = std::size_t(std::count(used.begin(), used.end(), true));
      if (rounds_used > 1) top_time_error_[d][key] = (top.high - top.value) / t_quantile(rounds_used);
      // The energy of the same rounds: an instruction's energy follows its time, so a round whose
      // time was left out is no measure of its energy either.
      double energy = 0;
      for (std::size_t i = 0; i < rounds.size() && i < used.size(); ++i)
        if (used[i]) energy += rounds[i].energy;
      if (rounds_used > 0) top_energy_[d][key] = energy / static_cast<double>(rounds_used);
    }
  }
  const double middle = median(compute_time_);
  pace_.assign(D, 1.0);
  for (std::size_t d = 0; d < D; ++d)
    if (middle > 0 && compute_time_[d] > 0) pace_[d] = compute_time_[d] / middle;
  speed_.assign(D, {});
  std::map<StageKind, std::vector<double>> across;
  for (const auto& mine : top_time_)
    for (const auto& [key, t] : mine) across[key].push_back(t);
  for (const auto& [key, values] : across) {
    const double mid = median(values);
    for (std::size_t d = 0; d < D; ++d) {
      auto it = top_time_[d].find(key);
      if (it != top_time_[d].end() && mid > 0 && it->second > 0) speed_[d][key] = it->second / mid;
    }
  }
  estimated_ = true;
}

double PipelineBaseline::pace(std::size_t d) const { return d < pace_.size() ? pace_[d] : 1.0; }
double PipelineBaseline::compute_time(std::size_t d) const { return d < compute_time_.size() ? compute_time_[d] : 0; }
double PipelineBaseline::energy(std::size_t d) const { return d < energy_.size() ? energy_[d] : 0; }

double PipelineBaseline::speed(std::size_t d, const StageKind& key) const {
  if (d >= speed_.size()) return 1.0;
  auto it = speed_[d].find(key);
  return it == speed_[d].end() ? 1.0 : it->second;
}

std::optional<double> PipelineBaseline::top_time(std::size_t d, const StageKind& key) const {
  if (d >= top_time_.size()) return std::nullopt;
  auto it = top_time_[d].find(key);
  if (it == top_time_[d].end() || it->second <= 0) return std::nullopt;
  return it->second;
}

double PipelineBaseline::top_time_error(std::size_t d, const StageKind& key) const {
  if (d >= top_time_error_.size()) return 0;
  auto it = top_time_error_[d].find(key);
  return it == top_time_error_[d].end() ? 0 : it->second;
}

std::optional<double> PipelineBaseline::top_energy(std::size_t d, const StageKind& key) const {
  if (d >= top_energy_.size()) return std::nullopt;
  auto it = top_energy_[d].find(key);
  if (it == top_energy_[d].end() || it->second <= 0) return std::nullopt;
  return it->second;
}

std::optional<double> PipelineBaseline::conditions(const RoundMeasurement& m, std::size_t d,
                                                   const std::vector<std::vector<Instruction>>& orders, int num_stages,
                                                   const std::vector<std::vector<int>>* clocks, int top,
                                                   const std::vector<std::vector<double>>* late, bool* steady_only,
                                                   double* error, std::size_t fewest) const {
  if (d >= top_time_.size() || d >= m.slot_time.size()) return std::nullopt;
  std::vector<double> steady, after_change;
  const auto& slots = m.slot_time[d];
  for (std::size_t s = 0; s < slots.size() && s < orders.size(); ++s)
    for (std::size_t k = 0; k < slots[s].size() && k < orders[s].size(); ++k) {
      if (clocks && (s >= clocks->size() || k >= (*clocks)[s].size() || (*clocks)[s][k] != top)) continue;
      auto it = top_time_[d].find({model_stage(orders[s][k], num_stages), orders[s][k].kind});
      if (it == top_time_[d].end() || it->second <= 0 || slots[s][k] <= 0) continue;
      // Right after a change to the top clock, the instruction starts at the clock before (a clock
      // change takes effect late): less what the latency cost it where that is known, else counted
      // only where too few others ran at the top clock.
      const bool changed = clocks && (*clocks)[s][k > 0 ? k - 1 : (*clocks)[s].size() - 1] != top;
      const bool known = late && s < late->size() && k < (*late)[s].size();
      if (changed && known) {
        steady.push_back((slots[s][k] - (*late)[s][k]) / it->second);
      } else {
        (changed ? after_change : steady).push_back(slots[s][k] / it->second);
      }
    }
  fewest = std::max<std::size_t>(fewest, 1);
  if (steady_only) *steady_only = steady.size() >= fewest;
  if (steady.size() < fewest) steady.insert(steady.end(), after_change.begin(), after_change.end());
  if (steady.size() < fewest) return std::nullopt;
  const double middle = median(steady);
  // A median of normal draws is sqrt(pi / 2) times as uncertain as their mean.
  constexpr double kMedianOverMean = 1.2533141373155001;
  if (error)
    *error = middle > 0 ? kMedianOverMean * sample_stddev(steady) / std::sqrt(double(steady.size())) / middle : 0;
  return middle;
}

}  // namespace perseus::online
