#include "core/output.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>

namespace gpuscope {

namespace {

// Length of the valid UTF-8 sequence at s[i], or 0 when the byte there starts none.
size_t utf8_len(std::string_view s, size_t i) {
  auto c = static_cast<unsigned char>(s[i]);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; k++)
    if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) return 0;
  if (n == 2 && c < 0xc2) return 0;  // overlong
  if (n == 3) {
    auto c1 = static_cast<unsigned char>(s[i + 1]);
    if ((c == 0xe0 && c1 < 0xa0) || (c == 0xed && c1 >= 0xa0)) return 0;  // overlong, surrogate
  }
  if (n == 4) {
    auto c1 = static_cast<unsigned char>(s[i + 1]);
    if ((c == 0xf0 && c1 < 0x90) || c > 0xf4 || (c == 0xf4 && c1 >= 0x90)) return 0;
  }
  return n;
}

}  // namespace

std::string utf8_valid(std::string_view s) {
  std::string o;
  o.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t n = utf8_len(s, i);
    if (n) {
      o.append(s.data() + i, n);
      i += n;
      continue;
    }
    auto c = static_cast<unsigned char>(s[i++]);
    o += static_cast<char>(0xc0 | (c >> 6));
    o += static_cast<char>(0x80 | (c & 0x3f));
  }
  return o;
}

char* json_escape_to(char* p, std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') {
      *p++ = static_cast<char>(c);
      i++;
      continue;
    }
    if (c >= 0x80) {
      if (size_t n = utf8_len(s, i)) {
        memcpy(p, s.data() + i, n);
        p += n;
        i += n;
        continue;
      }
    }
    *p++ = '\\';
    switch (c) {
      case '"': *p++ = '"'; break;
      case '\\': *p++ = '\\'; break;
      case '\n': *p++ = 'n'; break;
      case '\t': *p++ = 't'; break;
      default:
        // A control character, or a byte of no valid UTF-8 sequence (read as Latin-1).
        *p++ = 'u';
        *p++ = '0';
        *p++ = '0';
        *p++ = "0123456789abcdef"[c >> 4];
        *p++ = "0123456789abcdef"[c & 15];
    }
    i++;
  }
  return p;
}

void json_escape(fmt::memory_buffer& out, std::string_view s) {
  size_t at = out.size();
  out.resize(at + s.size() * 6);
  char* end = json_escape_to(out.data() + at, s);
  out.resize(static_cast<size_t>(end - out.data()));
}

JsonLine& JsonLine::real_value(double v, int decimals) {
  if (!std::isfinite(v)) {
    put("null", 4);
    return *this;
  }
  char tmp[64];
  auto r = decimals < 0 ? fmt::format_to_n(tmp, sizeof tmp, "{}", v)
                        : fmt::format_to_n(tmp, sizeof tmp, "{:.{}f}", v, decimals);
  put(tmp, std::min(r.size, sizeof tmp));
  return *this;
}

void Writer::flush() {
  const char* p = buf_.data();
  size_t left = buf_.size();
  while (left > 0) {
    ssize_t n = ::write(STDOUT_FILENO, p, left);
    if (n <= 0) break;
    p += n;
    left -= static_cast<size_t>(n);
  }
  buf_.clear();
  // A burst (a full ring buffer drained at once) grows the buffer; its capacity would stay.
  if (buf_.capacity() > kMaxKeptBytes) buf_ = fmt::memory_buffer();
}

void Table::header(fmt::memory_buffer& out) const {
  std::vector<std::string> names;
  for (auto& c : cols_) names.push_back(c.name);
  row(out, names);
}

void Table::row(fmt::memory_buffer& out, const std::vector<std::string>& cells) const {
  for (size_t i = 0; i < cols_.size() && i < cells.size(); i++) {
    int w = cols_[i].width;
    bool last = i + 1 == cols_.size();
    if (last)
      out.append(cells[i]);
    else if (w < 0)
      fmt::format_to(std::back_inserter(out), "{:<{}} ", cells[i], -w);
    else
      fmt::format_to(std::back_inserter(out), "{:>{}} ", cells[i], w);
  }
  out.push_back('\n');
}

}  // namespace gpuscope
