#include "core/elf_symbols.h"

#include <elf.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <stdexcept>
#include <vector>

namespace gpuscope {

namespace {

struct ElfHandle {
  Elf* e;
  ~ElfHandle() {
    if (e) elf_end(e);
  }
};

template <class T>
T fix(T v, bool swap) {
  if (!swap) return v;
  if constexpr (sizeof(T) == 2) return static_cast<T>(__builtin_bswap16(v));
  if constexpr (sizeof(T) == 4) return static_cast<T>(__builtin_bswap32(v));
  if constexpr (sizeof(T) == 8) return static_cast<T>(__builtin_bswap64(v));
  return v;
}

template <class S>
ElfFile::Sym convert(const S& s, bool swap) {
  unsigned char info = s.st_info;
  return {
      fix(s.st_name, swap),  static_cast<unsigned char>(info & 0xf),       static_cast<unsigned char>(info >> 4),
      fix(s.st_shndx, swap), static_cast<uint64_t>(fix(s.st_value, swap)), static_cast<uint64_t>(fix(s.st_size, swap))};
}

constexpr size_t kChunkBytes = 64 << 10;
constexpr size_t kMaxName = 1 << 20;  // longer is no symbol name
constexpr size_t kNameBatch = 128 << 10;

// The NUL-terminated strings of one string table, read through a window that slides forward.
class StringTableReader {
 public:
  StringTableReader(int fd, uint64_t offset, uint64_t size) : fd_(fd), offset_(offset), size_(size) {}
  // The string at pos; empty when pos is outside the table or no NUL ends it there. Valid until
  // the next call.
  std::string_view at(uint64_t pos);

 private:
  int fd_;
  uint64_t offset_, size_;
  std::vector<char> buf_;
  uint64_t win_ = 0;  // table position of buf_[0]
  size_t len_ = 0;
};

}  // namespace

ElfFile::ElfFile(const std::string& path) : path_(path) {
  elf_version(EV_CURRENT);
  fd_ = Fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd_) throw std::runtime_error(path + ": " + strerror(errno));
  // ELF_C_READ reads the headers only, on demand; the symbols are read below in chunks.
  ElfHandle elf{elf_begin(fd_.get(), ELF_C_READ, nullptr)};
  if (!elf.e || elf_kind(elf.e) != ELF_K_ELF) throw std::runtime_error(path + ": not an ELF file");
  GElf_Ehdr eh;
  if (!gelf_getehdr(elf.e, &eh)) throw std::runtime_error(path + ": bad ELF header");
  if (eh.e_type != ET_EXEC && eh.e_type != ET_DYN)
    throw std::runtime_error(path + ": not an executable or shared object");
  is_exec_ = eh.e_type == ET_EXEC;
  elf64_ = eh.e_ident[EI_CLASS] == ELFCLASS64;
  swap_ = eh.e_ident[EI_DATA] != (__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ ? ELFDATA2LSB : ELFDATA2MSB);

  size_t nph = 0;
  if (elf_getphdrnum(elf.e, &nph) != 0) nph = 0;
  // The count is the file's claim (past PN_XNUM, up to 2^32): no more headers than the file holds,
  // and a table libelf cannot read ends the walk, so that a forged count does not spin.
  struct stat fst {};
  uint64_t phent = eh.e_phentsize ? eh.e_phentsize : 1;
  if (fstat(fd_.get(), &fst) == 0)
    nph = std::min<uint64_t>(nph, static_cast<uint64_t>(fst.st_size) > eh.e_phoff
                                      ? (static_cast<uint64_t>(fst.st_size) - eh.e_phoff) / phent
                                      : 0);
  bool first_load = true;
  for (size_t i = 0; i < nph && i <= INT_MAX; i++) {
    GElf_Phdr ph;
    if (!gelf_getphdr(elf.e, static_cast<int>(i), &ph)) break;
    if (ph.p_type != PT_LOAD) continue;
    if (first_load) first_load_vaddr_ = ph.p_vaddr & ~0xfffULL;
    first_load = false;
    if (ph.p_flags & PF_X) exec_loads_.push_back({ph.p_vaddr, ph.p_memsz, ph.p_offset});
  }

  const size_t sym_size = elf64_ ? sizeof(Elf64_Sym) : sizeof(Elf32_Sym);
  for (Elf64_Word want : {SHT_DYNSYM, SHT_SYMTAB}) {
    Elf_Scn* scn = nullptr;
    while ((scn = elf_nextscn(elf.e, scn))) {
      GElf_Shdr sh, str;
      if (!gelf_getshdr(scn, &sh) || sh.sh_type != want || sh.sh_entsize == 0) continue;
      if (sh.sh_flags & SHF_COMPRESSED) continue;
      Elf_Scn* strscn = elf_getscn(elf.e, sh.sh_link);
      if (!strscn || !gelf_getshdr(strscn, &str) || str.sh_type != SHT_STRTAB || (str.sh_flags & SHF_COMPRESSED))
        continue;
      // sh_size and sh_entsize are the file's claims: the walk stops at the end of the data the
      // file really holds, so a forged size ends it instead of spinning.
      uint64_t count = std::min<uint64_t>({sh.sh_size / sh.sh_entsize, sh.sh_size / sym_size, INT_MAX});
      sections_.push_back({sh.sh_offset, sh.sh_size, count, str.sh_offset, str.sh_size, want == SHT_DYNSYM});
    }
  }
}

void ElfFile::for_each_symbol(const SymbolSection& s, const std::function<void(uint64_t, const Sym&)>& f) const {
  const size_t sym_size = elf64_ ? sizeof(Elf64_Sym) : sizeof(Elf32_Sym);
  std::vector<char> buf(kChunkBytes - kChunkBytes % sym_size);
  uint64_t done = 0;
  while (done < s.count) {
    size_t want = static_cast<size_t>(std::min<uint64_t>(buf.size() / sym_size, s.count - done));
    ssize_t n = pread(fd_.get(), buf.data(), want * sym_size, static_cast<off_t>(s.offset + done * sym_size));
    if (n <= 0) return;
    size_t got = static_cast<size_t>(n) / sym_size;
    for (size_t i = 0; i < got; i++) {
      if (elf64_) {
        Elf64_Sym e;
        memcpy(&e, buf.data() + i * sym_size, sizeof e);
        f(done + i, convert(e, swap_));
      } else {
        Elf32_Sym e;
        memcpy(&e, buf.data() + i * sym_size, sizeof e);
        f(done + i, convert(e, swap_));
      }
    }
    if (got < want) return;
    done += got;
  }
}

void ElfFile::for_each_named(const SymbolSection& s, const std::function<bool(const Sym&)>& want,
                             const std::function<void(uint64_t, const Sym&, std::string_view)>& f) const {
  StringTableReader names(fd_.get(), s.str_offset, s.str_size);
  std::vector<std::pair<uint64_t, Sym>> batch;
  auto flush = [&] {
    std::sort(batch.begin(), batch.end(), [](auto& a, auto& b) { return a.second.name < b.second.name; });
    for (auto& [i, sym] : batch)
      if (std::string_view n = names.at(sym.name); !n.empty()) f(i, sym, n);
    batch.clear();
  };
  for_each_symbol(s, [&](uint64_t i, const Sym& sym) {
    if (!want(sym)) return;
    batch.emplace_back(i, sym);
    if (batch.size() == kNameBatch) flush();
  });
  flush();
}

std::string ElfFile::name_at(const SymbolSection& s, uint32_t name) const {
  StringTableReader names(fd_.get(), s.str_offset, s.str_size);
  return std::string(names.at(name));
}

std::map<std::string, uint64_t> ElfFile::values_of(const std::set<std::string>& names) const {
  std::map<std::string, uint64_t> out;
  for (auto& sec : sections_) {
    std::map<std::string, std::pair<uint64_t, uint64_t>> found;  // name -> (index, value)
    for_each_named(
        sec, [](const Sym& s) { return s.shndx != SHN_UNDEF && s.value != 0; },
        [&](uint64_t i, const Sym& s, std::string_view n) {
          if (!names.count(std::string(n))) return;
          auto [it, added] = found.try_emplace(std::string(n), i, s.value);
          if (!added && i < it->second.first) it->second = {i, s.value};
        });
    for (auto& [n, v] : found) out.try_emplace(n, v.second);
  }
  return out;
}

std::optional<uint64_t> ElfFile::to_offset(uint64_t vaddr) const {
  for (auto& l : exec_loads_)
    if (vaddr >= l.vaddr && vaddr < l.vaddr + l.memsz) return vaddr - l.vaddr + l.offset;
  return std::nullopt;
}

namespace {

std::string_view StringTableReader::at(uint64_t pos) {
  if (pos >= size_) return {};
  for (;;) {
    if (pos >= win_ && pos < win_ + len_) {
      const char* start = buf_.data() + (pos - win_);
      if (const void* nul = memchr(start, 0, len_ - (pos - win_)))
        return {start, static_cast<size_t>(static_cast<const char*>(nul) - start)};
      if (win_ + len_ >= size_) return {};  // runs off the table's end
      if (pos == win_) {                    // longer than the window: widen it
        if (buf_.size() >= kMaxName) return {};
        buf_.resize(buf_.size() * 2);
      }
    }
    if (buf_.empty()) buf_.resize(kChunkBytes);
    size_t want = static_cast<size_t>(std::min<uint64_t>(buf_.size(), size_ - pos));
    ssize_t n = pread(fd_, buf_.data(), want, static_cast<off_t>(offset_ + pos));
    win_ = pos;
    len_ = n > 0 ? static_cast<size_t>(n) : 0;
    if (len_ < want) {
      size_ = pos + len_;  // the file ends here
      if (!len_) return {};
    }
  }
}

}  // namespace

ElfSymbols ElfSymbols::read(const std::string& path, const Filter& keep, const Filter& keep_objects) {
  ElfFile f(path);
  ElfSymbols out;
  out.is_exec_ = f.is_executable();
  out.first_load_vaddr_ = f.first_load_vaddr();
  // .symtab last, so an exported name wins over a local one of the same name; within a section
  // the first of a name wins, as the entries come in order.
  struct Kept {
    uint64_t index;
    ElfFile::Sym sym;
    std::string name;
  };
  std::vector<Kept> kept;
  for (auto& sec : f.symbol_sections()) {
    auto want = [&](const ElfFile::Sym& s) {
      if (s.shndx == SHN_UNDEF || s.value == 0) return false;
      if (s.type == STT_OBJECT) return keep_objects && !sec.dynamic;
      return s.type == STT_FUNC && f.to_offset(s.value).has_value();
    };
    f.for_each_named(sec, want, [&](uint64_t i, const ElfFile::Sym& s, std::string_view name) {
      if (s.type == STT_OBJECT ? keep_objects(name) : !keep || keep(name)) kept.push_back({i, s, std::string(name)});
    });
    std::sort(kept.begin(), kept.end(), [](auto& a, auto& b) { return a.index < b.index; });
    for (auto& k : kept) {
      if (k.sym.type == STT_OBJECT)
        out.objects_.emplace_back(k.sym.value, std::move(k.name));
      else
        out.syms_.try_emplace(std::move(k.name),
                              ElfSymbol{k.sym.value, k.sym.size, *f.to_offset(k.sym.value), k.sym.bind == STB_LOCAL});
    }
    kept.clear();
  }
  return out;
}

const ElfSymbol* ElfSymbols::find(const std::string& name) const {
  auto it = syms_.find(name);
  return it == syms_.end() ? nullptr : &it->second;
}

}  // namespace gpuscope
