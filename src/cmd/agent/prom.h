#pragma once
// Prometheus text exposition format 0.0.4, written in one place: every view that exports
// metrics (the agent today) adds families here. Debian's prometheus-cpp ships only shared
// objects, which the self-contained binary cannot link.
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gpuscope {

using PromLabels = std::vector<std::pair<std::string, std::string>>;

// Label values: made valid UTF-8 as JSON reads the same bytes (utf8_valid), then backslash,
// double quote and newline escaped.
std::string prom_escape_label(std::string_view v);
// HELP text: backslash and newline escaped.
std::string prom_escape_help(std::string_view v);
// A sample value: integers exactly, +Inf/-Inf/NaN spelled as Prometheus reads them.
std::string prom_number(double v);

// The metrics of one scrape. Samples of a family stay together and families come out in the
// order they were declared, each with its HELP and TYPE once.
class PromSet {
 public:
  enum class Type { counter, gauge, histogram };
  // Declares a family (again: no effect). Names follow Prometheus: `_total` counters, base units.
  void family(const std::string& name, Type type, std::string_view help);
  // One sample of a declared counter or gauge.
  void add(const std::string& name, const PromLabels& labels, double value);
  // The same, with labels `more` after `labels` (no copy of either).
  void add(const std::string& name, const PromLabels& labels, const PromLabels& more, double value);
  // One histogram series: upper bounds (ascending, +Inf implied) with the count of each bucket
  // (not cumulative), and the sum of the observed values.
  void histogram(const std::string& name, const PromLabels& labels, const std::vector<double>& upper_bounds,
                 const std::vector<uint64_t>& bucket_counts, double sum);
  size_t series() const { return series_; }
  std::string text() const;

 private:
  struct Family {
    Type type;
    std::string help;
    std::string body;
  };
  Family& get(const std::string& name);
  std::vector<std::string> order_;
  std::map<std::string, Family> families_;
  size_t series_ = 0;
};

// Writes `name{labels}` (no braces when there are none) into out.
void prom_series(std::string& out, std::string_view name, const PromLabels& labels,
                 const std::pair<std::string, std::string>* extra = nullptr, const PromLabels* more = nullptr);

}  // namespace gpuscope
