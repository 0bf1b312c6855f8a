#include "python/pystacks.h"

#include <bpf/bpf.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstring>
#include <regex>

#include <fmt/format.h>

#include "core/elf_symbols.h"
#include "core/fd.h"
#include "core/proc_maps.h"

namespace gpuscope {

namespace {

// Offsets of one minor version. Numbers printed by tools/py_offsets.c compiled against that
// version's own internal headers with Py_BUILD_CORE: 3.11 from Debian 12's python3.11-dev
// 3.11.2 (pyenv's 3.11.7 gives the same), 3.12 from pyenv's 3.12.1 headers. 3.13's walk offsets
// come from the interpreter (_Py_DebugOffsets); its string layout is this table's.
struct Layout {
  int minor;
  uint16_t runtime_interpreters_head, interp_threads_head, tstate_next, tstate_native_thread_id, tstate_frame,
      cframe_current_frame, frame_code, frame_previous, frame_instr, frame_owner, frame_is_entry, code_filename,
      code_qualname, code_linetable, code_firstlineno, code_adaptive, ascii_size, compact_size, compact_utf8;
};
constexpr Layout kLayouts[] = {
    {11, 40, 16, 8, 160, 56, 8, 32, 48, 56, 69, 68, 112, 128, 136, 72, 184, 48, 72, 56},
    {12, 40, 72, 8, 144, 56, 0, 0, 8, 56, 70, GS_PY_NONE, 112, 128, 136, 68, 192, 40, 56, 48},
    {13, 0, 0, 0, 0, 0, GS_PY_NONE, 0, 0, 0, 0, GS_PY_NONE, 0, 0, 0, 0, 0, 40, 56, 48},
};
constexpr uint16_t kBytesSval = 32, kBytesSize = 16, kUnicodeState = 32, kUnicodeLength = 16;

const Layout* layout_of(int major, int minor) {
  if (major != 3) return nullptr;
  for (auto& l : kLayouts)
    if (l.minor == minor) return &l;
  return nullptr;
}

// _Py_DebugOffsets as 3.13 lays it out (Include/internal/pycore_runtime.h): every field a u64.
// Its own layout changes between minor versions, so only 3.13's is read.
struct DebugOffsets313 {
  char cookie[8];
  uint64_t version, free_threaded;
  uint64_t rt_size, rt_finalizing, rt_interpreters_head;
  uint64_t is_size, is_id, is_next, is_threads_head, is_rest[9];
  uint64_t ts_size, ts_prev, ts_next, ts_interp, ts_current_frame, ts_thread_id, ts_native_thread_id,
      ts_datastack_chunk, ts_status;
  uint64_t fr_size, fr_previous, fr_executable, fr_instr_ptr, fr_localsplus, fr_owner;
  uint64_t co_size, co_filename, co_name, co_qualname, co_linetable, co_firstlineno, co_argcount, co_localsplusnames,
      co_localspluskinds, co_code_adaptive;
};
static_assert(offsetof(DebugOffsets313, rt_interpreters_head) == 40);
static_assert(offsetof(DebugOffsets313, ts_size) == 152);
static_assert(offsetof(DebugOffsets313, co_code_adaptive) == 344);

bool read_mem(int fd, uint64_t addr, void* buf, size_t n) {
  return fd >= 0 && pread(fd, buf, n, static_cast<off_t>(addr)) == static_cast<ssize_t>(n);
}

template <class T>
std::optional<T> read_val(int fd, uint64_t addr) {
  T v{};
  if (!read_mem(fd, addr, &v, sizeof v)) return std::nullopt;
  return v;
}

Fd open_mem(pid_t pid) { return Fd(open(fmt::format("/proc/{}/mem", pid).c_str(), O_RDONLY | O_CLOEXEC)); }

struct ElfObjects {
  bool exec = false;
  uint64_t first_load_vaddr = 0;
  std::map<std::string, uint64_t> syms;  // wanted symbols by value
};

// _PyRuntime is exported by every CPython build (the stripped Debian and Ubuntu executables have
// no .symtab).
std::optional<ElfObjects> elf_objects(const std::string& path, const std::set<std::string>& want) {
  try {
    ElfFile f(path);
    return ElfObjects{f.is_executable(), f.first_load_vaddr(), f.values_of(want)};
  } catch (const std::runtime_error&) {
    return std::nullopt;
  }
}

std::string base_name(const std::string& p) {
  auto s = p.rfind('/');
  return s == std::string::npos ? p : p.substr(s + 1);
}

void append_utf8(std::string& out, uint32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xc0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3f));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xe0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (c & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (c & 0x3f));
  }
}

// A str object's text as UTF-8 (compact strings: every str a code object holds).
std::optional<std::string> read_str(int fd, uint64_t obj, const Layout& l) {
  constexpr int64_t kMax = 4096;
  auto state = read_val<uint32_t>(fd, obj + kUnicodeState);
  auto len = read_val<int64_t>(fd, obj + kUnicodeLength);
  if (!state || !len || *len < 0 || *len > kMax) return std::nullopt;
  bool compact = (*state >> 5) & 1, ascii = (*state >> 6) & 1;
  unsigned kind = (*state >> 2) & 7;
  if (!compact) return std::nullopt;
  std::string s;
  if (ascii) {
    s.resize(static_cast<size_t>(*len));
    if (!read_mem(fd, obj + l.ascii_size, s.data(), s.size())) return std::nullopt;
    return s;
  }
  if (kind != 1 && kind != 2 && kind != 4) return std::nullopt;
  std::string raw(static_cast<size_t>(*len) * kind, '\0');
  if (!read_mem(fd, obj + l.compact_size, raw.data(), raw.size())) return std::nullopt;
  for (int64_t i = 0; i < *len; i++) {
    uint32_t c = 0;
    memcpy(&c, raw.data() + i * kind, kind);
    append_utf8(s, c);
  }
  return s;
}

std::optional<std::string> read_bytes(int fd, uint64_t obj) {
  auto len = read_val<int64_t>(fd, obj + kBytesSize);
  if (!len || *len < 0 || *len > (1 << 20)) return std::nullopt;
  std::string s(static_cast<size_t>(*len), '\0');
  if (!read_mem(fd, obj + kBytesSval, s.data(), s.size())) return std::nullopt;
  return s;
}

}  // namespace

std::string PyTarget::version() const {
  return micro < 0 ? fmt::format("{}.{}", major, minor) : fmt::format("{}.{}.{}", major, minor, micro);
}

std::optional<PyTarget> find_python(pid_t pid, std::string* why) {
  static const std::regex name(R"(^(lib)?python(\d)\.(\d+)[^/]*$)");
  struct File {
    std::string path;
    uint64_t first_start = UINT64_MAX;
    int major = 0, minor = 0;
  };
  std::map<std::pair<dev_t, ino_t>, File> files;
  // The executable too, whatever its name (an embedding program, a renamed interpreter): its
  // version then comes from Py_Version alone.
  char exe_buf[4096];
  ssize_t n = readlink(fmt::format("/proc/{}/exe", pid).c_str(), exe_buf, sizeof exe_buf);
  std::string exe(exe_buf, n > 0 ? static_cast<size_t>(n) : 0);
  for (auto& m : read_proc_maps(pid)) {
    if (!m.is_file()) continue;
    std::smatch mt;
    std::string b = base_name(m.path);
    bool named = std::regex_match(b, mt, name) && (b.find(".so") != std::string::npos || !mt[1].matched);
    if (!named && m.path != exe) continue;
    File& f = files[{m.dev, m.ino}];
    f.path = m.path;
    if (named) {
      f.major = std::stoi(mt[2]);
      f.minor = std::stoi(mt[3]);
    }
    if (m.file_offset == 0 && m.start < f.first_start) f.first_start = m.start;
  }
  for (auto& [_, f] : files) {
    auto elf = elf_objects(fmt::format("/proc/{}/root{}", pid, f.path), {"_PyRuntime", "Py_Version"});
    if (!elf || !elf->syms.count("_PyRuntime") || f.first_start == UINT64_MAX) continue;
    uint64_t bias = elf->exec ? 0 : f.first_start - elf->first_load_vaddr;
    PyTarget t{f.major, f.minor, -1, bias + elf->syms["_PyRuntime"], f.path};
    // Py_Version (3.11+) is PY_VERSION_HEX: the interpreter's own word over the file name's.
    if (elf->syms.count("Py_Version")) {
      Fd mem = open_mem(pid);
      if (auto v = read_val<uint64_t>(mem.get(), bias + elf->syms["Py_Version"])) {
        t.major = static_cast<int>((*v >> 24) & 0xff);
        t.minor = static_cast<int>((*v >> 16) & 0xff);
        t.micro = static_cast<int>((*v >> 8) & 0xff);
      }
    }
    if (!t.major) continue;  // an executable of another name without Py_Version: not a CPython we know
    return t;
  }
  if (why) *why = "no python3.X or libpython3.X with _PyRuntime mapped, nor an executable exporting it";
  return std::nullopt;
}

namespace {

// t's layout: the table's, with 3.13's walk and code fields from the interpreter's own
// _Py_DebugOffsets.
std::optional<Layout> layout_for(int mem_fd, const PyTarget& t) {
  const Layout* l = layout_of(t.major, t.minor);
  if (!l) return std::nullopt;
  if (t.minor < 13) return *l;
  auto d = read_val<DebugOffsets313>(mem_fd, t.runtime_addr);
  if (!d || memcmp(d->cookie, "xdebugpy", 8) != 0 || ((d->version >> 16) & 0xffff) != 0x030d || d->free_threaded)
    return std::nullopt;
  auto u16 = [](uint64_t v) { return static_cast<uint16_t>(v); };
  Layout o = *l;
  o.runtime_interpreters_head = u16(d->rt_interpreters_head);
  o.interp_threads_head = u16(d->is_threads_head);
  o.tstate_next = u16(d->ts_next);
  o.tstate_native_thread_id = u16(d->ts_native_thread_id);
  o.tstate_frame = u16(d->ts_current_frame);
  o.frame_code = u16(d->fr_executable);
  o.frame_previous = u16(d->fr_previous);
  o.frame_instr = u16(d->fr_instr_ptr);
  o.frame_owner = u16(d->fr_owner);
  o.code_filename = u16(d->co_filename);
  o.code_qualname = u16(d->co_qualname);
  o.code_linetable = u16(d->co_linetable);
  o.code_firstlineno = u16(d->co_firstlineno);
  o.code_adaptive = u16(d->co_code_adaptive);
  return o;
}

}  // namespace

std::optional<gs_py_proc> py_offsets(pid_t pid, const PyTarget& t) {
  Fd mem = t.minor >= 13 ? open_mem(pid) : Fd();
  std::optional<Layout> l = layout_for(mem.get(), t);
  if (!l) return std::nullopt;
  // The BPF side reads frame fields from a 72-byte window.
  if (l->frame_code > 64 || l->frame_previous > 64 || l->frame_instr > 64 || l->frame_owner > 71) return std::nullopt;
  return gs_py_proc{.interp_head_addr = t.runtime_addr + l->runtime_interpreters_head,
                    .interp_threads_head = l->interp_threads_head,
                    .tstate_next = l->tstate_next,
                    .tstate_native_thread_id = l->tstate_native_thread_id,
                    .tstate_frame = l->tstate_frame,
                    .cframe_current_frame = l->cframe_current_frame,
                    .frame_code = l->frame_code,
                    .frame_previous = l->frame_previous,
                    .frame_instr = l->frame_instr,
                    .frame_owner = l->frame_owner,
                    .frame_is_entry = l->frame_is_entry,
                    .code_qualname = l->code_qualname,
                    .code_adaptive = l->code_adaptive};
}

int py_line_at(const std::string& table, int firstlineno, uint32_t lasti) {
  const auto* p = reinterpret_cast<const uint8_t*>(table.data());
  size_t n = table.size(), i = 0;
  int line = firstlineno;
  uint64_t addr = 0;
  auto varint = [&](size_t& at) {
    uint32_t v = 0;
    int shift = 0;
    while (at < n) {
      uint8_t b = p[at++];
      if (shift < 30) v |= static_cast<uint32_t>(b & 63) << shift;
      shift += 6;
      if (!(b & 64)) break;
    }
    return v;
  };
  while (i < n) {
    uint8_t first = p[i];
    if (!(first & 0x80)) return firstlineno;  // not an entry start: not a table we understand
    int code = (first >> 3) & 15;
    uint64_t len = (first & 7) + 1;
    size_t at = i + 1;
    if (code == 13 || code == 14) {
      uint32_t u = varint(at);
      line += (u & 1) ? -static_cast<int>(u >> 1) : static_cast<int>(u >> 1);
    } else if (code >= 10 && code <= 12) {
      line += code - 10;
    }
    if (lasti < addr + len) return line;
    addr += len;
    for (i++; i < n && !(p[i] & 0x80); i++) {
    }
  }
  return line;
}

std::vector<std::string> py_merge(const std::vector<std::string>& native, const std::vector<PyFrame>& py) {
  std::vector<std::vector<std::string>> groups(1);
  for (auto& f : py) {
    groups.back().push_back(f.name);
    if (f.entry) groups.emplace_back();
  }
  if (groups.back().empty()) groups.pop_back();
  std::vector<std::string> out;
  size_t g = 0;
  for (auto& n : native) {
    // A bare address is in no mapping: what a frame-pointer walk reads once it has left code
    // built without frame pointers (Debian's and Ubuntu's interpreters), not a frame.
    if (!py.empty() && (n.starts_with("py::") || (n.starts_with("0x") && n.find(' ') == std::string::npos))) continue;
    if (n.starts_with("_PyEval_EvalFrameDefault") && g < groups.size()) {
      out.insert(out.end(), groups[g].begin(), groups[g].end());
      g++;
      continue;
    }
    out.push_back(n);
  }
  for (; g < groups.size(); g++) out.insert(out.end(), groups[g].begin(), groups[g].end());
  return out;
}

PyStacks::PyStacks(Maps maps, std::function<void(const std::string&)> note) : maps_(maps), note_(std::move(note)) {
  rb_ = std::make_unique<RingBuffer>(maps_.events, [this](const void* d, size_t sz) {
    if (sz >= sizeof(gs_py_new_stack)) on_new(*static_cast<const gs_py_new_stack*>(d));
  });
}

PyStacks::~PyStacks() = default;

bool PyStacks::track(pid_t pid) {
  if (procs_.count(pid)) return true;
  char exe[4096];
  ssize_t n = readlink(fmt::format("/proc/{}/exe", pid).c_str(), exe, sizeof exe);
  std::string now(exe, n > 0 ? static_cast<size_t>(n) : 0);
  if (auto it = not_python_.find(pid); it != not_python_.end() && it->second == now) return false;
  auto t = find_python(pid);
  if (!t) {
    not_python_[pid] = now;
    return false;
  }
  auto off = py_offsets(pid, *t);
  if (!off) {
    not_python_[pid] = now;
    if (said_.insert(fmt::format("{}.{}", t->major, t->minor)).second && note_)
      note_(fmt::format("pid {} runs Python {} ({}): no interpreter layout for this version, native frames only", pid,
                        t->version(), t->path));
    return false;
  }
  uint32_t key = static_cast<uint32_t>(pid);
  if (bpf_map_update_elem(maps_.procs, &key, &*off, BPF_ANY) != 0) return false;
  procs_[pid] = {*t, *off};
  return true;
}

void PyStacks::forget(pid_t pid) {
  uint32_t key = static_cast<uint32_t>(pid);
  bpf_map_delete_elem(maps_.procs, &key);
  procs_.erase(pid);
  not_python_.erase(pid);
  std::vector<gs_py_stack_key> stacks;
  gs_py_stack_key sk{}, snext{};
  for (void* prev = nullptr; bpf_map_get_next_key(maps_.stacks, prev, &snext) == 0; prev = &sk) {
    sk = snext;
    if (sk.pid == key) stacks.push_back(sk);
  }
  for (auto& k : stacks) bpf_map_delete_elem(maps_.stacks, &k);
  std::vector<uint32_t> tids;
  uint32_t tk = 0, tnext = 0;
  for (void* prev = nullptr; bpf_map_get_next_key(maps_.tstates, prev, &tnext) == 0; prev = &tk) {
    tk = tnext;
    gs_py_tstate v{};
    if (bpf_map_lookup_elem(maps_.tstates, &tk, &v) == 0 && v.pid == key) tids.push_back(tk);
  }
  for (auto t : tids) bpf_map_delete_elem(maps_.tstates, &t);
  codes_.erase(codes_.lower_bound({pid, 0, 0}), codes_.lower_bound({pid + 1, 0, 0}));
}

int PyStacks::poll() { return rb_->poll(0); }

void PyStacks::on_new(const gs_py_new_stack& n) {
  pid_t pid = static_cast<pid_t>(n.key.pid);
  if (n.key.hash) {
    frames(pid, n.key.hash);
    return;
  }
  forget(pid);
  track(pid);
}

std::optional<PyCode> py_read_code(int mem_fd, const PyTarget& t, const gs_py_proc& off, uint64_t addr, uint32_t tag) {
  std::optional<Layout> l = layout_for(mem_fd, t);
  uint8_t obj[256];
  if (!l || !read_mem(mem_fd, addr, obj, sizeof obj)) return std::nullopt;
  auto field = [&](uint16_t at) {
    uint64_t v = 0;
    memcpy(&v, obj + at, sizeof v);
    return v;
  };
  uint16_t qual = off.code_qualname, file = l->code_filename, lines = l->code_linetable, first = l->code_firstlineno;
  if (qual >= 248 || file >= 248 || lines >= 248 || first >= 252) return std::nullopt;
  if ((static_cast<uint32_t>(field(qual) >> 3) & ~GS_PY_ENTRY) != (tag & ~GS_PY_ENTRY)) return std::nullopt;
  int32_t fl = 0;
  memcpy(&fl, obj + first, sizeof fl);
  auto q = read_str(mem_fd, field(qual), *l);
  auto f = read_str(mem_fd, field(file), *l);
  if (!q || !f) return std::nullopt;
  return PyCode{*q, *f, fl, read_bytes(mem_fd, field(lines)).value_or("")};
}

std::vector<gs_py_frame> py_walk_user(pid_t pid, const gs_py_proc& off, uint32_t ns_tid) {
  std::vector<gs_py_frame> out;
  Fd mem = open_mem(pid);
  auto ptr = [&](uint64_t a) { return read_val<uint64_t>(mem.get(), a).value_or(0); };
  uint64_t ts = ptr(off.interp_head_addr);
  if (ts) ts = ptr(ts + off.interp_threads_head);
  for (int i = 0; i < GS_PY_MAX_THREADS && ts; i++, ts = ptr(ts + off.tstate_next))
    if (static_cast<uint32_t>(ptr(ts + off.tstate_native_thread_id)) == ns_tid) break;
  if (!ts) return out;
  uint64_t f = ptr(ts + off.tstate_frame);
  if (f && off.cframe_current_frame != GS_PY_NONE) f = ptr(f + off.cframe_current_frame);
  for (int i = 0; i < 2 * GS_PY_MAX_DEPTH && f && out.size() < GS_PY_MAX_DEPTH; i++) {
    uint8_t win[72];
    if (!read_mem(mem.get(), f, win, sizeof win)) break;
    auto at = [&](uint16_t o) {
      uint64_t v = 0;
      memcpy(&v, win + o, sizeof v);
      return v;
    };
    uint64_t code = at(off.frame_code), prev = at(off.frame_previous), instr = at(off.frame_instr);
    if (win[off.frame_owner] == GS_PY_OWNED_BY_CSTACK) {
      if (!out.empty()) out.back().tag |= GS_PY_ENTRY;
      f = prev;
      continue;
    }
    uint64_t base = code + off.code_adaptive;
    gs_py_frame fr{code, instr > base ? static_cast<uint32_t>((instr - base) / 2) : 0,
                   static_cast<uint32_t>(ptr(code + off.code_qualname) >> 3) & ~GS_PY_ENTRY};
    if (off.frame_is_entry != GS_PY_NONE && win[off.frame_is_entry]) fr.tag |= GS_PY_ENTRY;
    out.push_back(fr);
    f = prev;
  }
  return out;
}

const PyCode* PyStacks::code(pid_t pid, uint64_t addr, uint32_t tag, int mem_fd) {
  CodeKey key{pid, addr, tag & ~GS_PY_ENTRY};
  if (auto it = codes_.find(key); it != codes_.end()) return it->second ? &*it->second : nullptr;
  auto p = procs_.find(pid);
  if (p == procs_.end() || mem_fd < 0) return nullptr;  // not cached, and no longer readable
  auto [it, _] = codes_.emplace(key, py_read_code(mem_fd, p->second.target, p->second.offsets, addr, tag));
  return it->second ? &*it->second : nullptr;
}

std::vector<PyFrame> PyStacks::frames(pid_t pid, uint64_t hash, bool* truncated) {
  std::vector<PyFrame> out;
  if (!hash) return out;
  gs_py_stack_key key{static_cast<uint32_t>(pid), 0, hash};
  gs_py_stack s{};
  if (bpf_map_lookup_elem(maps_.stacks, &key, &s) != 0) return out;
  if (truncated) *truncated = s.flags & GS_PY_TRUNCATED;
  Fd mem;
  for (uint32_t i = 0; i < s.depth && i < GS_PY_MAX_DEPTH; i++) {
    const gs_py_frame& f = s.frames[i];
    CodeKey k{pid, f.code, f.tag & ~GS_PY_ENTRY};
    if (!mem && !codes_.count(k)) mem = open_mem(pid);
    const PyCode* c = code(pid, f.code, f.tag, mem.get());
    bool entry = f.tag & GS_PY_ENTRY;
    if (!c) {
      out.push_back({fmt::format("py::? (code {:#x})", f.code), entry});
      continue;
    }
    out.push_back(
        {fmt::format("py::{} ({}:{})", c->qualname, c->filename, py_line_at(c->linetable, c->firstlineno, f.lasti)),
         entry});
  }
  return out;
}

PyStacks::Counters PyStacks::counters() const {
  int fd = maps_.counters;
  return {percpu_sum(fd, GS_PY_CNT_WALKS),       percpu_sum(fd, GS_PY_CNT_TRUNCATED),
          percpu_sum(fd, GS_PY_CNT_NO_TSTATE),   percpu_sum(fd, GS_PY_CNT_READ_ERR),
          percpu_sum(fd, GS_PY_CNT_STACKS_FULL), percpu_sum(fd, GS_PY_CNT_EVENTS_LOST)};
}

std::string PyStacks::drops_text() const {
  Counters c = counters();
  if (!c.truncated && !c.read_errors && !c.stacks_full && !c.events_lost) return "";
  return fmt::format(
      ", Python chains: {} cut at {} frames, {} unreadable mid-walk, {} not kept (chain map full), "
      "{} named late (notice lost)",
      c.truncated, GS_PY_MAX_DEPTH, c.read_errors, c.stacks_full, c.events_lost);
}

}  // namespace gpuscope
