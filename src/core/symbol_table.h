#pragma once
// Function symbols of one ELF file by file offset, for naming the addresses of stacks and
// kernels: a sorted array of 12 bytes a symbol; names stay in the file (a small table keeps its
// strings in one block) and are read when asked for, demangled names through a bounded cache.
// One table per file (device, inode) for the whole process, shared by every collector and traced
// process, and freed, its memory given back, when the last holder lets go.
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/fd.h"

namespace gpuscope {

class SymbolTable {
 public:
  struct Entry {
    uint32_t offset;  // in the file
    uint32_t size;
    uint32_t name;  // into the string tables, one after the other
  };

  // The table of the file (dev, ino), read from the first of `paths` that opens unless a holder
  // has it already; empty when none opens.
  static std::shared_ptr<const SymbolTable> shared(dev_t dev, ino_t ino, const std::vector<std::string>& paths);
  // Tables alive in this process.
  static size_t live();
  // Heap bytes held by the tables alive.
  static size_t live_bytes();

  // Throws std::runtime_error with a one-line reason when the file is not a readable ELF.
  explicit SymbolTable(const std::string& path);
  SymbolTable() = default;

  // The symbol covering a file offset: a sized one must contain it, an unsized one reaches to
  // the next.
  const Entry* find(uint64_t file_offset) const;
  // The name as the file has it; empty when it cannot be read.
  std::string name(const Entry& e) const;
  // Demangled where C++, as stacks show it.
  std::string display_name(const Entry& e) const;
  size_t size() const { return entries_.size(); }
  const std::vector<Entry>& entries() const { return entries_; }
  // Heap bytes held.
  size_t bytes() const { return entries_.capacity() * sizeof(Entry) + names_.capacity(); }

 private:
  struct Strings {
    uint64_t base, file_offset, size;
  };
  std::vector<Entry> entries_;
  std::vector<Strings> strings_;
  std::vector<char> names_;  // every string table, when small; else read through fd_
  Fd fd_;
  uint64_t id_ = 0;  // the demangling cache's key, never reused
};
static_assert(sizeof(SymbolTable::Entry) == 12);

}  // namespace gpuscope
