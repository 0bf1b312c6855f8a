#include "core/proc_maps.h"

#include <fcntl.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <charconv>

namespace gpuscope {

namespace {

// Reads a hex or decimal field and the separator after it; false on anything else.
bool take_number(std::string_view& s, uint64_t& v, int base) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v, base);
  if (ec != std::errc() || p == s.data()) return false;
  s.remove_prefix(static_cast<size_t>(p - s.data()));
  return true;
}

bool take_char(std::string_view& s, char c) {
  if (s.empty() || s.front() != c) return false;
  s.remove_prefix(1);
  return true;
}

void skip_spaces(std::string_view& s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
}

}  // namespace

std::optional<MapEntry> parse_maps_line(std::string_view s) {
  // start-end perms offset major:minor inode [path]
  MapEntry m;
  uint64_t maj = 0, min = 0, ino = 0;
  if (!take_number(s, m.start, 16) || !take_char(s, '-') || !take_number(s, m.end, 16) || !take_char(s, ' '))
    return std::nullopt;
  if (s.size() < 5 || s[4] != ' ') return std::nullopt;
  m.readable = s[0] == 'r';
  m.writable = s[1] == 'w';
  m.executable = s[2] == 'x';
  s.remove_prefix(5);
  if (!take_number(s, m.file_offset, 16) || !take_char(s, ' ') || !take_number(s, maj, 16) || !take_char(s, ':') ||
      !take_number(s, min, 16) || !take_char(s, ' ') || !take_number(s, ino, 10))
    return std::nullopt;
  if (m.end < m.start || maj > 0xfff || min > 0xfffff) return std::nullopt;
  m.dev = makedev(static_cast<unsigned>(maj), static_cast<unsigned>(min));
  m.ino = static_cast<ino_t>(ino);
  skip_spaces(s);
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.remove_suffix(1);
  constexpr std::string_view kDeleted = " (deleted)";
  if (s.size() > kDeleted.size() && s.substr(s.size() - kDeleted.size()) == kDeleted) {
    m.deleted = true;
    s.remove_suffix(kDeleted.size());
  }
  m.path = std::string(s);
  return m;
}

std::vector<MapEntry> parse_maps(std::string_view text) {
  std::vector<MapEntry> out;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    if (auto m = parse_maps_line(line)) out.push_back(std::move(*m));
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
  return out;
}

std::vector<MapEntry> read_proc_maps(pid_t pid) {
  std::string path = "/proc/" + std::to_string(pid) + "/maps";
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  std::string text;
  char buf[65536];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return parse_maps(text);
}

const MapEntry* mapping_at(const std::vector<MapEntry>& maps, uint64_t addr) {
  for (auto& m : maps)
    if (addr >= m.start && addr < m.end) return &m;
  return nullptr;
}

std::vector<MapEntry> read_exec_file_maps(pid_t pid) {
  std::vector<MapEntry> out;
  for (auto& m : read_proc_maps(pid))
    if (m.executable && m.is_file()) out.push_back(std::move(m));
  return out;
}

}  // namespace gpuscope
