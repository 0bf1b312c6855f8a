// The SVG is written here rather than by flamegraph.pl: gpuscope is one static binary that must
// run on hosts without Perl or a flamegraph package (Debian's packages are scripts, nothing to
// link), and a flame graph is a few rectangles.
#include "core/flamegraph.h"

#include <fmt/format.h>

#include <algorithm>
#include <memory>

namespace gpuscope {

std::string fold(const std::vector<std::string>& frames) {
  std::string out;
  for (size_t i = 0; i < frames.size(); i++) {
    if (i) out.push_back(';');
    for (char c : frames[i]) out.push_back(c == ';' ? ':' : c == '\n' ? ' ' : c);
  }
  return out;
}

std::string folded_text(const Folded& f) {
  std::string out;
  for (auto& [stack, w] : f)
    if (w) out += fmt::format("{} {}\n", stack, w);
  return out;
}

namespace {

struct Node {
  std::string name;
  uint64_t total = 0;
  std::map<std::string, std::unique_ptr<Node>> kids;  // sorted by name, as flamegraph.pl does
};

void escape(std::string& out, std::string_view s) {
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        // XML 1.0 allows no control characters but tab, newline and carriage return.
        if (static_cast<unsigned char>(c) < 0x20)
          out.push_back(' ');
        else
          out.push_back(c);
    }
  }
}

// Warm colours, fixed per name so that two graphs of one program look alike.
std::string colour(const std::string& name) {
  uint32_t h = 2166136261u;
  for (unsigned char c : name) h = (h ^ c) * 16777619u;
  unsigned r = 205 + (h % 50), g = (h >> 8) % 230, b = (h >> 16) % 55;
  if (name.ends_with("_[k]")) r = 200, g = 100 + (h % 80), b = 100 + ((h >> 8) % 80);  // kernel: pinker
  return fmt::format("rgb({},{},{})", r, g, b);
}

int depth_of(const Node& n) {
  int d = 0;
  for (auto& [_, k] : n.kids) d = std::max(d, depth_of(*k));
  return d + 1;
}

struct Layout {
  std::string& out;
  double width, xpad, frame_h, base_y, per_unit;
  uint64_t grand;
  const std::string& unit;
  int frames = 0;

  void draw(const Node& n, int depth, double x) {
    double w = static_cast<double>(n.total) * per_unit;
    if (w < 0.1) return;  // too thin to see
    double y = base_y - (depth + 1) * frame_h;
    out += "<g><title>";
    escape(out, n.name);
    out += fmt::format(" ({} {}, {:.2f}%)</title>", n.total, unit, 100.0 * static_cast<double>(n.total) / grand);
    out += fmt::format(
        "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\" rx=\"2\" ry=\"2\"/>", x, y, w,
        frame_h - 1, colour(n.name));
    size_t fit = static_cast<size_t>(w / 7);  // about 7 px per character at 12 px
    if (fit >= 3) {
      std::string label = n.name.size() <= fit ? n.name : n.name.substr(0, fit - 2) + "..";
      out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\">", x + 3, y + frame_h - 5);
      escape(out, label);
      out += "</text>";
    }
    out += "</g>\n";
    frames++;
    double kx = x;
    for (auto& [_, k] : n.kids) {
      draw(*k, depth + 1, kx);
      kx += static_cast<double>(k->total) * per_unit;
    }
  }
};

}  // namespace

std::string flamegraph_svg(const Folded& f, const std::string& title, const std::string& unit) {
  Node root{"all"};
  for (auto& [stack, w] : f) {
    if (!w) continue;
    root.total += w;
    Node* n = &root;
    size_t pos = 0;
    while (pos <= stack.size()) {
      size_t semi = stack.find(';', pos);
      if (semi == std::string::npos) semi = stack.size();
      std::string name = stack.substr(pos, semi - pos);
      auto& k = n->kids[name];
      if (!k) k = std::make_unique<Node>(Node{name});
      k->total += w;
      n = k.get();
      pos = semi + 1;
    }
  }
  const double width = 1200, xpad = 10, frame_h = 16, top = 40, bottom = 20;
  int depth = depth_of(root);
  double height = top + depth * frame_h + bottom;
  std::string out;
  out += "<?xml version=\"1.0\" standalone=\"no\"?>\n";
  out += fmt::format(
      "<svg version=\"1.1\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" "
      "viewBox=\"0 0 {0} {1}\">\n",
      width, height);
  out += "<style>text { font-family: Verdana, sans-serif; font-size: 12px; fill: #000; }</style>\n";
  out += fmt::format("<rect x=\"0\" y=\"0\" width=\"{}\" height=\"{}\" fill=\"#f8f8f8\"/>\n", width, height);
  out += fmt::format("<text x=\"{}\" y=\"24\" text-anchor=\"middle\" style=\"font-size:17px\">", width / 2);
  escape(out, title);
  out += "</text>\n";
  if (root.total) {
    Layout l{
        out,        width, xpad, frame_h, top + depth * frame_h, (width - 2 * xpad) / static_cast<double>(root.total),
        root.total, unit};
    l.draw(root, 0, xpad);
  } else {
    out += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">no samples</text>\n", width / 2, top + 16);
  }
  out += "</svg>\n";
  return out;
}

}  // namespace gpuscope
