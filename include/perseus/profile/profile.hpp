#pragma once
// A stage profile (docs/design.md#profiles): time and energy of one forward or backward of one microbatch,
// per pipeline stage and SM clock.
#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

#include "perseus/profile/instruction_kind.hpp"

namespace perseus {

struct ProfileRow {
  int stage = 0;  // model stage; with a `chunk` column, the pipeline stage (GPU)
  InstructionKind kind = InstructionKind::forward;
  int frequency = 0;     // SM clock, MHz
  double time = 0;       // seconds, one execution
  double energy = 0;     // joules, one execution
  std::size_t line = 0;  // 1-based line in the source file, for error messages
  int chunk = 0;         // model chunk on that stage (optional `chunk` column, interleaved schedules)
};

struct Profile {
  std::string source;  // file name used in error messages
  std::vector<ProfileRow> rows;
  bool has_chunks = false;  // the file had a `chunk` column

  int max_stage() const;  // -1 when empty
  std::vector<ProfileRow> rows_for(int stage, InstructionKind kind) const;
};

// Parses CSV text with header `stage,instruction,frequency,time,energy` (any order, extra columns
// ignored; an optional `chunk` column names the model chunk of an interleaved schedule). Throws InputError naming
// source, line and field for every malformed value and for duplicate (stage, instruction, frequency) rows.
Profile parse_profile(const std::string& text, const std::string& source);
Profile read_profile(const std::filesystem::path& path);

// 1F1B with activation recomputation: the backward of a recomputed layer first runs its forward
// again, inside the same backward call (Megatron-LM, DeepSpeed), so at the clock locked for that
// backward. Every backward row gets the forward's time and energy at the same clock added; the
// instruction order is unchanged. Throws InputError naming the backward's line when the forward has
// no row at that clock.
Profile with_recomputation(const Profile& profile);

// The CSV text parse_profile reads back exactly (shortest round-trip numbers, rows in order).
std::string profile_csv(const Profile& profile);

// Rows keyed by model stage: with a `chunk` column, stage s's chunk c is model stage
// c * num_stages + s (Megatron-LM's round-robin assignment); without one, rows already are.
Profile by_model_stage(const Profile& profile, int num_stages);

// Checks that stages 0..num_stages-1 each have forward and backward rows and that no row names a
// stage outside that range. Throws InputError.
void check_profile_covers(const Profile& profile, int num_stages);

}  // namespace perseus
