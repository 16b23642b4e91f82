#include "svg_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "http_server.h"

namespace chorus::web {
namespace {

const char* const kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                "#9467bd", "#8c564b", "#e377c2", "#17becf"};

struct Box {
  double x0, x1, y0, y1;            // data range
  double left, right, top, bottom;  // pixels
  double px(double x) const { return left + (x - x0) / (x1 - x0) * (right - left); }
  double py(double y) const { return bottom - (y - y0) / (y1 - y0) * (bottom - top); }
};

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", v);
  return buf;
}

// At most `max` points: the stretch each output slot covers keeps its min and its max.
std::vector<std::pair<double, double>> thin(const std::vector<std::pair<double, double>>& in,
                                            size_t max) {
  std::vector<std::pair<double, double>> pts;
  for (const auto& p : in) {
    if (std::isfinite(p.first) && std::isfinite(p.second)) pts.push_back(p);
  }
  if (pts.size() <= max || max < 4) return pts;
  std::vector<std::pair<double, double>> out;
  size_t buckets = max / 2;
  for (size_t b = 0; b < buckets; ++b) {
    size_t from = b * pts.size() / buckets, to = (b + 1) * pts.size() / buckets;
    auto [lo, hi] = std::minmax_element(pts.begin() + from, pts.begin() + to,
                                        [](auto& a, auto& c) { return a.second < c.second; });
    if (lo > hi) std::swap(lo, hi);
    out.push_back(*lo);
    if (hi != lo) out.push_back(*hi);
  }
  return out;
}

bool data_range(const std::vector<std::vector<std::pair<double, double>>>& all, Box& box) {
  bool any = false;
  for (const auto& pts : all) {
    for (const auto& [x, y] : pts) {
      if (!any) box.x0 = box.x1 = x, box.y0 = box.y1 = y;
      any = true;
      box.x0 = std::min(box.x0, x), box.x1 = std::max(box.x1, x);
      box.y0 = std::min(box.y0, y), box.y1 = std::max(box.y1, y);
    }
  }
  if (!any) return false;
  if (box.x1 - box.x0 < 1e-12) box.x0 -= 0.5, box.x1 += 0.5;
  if (box.y1 - box.y0 < 1e-12 * std::max(1.0, std::fabs(box.y0))) {
    double pad = std::max(std::fabs(box.y0) * 0.05, 1e-6);
    box.y0 -= pad, box.y1 += pad;
  }
  return true;
}

std::string axes(const Box& box, const ChartOptions& o) {
  std::string out;
  for (double t : nice_ticks(box.y0, box.y1, 5)) {
    if (t < box.y0 || t > box.y1) continue;
    std::string y = fmt(box.py(t));
    out += "<line x1=\"" + fmt(box.left) + "\" x2=\"" + fmt(box.right) + "\" y1=\"" + y +
           "\" y2=\"" + y + "\" stroke=\"#e4e4e4\"/>";
    out += "<text x=\"" + fmt(box.left - 4) + "\" y=\"" + fmt(box.py(t) + 4) +
           "\" text-anchor=\"end\">" + html_escape(short_number(t)) + "</text>";
  }
  for (double t : nice_ticks(box.x0, box.x1, 5)) {
    if (t < box.x0 || t > box.x1) continue;
    out += "<text x=\"" + fmt(box.px(t)) + "\" y=\"" + fmt(box.bottom + 14) +
           "\" text-anchor=\"middle\">" + html_escape(short_number(t)) + "</text>";
  }
  out += "<rect x=\"" + fmt(box.left) + "\" y=\"" + fmt(box.top) + "\" width=\"" +
         fmt(box.right - box.left) + "\" height=\"" + fmt(box.bottom - box.top) +
         "\" fill=\"none\" stroke=\"#999\"/>";
  out += "<text x=\"" + fmt(box.right) + "\" y=\"" + fmt(box.bottom + 28) +
         "\" text-anchor=\"end\" fill=\"#666\">" + html_escape(o.x_label) + "</text>";
  return out;
}

std::string legend(const std::vector<Series>& series, const Box& box) {
  std::string out;
  double x = box.left;
  for (size_t i = 0; i < series.size() && i < 16; ++i) {
    const char* colour = kPalette[i % 8];
    std::string name = series[i].name.substr(0, 40);
    out += "<rect x=\"" + fmt(x) + "\" y=\"" + fmt(box.bottom + 20) +
           "\" width=\"10\" height=\"10\" fill=\"" + colour + "\"/>";
    out += "<text x=\"" + fmt(x + 13) + "\" y=\"" + fmt(box.bottom + 29) + "\">" +
           html_escape(name) + "</text>";
    x += 22 + 6.5 * static_cast<double>(name.size());
  }
  return out;
}

}  // namespace

std::vector<double> nice_ticks(double lo, double hi, int count) {
  std::vector<double> out;
  if (!(hi > lo) || count < 1 || !std::isfinite(lo) || !std::isfinite(hi)) return out;
  double raw = (hi - lo) / count;
  double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  }
  // k * step, not a running sum: no drift across the ticks.
  for (double k = std::ceil(lo / step - 1e-9); k * step <= hi + step * 1e-9 && out.size() < 50;
       k += 1) {
    out.push_back(k == 0 ? 0.0 : k * step);
  }
  return out;
}

std::string short_number(double v) {
  char buf[32];
  double a = std::fabs(v);
  if (a >= 1e9) {
    std::snprintf(buf, sizeof(buf), "%.3gG", v / 1e9);
  } else if (a >= 1e6) {
    std::snprintf(buf, sizeof(buf), "%.3gM", v / 1e6);
  } else if (a >= 1e4) {
    std::snprintf(buf, sizeof(buf), "%.3gk", v / 1e3);
  } else {
    std::snprintf(buf, sizeof(buf), "%.4g", v);
  }
  return buf;
}

std::string svg_line_chart(const std::vector<Series>& series, const ChartOptions& o) {
  std::vector<std::vector<std::pair<double, double>>> pts;
  for (const Series& s : series) pts.push_back(thin(s.points, o.max_points));
  Box box{0, 1, 0, 1, 52, o.width - 10.0, 24, o.height - 36.0};
  std::string out = "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" width=\"" +
                    std::to_string(o.width) + "\" height=\"" + std::to_string(o.height) +
                    "\" viewBox=\"0 0 " + std::to_string(o.width) + " " + std::to_string(o.height) +
                    "\" font-family=\"sans-serif\" font-size=\"11\">";
  out += "<text x=\"" + fmt(box.left) + "\" y=\"15\" font-size=\"13\" font-weight=\"bold\">" +
         html_escape(o.title) + "</text>";
  if (!data_range(pts, box)) {
    return out + "<text x=\"" + fmt(o.width / 2.0) + "\" y=\"" + fmt(o.height / 2.0) +
           "\" text-anchor=\"middle\" fill=\"#888\">no data yet</text></svg>";
  }
  out += axes(box, o);
  for (size_t i = 0; i < pts.size(); ++i) {
    if (pts[i].empty()) continue;
    std::string line;
    for (const auto& [x, y] : pts[i]) line += fmt(box.px(x)) + "," + fmt(box.py(y)) + " ";
    out += "<polyline fill=\"none\" stroke-width=\"1.6\" stroke=\"" + std::string(kPalette[i % 8]) +
           "\" points=\"" + line + "\"/>";
    if (pts[i].size() == 1) {
      out += "<circle r=\"3\" fill=\"" + std::string(kPalette[i % 8]) + "\" cx=\"" +
             fmt(box.px(pts[i][0].first)) + "\" cy=\"" + fmt(box.py(pts[i][0].second)) + "\"/>";
    }
  }
  return out + legend(series, box) + "</svg>";
}

}  // namespace chorus::web
