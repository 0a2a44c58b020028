// The exponential fit against scipy's, the reference's, on option sets that no one tuned to
// (tests/data, written by bench/fit_reference.py: noisy, few and many Pareto clocks, unbalanced
// stages, unit times 1 and 0.1 ms). Wherever the reference fits, perseus fits at least as well
// (mean squared error, the reference's choice rule); and as MINPACK's lmdif is followed step by
// step, it lands on the reference's parameters.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "perseus/model/cost_model.hpp"

using namespace perseus;

namespace {

const std::filesystem::path kData = std::filesystem::path(PERSEUS_SOURCE_DIR) / "tests" / "data";

struct OptionSet {
  double unit_time = 0;
  std::vector<ExecutionOption> options;
};

struct ScipyFit {
  double a, b, c, mse;
};

std::vector<std::vector<std::string>> read_csv(const std::filesystem::path& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << path;
  std::vector<std::vector<std::string>> rows;
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::vector<std::string> fields;
    std::stringstream stream(line);
    std::string field;
    while (std::getline(stream, field, ',')) fields.push_back(field);
    if (!line.empty() && line.back() == ',') fields.emplace_back();
    rows.push_back(fields);
  }
  return rows;
}

std::map<int, OptionSet> option_sets() {
  std::map<int, OptionSet> sets;
  for (const auto& row : read_csv(kData / "exp_fit_reference.csv")) {
    auto& set = sets[std::stoi(row.at(0))];
    set.unit_time = std::stod(row.at(1));
    ExecutionOption option;
    option.quant_time = std::stoi(row.at(2));
    option.effective_energy = std::stod(row.at(3));
    set.options.push_back(option);
  }
  return sets;
}

std::map<int, std::optional<ScipyFit>> scipy_fits() {
  std::map<int, std::optional<ScipyFit>> fits;
  for (const auto& row : read_csv(kData / "exp_fit_scipy.csv")) {
    const int id = std::stoi(row.at(0));
    if (row.size() < 5 || row.at(1).empty()) {
      fits[id] = std::nullopt;
    } else {
      fits[id] = ScipyFit{std::stod(row[1]), std::stod(row[2]), std::stod(row[3]), std::stod(row[4])};
    }
  }
  return fits;
}

}  // namespace

TEST(ExponentialFitVsScipy, AtLeastAsGoodAsTheReferenceWhereverItFits) {
  const auto sets = option_sets();
  const auto fits = scipy_fits();
  ASSERT_GE(sets.size(), 200u);
  ASSERT_EQ(sets.size(), fits.size());
  int reference_fits = 0, well_determined = 0, same_curve = 0, clearly_better = 0;
  for (const auto& [id, set] : sets) {
    const auto& reference = fits.at(id);
    const auto model = fit_exponential(set.options, set.unit_time);
    if (!reference) continue;
    ++reference_fits;
    ASSERT_NE(model, nullptr) << "set " << id << ": the reference fits, perseus does not";
    const double error = model->mean_squared_error(set.options);
    EXPECT_LE(error, reference->mse * (1 + 1e-9) + 1e-300)
        << "set " << id << ": perseus " << model->describe() << " vs scipy a=" << reference->a << " b=" << reference->b
        << " c=" << reference->c;
    // Where the curve bends over the options' span (|b| * span > 0.05) the fit is well
    // determined: unless perseus found a clearly better minimum, its curve is scipy's (lmdif stops
    // within ftol of the minimum, and the last bit of exp moves its forward differences).
    if (error < reference->mse * (1 - 1e-6)) ++clearly_better;
    const double span = std::fabs(set.options.front().quant_time - set.options.back().quant_time);
    if (std::fabs(reference->b) * span > 0.05 && error > reference->mse * (1 - 1e-6)) {
      ++well_determined;
      double scale = 0, difference = 0;
      for (const auto& option : set.options) {
        const double theirs = reference->a * std::exp(reference->b * option.quant_time) + reference->c;
        scale = std::max(scale, std::fabs(option.effective_energy));
        difference = std::max(difference, std::fabs((*model)(option.quant_time) - theirs));
      }
      if (difference <= 1e-4 * scale) {
        ++same_curve;
      } else {
        ADD_FAILURE() << "set " << id << ": perseus " << model->describe() << " vs scipy a=" << reference->a
                      << " b=" << reference->b << " c=" << reference->c << ": " << difference / scale;
      }
    }
  }
  EXPECT_GE(well_determined, reference_fits / 2) << "the generated sets should mostly bend";
  RecordProperty("same_curve", same_curve);
  RecordProperty("well_determined", well_determined);
  RecordProperty("clearly_better", clearly_better);
  RecordProperty("reference_fits", reference_fits);
}
