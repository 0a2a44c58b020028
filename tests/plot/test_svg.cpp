// The SVG pictures parse as XML and hold the expected elements.
#include <gtest/gtest.h>
#include <tinyxml2.h>

#include <functional>

#include "perseus/emulate/emulator.hpp"
#include "perseus/plot/svg.hpp"
#include "perseus/util/error.hpp"
#include "emulate_fixtures.hpp"

namespace perseus {
namespace {

// Elements (anywhere below root) with the given name and class attribute.
std::vector<const tinyxml2::XMLElement*> find_all(const tinyxml2::XMLElement* root, const std::string& name,
                                                  const std::string& cls) {
  std::vector<const tinyxml2::XMLElement*> found;
  std::function<void(const tinyxml2::XMLElement*)> visit = [&](const tinyxml2::XMLElement* e) {
    for (; e; e = e->NextSiblingElement()) {
      const char* c = e->Attribute("class");
      if (name == e->Name() && cls == (c ? c : "")) found.push_back(e);
      visit(e->FirstChildElement());
    }
  };
  visit(root->FirstChildElement());
  return found;
}

TEST(Svg, TimelineHasOneBoxPerInstructionAndTheCriticalPath) {
  EmulatorConfig config;
  config.num_stages = 2;
  config.num_microbatches = 3;
  config.p_block = 5;
  const Emulator emulator(fixtures::two_clock_profile(2), config);
  const auto run = emulator.run({{1000, 1000, 500, 1000, 1000, 1000}, {1000, 1000, 1000, 1000, 1000, 1000}});
  TimelineOptions options;
  options.title = "a <plan> & more";
  const std::string svg = timeline_svg(run, options);
  tinyxml2::XMLDocument doc;
  ASSERT_EQ(doc.Parse(svg.c_str()), tinyxml2::XML_SUCCESS) << doc.ErrorStr();
  const auto* root = doc.RootElement();
  ASSERT_STREQ(root->Name(), "svg");
  const auto boxes = find_all(root, "rect", "instruction");
  ASSERT_EQ(boxes.size(), 12u);
  int forwards = 0, slow = 0;
  for (const auto* b : boxes) {
    forwards += std::string(b->Attribute("data-kind")) == "F";
    slow += b->IntAttribute("data-frequency") == 500;
    EXPECT_GT(b->DoubleAttribute("width"), 0);
  }
  EXPECT_EQ(forwards, 6);
  EXPECT_EQ(slow, 1);
  EXPECT_EQ(find_all(root, "rect", "idle").size(), 2u);  // one waiting band per stage
  const auto path = find_all(root, "polyline", "critical-path");
  ASSERT_EQ(path.size(), 1u);
  EXPECT_NE(std::string(path[0]->Attribute("points")).find(','), std::string::npos);
  EXPECT_NE(svg.find("a &lt;plan&gt; &amp; more"), std::string::npos);
}

TEST(Svg, FrontierHasAllPointsAndMarkers) {
  std::vector<FrontierSeries> series{{"gpt3 & a100", {{1, 10}, {2, 8}, {3, 7.5}}}, {"bloom", {{1.5, 9}, {2.5, 8}}}};
  std::vector<PlotMarker> markers{{"all-max", 1, 12}, {"envpipe-balanced", 1, 11}, {"chosen", 2, 8}};
  const std::string svg = frontier_svg(series, markers, "frontiers");
  tinyxml2::XMLDocument doc;
  ASSERT_EQ(doc.Parse(svg.c_str()), tinyxml2::XML_SUCCESS) << doc.ErrorStr();
  const auto lines = find_all(doc.RootElement(), "polyline", "frontier");
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]->IntAttribute("data-points"), 3);
  EXPECT_STREQ(lines[0]->Attribute("data-name"), "gpt3 & a100");
  // Every point is a coordinate pair in the polyline.
  const std::string points = lines[1]->Attribute("points");
  EXPECT_EQ(std::count(points.begin(), points.end(), ','), 2);
  const auto marks = find_all(doc.RootElement(), "circle", "marker");
  ASSERT_EQ(marks.size(), 3u);
  EXPECT_STREQ(marks[2]->Attribute("data-name"), "chosen");
  EXPECT_THROW(frontier_svg({}, {}, "empty"), Error);
  EXPECT_TRUE(find_all(doc.RootElement(), "polyline", "dominated").empty());
}

// Points slower and costlier than another are drawn apart: the solid line joins the others.
TEST(Svg, DominatedPointsAreDrawnDashed) {
  // Past 3 s the energy rises again (the blocking power outweighs the clocks' saving).
  std::vector<FrontierSeries> series{{"rises", {{4, 9}, {3.5, 8.5}, {3, 8}, {2, 9}, {1, 12}}}};
  const std::string svg = frontier_svg(series, {}, "frontier");
  tinyxml2::XMLDocument doc;
  ASSERT_EQ(doc.Parse(svg.c_str()), tinyxml2::XML_SUCCESS) << doc.ErrorStr();
  const auto solid = find_all(doc.RootElement(), "polyline", "frontier");
  ASSERT_EQ(solid.size(), 1u);
  EXPECT_EQ(solid[0]->IntAttribute("data-points"), 3);
  const std::string points = solid[0]->Attribute("points");
  EXPECT_EQ(std::count(points.begin(), points.end(), ','), 3);
  const auto dashed = find_all(doc.RootElement(), "polyline", "dominated");
  ASSERT_EQ(dashed.size(), 1u);
  EXPECT_EQ(dashed[0]->IntAttribute("data-points"), 2);
  const std::string all = dashed[0]->Attribute("points");
  EXPECT_EQ(std::count(all.begin(), all.end(), ','), 5);
}

}  // namespace
}  // namespace perseus
