// The server-drawn SVG charts.
#include "svg_chart.h"

#include <gtest/gtest.h>

#include <cmath>

namespace chorus::web {
namespace {

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(SvgChart, OnePolylinePerSeriesEscapedNames) {
  Series a{"train", {{0, 2.0}, {1, 1.5}, {2, 0.9}}};
  Series b{"<val>", {{0, 2.1}, {2, 1.2}}};
  ChartOptions o;
  o.title = "loss & \"more\"";
  std::string svg = svg_line_chart({a, b}, o);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_EQ(svg.substr(svg.size() - 6), "</svg>");
  EXPECT_EQ(count(svg, "<polyline"), 2u);
  EXPECT_NE(svg.find("loss &amp; &quot;more&quot;"), std::string::npos);
  EXPECT_NE(svg.find("&lt;val&gt;"), std::string::npos);
  EXPECT_EQ(svg.find("<val>"), std::string::npos);
}

TEST(SvgChart, EmptyAndDegenerateData) {
  EXPECT_NE(svg_line_chart({}, {}).find("no data yet"), std::string::npos);
  Series nan{"x", {{0, std::nan("")}, {1, INFINITY}}};
  EXPECT_NE(svg_line_chart({nan}, {}).find("no data yet"), std::string::npos);
  Series one{"x", {{5, 3}}};
  std::string svg = svg_line_chart({one}, {});
  EXPECT_NE(svg.find("<circle"), std::string::npos);
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  EXPECT_EQ(svg.find("inf"), std::string::npos);
}

TEST(SvgChart, ThinsLongSeriesKeepingExtremes) {
  Series s{"x", {}};
  for (int i = 0; i < 100000; ++i) s.points.emplace_back(i, i == 54321 ? 1000.0 : std::sin(i));
  ChartOptions o;
  o.max_points = 400;
  std::string svg = svg_line_chart({s}, o);
  size_t from = svg.find("points=\"");
  std::string pts = svg.substr(from, svg.find('"', from + 8) - from);
  EXPECT_LE(count(pts, ","), 400u);
  // The spike sets the top of the y range, so it is drawn at the top of the plot (y=24.0).
  EXPECT_NE(pts.find(",24.0 "), std::string::npos);
}

TEST(SvgChart, NiceTicks) {
  EXPECT_EQ(nice_ticks(0, 10, 5), (std::vector<double>{0, 2, 4, 6, 8, 10}));
  std::vector<double> t = nice_ticks(0.13, 0.52, 4), want = {0.2, 0.3, 0.4, 0.5};
  ASSERT_EQ(t.size(), want.size());
  for (size_t i = 0; i < t.size(); ++i) EXPECT_NEAR(t[i], want[i], 1e-12);
  EXPECT_TRUE(nice_ticks(1, 1, 5).empty());
  EXPECT_TRUE(nice_ticks(0, INFINITY, 5).empty());
  EXPECT_EQ(short_number(1500000), "1.5M");
  EXPECT_EQ(short_number(25000), "25k");
  EXPECT_EQ(short_number(0.0031), "0.0031");
}

}  // namespace
}  // namespace chorus::web
