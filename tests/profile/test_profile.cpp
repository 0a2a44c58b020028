#include <gtest/gtest.h>

#include "perseus/profile/profile.hpp"
#include "perseus/util/error.hpp"

using namespace perseus;

namespace {

const char* kGood =
    "stage,instruction,frequency,time,energy,rank\n"
    "0,forward,1410,0.05,20,0\n"
    "0,backward,1410,0.1,40,0\n"
    "1,forward,1410,0.06,22,1\n"
    "1,backward,1410,0.12,44,1\n";

// Parses `text` and returns the error message (empty when it parsed).
std::string error_of(const std::string& text, int stages = 2) {
  try {
    check_profile_covers(parse_profile(text, "p.csv"), stages);
  } catch (const InputError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::bad_input);
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Profile, ParsesRowsAndIgnoresExtraColumns) {
  const auto profile = parse_profile(kGood, "p.csv");
  ASSERT_EQ(profile.rows.size(), 4u);
  EXPECT_EQ(profile.rows[2].stage, 1);
  EXPECT_EQ(profile.rows[2].kind, InstructionKind::forward);
  EXPECT_EQ(profile.rows[2].frequency, 1410);
  EXPECT_DOUBLE_EQ(profile.rows[3].energy, 44);
  EXPECT_EQ(profile.rows[3].line, 5u);
  EXPECT_EQ(profile.max_stage(), 1);
  EXPECT_EQ(error_of(kGood), "");
}

TEST(Profile, ColumnsInAnyOrderAndCrlf) {
  const auto profile = parse_profile("energy,time,frequency,instruction,stage\r\n5,0.5,900,backward,0\r\n", "p.csv");
  ASSERT_EQ(profile.rows.size(), 1u);
  EXPECT_EQ(profile.rows[0].kind, InstructionKind::backward);
  EXPECT_DOUBLE_EQ(profile.rows[0].time, 0.5);
}

TEST(Profile, MissingColumnNamesIt) {
  EXPECT_EQ(error_of("stage,instruction,frequency,time\n0,forward,1,1\n"),
            "p.csv:1: field 'energy': required column missing from header (need "
            "stage,instruction,frequency,time,energy)");
}

TEST(Profile, BadValuesNameFileLineAndField) {
  const std::string header = "stage,instruction,frequency,time,energy\n";
  EXPECT_EQ(error_of(header + "0,forward,1410,nan,1\n"), "p.csv:2: field 'time': 'nan' is not finite");
  EXPECT_EQ(error_of(header + "0,forward,1410,-0.1,1\n"), "p.csv:2: field 'time': -0.1 must be positive");
  EXPECT_EQ(error_of(header + "0,forward,1410,0.1,abc\n"), "p.csv:2: field 'energy': 'abc' is not a number");
  EXPECT_EQ(error_of(header + "0,forward,14.5,0.1,1\n"),
            "p.csv:2: field 'frequency': '14.5' is not a positive integer clock in MHz");
  EXPECT_EQ(error_of(header + "x,forward,1410,0.1,1\n"),
            "p.csv:2: field 'stage': 'x' is not a stage index (a non-negative integer)");
  EXPECT_EQ(error_of(header + "0,sideways,1410,0.1,1\n"),
            "p.csv:2: field 'instruction': 'sideways' is not forward, backward, backward_input, backward_weight or "
            "forward_backward");
  EXPECT_EQ(error_of(header + "0,forward,1410,0.1\n"), "p.csv:2: expected 5 fields like the header, found 4");
  EXPECT_EQ(error_of(""), "p.csv:1: empty file: expected header stage,instruction,frequency,time,energy");
  EXPECT_EQ(error_of(header), "p.csv: no data rows after the header");
}

TEST(Profile, DuplicateRowPointsAtTheFirst) {
  std::string text = kGood;
  text += "1,forward,1410,0.06,22,1\n";
  EXPECT_EQ(error_of(text),
            "p.csv:6: field 'frequency': duplicate row for stage 1 forward at 1410 MHz (first on line 4)");
}

TEST(Profile, CoverageOfStages) {
  EXPECT_EQ(error_of(kGood, 3),
            "p.csv: field 'stage': no forward rows for stage 2 (every stage 0..2 needs forward and backward rows, or "
            "forward and backward_input/backward_weight rows)");
  EXPECT_EQ(error_of(kGood, 1), "p.csv:4: field 'stage': stage 1 is outside 0..0 (the pipeline has 1 stages)");
  const std::string no_backward = "stage,instruction,frequency,time,energy\n0,forward,1,1,1\n";
  EXPECT_EQ(error_of(no_backward, 1),
            "p.csv: field 'stage': no backward rows for stage 0 (every stage 0..0 needs forward and backward rows, or "
            "forward and backward_input/backward_weight rows)");
}

TEST(Profile, MissingFileIsNoInput) {
  try {
    read_profile("/nonexistent/profile.csv");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::not_found);
    EXPECT_NE(std::string(e.what()).find("/nonexistent/profile.csv"), std::string::npos);
  }
}
