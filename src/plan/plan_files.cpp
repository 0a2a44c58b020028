#include "perseus/plan/plan_files.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <limits>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <nlohmann/json.hpp>

#include "perseus/util/atomic_file.hpp"
#include "perseus/util/csv.hpp"
#include "perseus/util/error.hpp"
#include "perseus/util/safe_text.hpp"

namespace perseus {

using nlohmann::json;

std::string plan_to_json(const Plan& plan) {
  json instructions = json::array();
  const auto layout = plan.stage_instructions();
  for (int s = 0; s < plan.num_stages; ++s) {
    json names = json::array();
    for (const auto& inst : layout[s]) {
      names.push_back(short_name(inst, plan.virtual_stages));
    }
    instructions.push_back(std::move(names));
  }
  // time and energy: what the plan takes on the profile (emulated) where known; planned_*: the
  // planner's quantized time and model energy.
  json out = {{"format", "perseus-plan/1"},
              {"time", plan.emulated_time.value_or(plan.time)},
              {"energy", plan.emulated_energy.value_or(plan.energy)},
              {"planned_time", plan.time},
              {"planned_energy", plan.energy},
              {"num_stages", plan.num_stages},
              {"num_microbatches", plan.num_microbatches},
              {"schedule", to_string(plan.schedule)},
              {"extra_forwards", plan.extra_forwards},
              {"virtual_stages", plan.virtual_stages},
              {"frequencies", plan.frequencies},
              {"instructions", instructions}};
  if (plan.index) out["index"] = *plan.index;
  return out.dump(1) + "\n";
}

std::string plan_to_text(const Plan& plan) {
  const auto layout = plan.stage_instructions();
  std::string text;
  for (std::size_t s = 0; s < layout.size() && s < plan.frequencies.size(); ++s) {
    text += fmt::format("stage {}:", s);
    for (std::size_t k = 0; k < layout[s].size() && k < plan.frequencies[s].size(); ++k) {
      const auto& inst = layout[s][k];
      text += fmt::format(" {}@{}", short_name(inst, plan.virtual_stages), plan.frequencies[s][k]);
    }
    text += "\n";
  }
  return text;
}

namespace {

// A Python list literal, one stage's items per line, then comment lines.
template <typename StageItems>
std::string python_plan_file(std::size_t stages, StageItems items, const std::vector<std::string>& comments) {
  std::string text = "[\n";
  for (std::size_t s = 0; s < stages; ++s) text += fmt::format("[{}],\n", fmt::join(items(s), ", "));
  text += "]\n";
  for (const auto& line : comments) text += line + "\n";
  return text;
}

}  // namespace

std::string plan_to_python(const Plan& plan, std::size_t iteration) {
  const std::string prefix = fmt::format("# Iteration {}: ", iteration);
  return python_plan_file(plan.frequencies.size(), [&](std::size_t s) { return plan.frequencies[s]; },
                          {prefix + "cost change " + python_float(plan.cost_change) + " ",
                           prefix + "total cost " + python_float(plan.effective_cost) + " ",
                           prefix + "refined cost " + python_float(plan.energy) + " "});
}

std::string plan_to_zeus(const Plan& plan, std::size_t iteration) {
  const auto layout = plan.stage_instructions();
  auto pairs = [&](std::size_t s) {
    std::vector<std::string> out;
    for (std::size_t k = 0; k < plan.frequencies[s].size() && s < layout.size() && k < layout[s].size(); ++k)
      out.push_back(fmt::format("('{}', {})", to_string(layout[s][k].kind), plan.frequencies[s][k]));
    return out;
  };
  const std::string prefix = fmt::format("# Iteration {} ", iteration);
  return python_plan_file(plan.frequencies.size(), pairs,
                          {prefix + "cost change: " + python_float(plan.cost_change),
                           prefix + "total cost: " + python_float(plan.effective_cost),
                           prefix + "total cost with P2P: " + python_float(plan.energy)});
}

namespace {

// Recursive-descent reader for `[[int, ...], ...]` (the artifact's) and `[[('forward', int), ...],
// ...]` (Zeus's), with Python's optional trailing commas and either quote.
class ListParser {
 public:
  ListParser(const std::string& text, const std::string& source) : text_(text), source_(source) {}

  void parse(PlanFile& plan) {
    expect('[');
    skip();
    while (peek() != ']') {
      parse_stage(plan);
      skip();
      if (peek() == ',') {
        ++pos_;
        skip();
      } else if (peek() != ']') fail("expected ',' or ']' after a stage's list");
    }
    ++pos_;
    skip();
    if (pos_ != text_.size()) fail("unexpected text after the plan's list");
    if (!plan.instructions.empty() && plan.instructions.size() != plan.frequencies.size())
      fail("every stage must list (instruction, clock) tuples, or every stage plain clocks");
  }

 private:
  void parse_stage(PlanFile& plan) {
    std::vector<int> clocks;
    std::vector<std::string> names;
    expect('[');
    skip();
    while (peek() != ']') {
      if (peek() == '(') {
        ++pos_;
        skip();
        names.push_back(parse_name());
        expect(',');
        skip();
        clocks.push_back(parse_clock());
        skip();
        if (peek() == ',') {
          ++pos_;
          skip();
        }
        expect(')');
      } else {
        clocks.push_back(parse_clock());
      }
      if (!names.empty() && names.size() != clocks.size())
        fail("a stage mixes plain clocks and (instruction, clock) tuples");
      skip();
      if (peek() == ',') {
        ++pos_;
        skip();
      } else if (peek() != ']') fail("expected ',' or ']' in a stage's list");
    }
    ++pos_;
    if (!names.empty()) {
      if (plan.instructions.size() != plan.frequencies.size())
        fail("every stage must list (instruction, clock) tuples, or every stage plain clocks");
      plan.instructions.push_back(std::move(names));
    }
    plan.frequencies.push_back(std::move(clocks));
  }
  int parse_clock() {
    const std::size_t start = pos_;
    while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) ++pos_;
    if (start == pos_) fail("expected a clock (a positive integer)");
    const auto value = parse_integer(std::string_view(text_).substr(start, pos_ - start));
    if (!value || *value <= 0 || *value > 1000000) fail("clock out of range");
    return static_cast<int>(*value);
  }
  std::string parse_name() {
    const char quote = peek();
    if (quote != '\'' && quote != '"') fail("expected 'forward' or 'backward'");
    const std::size_t start = ++pos_;
    while (pos_ < text_.size() && text_[pos_] != quote && text_[pos_] != '\n') ++pos_;
    std::string name = text_.substr(start, pos_ - start);
    if (pos_ >= text_.size() || text_[pos_] != quote) fail("unterminated string");
    ++pos_;
    if (!parse_instruction_kind(name))
      fail(fmt::format("instruction '{}' is not forward, backward, backward_input, backward_weight or forward_backward",
                       safe_text(name)));
    return name;
  }
  // Whitespace and comments (which run to the end of their line) are skipped.
  void skip() {
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == '#') {
        while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
      } else if (std::isspace(static_cast<unsigned char>(c))) {
        ++pos_;
      } else {
        return;
      }
    }
  }
  char peek() {
    if (pos_ >= text_.size()) fail("unexpected end of file");
    return text_[pos_];
  }
  void expect(char c) {
    skip();
    if (peek() != c) fail(fmt::format("expected '{}'", c));
    ++pos_;
  }
  [[noreturn]] void fail(const std::string& problem) {
    const std::size_t line =
        1 + static_cast<std::size_t>(std::count(text_.begin(), text_.begin() + std::min(pos_, text_.size()), '\n'));
    throw InputError(source_, line, "",
                     problem +
                         " (a plan file holds only a list of per-stage lists of clocks or of "
                         "(instruction, clock) tuples, and comments)");
  }

  const std::string& text_;
  const std::string& source_;
  std::size_t pos_ = 0;
};

std::optional<double> comment_value(const std::string& text, const std::string& key) {
  LineReader reader(text);
  std::string_view line;
  while (reader.next(line)) {
    line = trim(line);
    if (line.empty() || line.front() != '#') continue;
    const auto at = line.find(key);
    if (at == std::string_view::npos) continue;
    return parse_double(line.substr(at + key.size()));
  }
  return std::nullopt;
}

}  // namespace

PlanFile parse_python_plan(const std::string& text, const std::string& source) {
  PlanFile plan;
  ListParser(text, source).parse(plan);
  if (plan.frequencies.empty()) throw InputError(source, 1, "", "the plan lists no stages");
  if (plan.instructions.empty()) {  // the artifact's comments: "# Iteration N: cost change X "
    plan.cost_change = comment_value(text, ": cost change ");
    plan.total_cost = comment_value(text, ": total cost ");
    plan.refined_cost = comment_value(text, ": refined cost ");
  } else {  // Zeus's: "# Iteration N cost change: X"
    plan.cost_change = comment_value(text, " cost change: ");
    plan.total_cost = comment_value(text, " total cost: ");
    plan.energy = comment_value(text, " total cost with P2P: ");
  }
  return plan;
}

namespace {

// What a JSON plan says of its shape must be what it holds: num_stages its stage lists, and
// instructions (as plan_to_json writes them) one name per clock, the very names of its schedule.
// Every stage runs at least one instruction per microbatch, so num_microbatches is at most a
// stage's clock count (which also bounds the schedule built to compare against).
void check_json_plan_shape(const json& doc, const PlanFile& plan, const std::string& source) {
  const auto stages = plan.frequencies.size();
  if (doc.contains("num_stages")) {
    const json& n = doc["num_stages"];
    if (!n.is_number_integer() || n.get<std::int64_t>() != static_cast<std::int64_t>(stages))
      throw InputError(source, 0, "num_stages",
                       fmt::format("{} but the plan lists {} stages in 'frequencies'", describe_json(n), stages));
  }
  if (plan.num_microbatches) {
    for (std::size_t s = 0; s < stages; ++s)
      if (static_cast<std::size_t>(*plan.num_microbatches) > plan.frequencies[s].size())
        throw InputError(source, 0, "num_microbatches",
                         fmt::format("{} microbatches, but stage {} runs only {} instructions (at least one per "
                                     "microbatch)",
                                     *plan.num_microbatches, s, plan.frequencies[s].size()));
  }
  if (!doc.contains("instructions")) return;
  const json& names = doc["instructions"];
  if (!names.is_array() || names.size() != stages)
    throw InputError(source, 0, "instructions", fmt::format("must be {} lists of names, one per stage", stages));
  std::vector<std::vector<std::string>> expected;
  if (plan.schedule && plan.num_microbatches) {
    Plan shape;
    shape.num_stages = static_cast<int>(stages);
    shape.num_microbatches = *plan.num_microbatches;
    shape.schedule = *plan.schedule;
    shape.extra_forwards = plan.extra_forwards;
    shape.virtual_stages = plan.virtual_stages;
    try {
      check_schedule_shape(shape.schedule, shape.num_stages, shape.num_microbatches, shape.virtual_stages);
      check_extra_forwards(shape.schedule, shape.extra_forwards, shape.num_stages, shape.num_microbatches);
      for (const auto& stage : shape.stage_instructions()) {
        expected.emplace_back();
        for (const auto& inst : stage) expected.back().push_back(short_name(inst, shape.virtual_stages));
      }
    } catch (const Error& e) {
      throw InputError(source, 0, "schedule", e.what());
    }
  }
  for (std::size_t s = 0; s < stages; ++s) {
    const std::string where = fmt::format("instructions[{}]", s);
    if (!names[s].is_array() || names[s].size() != plan.frequencies[s].size())
      throw InputError(
          source, 0, where,
          fmt::format("must list one name per clock of frequencies[{}] ({})", s, plan.frequencies[s].size()));
    for (std::size_t k = 0; k < names[s].size(); ++k) {
      const json& name = names[s][k];
      bool same = name.is_string() && (expected.empty() ? !name.get_ref<const std::string&>().empty()
                                                        : s < expected.size() && k < expected[s].size() &&
                                                              name.get_ref<const std::string&>() == expected[s][k]);
      if (!same)
        throw InputError(
            source, 0, fmt::format("{}[{}]", where, k),
            expected.empty()
                ? fmt::format("expected an instruction name, got {}", describe_json(name))
                : fmt::format("{} is not the plan's {} schedule's instruction here ({})", describe_json(name),
                              to_string(*plan.schedule),
                              s < expected.size() && k < expected[s].size() ? expected[s][k] : std::string("none")));
    }
  }
}

}  // namespace

PlanFile parse_json_plan(const std::string& text, const std::string& source) {
  json doc;
  try {
    check_json_depth(text);
    doc = json::parse(text);
  } catch (const JsonTooDeep& e) {
    throw InputError(source, 0, "", fmt::format("not usable JSON ({})", e.what()));
  } catch (const json::parse_error& e) {
    throw InputError(source, 0, "", fmt::format("not valid JSON ({})", e.what()));
  } catch (const json::exception& e) {  // e.g. a number too large for a double (found by fuzz_plan_json)
    throw InputError(source, 0, "", fmt::format("not usable JSON ({})", e.what()));
  }
  PlanFile plan;
  if (!doc.is_object() || !doc.contains("frequencies")) throw InputError(source, 0, "frequencies", "missing");
  if (doc.contains("format") && doc["format"] != "perseus-plan/1")
    throw InputError(source, 0, "format",
                     fmt::format("expected \"perseus-plan/1\", got {}", describe_json(doc["format"])));
  // Every clock a positive whole number of MHz that fits an int: 900.5 is an error, not 900.
  const json& stages = doc["frequencies"];
  if (!stages.is_array())
    throw InputError(source, 0, "frequencies", "must be a list of per-stage lists of integer clocks");
  for (std::size_t s = 0; s < stages.size(); ++s) {
    const std::string where = fmt::format("frequencies[{}]", s);
    if (!stages[s].is_array() || stages[s].empty())
      throw InputError(source, 0, where, "must be a non-empty list of integer clocks");
    std::vector<int> clocks;
    for (std::size_t i = 0; i < stages[s].size(); ++i) {
      const json& c = stages[s][i];
      bool whole = c.is_number_unsigned()
                       ? c.get<std::uint64_t>() <= 1000000u
                       : c.is_number_integer() && c.get<std::int64_t>() > 0 && c.get<std::int64_t>() <= 1000000;
      if (!whole || c.get<std::int64_t>() <= 0)
        throw InputError(source, 0, fmt::format("{}[{}]", where, i),
                         fmt::format("a clock must be a positive whole number of MHz, got {}", describe_json(c)));
      clocks.push_back(c.get<int>());
    }
    plan.frequencies.push_back(std::move(clocks));
  }
  if (plan.frequencies.empty()) throw InputError(source, 0, "frequencies", "lists no stages");
  // The planner's prediction: planned_* where the file has them (time and energy are then the
  // emulated ones), time and energy in files written before.
  for (const char* name : {"planned_time", "time"})
    if (!plan.time && doc.contains(name) && doc[name].is_number()) plan.time = doc[name].get<double>();
  for (const char* name : {"planned_energy", "energy"})
    if (!plan.energy && doc.contains(name) && doc[name].is_number()) plan.energy = doc[name].get<double>();
  if (doc.contains("schedule")) {
    const auto kind =
        doc["schedule"].is_string() ? parse_schedule_kind(doc["schedule"].get<std::string>()) : std::nullopt;
    if (!kind) throw InputError(source, 0, "schedule", "must be one of " + schedule_names());
    plan.schedule = kind;
  }
  if (doc.contains("extra_forwards")) {
    const json& extra = doc["extra_forwards"];
    auto bad_extra = [&] {
      return InputError(source, 0, "extra_forwards", "must be a list of integers, one per stage");
    };
    if (!extra.is_array()) throw bad_extra();
    for (const auto& e : extra) {
      if (!e.is_number_integer() || e.get<std::int64_t>() < 0 ||
          e.get<std::int64_t>() > std::numeric_limits<int>::max())
        throw bad_extra();
      plan.extra_forwards.push_back(e.get<int>());
    }
  }
  if (doc.contains("virtual_stages")) {
    const json& v = doc["virtual_stages"];
    if (!v.is_number_integer() || v.get<std::int64_t>() < 1 || v.get<std::int64_t>() > 1024)
      throw InputError(source, 0, "virtual_stages", "must be an integer in [1, 1024]");
    plan.virtual_stages = v.get<int>();
  }
  if (doc.contains("num_microbatches")) {
    const json& m = doc["num_microbatches"];
    if (!m.is_number_integer() || m.get<std::int64_t>() < 1 ||
        m.get<std::int64_t>() > std::numeric_limits<int>::max()) {
      throw InputError(source, 0, "num_microbatches", "must be a positive integer");
    }
    plan.num_microbatches = doc["num_microbatches"].get<int>();
  }
  check_json_plan_shape(doc, plan, source);
  return plan;
}

PlanFile read_plan_file(const std::filesystem::path& path) {
  const std::string text = read_file(path);
  if (path.extension() == ".json") return parse_json_plan(text, path.string());
  if (path.extension() == ".py") return parse_python_plan(text, path.string());
  throw Error(fmt::format("'{}': a plan file must end in .json or .py", path.string()), ErrorKind::bad_setting);
}

}  // namespace perseus
