#include "core/elf_symbols.h"

#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "core/fd.h"

namespace gpuscope {

namespace {
struct ElfHandle {
  Elf* e;
  ~ElfHandle() {
    if (e) elf_end(e);
  }
};
}  // namespace

ElfSymbols ElfSymbols::read(const std::string& path, const Filter& keep, const Filter& keep_objects) {
  elf_version(EV_CURRENT);
  Fd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) throw std::runtime_error(path + ": " + strerror(errno));
  ElfHandle elf{elf_begin(fd.get(), ELF_C_READ_MMAP, nullptr)};
  if (!elf.e || elf_kind(elf.e) != ELF_K_ELF) throw std::runtime_error(path + ": not an ELF file");
  GElf_Ehdr eh;
  if (!gelf_getehdr(elf.e, &eh)) throw std::runtime_error(path + ": bad ELF header");
  if (eh.e_type != ET_EXEC && eh.e_type != ET_DYN)
    throw std::runtime_error(path + ": not an executable or shared object");

  ElfSymbols out;
  out.is_exec_ = eh.e_type == ET_EXEC;
  size_t nph = 0;
  elf_getphdrnum(elf.e, &nph);
  std::vector<GElf_Phdr> loads;
  bool first_load = true;
  for (size_t i = 0; i < nph; i++) {
    GElf_Phdr ph;
    if (!gelf_getphdr(elf.e, static_cast<int>(i), &ph) || ph.p_type != PT_LOAD) continue;
    if (first_load) out.first_load_vaddr_ = ph.p_vaddr & ~0xfffULL;
    first_load = false;
    if (ph.p_flags & PF_X) loads.push_back(ph);
  }
  auto to_offset = [&](uint64_t vaddr) -> std::optional<uint64_t> {
    for (auto& ph : loads)
      if (vaddr >= ph.p_vaddr && vaddr < ph.p_vaddr + ph.p_memsz) return vaddr - ph.p_vaddr + ph.p_offset;
    return std::nullopt;
  };

  // .symtab last, so an exported name wins over a local one of the same name.
  for (Elf64_Word want : {SHT_DYNSYM, SHT_SYMTAB}) {
    Elf_Scn* scn = nullptr;
    while ((scn = elf_nextscn(elf.e, scn))) {
      GElf_Shdr sh;
      if (!gelf_getshdr(scn, &sh) || sh.sh_type != want || sh.sh_entsize == 0) continue;
      Elf_Data* data = elf_getdata(scn, nullptr);
      if (!data) continue;
      // sh_size is the file's claim; gelf_getsym fails past the data libelf really read, and
      // every later index fails too, so a forged size ends the walk instead of spinning.
      const size_t n = std::min<uint64_t>(sh.sh_size / sh.sh_entsize, INT_MAX);
      for (size_t i = 0; i < n; i++) {
        GElf_Sym s;
        if (!gelf_getsym(data, static_cast<int>(i), &s)) break;
        if (s.st_shndx == SHN_UNDEF || s.st_value == 0) continue;
        const bool object = GELF_ST_TYPE(s.st_info) == STT_OBJECT;
        if (GELF_ST_TYPE(s.st_info) != STT_FUNC && !(object && keep_objects)) continue;
        const char* name = elf_strptr(elf.e, sh.sh_link, s.st_name);
        if (!name || !*name) continue;
        std::string_view nv(name);
        if (object) {
          if (want == SHT_SYMTAB && keep_objects(nv)) out.objects_.emplace_back(s.st_value, std::string(nv));
          continue;
        }
        if (keep && !keep(nv)) continue;
        auto off = to_offset(s.st_value);
        if (!off) continue;
        out.syms_.try_emplace(std::string(nv),
                              ElfSymbol{s.st_value, s.st_size, *off, GELF_ST_BIND(s.st_info) == STB_LOCAL});
      }
    }
  }
  return out;
}

const ElfSymbol* ElfSymbols::find(const std::string& name) const {
  auto it = syms_.find(name);
  return it == syms_.end() ? nullptr : &it->second;
}

}  // namespace gpuscope
