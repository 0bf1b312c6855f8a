// libFuzzer target: ElfSymbols::read on an arbitrary file (any mapped library or executable of a
// traced process, opened through /proc/PID/root). The input is written into a memfd and read
// back by path, the way gpuscope opens files, so libelf's mmap path is the one exercised.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>

#include "core/elf_symbols.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static int fd = memfd_create("fuzz-elf", MFD_CLOEXEC);
  static const std::string path = "/proc/self/fd/" + std::to_string(fd);
  if (fd < 0) {
    perror("memfd_create");
    __builtin_trap();
  }
  if (ftruncate(fd, 0) != 0 || (size && pwrite(fd, data, size, 0) != static_cast<ssize_t>(size))) __builtin_trap();
  try {
    auto all = gpuscope::ElfSymbols::read(path);
    for (const auto& [name, sym] : all.all()) {
      if (name.empty()) __builtin_trap();
      if (all.find(name) != &sym) __builtin_trap();
    }
    // With a filter, as discovery calls it: only a subset, never more.
    auto some = gpuscope::ElfSymbols::read(path, [](std::string_view n) { return n.starts_with("cu"); });
    if (some.all().size() > all.all().size()) __builtin_trap();
  } catch (const std::exception&) {
    // Not an ELF, truncated, not ET_EXEC/ET_DYN: a one-line error is the expected outcome.
  }
  return 0;
}
