#include "core/output.h"

#include <unistd.h>

namespace gpuscope {

void json_escape(fmt::memory_buffer& out, std::string_view s) {
  size_t clean = 0;
  while (clean < s.size() && static_cast<unsigned char>(s[clean]) >= 0x20 && s[clean] != '"' && s[clean] != '\\')
    clean++;
  out.append(s.substr(0, clean));
  for (unsigned char c : s.substr(clean)) {
    switch (c) {
      case '"': out.append(std::string_view("\\\"")); break;
      case '\\': out.append(std::string_view("\\\\")); break;
      case '\n': out.append(std::string_view("\\n")); break;
      case '\t': out.append(std::string_view("\\t")); break;
      default:
        if (c < 0x20)
          fmt::format_to(std::back_inserter(out), "\\u{:04x}", c);
        else
          out.push_back(static_cast<char>(c));
    }
  }
}

char* json_escape_to(char* p, std::string_view s) {
  for (unsigned char c : s) {
    if (c >= 0x20 && c != '"' && c != '\\') {
      *p++ = static_cast<char>(c);
      continue;
    }
    *p++ = '\\';
    switch (c) {
      case '"': *p++ = '"'; break;
      case '\\': *p++ = '\\'; break;
      case '\n': *p++ = 'n'; break;
      case '\t': *p++ = 't'; break;
      default:
        *p++ = 'u';
        *p++ = '0';
        *p++ = '0';
        *p++ = "0123456789abcdef"[c >> 4];
        *p++ = "0123456789abcdef"[c & 15];
    }
  }
  return p;
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
