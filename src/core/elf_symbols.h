#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/fd.h"

namespace gpuscope {

struct ElfSymbol {
  uint64_t vaddr = 0;
  uint64_t size = 0;
  uint64_t file_offset = 0;  // what a uprobe needs
  bool local = false;        // from .symtab with STB_LOCAL (static cudart inside an executable)
};

// One ELF file's headers (through libelf) and its symbol sections, read with pread in bounded
// chunks: a library of a million symbols passes through a small buffer rather than being mapped
// or copied whole, so reading it costs no memory that grows with it.
class ElfFile {
 public:
  // Throws std::runtime_error with a one-line reason when the file is not a readable ELF.
  explicit ElfFile(const std::string& path);

  struct SymbolSection {
    uint64_t offset, size, count;   // of the symbol entries, count bounded by both sizes
    uint64_t str_offset, str_size;  // its string table
    bool dynamic;                   // .dynsym (else .symtab)
  };
  struct Sym {
    uint32_t name;
    unsigned char type, bind;
    uint16_t shndx;
    uint64_t value, size;
  };
  // .dynsym sections first, then .symtab, each in file order.
  const std::vector<SymbolSection>& symbol_sections() const { return sections_; }
  // Every entry of s in order, with its index; stops early at the end of what the file really
  // holds.
  void for_each_symbol(const SymbolSection& s, const std::function<void(uint64_t, const Sym&)>& f) const;
  // The entries `want` accepts, with their names (empty names left out), in batches, each batch
  // in the order of its names in the string table: .dynsym is in hash order, so reading names in
  // symbol order would jump across the whole table for each.
  void for_each_named(const SymbolSection& s, const std::function<bool(const Sym&)>& want,
                      const std::function<void(uint64_t, const Sym&, std::string_view)>& f) const;
  // The name at `name` of s's string table; empty when it cannot be read.
  std::string name_at(const SymbolSection& s, uint32_t name) const;
  // The values of the named symbols the file defines, of any type (.dynsym first, then .symtab;
  // the first of a name wins): what a process exports by name, data included (_PyRuntime).
  std::map<std::string, uint64_t> values_of(const std::set<std::string>& names) const;
  // The file offset of a virtual address inside an executable segment.
  std::optional<uint64_t> to_offset(uint64_t vaddr) const;
  bool is_executable() const { return is_exec_; }
  uint64_t first_load_vaddr() const { return first_load_vaddr_; }
  int fd() const { return fd_.get(); }
  const std::string& path() const { return path_; }

 private:
  struct Load {
    uint64_t vaddr, memsz, offset;
  };
  std::string path_;
  Fd fd_;
  bool elf64_ = true, swap_ = false, is_exec_ = false;
  uint64_t first_load_vaddr_ = 0;
  std::vector<Load> exec_loads_;
  std::vector<SymbolSection> sections_;
};

// Defined FUNC symbols of one ELF file (.dynsym and .symtab) by name, for lookups of a few names
// (the CUDA API, a probe's target): pass a filter, since each kept name costs a heap string.
class ElfSymbols {
 public:
  using Filter = std::function<bool(std::string_view)>;
  // Throws std::runtime_error with a one-line reason when the file is not a readable ELF.
  // `keep_objects` also reads the data (STT_OBJECT) symbols it accepts, by virtual address.
  static ElfSymbols read(const std::string& path, const Filter& keep = nullptr, const Filter& keep_objects = nullptr);

  const ElfSymbol* find(const std::string& name) const;
  const std::unordered_map<std::string, ElfSymbol>& all() const { return syms_; }
  bool is_executable() const { return is_exec_; }
  // (vaddr, name) of the data symbols kept.
  const std::vector<std::pair<uint64_t, std::string>>& objects() const { return objects_; }
  // Page-aligned virtual address of the first PT_LOAD segment: what a shared object's lowest
  // mapping stands for, so load bias = that mapping's start - this.
  uint64_t first_load_vaddr() const { return first_load_vaddr_; }

 private:
  std::unordered_map<std::string, ElfSymbol> syms_;
  std::vector<std::pair<uint64_t, std::string>> objects_;
  uint64_t first_load_vaddr_ = 0;
  bool is_exec_ = false;
};

}  // namespace gpuscope
