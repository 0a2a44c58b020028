#include "perseus/profile/profile.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <tuple>

#include "perseus/util/atomic_file.hpp"
#include "perseus/util/csv.hpp"
#include "perseus/util/error.hpp"
#include "perseus/util/pyfloat.hpp"

namespace perseus {

namespace {

constexpr std::array<std::string_view, 5> kRequired = {"stage", "instruction", "frequency", "time", "energy"};

struct Columns {
  std::array<std::size_t, 5> index{};  // position of each required column
  std::size_t count = 0;               // number of header fields
};

Columns parse_header(std::string_view line, const std::string& source) {
  const auto fields = split_csv_line(line);
  Columns columns;
  columns.count = fields.size();
  for (std::size_t r = 0; r < kRequired.size(); ++r) {
    std::size_t found = fields.size();
    for (std::size_t i = 0; i < fields.size(); ++i) {
      if (fields[i] == kRequired[r]) {
        if (found != fields.size()) {
          throw InputError(source, 1, std::string(kRequired[r]), "column appears twice in header");
        }
        found = i;
      }
    }
    if (found == fields.size()) {
      throw InputError(source, 1, std::string(kRequired[r]),
                       "required column missing from header (need stage,instruction,frequency,"
                       "time,energy)");
    }
    columns.index[r] = found;
  }
  return columns;
}

double positive_finite(std::string_view text, const std::string& source, std::size_t line, const char* field) {
  const auto value = parse_double(text);
  if (!value) throw InputError(source, line, field, fmt::format("'{}' is not a number", text));
  if (!std::isfinite(*value)) throw InputError(source, line, field, fmt::format("'{}' is not finite", text));
  if (*value <= 0) throw InputError(source, line, field, fmt::format("{} must be positive", text));
  return *value;
}

// Per (stage, chunk): either `backward` rows or both split kinds, never a mix.
void check_backward_kinds(const Profile& profile) {
  std::map<std::tuple<int, int, int>, const ProfileRow*> first;  // (stage, chunk, kind) -> first row
  for (const auto& row : profile.rows) first.try_emplace({row.stage, row.chunk, static_cast<int>(row.kind)}, &row);
  auto find = [&](const ProfileRow& row, InstructionKind kind) -> const ProfileRow* {
    const auto it = first.find({row.stage, row.chunk, static_cast<int>(kind)});
    return it == first.end() ? nullptr : it->second;
  };
  for (const auto& [key, row] : first) {
    const auto kind = static_cast<InstructionKind>(std::get<2>(key));
    const std::string where =
        fmt::format("stage {}{}", row->stage, profile.has_chunks ? fmt::format(" chunk {}", row->chunk) : "");
    if (kind == InstructionKind::backward_input || kind == InstructionKind::backward_weight) {
      const auto other =
          kind == InstructionKind::backward_input ? InstructionKind::backward_weight : InstructionKind::backward_input;
      if (!find(*row, other))
        throw InputError(profile.source, row->line, "instruction",
                         fmt::format("{} has {} rows but no {} rows; a split backward needs both parts", where,
                                     to_string(kind), to_string(other)));
      if (const auto* whole = find(*row, InstructionKind::backward))
        throw InputError(profile.source, row->line, "instruction",
                         fmt::format("{} has {} rows and backward rows (line {}); give either the whole backward or "
                                     "its two parts",
                                     where, to_string(kind), whole->line));
    }
  }
}

}  // namespace

int Profile::max_stage() const {
  int result = -1;
  for (const auto& row : rows) result = std::max(result, row.stage);
  return result;
}

std::vector<ProfileRow> Profile::rows_for(int stage, InstructionKind kind) const {
  std::vector<ProfileRow> result;
  for (const auto& row : rows) {
    if (row.stage == stage && row.kind == kind) result.push_back(row);
  }
  return result;
}

Profile parse_profile(const std::string& text, const std::string& source) {
  Profile profile;
  profile.source = source;
  std::string_view body = text;
  if (body.substr(0, 3) == "\xEF\xBB\xBF") body.remove_prefix(3);  // a UTF-8 byte-order mark, as pandas accepts
  LineReader reader(body);
  std::string_view line;
  if (!reader.next(line) || trim(line).empty()) {
    throw InputError(source, 1, "", "empty file: expected header stage,instruction,frequency,time,energy");
  }
  const Columns columns = parse_header(line, source);
  const auto header = split_csv_line(line);
  const auto chunk_column = std::find(header.begin(), header.end(), "chunk");
  profile.has_chunks = chunk_column != header.end();
  const std::size_t chunk_index = static_cast<std::size_t>(chunk_column - header.begin());
  std::map<std::tuple<int, int, int, int>, std::size_t> seen;  // (stage, chunk, kind, freq) -> line

  while (reader.next(line)) {
    const std::size_t n = reader.line_number();
    if (trim(line).empty()) continue;
    const auto fields = split_csv_line(line);
    if (fields.size() != columns.count) {
      throw InputError(source, n, "",
                       fmt::format("expected {} fields like the header, found {}", columns.count, fields.size()));
    }
    ProfileRow row;
    row.line = n;
    const auto stage = parse_integer(fields[columns.index[0]]);
    if (!stage || *stage < 0 || *stage > 100000) {
      throw InputError(source, n, "stage",
                       fmt::format("'{}' is not a stage index (a non-negative integer)", fields[columns.index[0]]));
    }
    row.stage = static_cast<int>(*stage);
    if (profile.has_chunks) {
      const auto chunk = parse_integer(fields[chunk_index]);
      if (!chunk || *chunk < 0 || *chunk > 1024)
        throw InputError(source, n, "chunk",
                         fmt::format("'{}' is not a model chunk index (an integer in 0..1024)", fields[chunk_index]));
      row.chunk = static_cast<int>(*chunk);
    }
    const auto kind = parse_instruction_kind(fields[columns.index[1]]);
    if (!kind) {
      throw InputError(source, n, "instruction",
                       fmt::format("'{}' is not forward, backward, backward_input, backward_weight or "
                                   "forward_backward",
                                   fields[columns.index[1]]));
    }
    row.kind = *kind;
    const auto freq = parse_integer(fields[columns.index[2]]);
    if (!freq || *freq <= 0 || *freq > 1000000) {
      throw InputError(source, n, "frequency",
                       fmt::format("'{}' is not a positive integer clock in MHz", fields[columns.index[2]]));
    }
    row.frequency = static_cast<int>(*freq);
    row.time = positive_finite(fields[columns.index[3]], source, n, "time");
    row.energy = positive_finite(fields[columns.index[4]], source, n, "energy");

    const auto key = std::make_tuple(row.stage, row.chunk, static_cast<int>(row.kind), row.frequency);
    if (const auto it = seen.find(key); it != seen.end()) {
      throw InputError(source, n, "frequency",
                       fmt::format("duplicate row for stage {}{} {} at {} MHz (first on line {})", row.stage,
                                   profile.has_chunks ? fmt::format(" chunk {}", row.chunk) : "", to_string(row.kind),
                                   row.frequency, it->second));
    }
    seen.emplace(key, n);
    profile.rows.push_back(row);
  }
  if (profile.rows.empty()) throw InputError(source, 0, "", "no data rows after the header");
  check_backward_kinds(profile);
  return profile;
}

Profile read_profile(const std::filesystem::path& path) { return parse_profile(read_file(path), path.string()); }

Profile by_model_stage(const Profile& profile, int num_stages) {
  if (!profile.has_chunks) return profile;
  Profile result = profile;
  result.has_chunks = false;
  for (auto& row : result.rows) {
    if (row.stage >= num_stages)
      throw InputError(profile.source, row.line, "stage",
                       fmt::format("stage {} is outside 0..{} (the pipeline has {} stages; with a chunk column, stage "
                                   "is the pipeline stage)",
                                   row.stage, num_stages - 1, num_stages));
    row.stage = row.chunk * num_stages + row.stage;
    row.chunk = 0;
  }
  return result;
}

void check_profile_covers(const Profile& profile, int num_stages) {
  for (const auto& row : profile.rows) {
    if (row.stage >= num_stages) {
      throw InputError(
          profile.source, row.line, "stage",
          fmt::format("stage {} is outside 0..{} (the pipeline has {} stages)", row.stage, num_stages - 1, num_stages));
    }
  }
  for (int stage = 0; stage < num_stages; ++stage) {
    for (auto kind : {InstructionKind::forward, InstructionKind::backward}) {
      bool found = false;
      for (const auto& row : profile.rows)
        found = found || (row.stage == stage && (row.kind == kind || (kind == InstructionKind::backward &&
                                                                      row.kind == InstructionKind::backward_input)));
      if (!found) {
        throw InputError(profile.source, 0, "stage",
                         fmt::format("no {} rows for stage {} (every stage 0..{} needs forward "
                                     "and backward rows, or forward and backward_input/backward_weight rows)",
                                     to_string(kind), stage, num_stages - 1));
      }
    }
  }
}

std::string profile_csv(const Profile& profile) {
  std::string csv = profile.has_chunks ? "stage,chunk,instruction,frequency,time,energy\n"
                                       : "stage,instruction,frequency,time,energy\n";
  for (const auto& row : profile.rows)
    csv += fmt::format("{}{},{},{},{},{}\n", row.stage, profile.has_chunks ? fmt::format(",{}", row.chunk) : "",
                       to_string(row.kind), row.frequency, python_float(row.time), python_float(row.energy));
  return csv;
}

Profile with_recomputation(const Profile& profile) {
  std::map<std::tuple<int, int, int>, const ProfileRow*> forwards;  // (stage, chunk, clock)
  for (const auto& row : profile.rows)
    if (row.kind == InstructionKind::forward) forwards[{row.stage, row.chunk, row.frequency}] = &row;
  Profile out = profile;
  for (auto& row : out.rows) {
    if (row.kind != InstructionKind::backward) continue;
    auto it = forwards.find({row.stage, row.chunk, row.frequency});
    if (it == forwards.end())
      throw InputError(profile.source, row.line, "frequency",
                       fmt::format("recompute: stage {} has a backward at {} MHz but no forward at that clock to "
                                   "run again",
                                   row.stage, row.frequency),
                       {"recompute"});
    row.time += it->second->time;
    row.energy += it->second->energy;
  }
  return out;
}

}  // namespace perseus
