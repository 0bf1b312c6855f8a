#pragma once
#include <fmt/format.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace gpuscope {

// JSON lines are written with fmt rather than a JSON DOM: the trace hot path must turn a
// record into a line in well under a microsecond, and every value here is a number or a
// short string that json_escape makes safe.
void json_escape(fmt::memory_buffer& out, std::string_view s);
// Writes the escaped form at p (room for 6 bytes per input byte); returns the new end.
char* json_escape_to(char* p, std::string_view s);

class JsonLine {
 public:
  explicit JsonLine(fmt::memory_buffer& buf) : b_(buf), start_(buf.size()) {
    ensure(512);
    *p_++ = '{';
  }
  JsonLine& str(std::string_view k, std::string_view v) {
    key(k);
    ensure(v.size() * 6 + 2);
    *p_++ = '"';
    p_ = json_escape_to(p_, v);
    *p_++ = '"';
    return *this;
  }
  template <typename T>
  JsonLine& num(std::string_view k, T v) {
    key(k);
    fmt::format_int f(v);
    put(f.data(), f.size());
    return *this;
  }
  JsonLine& boolean(std::string_view k, bool v) {
    key(k);
    if (v)
      put("true", 4);
    else
      put("false", 5);
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
    key(k);
    for (int i = 0; i < 3; i++) {
      *p_++ = i ? ',' : '[';
      fmt::format_int f(v[i]);
      put(f.data(), f.size());
    }
    *p_++ = ']';
    return *this;
  }
  void end() {
    *p_++ = '}';
    *p_++ = '\n';
    b_.resize(static_cast<size_t>(p_ - b_.data()));
  }

 private:
  // Lines are written straight into the buffer's storage: one bounds check per value
  // instead of one append call per fragment.
  void ensure(size_t n) {
    size_t used = p_ ? static_cast<size_t>(p_ - b_.data()) : start_;
    if (p_ && used + n + 64 <= b_.size()) return;
    b_.resize(used + n + 1024);
    p_ = b_.data() + used;
  }
  void put(const char* s, size_t n) {
    memcpy(p_, s, n);
    p_ += n;
  }
  void key(std::string_view k) {
    ensure(k.size() + 48);
    if (!first_) *p_++ = ',';
    first_ = false;
    *p_++ = '"';
    put(k.data(), k.size());
    *p_++ = '"';
    *p_++ = ':';
  }
  fmt::memory_buffer& b_;
  size_t start_;
  char* p_ = nullptr;
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
