#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace gpuscope {

struct ElfSymbol {
  uint64_t vaddr = 0;
  uint64_t size = 0;
  uint64_t file_offset = 0;  // what a uprobe needs
  bool local = false;        // from .symtab with STB_LOCAL (static cudart inside an executable)
};

// Defined FUNC symbols of one ELF file (.dynsym and .symtab), read with libelf.
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
