#pragma once
// Self-contained SVG charts: open in any browser, no plotting tools needed.
#include <string>
#include <utility>
#include <vector>

#include "perseus/emulate/emulator.hpp"

namespace perseus {

enum class TimelineColor { clock, power };

struct TimelineOptions {
  TimelineColor color = TimelineColor::clock;
  std::string title;
};

// One emulated iteration: stages as rows, each forward/backward a box from its start time with
// its duration as width, coloured by clock or average power, labelled F/B and microbatch; grey
// shows where a GPU waits; the critical path is drawn over the boxes.
std::string timeline_svg(const EmulationResult& run, const TimelineOptions& options);

struct FrontierSeries {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (time s, energy J)
};

struct PlotMarker {
  std::string name;  // e.g. "all-max", "EnvPipe", "chosen"
  double time = 0, energy = 0;
};

// Frontiers as lines (one polyline each, every point) with marked plans.
std::string frontier_svg(const std::vector<FrontierSeries>& series, const std::vector<PlotMarker>& markers,
                         const std::string& title);

// Escapes &, <, >, " and ' for SVG text and attributes.
std::string xml_escape(const std::string& text);

}  // namespace perseus
