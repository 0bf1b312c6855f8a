#include "core/symbol_table.h"

#include <elf.h>
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstring>
#include <functional>
#include <list>
#include <map>
#include <mutex>
#include <unordered_map>

#include "core/demangle.h"
#include "core/elf_symbols.h"

namespace gpuscope {

namespace {

// Up to this many bytes of string tables are kept in memory; larger ones are read from the file
// name by name (libtorch_cuda's are tens of MB).
constexpr uint64_t kNamesInMemory = 1 << 20;
constexpr size_t kMaxName = 1 << 20;
// Tables this large give their memory back to the system when freed (malloc keeps it otherwise).
constexpr size_t kTrimBytes = 1 << 20;
constexpr size_t kDemangledCached = 4096;

std::atomic<uint64_t> next_id{1};

struct Registry {
  std::mutex mu;
  std::map<std::pair<dev_t, ino_t>, std::weak_ptr<const SymbolTable>> tables;
};
Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: tables may be freed during exit
  return *r;
}

// Least recently used demangled names, by (table id, entry index).
class DemangledCache {
 public:
  std::string get(uint64_t table, size_t index, const std::function<std::string()>& make) {
    Key k{table, index};
    {
      std::lock_guard lock(mu_);
      if (auto it = map_.find(k); it != map_.end()) {
        lru_.splice(lru_.begin(), lru_, it->second);
        return it->second->second;
      }
    }
    std::string v = make();
    std::lock_guard lock(mu_);
    if (map_.count(k)) return v;
    lru_.emplace_front(k, v);
    map_[k] = lru_.begin();
    if (lru_.size() > kDemangledCached) {
      map_.erase(lru_.back().first);
      lru_.pop_back();
    }
    return v;
  }

 private:
  struct Key {
    uint64_t table;
    size_t index;
    bool operator==(const Key&) const = default;
  };
  struct Hash {
    size_t operator()(const Key& k) const { return std::hash<uint64_t>()(k.table * 0x9e3779b97f4a7c15ULL ^ k.index); }
  };
  std::mutex mu_;
  std::list<std::pair<Key, std::string>> lru_;
  std::unordered_map<Key, std::list<std::pair<Key, std::string>>::iterator, Hash> map_;
};
DemangledCache& demangled_cache() {
  static DemangledCache* c = new DemangledCache;
  return *c;
}

}  // namespace

SymbolTable::SymbolTable(const std::string& path) : id_(next_id++) {
  ElfFile f(path);
  uint64_t base = 0;
  for (auto& sec : f.symbol_sections()) {
    strings_.push_back({base, sec.str_offset, sec.str_size});
    const size_t prior = entries_.size();
    if (!prior) entries_.reserve(sec.count);
    auto known = [&](uint32_t off) {
      auto end = entries_.begin() + static_cast<ptrdiff_t>(prior);
      auto it = std::lower_bound(entries_.begin(), end, off, [](const Entry& e, uint32_t o) { return e.offset < o; });
      return it != end && it->offset == off;
    };
    f.for_each_symbol(sec, [&](uint64_t, const ElfFile::Sym& s) {
      if (s.type != STT_FUNC || s.shndx == SHN_UNDEF || s.value == 0 || s.name == 0 || s.name >= sec.str_size) return;
      auto off = f.to_offset(s.value);
      if (!off || *off > UINT32_MAX || base + s.name > UINT32_MAX || known(static_cast<uint32_t>(*off))) return;
      entries_.push_back({static_cast<uint32_t>(*off), static_cast<uint32_t>(std::min<uint64_t>(s.size, UINT32_MAX)),
                          static_cast<uint32_t>(base + s.name)});
    });
    // One name per address: an earlier section's (.dynsym's) or else the last of the section's
    // aliases, since .symtab lists its local symbols before the global ones.
    auto first = entries_.begin() + static_cast<ptrdiff_t>(prior);
    std::stable_sort(first, entries_.end(), [](const Entry& a, const Entry& b) { return a.offset < b.offset; });
    auto last = std::unique(std::make_reverse_iterator(entries_.end()), std::make_reverse_iterator(first),
                            [](const Entry& a, const Entry& b) { return a.offset == b.offset; });
    entries_.erase(first, last.base());
    std::inplace_merge(entries_.begin(), entries_.begin() + static_cast<ptrdiff_t>(prior), entries_.end(),
                       [](const Entry& a, const Entry& b) { return a.offset < b.offset; });
    base += sec.str_size;
  }
  if (entries_.capacity() - entries_.size() > entries_.size() / 4) entries_.shrink_to_fit();
  if (entries_.empty()) return;
  if (base > kNamesInMemory) {
    fd_ = Fd(dup(f.fd()));
    return;
  }
  names_.resize(base);
  for (auto& s : strings_) {
    ssize_t n = pread(f.fd(), names_.data() + s.base, s.size, static_cast<off_t>(s.file_offset));
    size_t got = n > 0 ? static_cast<size_t>(n) : 0;
    memset(names_.data() + s.base + got, 0, s.size - got);
  }
}

std::shared_ptr<const SymbolTable> SymbolTable::shared(dev_t dev, ino_t ino, const std::vector<std::string>& paths) {
  Registry& r = registry();
  const auto key = std::pair{dev, ino};
  {
    std::lock_guard lock(r.mu);
    if (auto it = r.tables.find(key); it != r.tables.end())
      if (auto t = it->second.lock()) return t;
  }
  SymbolTable* t = nullptr;
  for (auto& p : paths) {
    try {
      t = new SymbolTable(p);
      break;
    } catch (const std::exception&) {
    }
  }
  if (!t) {
    t = new SymbolTable();
    t->id_ = next_id++;
  }
  // Reading a big table leaves its parse buffers free in the heap's middle, where they would stay
  // resident for the process's life (11.6 MB of the agent's heap beside PyTorch on the H200).
  if (t->bytes() >= kTrimBytes) malloc_trim(0);
  std::shared_ptr<const SymbolTable> sp(t, [key](const SymbolTable* t) {
    const bool big = t->bytes() >= kTrimBytes;
    {
      Registry& r = registry();
      std::lock_guard lock(r.mu);
      if (auto it = r.tables.find(key); it != r.tables.end() && it->second.expired()) r.tables.erase(it);
    }
    delete t;
    if (big) malloc_trim(0);
  });
  std::lock_guard lock(r.mu);
  auto& slot = r.tables[key];
  if (auto other = slot.lock()) return other;  // read meanwhile by another thread
  slot = sp;
  return sp;
}

size_t SymbolTable::live() {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  size_t n = 0;
  for (auto& [_, w] : r.tables) n += !w.expired();
  return n;
}

size_t SymbolTable::live_bytes() {
  std::vector<std::shared_ptr<const SymbolTable>> held;
  {
    Registry& r = registry();
    std::lock_guard lock(r.mu);
    for (auto& [_, w] : r.tables)
      if (auto t = w.lock()) held.push_back(std::move(t));
  }
  // Summed and let go outside the lock: the last holder's deleter takes it.
  size_t n = 0;
  for (auto& t : held) n += t->bytes();
  return n;
}

const SymbolTable::Entry* SymbolTable::find(uint64_t off) const {
  auto it =
      std::upper_bound(entries_.begin(), entries_.end(), off, [](uint64_t o, const Entry& e) { return o < e.offset; });
  if (it == entries_.begin()) return nullptr;
  --it;
  if (it->size && off >= static_cast<uint64_t>(it->offset) + it->size) return nullptr;
  return &*it;
}

std::string SymbolTable::name(const Entry& e) const {
  auto s = std::upper_bound(strings_.begin(), strings_.end(), e.name,
                            [](uint64_t pos, const Strings& s) { return pos < s.base; });
  if (s == strings_.begin()) return {};
  --s;
  const uint64_t pos = e.name - s->base;
  if (pos >= s->size) return {};
  const uint64_t room = std::min<uint64_t>(s->size - pos, kMaxName);
  if (!names_.empty()) {
    const char* p = names_.data() + e.name;
    return std::string(p, strnlen(p, room));
  }
  std::string out;
  char buf[256];
  while (out.size() < room) {
    size_t want = std::min<uint64_t>(sizeof buf, room - out.size());
    ssize_t n = pread(fd_.get(), buf, want, static_cast<off_t>(s->file_offset + pos + out.size()));
    if (n <= 0) return {};
    size_t len = strnlen(buf, static_cast<size_t>(n));
    out.append(buf, len);
    if (len < static_cast<size_t>(n)) return out;
  }
  return {};  // no NUL within the table
}

std::string SymbolTable::display_name(const Entry& e) const {
  return demangled_cache().get(id_, static_cast<size_t>(&e - entries_.data()), [&] {
    std::string raw = name(e);
    return raw.starts_with("_Z") ? demangle(raw) : raw;
  });
}

}  // namespace gpuscope
