#include "perseus/plan/frontier_record.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <system_error>
#include <nlohmann/json.hpp>
#include <type_traits>

#include "perseus/solver/exact_times.hpp"
#include "perseus/util/atomic_file.hpp"
#include "perseus/util/csv.hpp"
#include "perseus/util/error.hpp"
#include "perseus/util/safe_text.hpp"

namespace perseus {

using nlohmann::json;

namespace {

constexpr const char* kFrontierHeader =
    "index,time,energy,quant_time,cost_change,effective_cost,profile_energy,emulated_time,emulated_energy,dominated";
constexpr const char* kOldFrontierHeader = "index,time,energy,quant_time,cost_change,effective_cost,profile_energy";

std::vector<std::vector<Instruction>> layout_of(ScheduleKind schedule, int num_stages, int num_microbatches,
                                                const std::vector<int>& extra_forwards, int virtual_stages) {
  std::vector<std::vector<Instruction>> result;
  for (int s = 0; s < num_stages; ++s) {
    result.push_back(stage_schedule(schedule, s, num_stages, num_microbatches,
                                    extra_forwards.empty() ? 0 : extra_forwards[s], virtual_stages));
  }
  return result;
}

}  // namespace

std::vector<std::vector<Instruction>> FrontierRecord::stage_instructions() const {
  return layout_of(schedule, num_stages, num_microbatches, extra_forwards, virtual_stages);
}

std::vector<std::vector<Instruction>> Plan::stage_instructions() const {
  return layout_of(schedule, num_stages, num_microbatches, extra_forwards, virtual_stages);
}

FrontierRecord make_frontier_record(const PlanningProblem& problem, const Frontier& frontier, const RecordInfo& info) {
  const auto& dag = problem.dag;
  FrontierRecord record;
  record.profile = info.profile;
  record.cost_model = info.cost_model;
  record.recompute = info.recompute;
  record.shape() = dag.shape();
  record.unit_time = problem.unit_time;
  record.p_block = problem.p_block;
  record.stop_reason = frontier.stop_text();
  record.interrupted = frontier.interrupted;
  record.fastest_fitted = frontier.fastest_fitted;
  record.start_quant_time = frontier.start_quant_time;
  for (const auto& spec : problem.specs) {
    record.model_descriptions.push_back(spec.model ? spec.model->name() + ": " + spec.model->describe()
                                                   : "none: the schedule runs no such instruction");
    record.model_fallbacks.push_back(spec.fallback);
  }

  // (stage, slot) of every instruction node
  std::vector<std::pair<int, int>> position(dag.instructions.size());
  for (int s = 0; s < dag.num_stages; ++s) {
    for (std::size_t k = 0; k < dag.stage_nodes[s].size(); ++k) {
      position[dag.stage_nodes[s][k]] = {s, static_cast<int>(k)};
    }
  }
  std::vector<int> durations = frontier.start_durations;
  double option_energy = 0;  // sum of the assigned options' effective energies
  for (std::size_t i = 0; i < durations.size(); ++i) {
    option_energy += problem.spec_of(static_cast<int>(i)).options.option_for(durations[i]).effective_energy;
  }
  record.start_durations.resize(dag.num_stages);
  record.start_frequencies.resize(dag.num_stages);
  for (int s = 0; s < dag.num_stages; ++s) {
    for (int node : dag.stage_nodes[s]) {
      record.start_durations[s].push_back(durations[node]);
      record.start_frequencies[s].push_back(problem.spec_of(node).options.knob_for(durations[node]));
    }
  }
  const double blocking = dag.num_stages * problem.p_block;
  // Emulated times: the frontier's (plan_frontier computes them), or computed here as the points go.
  std::optional<ExactTimes> exact;
  if (!frontier.points.empty() && std::isnan(frontier.points.front().exact_time))
    exact.emplace(problem, frontier.start_durations);
  for (std::size_t p = 0; p < frontier.points.size(); ++p) {
    const auto& point = frontier.points[p];
    std::vector<SlotChange> changes;
    for (std::size_t c = point.changes_begin; c < frontier.changes_end(p); ++c) {
      const auto& change = frontier.changes[c];
      const auto& options = problem.spec_of(change.instruction).options;
      option_energy += options.option_for(change.duration).effective_energy -
                       options.option_for(durations[change.instruction]).effective_energy;
      durations[change.instruction] = change.duration;
      if (exact) exact->set_duration(change.instruction, change.duration);
      const auto [stage, slot] = position[change.instruction];
      changes.push_back({stage, slot, change.duration, options.knob_for(change.duration)});
    }
    RecordedPoint recorded;
    recorded.quant_time = point.quant_time;
    recorded.time = point.quant_time * problem.unit_time;
    // The reference's "refined cost": cost + num_stages * real_time * p_p2p, in that order.
    recorded.energy = point.effective_cost + dag.num_stages * recorded.time * problem.p_block;
    recorded.cost_change = point.cost_change;
    recorded.effective_cost = point.effective_cost;
    recorded.profile_energy = option_energy + blocking * recorded.time;
    recorded.emulated_time = exact ? exact->time() : point.exact_time;
    recorded.emulated_energy = exact ? exact->energy() : point.exact_energy;
    record.points.push_back(recorded);
    record.changes.push_back(std::move(changes));
  }
  mark_dominated(record);
  return record;
}

namespace {

// Which model each (stage, instruction) got, from the descriptions ("exp: ...", in spec order).
json per_operation_models(const FrontierRecord& record) {
  json out = json::array();
  for (std::size_t i = 0; i < record.model_descriptions.size(); ++i) {
    const auto& text = record.model_descriptions[i];
    if (text.rfind("none:", 0) == 0) continue;
    json entry = {{"stage", i / kNumInstructionKinds},
                  {"instruction", to_string(kAllInstructionKinds[i % kNumInstructionKinds])},
                  {"model", text.substr(0, text.find(':'))}};
    if (i < record.model_fallbacks.size() && !record.model_fallbacks[i].empty())
      entry["fallback"] = record.model_fallbacks[i];
    out.push_back(std::move(entry));
  }
  return out;
}

}  // namespace

namespace {

json nested(const std::vector<std::vector<int>>& values) { return json(values); }

}  // namespace

void write_frontier_record(const FrontierRecord& record, const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir)) {
    throw Error(fmt::format("cannot create output directory '{}'", dir.string()), ErrorKind::cannot_write);
  }
  {
    AtomicFile file(dir / "frontier.csv");
    auto& out = file.stream();
    out << kFrontierHeader << "\n";
    for (std::size_t i = 0; i < record.points.size(); ++i) {
      const auto& p = record.points[i];
      out << fmt::format("{},{},{},{},{},{},{},{},{},{}\n", i, p.time, p.energy, p.quant_time, p.cost_change,
                         p.effective_cost, p.profile_energy, p.emulated_time, p.emulated_energy, p.dominated ? 1 : 0);
    }
    file.commit();
  }
  {
    AtomicFile file(dir / "iteration_time_energy.csv");
    file.stream() << "time,energy\n";
    for (const auto& p : record.points) file.stream() << fmt::format("{},{}\n", p.time, p.energy);
    file.commit();
  }
  {
    AtomicFile file(dir / "plan_changes.csv");
    file.stream() << "point,stage,slot,duration,frequency\n";
    for (std::size_t i = 0; i < record.changes.size(); ++i) {
      for (const auto& c : record.changes[i]) {
        file.stream() << fmt::format("{},{},{},{},{}\n", i, c.stage, c.slot, c.duration, c.frequency);
      }
    }
    file.commit();
  }
  json meta = {
      {"format", "perseus-frontier/1"},
      {"profile", record.profile},
      {"num_stages", record.num_stages},
      {"num_microbatches", record.num_microbatches},
      {"schedule", to_string(record.schedule)},
      {"extra_forwards", record.extra_forwards},
      {"virtual_stages", record.virtual_stages},
      {"unit_time", record.unit_time},
      {"p2p_power", record.p_block},
      {"cost_model", record.cost_model},
      {"recompute", record.recompute},
      {"num_points", record.points.size()},
      {"stop_reason", record.stop_reason},
      {"interrupted", record.interrupted},
      {"fastest_fitted", record.fastest_fitted},
      {"models", record.model_descriptions},
      {"cost_models", per_operation_models(record)},
      {"start",
       {{"quant_time", record.start_quant_time},
        {"durations", nested(record.start_durations)},
        {"frequencies", nested(record.start_frequencies)}}},
  };
  write_file_atomic(dir / "plans.json", meta.dump(1) + "\n");
}

namespace {

// Every number in `value` (a number or nested lists) an integer that fits an int: 1e12 or 2.5 is
// an error, not a conversion (which would be undefined).
bool ints_only(const json& value) {
  if (value.is_array()) return std::all_of(value.begin(), value.end(), ints_only);
  if (value.is_number_unsigned()) return value.get<std::uint64_t>() <= std::numeric_limits<int>::max();
  if (value.is_number_integer())
    return value.get<std::int64_t>() >= std::numeric_limits<int>::min() &&
           value.get<std::int64_t>() <= std::numeric_limits<int>::max();
  return false;
}

template <typename T>
T field(const json& object, const char* name, const std::string& file) {
  if (!object.contains(name)) throw InputError(file, 0, name, "missing");
  constexpr bool integers =
      std::is_same_v<T, int> || std::is_same_v<T, std::vector<int>> || std::is_same_v<T, std::vector<std::vector<int>>>;
  if constexpr (integers)
    if (!ints_only(object.at(name)))
      throw InputError(file, 0, name,
                       fmt::format("must hold whole numbers that fit an int, got {}", describe_json(object.at(name))));
  try {
    return object.at(name).get<T>();
  } catch (const json::exception&) {
    throw InputError(file, 0, name, "has the wrong type");
  }
}

std::vector<std::vector<std::string_view>> read_rows(const std::string& text, const std::string& file,
                                                     const std::string& header, std::vector<std::size_t>& lines) {
  LineReader reader(text);
  std::string_view line;
  if (!reader.next(line) || trim(line) != header) {
    throw InputError(file, 1, "", fmt::format("expected header '{}'", header));
  }
  const std::size_t columns = split_csv_line(header).size();
  std::vector<std::vector<std::string_view>> rows;
  while (reader.next(line)) {
    if (trim(line).empty()) continue;
    auto fields = split_csv_line(line);
    if (fields.size() != columns) {
      throw InputError(file, reader.line_number(), "", fmt::format("expected {} fields", columns));
    }
    rows.push_back(std::move(fields));
    lines.push_back(reader.line_number());
  }
  return rows;
}

long long int_field(std::string_view text, const std::string& file, std::size_t line, const char* name) {
  const auto value = parse_integer(text);
  if (!value) throw InputError(file, line, name, fmt::format("'{}' is not an integer", text));
  return *value;
}

double number_field(std::string_view text, const std::string& file, std::size_t line, const char* name) {
  const auto value = parse_double(text);
  if (!value || !std::isfinite(*value)) throw InputError(file, line, name, fmt::format("'{}' is not a number", text));
  return *value;
}

}  // namespace

FrontierRecord read_frontier_record(const std::filesystem::path& dir) {
  FrontierRecord record;
  const std::string meta_file = (dir / "plans.json").string();
  std::error_code error;
  if (!std::filesystem::is_directory(dir, error))
    throw Error(
        fmt::format("'{}' is no folder: give the folder `perseus optimize` wrote its frontier to", dir.string()),
        ErrorKind::not_found);
  if (!std::filesystem::exists(meta_file, error))
    throw Error(fmt::format("'{}' is no `perseus optimize` output: it has no plans.json (an optimize run writes "
                            "plans.json, frontier.csv and a plan file per frontier point into its output folder)",
                            dir.string()),
                ErrorKind::not_found);
  json meta;
  try {
    const std::string text = read_file(meta_file);
    check_json_depth(text);
    meta = json::parse(text);
  } catch (const JsonTooDeep& e) {
    throw InputError(meta_file, 0, "", fmt::format("not usable JSON ({})", e.what()));
  } catch (const json::parse_error& e) {
    throw InputError(meta_file, 0, "", fmt::format("not valid JSON ({})", e.what()));
  }
  record.profile = field<std::string>(meta, "profile", meta_file);
  record.num_stages = field<int>(meta, "num_stages", meta_file);
  record.num_microbatches = field<int>(meta, "num_microbatches", meta_file);
  const auto schedule = parse_schedule_kind(field<std::string>(meta, "schedule", meta_file));
  if (!schedule) throw InputError(meta_file, 0, "schedule", "must be one of " + schedule_names());
  record.schedule = *schedule;
  if (meta.contains("virtual_stages")) record.virtual_stages = field<int>(meta, "virtual_stages", meta_file);
  if (meta.contains("extra_forwards")) {
    record.extra_forwards = field<std::vector<int>>(meta, "extra_forwards", meta_file);
  }
  record.unit_time = field<double>(meta, "unit_time", meta_file);
  record.p_block = field<double>(meta, "p2p_power", meta_file);
  record.cost_model = field<std::string>(meta, "cost_model", meta_file);
  if (meta.contains("recompute")) record.recompute = field<bool>(meta, "recompute", meta_file);
  record.stop_reason = field<std::string>(meta, "stop_reason", meta_file);
  record.interrupted = field<bool>(meta, "interrupted", meta_file);
  if (meta.contains("fastest_fitted")) record.fastest_fitted = field<bool>(meta, "fastest_fitted", meta_file);
  record.model_descriptions = field<std::vector<std::string>>(meta, "models", meta_file);
  const json start = field<json>(meta, "start", meta_file);
  record.start_quant_time = field<int>(start, "quant_time", meta_file);
  record.start_durations = field<std::vector<std::vector<int>>>(start, "durations", meta_file);
  record.start_frequencies = field<std::vector<std::vector<int>>>(start, "frequencies", meta_file);
  if (record.num_stages < 1 || record.num_microbatches < 1) {
    throw InputError(meta_file, 0, "num_stages", "stages and microbatches must be at least 1");
  }
  try {
    check_extra_forwards(record.schedule, record.extra_forwards, record.num_stages, record.num_microbatches);
  } catch (const Error& e) {
    throw InputError(meta_file, 0, "extra_forwards", e.what());
  }
  try {
    check_schedule_shape(record.schedule, record.num_stages, record.num_microbatches, record.virtual_stages);
  } catch (const Error& e) {
    throw InputError(meta_file, 0, "virtual_stages", e.what());
  }
  const auto layout = record.stage_instructions();
  if (record.start_frequencies.size() != layout.size() || record.start_durations.size() != layout.size()) {
    throw InputError(meta_file, 0, "start", "needs one list per stage");
  }
  for (std::size_t s = 0; s < layout.size(); ++s) {
    if (record.start_frequencies[s].size() != layout[s].size() ||
        record.start_durations[s].size() != layout[s].size()) {
      throw InputError(meta_file, 0, "start", fmt::format("stage {} needs {} entries", s, layout[s].size()));
    }
  }

  const std::string frontier_file = (dir / "frontier.csv").string();
  const std::string frontier_text = read_file(frontier_file);
  std::vector<std::size_t> lines;
  // A record written before the emulated columns has the first seven only. `dominated` is computed
  // again from the times and energies (the column is for readers of the CSV).
  const bool emulated = frontier_text.rfind(std::string(kFrontierHeader) + "\n", 0) == 0 ||
                        frontier_text.rfind(std::string(kFrontierHeader) + "\r\n", 0) == 0;
  const auto rows = read_rows(frontier_text, frontier_file,
                              emulated ? std::string(kFrontierHeader) : std::string(kOldFrontierHeader), lines);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    if (int_field(r[0], frontier_file, lines[i], "index") != static_cast<long long>(i)) {
      throw InputError(frontier_file, lines[i], "index", fmt::format("expected {}", i));
    }
    RecordedPoint p;
    p.time = number_field(r[1], frontier_file, lines[i], "time");
    p.energy = number_field(r[2], frontier_file, lines[i], "energy");
    p.quant_time = static_cast<int>(int_field(r[3], frontier_file, lines[i], "quant_time"));
    p.cost_change = number_field(r[4], frontier_file, lines[i], "cost_change");
    p.effective_cost = number_field(r[5], frontier_file, lines[i], "effective_cost");
    p.profile_energy = number_field(r[6], frontier_file, lines[i], "profile_energy");
    p.emulated_time = emulated ? number_field(r[7], frontier_file, lines[i], "emulated_time") : std::nan("");
    p.emulated_energy = emulated ? number_field(r[8], frontier_file, lines[i], "emulated_energy") : std::nan("");
    if (emulated && r[9] != "0" && r[9] != "1")
      throw InputError(frontier_file, lines[i], "dominated", "must be 0 or 1");
    record.points.push_back(p);
  }
  mark_dominated(record);
  record.changes.resize(record.points.size());

  const std::string changes_file = (dir / "plan_changes.csv").string();
  const std::string changes_text = read_file(changes_file);
  lines.clear();
  const auto change_rows = read_rows(changes_text, changes_file, "point,stage,slot,duration,frequency", lines);
  for (std::size_t i = 0; i < change_rows.size(); ++i) {
    const auto& r = change_rows[i];
    const auto point = int_field(r[0], changes_file, lines[i], "point");
    SlotChange c;
    c.stage = static_cast<int>(int_field(r[1], changes_file, lines[i], "stage"));
    c.slot = static_cast<int>(int_field(r[2], changes_file, lines[i], "slot"));
    c.duration = static_cast<int>(int_field(r[3], changes_file, lines[i], "duration"));
    c.frequency = static_cast<int>(int_field(r[4], changes_file, lines[i], "frequency"));
    if (point < 0 || point >= static_cast<long long>(record.points.size())) {
      throw InputError(changes_file, lines[i], "point", "no such frontier point in frontier.csv");
    }
    if (c.stage < 0 || c.stage >= record.num_stages || c.slot < 0 ||
        c.slot >= static_cast<int>(layout[c.stage].size())) {
      throw InputError(changes_file, lines[i], "slot", "outside the pipeline schedule");
    }
    record.changes[point].push_back(c);
  }
  return record;
}

Plan plan_at(const FrontierRecord& record, std::size_t index) {
  if (index >= record.points.size()) {
    throw Error(fmt::format("plan index {} is out of range: the frontier has {} points", index, record.points.size()),
                ErrorKind::bad_setting);
  }
  Plan plan;
  plan.shape() = record.shape();
  plan.frequencies = record.start_frequencies;
  advance_plan(record, plan, index);
  return plan;
}

void advance_plan(const FrontierRecord& record, Plan& plan, std::size_t index) {
  const std::size_t first = plan.index ? *plan.index + 1 : 0;
  for (std::size_t p = first; p <= index; ++p) {
    for (const auto& c : record.changes[p]) plan.frequencies[c.stage][c.slot] = c.frequency;
  }
  const auto& point = record.points[index];
  plan.index = index;
  plan.time = point.time;
  plan.energy = point.energy;
  plan.emulated_time = point.has_emulated() ? std::optional<double>(point.emulated_time) : std::nullopt;
  plan.emulated_energy = point.has_emulated() ? std::optional<double>(point.emulated_energy) : std::nullopt;
  plan.cost_change = point.cost_change;
  plan.effective_cost = point.effective_cost;
}

std::optional<std::size_t> cheapest_within(const FrontierRecord& record, double deadline) {
  std::optional<std::size_t> best;
  for (std::size_t i = 0; i < record.points.size(); ++i) {
    const auto& p = record.points[i];
    // Tolerate the rounding of a deadline typed from a time shown (10 significant digits).
    if (p.shown_time() > deadline + 1e-9 * std::max(1.0, deadline)) continue;
    if (!best || p.shown_energy() < record.points[*best].shown_energy() ||
        (p.shown_energy() == record.points[*best].shown_energy() && p.shown_time() < record.points[*best].shown_time()))
      best = i;
  }
  return best;
}

std::size_t fastest_point(const FrontierRecord& record) {
  std::size_t best = 0;
  for (std::size_t i = 1; i < record.points.size(); ++i)
    if (record.points[i].shown_time() <= record.points[best].shown_time()) best = i;
  return best;
}

std::vector<bool> dominated_points(const std::vector<std::pair<double, double>>& points) {
  std::vector<std::size_t> order(points.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return points[a] < points[b]; });
  // By time, then energy: a point is dominated by a faster one at most as costly, or by one as fast
  // and cheaper (the first of its time, where that one is cheaper).
  std::vector<bool> dominated(points.size(), false);
  double cheapest_faster = std::numeric_limits<double>::infinity();
  for (std::size_t k = 0; k < order.size();) {
    std::size_t end = k;
    while (end < order.size() && points[order[end]].first == points[order[k]].first) ++end;
    const double cheapest_here = points[order[k]].second;
    for (std::size_t j = k; j < end; ++j) {
      const double energy = points[order[j]].second;
      dominated[order[j]] = cheapest_faster <= energy || cheapest_here < energy;
    }
    cheapest_faster = std::min(cheapest_faster, cheapest_here);
    k = end;
  }
  return dominated;
}

void mark_dominated(FrontierRecord& record) {
  std::vector<std::pair<double, double>> points;
  points.reserve(record.points.size());
  for (const auto& p : record.points) points.emplace_back(p.shown_time(), p.shown_energy());
  const auto dominated = dominated_points(points);
  for (std::size_t i = 0; i < record.points.size(); ++i) record.points[i].dominated = dominated[i];
}

std::size_t cheapest_point(const FrontierRecord& record) {
  std::size_t best = 0;
  for (std::size_t i = 1; i < record.points.size(); ++i) {
    const auto &p = record.points[i], &b = record.points[best];
    if (p.shown_energy() < b.shown_energy() ||
        (p.shown_energy() == b.shown_energy() && p.shown_time() < b.shown_time()))
      best = i;
  }
  return best;
}

}  // namespace perseus
