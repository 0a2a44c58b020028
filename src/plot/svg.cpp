#include "perseus/plot/svg.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "perseus/plan/frontier_record.hpp"
#include "perseus/util/error.hpp"

namespace perseus {

namespace {

// Blue (low) through yellow to red (high): readable for clocks and power alike.
std::string ramp(double t) {
  static constexpr std::array<std::array<double, 3>, 3> stops{{{44, 123, 182}, {255, 255, 191}, {215, 25, 28}}};
  t = std::clamp(std::isfinite(t) ? t : 0.0, 0.0, 1.0);
  const double x = t * 2;
  const int i = std::min(1, static_cast<int>(x));
  const double f = x - i;
  std::array<int, 3> c{};
  for (int k = 0; k < 3; ++k) c[k] = static_cast<int>(std::lround(stops[i][k] + (stops[i + 1][k] - stops[i][k]) * f));
  return fmt::format("#{:02x}{:02x}{:02x}", c[0], c[1], c[2]);
}

// About `count` round tick values covering [lo, hi].
std::vector<double> ticks(double lo, double hi, int count) {
  if (!(hi > lo)) return {lo};
  const double raw = (hi - lo) / count;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = magnitude;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * magnitude >= raw) {
      step = m * magnitude;
      break;
    }
  }
  std::vector<double> out;
  for (double v = std::ceil(lo / step) * step; v <= hi + step * 1e-9; v += step)
    out.push_back(std::abs(v) < step * 1e-9 ? 0 : v);
  return out;
}

std::string header(double width, double height) {
  return fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0:.0f}\" height=\"{1:.0f}\" viewBox=\"0 0 {0:.0f} {1:.0f}\" "
      "font-family=\"sans-serif\" font-size=\"11\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      width, height);
}

}  // namespace

std::string xml_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string timeline_svg(const EmulationResult& run, const TimelineOptions& options) {
  const int S = static_cast<int>(run.instructions.size());
  // With model chunks (interleaved) every label names its chunk: F3c1.
  int virtual_stages = 1;
  for (const auto& stage : run.instructions)
    for (const auto& i : stage) virtual_stages = std::max(virtual_stages, i.instruction.chunk + 1);
  const double left = 70, right = 30, top = 40, row = 34, gap = 6, plot_width = 1100;
  const double height = top + S * row + 80;
  const double width = left + plot_width + right;
  const double T = run.iteration_time > 0 ? run.iteration_time : 1;
  auto x_of = [&](double t) { return left + t / T * plot_width; };

  auto value_of = [&](const InstructionRun& i) {
    return options.color == TimelineColor::clock ? static_cast<double>(i.frequency)
                                                 : (i.duration > 0 ? i.energy / i.duration : 0.0);
  };
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const auto& stage : run.instructions) {
    for (const auto& i : stage) {
      lo = std::min(lo, value_of(i));
      hi = std::max(hi, value_of(i));
    }
  }
  if (!(hi > lo)) hi = lo + 1;

  std::string svg = header(width, height);
  svg += fmt::format(
      "<text x=\"{}\" y=\"22\" font-size=\"14\">{}</text>\n", left,
      xml_escape(options.title.empty() ? fmt::format("iteration {:.4f} s, {:.1f} J", run.iteration_time, run.energy)
                                       : options.title));
  for (int s = 0; s < S; ++s) {
    const double y = top + s * row;
    svg +=
        fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">stage {}</text>\n", left - 8, y + row / 2 + 4, s);
    // Everything not covered by a box is waiting: draw the row grey first.
    svg += fmt::format(
        "<rect class=\"idle\" x=\"{:.2f}\" y=\"{:.2f}\" width=\"{:.2f}\" height=\"{:.2f}\" fill=\"#d9d9d9\"/>\n", left,
        y, plot_width, row - gap);
    for (const auto& i : run.instructions[s]) {
      const double x = x_of(i.start), w = std::max(0.5, x_of(i.start + i.duration) - x);
      // F forward, B backward, I input-gradient part, W weight-gradient part (dashed: local work
      // that fills bubbles), P an overlapped forward/backward pair.
      static constexpr char kKindLetter[] = {'F', 'B', 'I', 'W', 'P'};
      const char kind = kKindLetter[static_cast<int>(i.instruction.kind)];
      const char* dash = i.instruction.kind == InstructionKind::backward_weight ? "\" stroke-dasharray=\"3,2" : "";
      const std::string name = short_name(i.instruction, virtual_stages);
      svg += fmt::format(
          "<rect class=\"instruction\" data-stage=\"{}\" data-kind=\"{}\" data-microbatch=\"{}\" data-chunk=\"{}\" "
          "data-frequency=\"{}\" x=\"{:.2f}\" y=\"{:.2f}\" width=\"{:.2f}\" height=\"{:.2f}\" fill=\"{}\" "
          "stroke=\"#333\" "
          "stroke-width=\"0.5{}\"><title>{} stage {}: {} MHz, start {:.4f} s, {:.4f} s, {:.2f} J</title></rect>\n",
          s, kind, i.instruction.microbatch, i.instruction.chunk, i.frequency, x, y, w, row - gap,
          ramp((value_of(i) - lo) / (hi - lo)), dash, name, s, i.frequency, i.start, i.duration, i.energy);
      if (w >= 16) {
        svg += fmt::format("<text x=\"{:.2f}\" y=\"{:.2f}\" text-anchor=\"middle\" font-size=\"9\">{}</text>\n",
                           x + w / 2, y + (row - gap) / 2 + 3, name);
      }
    }
  }
  // Critical path: box centres joined in time order.
  std::vector<std::pair<double, double>> path;
  for (int s = 0; s < S; ++s) {
    for (const auto& i : run.instructions[s]) {
      if (i.critical) path.emplace_back(i.start, top + s * row + (row - gap) / 2);
    }
  }
  std::sort(path.begin(), path.end());
  std::string points;
  for (const auto& [start, y] : path) points += fmt::format("{:.2f},{:.2f} ", x_of(start), y);
  svg += fmt::format(
      "<polyline class=\"critical-path\" points=\"{}\" fill=\"none\" stroke=\"#000\" "
      "stroke-width=\"1.5\" stroke-dasharray=\"4 2\"/>\n",
      points);
  // Time axis.
  const double axis_y = top + S * row + 4;
  svg += fmt::format("<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\" stroke=\"#000\"/>\n", left, axis_y,
                     left + plot_width, axis_y);
  for (double t : ticks(0, T, 10)) {
    svg += fmt::format(
        "<line x1=\"{0:.2f}\" y1=\"{1:.1f}\" x2=\"{0:.2f}\" y2=\"{2:.1f}\" stroke=\"#000\"/>"
        "<text x=\"{0:.2f}\" y=\"{3:.1f}\" text-anchor=\"middle\">{4:g}</text>\n",
        x_of(t), axis_y, axis_y + 4, axis_y + 16, t);
  }
  svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">time (s)</text>\n", left + plot_width / 2,
                     axis_y + 30);
  // Colour legend.
  const double ly = axis_y + 44;
  const std::string unit = options.color == TimelineColor::clock ? "MHz" : "W";
  svg += fmt::format("<text x=\"{}\" y=\"{:.1f}\">{} {:.0f} {}</text>\n", left, ly + 10,
                     options.color == TimelineColor::clock ? "clock" : "power", lo, unit);
  for (int k = 0; k < 20; ++k) {
    svg += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"10\" height=\"12\" fill=\"{}\"/>", left + 110 + 10 * k,
                       ly, ramp(k / 19.0));
  }
  svg += fmt::format("\n<text x=\"{:.1f}\" y=\"{:.1f}\">{:.0f} {}</text>\n", left + 318, ly + 10, hi, unit);
  svg += fmt::format(
      "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"12\" height=\"12\" fill=\"#d9d9d9\"/>"
      "<text x=\"{:.1f}\" y=\"{:.1f}\">waiting (P_block)</text>\n",
      left + 400, ly, left + 416, ly + 10);
  svg += fmt::format(
      "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#000\" stroke-dasharray=\"4 2\"/>"
      "<text x=\"{:.1f}\" y=\"{:.1f}\">critical path</text>\n",
      left + 540, ly + 6, left + 570, ly + 6, left + 576, ly + 10);
  svg += "</svg>\n";
  return svg;
}

std::string frontier_svg(const std::vector<FrontierSeries>& series, const std::vector<PlotMarker>& markers,
                         const std::string& title) {
  const double left = 80, right = 260, top = 40, bottom = 50, plot_w = 700, plot_h = 450;
  const double width = left + plot_w + right, height = top + plot_h + bottom;
  double tx0 = std::numeric_limits<double>::infinity(), tx1 = -tx0, ey0 = tx0, ey1 = -tx0;
  auto include = [&](double t, double e) {
    if (!std::isfinite(t) || !std::isfinite(e)) return;
    tx0 = std::min(tx0, t), tx1 = std::max(tx1, t), ey0 = std::min(ey0, e), ey1 = std::max(ey1, e);
  };
  for (const auto& s : series) {
    for (const auto& [t, e] : s.points) include(t, e);
  }
  for (const auto& m : markers) include(m.time, m.energy);
  if (!std::isfinite(tx0)) throw Error("nothing to plot: no frontier points or markers", ErrorKind::bad_input);
  const double pad_t = std::max((tx1 - tx0) * 0.05, std::abs(tx1) * 1e-3 + 1e-12);
  const double pad_e = std::max((ey1 - ey0) * 0.05, std::abs(ey1) * 1e-3 + 1e-12);
  tx0 -= pad_t, tx1 += pad_t, ey0 -= pad_e, ey1 += pad_e;
  auto x_of = [&](double t) { return left + (t - tx0) / (tx1 - tx0) * plot_w; };
  auto y_of = [&](double e) { return top + plot_h - (e - ey0) / (ey1 - ey0) * plot_h; };

  static const std::array<const char*, 6> colours{"#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#17becf", "#7f7f7f"};
  static const std::array<const char*, 5> marker_colours{"#d62728", "#ff7f0e", "#e377c2", "#000000", "#bcbd22"};

  std::string svg = header(width, height);
  svg += fmt::format("<text x=\"{}\" y=\"22\" font-size=\"14\">{}</text>\n", left, xml_escape(title));
  svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#000\"/>\n", left, top,
                     plot_w, plot_h);
  for (double t : ticks(tx0, tx1, 8)) {
    svg += fmt::format(
        "<line x1=\"{0:.2f}\" y1=\"{1}\" x2=\"{0:.2f}\" y2=\"{2}\" stroke=\"#eee\"/>"
        "<text x=\"{0:.2f}\" y=\"{3}\" text-anchor=\"middle\">{4:g}</text>\n",
        x_of(t), top, top + plot_h, top + plot_h + 16, t);
  }
  for (double e : ticks(ey0, ey1, 8)) {
    svg += fmt::format(
        "<line x1=\"{1}\" y1=\"{0:.2f}\" x2=\"{2}\" y2=\"{0:.2f}\" stroke=\"#eee\"/>"
        "<text x=\"{3}\" y=\"{4:.2f}\" text-anchor=\"end\">{5:g}</text>\n",
        y_of(e), left, left + plot_w, left - 6, y_of(e) + 4, e);
  }
  svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">iteration time (s)</text>\n",
                     left + plot_w / 2, height - 12);
  svg += fmt::format(
      "<text transform=\"translate(16 {:.1f}) rotate(-90)\" text-anchor=\"middle\">energy per "
      "iteration (J)</text>\n",
      top + plot_h / 2);
  double legend_y = top + 10;
  for (std::size_t k = 0; k < series.size(); ++k) {
    const auto& s = series[k];
    // Points slower and costlier than another (no deadline chooses them): a thin dashed line
    // through every point shows where they lie; the solid one joins the others.
    const auto dominated = dominated_points(s.points);
    const auto dominated_count = std::count(dominated.begin(), dominated.end(), true);
    std::string points, all_points;
    points.reserve(s.points.size() * 16);
    for (std::size_t i = 0; i < s.points.size(); ++i) {
      const std::string xy = fmt::format("{:.2f},{:.2f} ", x_of(s.points[i].first), y_of(s.points[i].second));
      if (!dominated[i]) points += xy;
      if (dominated_count > 0) all_points += xy;
    }
    const char* colour = colours[k % colours.size()];
    if (dominated_count > 0)
      svg += fmt::format(
          "<polyline class=\"dominated\" data-name=\"{}\" data-points=\"{}\" points=\"{}\" fill=\"none\" "
          "stroke=\"{}\" stroke-width=\"1\" stroke-dasharray=\"4 3\" stroke-opacity=\"0.6\"><title>{} points "
          "slower and costlier than another</title></polyline>\n",
          xml_escape(s.name), dominated_count, all_points, colour, dominated_count);
    svg += fmt::format(
        "<polyline class=\"frontier\" data-name=\"{}\" data-points=\"{}\" points=\"{}\" fill=\"none\" "
        "stroke=\"{}\" stroke-width=\"1.5\"/>\n",
        xml_escape(s.name), s.points.size() - static_cast<std::size_t>(dominated_count), points, colour);
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" stroke=\"{3}\" stroke-width=\"2\"/>"
        "<text x=\"{4:.1f}\" y=\"{5:.1f}\">{6}</text>\n",
        left + plot_w + 10, legend_y, left + plot_w + 30, colour, left + plot_w + 36, legend_y + 4, xml_escape(s.name));
    legend_y += 18;
    if (dominated_count > 0) {
      svg += fmt::format(
          "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" stroke=\"{3}\" stroke-dasharray=\"4 3\"/>"
          "<text x=\"{4:.1f}\" y=\"{5:.1f}\">dominated ({6})</text>\n",
          left + plot_w + 10, legend_y, left + plot_w + 30, colour, left + plot_w + 36, legend_y + 4, dominated_count);
      legend_y += 18;
    }
  }
  for (std::size_t k = 0; k < markers.size(); ++k) {
    const auto& m = markers[k];
    const char* colour = marker_colours[k % marker_colours.size()];
    // Later markers are smaller, so plans that coincide (e.g. all-max and a Zeus clock at the top)
    // show as nested rings instead of hiding each other.
    const double radius = std::max(2.5, 8 - 1.5 * static_cast<double>(k));
    svg += fmt::format(
        "<circle class=\"marker\" data-name=\"{}\" cx=\"{:.2f}\" cy=\"{:.2f}\" r=\"{:.1f}\" fill=\"{}\" "
        "stroke=\"#000\"><title>{}: {:.4f} s, {:.1f} J</title></circle>\n",
        xml_escape(m.name), x_of(m.time), y_of(m.energy), radius, colour, xml_escape(m.name), m.time, m.energy);
    svg += fmt::format(
        "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"5\" fill=\"{}\" stroke=\"#000\"/>"
        "<text x=\"{:.1f}\" y=\"{:.1f}\">{}</text>\n",
        left + plot_w + 20, legend_y, colour, left + plot_w + 36, legend_y + 4, xml_escape(m.name));
    legend_y += 18;
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace perseus
