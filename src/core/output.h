#pragma once
#include <fmt/format.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace gpuscope {

// The one JSON writer. Lines are written with fmt rather than a JSON DOM: the trace hot path
// must turn a record into a line in well under a microsecond. Strings are escaped so that any
// byte a process or kernel name can hold gives valid JSON (invalid UTF-8 as \u00XX).
void json_escape(fmt::memory_buffer& out, std::string_view s);
// Writes the escaped form at p (room for 6 bytes per input byte); returns the new end.
char* json_escape_to(char* p, std::string_view s);
// The text a JSON reader decodes from json_escape(s): s itself where it is valid UTF-8, each
// byte of no valid sequence read as Latin-1 (U+0080..U+00FF). Every other writer of names (the
// Prometheus labels) uses it, so that one process name reads the same everywhere.
std::string utf8_valid(std::string_view s);

// One JSON object per line: JsonLine(buf).record("x", ts_ns).num("n", 1).end(). Nested arrays
// and objects open with begin_array/begin_object(key) and close with end_array/end_object;
// inside an array, values take no key (the overloads without one).
class JsonLine {
 public:
  explicit JsonLine(fmt::memory_buffer& buf) : b_(buf), start_(buf.size()) {
    ensure(512);
    *p_++ = '{';
  }
  // The head of every line (docs/json.md): its type, and ts_ns, the time it speaks of in
  // nanoseconds since the Unix epoch (CLOCK_REALTIME), so that lines of every subcommand sort
  // on one clock.
  JsonLine& record(std::string_view type, uint64_t ts_ns) { return str("type", type).num("ts_ns", ts_ns); }
  JsonLine& str(std::string_view k, std::string_view v) {
    key(k);
    return str_value(v);
  }
  JsonLine& str(std::string_view v) {
    item();
    return str_value(v);
  }
  template <typename T>
  JsonLine& num(std::string_view k, T v) {
    key(k);
    return num_value(v);
  }
  template <typename T>
  JsonLine& num(T v) {
    item();
    return num_value(v);
  }
  // A floating-point value: with `decimals` digits after the point, or the shortest form that
  // reads back the same when decimals < 0. NaN and infinities, which JSON lacks, are null.
  JsonLine& real(std::string_view k, double v, int decimals = -1) {
    key(k);
    return real_value(v, decimals);
  }
  JsonLine& real(double v, int decimals = -1) {
    item();
    return real_value(v, decimals);
  }
  JsonLine& boolean(std::string_view k, bool v) {
    key(k);
    if (v)
      put("true", 4);
    else
      put("false", 5);
    return *this;
  }
  JsonLine& null(std::string_view k) {
    key(k);
    put("null", 4);
    return *this;
  }
  JsonLine& hex(std::string_view k, unsigned long long v) {
    key(k);
    char tmp[24];
    char* end = tmp + sizeof tmp;
    char* p = end;
    *--p = '"';
    do {
      *--p = "0123456789abcdef"[v & 15];
      v >>= 4;
    } while (v);
    *--p = 'x';
    *--p = '0';
    *--p = '"';
    put(p, static_cast<size_t>(end - p));
    return *this;
  }
  JsonLine& triple(std::string_view k, const unsigned* v) {
    begin_array(k);
    for (int i = 0; i < 3; i++) num(v[i]);
    return end_array();
  }
  JsonLine& begin_array(std::string_view k) { return open(k, '['); }
  JsonLine& begin_array() { return open_item('['); }
  JsonLine& begin_object(std::string_view k) { return open(k, '{'); }
  JsonLine& begin_object() { return open_item('{'); }
  JsonLine& end_array() { return close(']'); }
  JsonLine& end_object() { return close('}'); }
  void end() {
    ensure(2);
    *p_++ = '}';
    *p_++ = '\n';
    b_.resize(static_cast<size_t>(p_ - b_.data()));
  }

 private:
  static constexpr int kMaxDepth = 16;
  // Lines are written straight into the buffer's storage: one bounds check per value
  // instead of one append call per fragment.
  void ensure(size_t n) {
    size_t used = p_ ? static_cast<size_t>(p_ - b_.data()) : start_;
    if (p_ && used + n + 64 <= b_.size()) return;
    b_.resize(used + n + 1024);
    p_ = b_.data() + used;
  }
  void put(const char* s, size_t n) {
    ensure(n);
    memcpy(p_, s, n);
    p_ += n;
  }
  void key(std::string_view k) {
    ensure(k.size() * 6 + 48);
    if (!first_[depth_]) *p_++ = ',';
    first_[depth_] = false;
    *p_++ = '"';
    p_ = json_escape_to(p_, k);
    *p_++ = '"';
    *p_++ = ':';
  }
  void item() {
    ensure(48);
    if (!first_[depth_]) *p_++ = ',';
    first_[depth_] = false;
  }
  JsonLine& str_value(std::string_view v) {
    ensure(v.size() * 6 + 2);
    *p_++ = '"';
    p_ = json_escape_to(p_, v);
    *p_++ = '"';
    return *this;
  }
  template <typename T>
  JsonLine& num_value(T v) {
    fmt::format_int f(v);
    put(f.data(), f.size());
    return *this;
  }
  JsonLine& real_value(double v, int decimals);
  JsonLine& open(std::string_view k, char c) {
    key(k);
    return push(c);
  }
  JsonLine& open_item(char c) {
    item();
    return push(c);
  }
  JsonLine& push(char c) {
    *p_++ = c;
    if (depth_ + 1 < kMaxDepth) first_[++depth_] = true;
    return *this;
  }
  JsonLine& close(char c) {
    ensure(1);
    *p_++ = c;
    if (depth_ > 0) depth_--;
    return *this;
  }
  fmt::memory_buffer& b_;
  size_t start_;
  char* p_ = nullptr;
  int depth_ = 0;
  bool first_[kMaxDepth] = {true};
};

// Writes buffered output to stdout in large chunks; flushes at the end of each poll round.
class Writer {
 public:
  static constexpr size_t kMaxKeptBytes = 1 << 20;  // capacity kept across flushes
  fmt::memory_buffer& buf() { return buf_; }
  void flush();
  // Writes out once kMaxKeptBytes / 4 are buffered: a stream of lines holds at most that much.
  void flush_if_full() {
    if (buf_.size() >= kMaxKeptBytes / 4) flush();
  }
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
