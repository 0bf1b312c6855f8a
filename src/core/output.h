#pragma once
#include <fmt/format.h>

#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace gpuscope {

// JSON lines are written with fmt rather than a JSON DOM: the trace hot path must turn a
// record into a line in well under a microsecond, and every value here is a number or a
// short string that json_escape makes safe.
void json_escape(fmt::memory_buffer& out, std::string_view s);

class JsonLine {
 public:
  explicit JsonLine(fmt::memory_buffer& buf) : b_(buf) { b_.push_back('{'); }
  JsonLine& str(std::string_view k, std::string_view v) {
    key(k);
    b_.push_back('"');
    json_escape(b_, v);
    b_.push_back('"');
    return *this;
  }
  template <typename T>
  JsonLine& num(std::string_view k, T v) {
    key(k);
    fmt::format_to(std::back_inserter(b_), "{}", v);
    return *this;
  }
  JsonLine& boolean(std::string_view k, bool v) {
    key(k);
    fmt::format_to(std::back_inserter(b_), "{}", v ? "true" : "false");
    return *this;
  }
  JsonLine& hex(std::string_view k, unsigned long long v) {
    key(k);
    fmt::format_to(std::back_inserter(b_), "\"0x{:x}\"", v);
    return *this;
  }
  JsonLine& triple(std::string_view k, const unsigned* v) {
    key(k);
    fmt::format_to(std::back_inserter(b_), "[{},{},{}]", v[0], v[1], v[2]);
    return *this;
  }
  void end() {
    b_.push_back('}');
    b_.push_back('\n');
  }

 private:
  void key(std::string_view k) {
    if (!first_) b_.push_back(',');
    first_ = false;
    b_.push_back('"');
    b_.append(k);
    b_.push_back('"');
    b_.push_back(':');
  }
  fmt::memory_buffer& b_;
  bool first_ = true;
};

// Writes buffered output to stdout in large chunks; flushes at the end of each poll round.
class Writer {
 public:
  fmt::memory_buffer& buf() { return buf_; }
  void flush();
  ~Writer() { flush(); }

 private:
  fmt::memory_buffer buf_;
};

// Fixed-width table rows with a header, as bcc tools print them.
class Table {
 public:
  struct Column {
    std::string name;
    int width;  // negative: left-aligned
  };
  explicit Table(std::vector<Column> cols) : cols_(std::move(cols)) {}
  void header(fmt::memory_buffer& out) const;
  void row(fmt::memory_buffer& out, const std::vector<std::string>& cells) const;

 private:
  std::vector<Column> cols_;
};

}  // namespace gpuscope
