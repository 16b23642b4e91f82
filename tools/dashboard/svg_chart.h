// Line charts drawn by the server as SVG text: the pages of chorusrun --dashboard and
// chorus-board put them in as they are, so the browser needs no chart library and no
// script of ours draws anything (docs/dashboard.md says why). Pure functions.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace chorus::web {

struct Series {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x, y); non-finite points are skipped
};

struct ChartOptions {
  std::string title;
  std::string x_label = "step";
  int width = 460;
  int height = 220;
  size_t max_points = 800;  // per series; more are thinned, keeping each stretch's min/max
};

// One <svg> element: axes with round ticks, a polyline per series in a fixed palette
// (series i gets colour i % 8), a legend, and the title. All text is escaped. With no
// finite point at all, the chart says "no data yet".
std::string svg_line_chart(const std::vector<Series>& series, const ChartOptions& options);

// Round tick values covering [lo, hi], about `count` of them (1, 2, 5 x 10^k steps).
std::vector<double> nice_ticks(double lo, double hi, int count);

// A short label for a tick or value: 1.5k, 2M, 0.0031, 12.
std::string short_number(double value);

}  // namespace chorus::web
