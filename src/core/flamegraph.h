#pragma once
// Folded stacks ("frame;frame;frame weight", outermost first, as flamegraph.pl reads them) and
// the flame graph drawn from them as SVG.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace gpuscope {

using Folded = std::map<std::string, uint64_t>;  // "a;b;c" -> weight

// Frames are joined with ';'; a ';' or newline inside a frame name would split it, so it is
// replaced.
std::string fold(const std::vector<std::string>& outermost_first);
std::string folded_text(const Folded& f);
// A self-contained SVG flame graph, well-formed XML: one <rect> and <title> per frame.
std::string flamegraph_svg(const Folded& f, const std::string& title, const std::string& unit);

}  // namespace gpuscope
