#include "cmd/agent/prom.h"

#include "core/output.h"

#include <fmt/format.h>

#include <cmath>
#include <stdexcept>

namespace gpuscope {

namespace {

bool ascii_plain(std::string_view v) {
  for (char c : v)
    if (c == '\\' || c == '"' || c == '\n' || static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}

}  // namespace

std::string prom_escape_label(std::string_view v) {
  if (ascii_plain(v)) return std::string(v);
  std::string o;
  o.reserve(v.size() + 8);
  for (char c : utf8_valid(v)) {
    if (c == '\\')
      o += "\\\\";
    else if (c == '"')
      o += "\\\"";
    else if (c == '\n')
      o += "\\n";
    else
      o += c;
  }
  return o;
}

std::string prom_escape_help(std::string_view v) {
  std::string o;
  for (char c : v) {
    if (c == '\\')
      o += "\\\\";
    else if (c == '\n')
      o += "\\n";
    else
      o += c;
  }
  return o;
}

std::string prom_number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  // Counters up to 2^53 are exact integers; print them without an exponent.
  if (v == std::floor(v) && std::fabs(v) < 9007199254740992.0) return fmt::format("{}", static_cast<int64_t>(v));
  return fmt::format("{}", v);
}

void prom_series(std::string& out, std::string_view name, const PromLabels& labels,
                 const std::pair<std::string, std::string>* extra, const PromLabels* more) {
  out += name;
  if (labels.empty() && !extra && (!more || more->empty())) return;
  out += '{';
  bool first = true;
  auto put = [&](const std::string& k, const std::string& v) {
    if (!first) out += ',';
    first = false;
    out += k;
    out += "=\"";
    if (ascii_plain(v))
      out += v;
    else
      out += prom_escape_label(v);
    out += '"';
  };
  for (auto& [k, v] : labels) put(k, v);
  if (more)
    for (auto& [k, v] : *more) put(k, v);
  if (extra) put(extra->first, extra->second);
  out += '}';
}

void PromSet::family(const std::string& name, Type type, std::string_view help) {
  if (families_.count(name)) return;
  order_.push_back(name);
  families_[name] = Family{type, std::string(help), {}};
}

PromSet::Family& PromSet::get(const std::string& name) {
  auto it = families_.find(name);
  if (it == families_.end()) throw std::logic_error("metric family not declared: " + name);
  return it->second;
}

void PromSet::add(const std::string& name, const PromLabels& labels, double value) {
  Family& f = get(name);
  prom_series(f.body, name, labels);
  f.body += ' ';
  f.body += prom_number(value);
  f.body += '\n';
  series_++;
}

void PromSet::add(const std::string& name, const PromLabels& labels, const PromLabels& more, double value) {
  Family& f = get(name);
  prom_series(f.body, name, labels, nullptr, &more);
  f.body += ' ';
  f.body += prom_number(value);
  f.body += '\n';
  series_++;
}

void PromSet::histogram(const std::string& name, const PromLabels& labels, const std::vector<double>& upper_bounds,
                        const std::vector<uint64_t>& bucket_counts, double sum) {
  Family& f = get(name);
  uint64_t cum = 0;
  std::string bucket = name + "_bucket";
  for (size_t i = 0; i < upper_bounds.size(); i++) {
    cum += i < bucket_counts.size() ? bucket_counts[i] : 0;
    std::pair<std::string, std::string> le{"le", prom_number(upper_bounds[i])};
    prom_series(f.body, bucket, labels, &le);
    f.body += ' ' + prom_number(static_cast<double>(cum)) + '\n';
  }
  for (size_t i = upper_bounds.size(); i < bucket_counts.size(); i++) cum += bucket_counts[i];
  std::pair<std::string, std::string> inf{"le", "+Inf"};
  prom_series(f.body, bucket, labels, &inf);
  f.body += ' ' + prom_number(static_cast<double>(cum)) + '\n';
  prom_series(f.body, name + "_sum", labels);
  f.body += ' ' + prom_number(sum) + '\n';
  prom_series(f.body, name + "_count", labels);
  f.body += ' ' + prom_number(static_cast<double>(cum)) + '\n';
  series_ += upper_bounds.size() + 3;
}

std::string PromSet::text() const {
  std::string out;
  for (auto& name : order_) {
    const Family& f = families_.at(name);
    static const char* types[] = {"counter", "gauge", "histogram"};
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, prom_escape_help(f.help), name,
                       types[static_cast<int>(f.type)]);
    out += f.body;
  }
  return out;
}

}  // namespace gpuscope
