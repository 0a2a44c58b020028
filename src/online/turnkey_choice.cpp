#include "turnkey_choice.hpp"

#include <algorithm>
#include <cmath>

#include "perseus/online/statistics.hpp"
#include "plan_choice_adapter.hpp"

namespace perseus::online::choice {

Variability ChoiceContext::cautious() const {
  Variability v = variability;
  for (auto& stage : v.sigma)
    for (double& sigma : stage) sigma *= caution;
  return v;
}

// The chooser's options for `group` of pipelines: their GPUs' speeds (the slowest kMaxPipelines).
NoiseAwareOptions options_for(const ChoiceContext& c, const std::vector<std::size_t>& group, bool straggling) {
  NoiseAwareOptions o;
  o.pipelines = static_cast<int>(std::max<std::size_t>(group.size(), 1));
  o.clock_latency = c.latency;
  if (!c.pipelines_known || c.speeds.size() < 2) return o;
  std::vector<std::size_t> order = group;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return c.paces[a] > c.paces[b]; });
  order.resize(std::min<std::size_t>(order.size(), kMaxPipelines));
  for (std::size_t d : order) o.speeds.push_back(straggling ? c.straggling[d] : c.speeds[d]);
  return o;
}

// Pipeline d's noise-free iteration time running `frequencies` on its GPUs (the model's terms).
double time_on(const ChoiceContext& c, std::size_t d, const std::vector<std::vector<int>>& frequencies,
               bool straggling) {
  NoiseAwareOptions o;
  o.speeds.push_back(straggling ? c.straggling[d] : c.speeds[d]);
  o.clock_latency = c.latency;
  return expected_time(*c.plans, frequencies, Variability{}, o);
}

namespace {
// GPUs within this of each other's speed for every (model stage, kind) are alike: what the
// baseline's rounds tell apart is coarser.
constexpr double kSameSpeed = 0.005;
// Pipelines within this of the slowest one's all-max time finish at about its pace: each is as
// likely to end the iteration as it is.
constexpr double kAlikePace = 0.003;

std::size_t slowest_of(const std::vector<double>& top) {
  return static_cast<std::size_t>(std::max_element(top.begin(), top.end()) - top.begin());
}

// Pipelines among `top` (all-max times) at about the slowest one's pace: it included.
std::size_t alike_count(const std::vector<double>& top) {
  const double slowest = top[slowest_of(top)];
  return static_cast<std::size_t>(
      std::count_if(top.begin(), top.end(), [&](double t) { return t * (1 + kAlikePace) >= slowest; }));
}
}  // namespace

std::vector<std::size_t> lead_pipelines(const std::vector<double>& top,
                                        const std::vector<std::map<StageKind, double>>& speeds) {
  std::vector<std::size_t> lead;
  if (top.empty()) return lead;
  const std::size_t slowest = slowest_of(top);
  const auto same_gpus = [&](std::size_t d) {
    if (d >= speeds.size() || slowest >= speeds.size()) return true;
    for (const auto& [key, speed] : speeds[slowest]) {
      auto it = speeds[d].find(key);
      if (it == speeds[d].end() || std::abs(it->second / speed - 1) > kSameSpeed) return false;
    }
    return true;
  };
  for (std::size_t d = 0; d < top.size(); ++d)
    if (d == slowest || same_gpus(d)) lead.push_back(d);
  return lead;
}

NoiseAwareOptions lead_options(const ChoiceContext& c, const std::vector<std::size_t>& lead,
                               const std::vector<double>& top, bool straggling) {
  NoiseAwareOptions o = options_for(c, lead, straggling);
  if (top.empty()) return o;
  const std::size_t alike = alike_count(top);
  if (o.speeds.empty()) {
    o.pipelines = std::max(o.pipelines, static_cast<int>(alike));
  } else {
    while (o.speeds.size() < std::min<std::size_t>(alike, kMaxPipelines)) o.speeds.push_back(o.speeds.front());
  }
  return o;
}

NoiseAwareOptions target_options(const ChoiceContext& c) {
  if (!c.plans || !c.pipelines_known) return options_for(c, {}, false);
  std::vector<double> top;
  const auto all = all_max(*c.plans).frequencies;
  for (std::size_t d = 0; d < c.speeds.size(); ++d) top.push_back(time_on(c, d, all, false));
  return lead_options(c, lead_pipelines(top, c.speeds), top, false);
}

// The pipelines that set the iteration's pace (the straggler, or the slowest of the baseline and
// those on GPUs alike its) run the target plan. Every other pipeline runs a plan chosen on its own
// GPUs: one at about the pace setters' pace (kAlikePace) the cheapest that, drawn as many times as
// they are, ends by their expected time (each of them as likely to end the iteration); a faster one
// the cheapest that, on its GPUs and under the measured noise, makes the iteration end no later than
// the pace setters and it at all-max would (a straggler told without its pipeline: every pipeline
// slows to the time told). Held to no later at all, such a plan keeps two or three spreads of the
// noise clear of the pace setters' (a 2-stage, 3-microbatch pipeline on GPUs 2.8% faster ended 2%
// before the pace setter: 76% of the ideal): one that makes the iteration end up to kPaceAllowance
// later, shared among the faster groups, is taken where it pays for that time (below). Where a
// straggler sets the pace it is allowed outright: its slowdown is estimated from a few rounds, and
// pace_miss corrects it. One plan for pipelines whose GPUs differ stage by stage would keep every
// stage fast that is slow on any of them, and use the slack of none.
namespace {
// Whether `later`, a paced group's plan that ends the iteration later than `plan` under the noise, saves
// of the job's all-max energy at least kPacedReturn times the share of time it adds: its `members`
// pipelines' energy, less the blocking of the others, which wait that much longer. More than the target
// plan's wider allowance asks (NoiseAwareOptions::wide_return): the model draws each pipeline's noise
// alone, and a paced plan's share of the iteration's end ran later than it predicts (0.14% where it
// predicted 0.10%, 4 stages and 12 microbatches under noise 0.02).
constexpr double kPacedReturn = 5;
bool pays_for_its_time(const PlanningOutput& plans, const ChosenPlan& plan, const ChosenPlan& later,
                       std::size_t members, std::size_t pipelines) {
  const double added = later.time - plan.time;
  if (added <= 0) return later.energy < plan.energy;
  const double blocking = plans.record.num_stages * plans.record.p_block * added;
  const double saved =
      static_cast<double>(members) * (plan.energy - later.energy) - static_cast<double>(pipelines - members) * blocking;
  const double job = static_cast<double>(pipelines) * plans.all_max().energy;
  return job > 0 && plan.time > 0 && saved / job >= kPacedReturn * added / plan.time;
}

// `options` allowing a plan no time past all-max's expected time, narrow or wide.
NoiseAwareOptions without_allowance(NoiseAwareOptions options) {
  options.allowance = options.max_allowance = options.wide_allowance = options.wide_max_allowance = 0;
  return options;
}
}  // namespace

Assignment assign(const ChoiceContext& c, const ChosenPlan& target) {
  constexpr double kPaceAllowance = 0.001;
  constexpr double kBin = 0.005;  // pipelines within this much of each other's pace share a plan
  const PlanningOutput& plans = *c.plans;
  const std::size_t D = c.speeds.size();
  Assignment out;
  out.straggler = c.straggler;
  const bool told = c.straggler && c.straggler->told;
  const auto all = all_max(plans).frequencies;
  std::vector<double> top(D);
  for (std::size_t d = 0; d < D; ++d) top[d] = time_on(c, d, all, true);
  const double slowest = *std::max_element(top.begin(), top.end());
  std::vector<std::size_t> lead;
  if (told) {
    if (c.straggler->pipeline && static_cast<std::size_t>(*c.straggler->pipeline) < D)
      lead.push_back(static_cast<std::size_t>(*c.straggler->pipeline));
  } else {
    lead = lead_pipelines(top, c.straggling);
  }
  // A pipeline slow in the baseline sets the pace for good: shown as a straggler in the baseline.
  if (!out.straggler && D > 1 && c.pipelines_known) {
    const std::size_t d = static_cast<std::size_t>(std::max_element(top.begin(), top.end()) - top.begin());
    const double pace = top[d] / median_of_others(top, d);
    if (pace > 1 + c.threshold) {
      ActiveStraggler s;
      s.pipeline = static_cast<int>(d);
      s.slowdown = pace;
      s.in_baseline = true;
      out.straggler = s;
    }
  }
  // When the iteration ends anyway, per Monte Carlo sample: the pace setters on their plan, or
  // all-max stretched to the time told.
  const Variability v = c.cautious();
  const std::uint64_t pace_seed = NoiseAwareOptions{}.seed;  // the pace setters' draws
  std::vector<double> pace;
  if (told) {
    std::vector<std::size_t> everyone(D);
    for (std::size_t d = 0; d < D; ++d) everyone[d] = d;
    pace = iteration_samples(plans, all, v, options_for(c, everyone, false));
    for (double& t : pace) t *= c.straggler->slowdown;
  } else {
    // A detected straggler sets the pace now: it runs a plan chosen for its own GPUs (no slower than
    // its own all-max than the target allows), not the target plan, which may have had slack there.
    const auto options = lead_options(c, lead, top, true);
    if (out.straggler && !out.straggler->in_baseline) {
      out.lead_plan = plan_choice::choose_plan_under_noise(
          plans, c.lead_deadline, v, c.lead_without_allowance ? without_allowance(options) : options);
      // Its plan measured too slow, and only all-max is predicted faster by the miss: where the miss is
      // of the noise's size (within twice the tolerance), a plan chosen under more noise (as the target
      // plan's step-up did) and with none of the allowance a plan may take on purpose (the straggler's
      // time is the job's, and the plan that missed had taken it) has the slack instead; all-max would
      // give up the straggler's whole saving until the next retry. A larger miss is no noise (a clock
      // latency not yet measured).
      const bool noise_sized = c.lead_deadline < c.deadline && c.lead_deadline * (1 + 2 * c.tolerance) >= c.deadline;
      if (out.lead_plan->is_all_max() && noise_sized && c.caution > 1)
        out.lead_plan = plan_choice::choose_plan_under_noise(plans, c.deadline, v, without_allowance(options));
    }
    pace = iteration_samples(plans, out.lead_plan ? out.lead_plan->frequencies : target.frequencies, v, options);
    // Measured together, the pace setters and the others ran later than predicted: the straggler's
    // slowdown, estimated from a few rounds, was too high, or the noise is larger than modelled.
    // The others are paced as if the straggler ended that much sooner.
    for (double& t : pace) t /= c.pace_miss;
  }
  double pace_time = 0;
  for (double t : pace) pace_time += t / static_cast<double>(pace.size());
  const double to_nominal = plan_choice::NoiseSeam(plans, v, target_options(c)).to_noisy;
  // A power budget's pace slower than the pace setters': every pipeline, the pace setters too, runs
  // the cheapest plan on its GPUs that finishes by it.
  if (c.budget_pace && *c.budget_pace * to_nominal > pace_time) {
    lead.clear();
    out.lead_plan.reset();
    pace_time = *c.budget_pace * to_nominal;
    pace.clear();
  }
  // The others, in groups of about equal pace, each group's plan chosen on its pipelines' GPUs.
  out.pace_of.assign(D, -1);
  if (out.lead_plan)
    for (std::size_t d : lead) out.pace_of[d] = Assignment::kLeadPlan;
  std::map<long, std::vector<std::size_t>> groups;
  std::size_t draws_alike = 0;
  for (std::size_t d = 0; d < D; ++d) {
    if (std::find(lead.begin(), lead.end(), d) != lead.end()) continue;
    groups[static_cast<long>(std::floor(std::log(slowest / top[d]) / std::log1p(kBin)))].push_back(d);
  }
  if (c.unpaced) groups.clear();
  if (!lead.empty()) {  // those at about the pace setters' pace: a plan each
    draws_alike = std::max<std::size_t>(lead_options(c, lead, top, true).speeds.size(), 2);
    std::map<long, std::vector<std::size_t>> regrouped;
    for (auto& [bin, members] : groups)
      for (std::size_t d : members)
        regrouped[top[d] * (1 + kAlikePace) >= slowest ? -1 - static_cast<long>(d) : bin].push_back(d);
    groups = std::move(regrouped);
  }
  // Each faster group may end the iteration a little later than at all-max; together, no more than the allowance.
  const auto faster_groups = static_cast<std::size_t>(
      std::count_if(groups.begin(), groups.end(), [](const auto& group) { return group.first >= 0; }));
  for (const auto& [bin, members] : groups) {
    NoiseAwareOptions o = options_for(c, members, true);
    double deadline = pace_time;
    std::optional<double> later;  // a deadline that allows its share of kPaceAllowance
    if (bin < 0 && !o.speeds.empty()) {
      while (o.speeds.size() < draws_alike) o.speeds.push_back(o.speeds.front());
      // At about the pace setters' pace but slower than their plan under the noise at all-max (GPUs
      // slow where that plan keeps no slack): the iteration would end that late at all-max too, which
      // is the reference's doing. Held to the pace setters' plan alone, nothing but all-max met it.
      deadline = std::max(deadline, expected_time(plans, all, v, o));
    } else {
      o.competitor = pace;
      // Their GPUs' noise is their own: drawn as the pace setters' (the same seed), a plan at about
      // their pace would end no later than they do in every draw, and the others would be paced as
      // close as the model allows, where in truth the later of two independent draws ends the iteration.
      o.seed = pace_seed + 1 + out.paced.size();
      // In some draws they end the iteration even at all-max (all the more where they run about the
      // pace setters' pace): that is the reference's, not their plan's doing.
      deadline = std::max(deadline, expected_time(plans, all, v, o));
      if (out.straggler) deadline *= 1 + kPaceAllowance;
      else later = deadline * (1 + kPaceAllowance / static_cast<double>(std::max<std::size_t>(faster_groups, 1)));
    }
    ChosenPlan plan = choose_plan_under_noise(plans, deadline, v, o);
    if (later) {
      ChosenPlan allowed = choose_plan_under_noise(plans, *later, v, o);
      if (pays_for_its_time(plans, plan, allowed, members.size(), D)) plan = std::move(allowed);
    }
    plan.time /= to_nominal > 0 ? to_nominal : 1.0;
    for (std::size_t d : members) out.pace_of[d] = static_cast<int>(out.paced.size());
    out.paced.push_back(std::move(plan));
  }
  // What each pipeline is expected to take on its plan without a straggler (detection's yardstick).
  out.predicted.assign(D, 0);
  for (std::size_t d = 0; d < D; ++d) {
    const int i = out.pace_of[d];
    const ChosenPlan& plan = i == Assignment::kLeadPlan ? *out.lead_plan
                             : i >= 0                   ? out.paced[static_cast<std::size_t>(i)]
                                                        : target;
    out.predicted[d] = time_on(c, d, plan.frequencies, false);
  }
  if (out.straggler && !out.straggler->told && out.straggler->pipeline)
    out.straggler->compute_time =
        out.predicted[static_cast<std::size_t>(*out.straggler->pipeline)] * out.straggler->slowdown;
  return out;
}

}  // namespace perseus::online::choice
