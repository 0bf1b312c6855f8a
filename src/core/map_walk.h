#pragma once
// Reading a whole BPF hash map from userspace: every entry in a few batched syscalls where the
// kernel has batch operations for the map, key by key where it has not. Entries are collected
// before the callback runs, so it may update or delete them.
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <vector>

namespace gpuscope {

namespace detail {
// A batch's values fill at most this many bytes: a per-CPU value is one per possible CPU (a
// latency histogram on a 16-CPU host, 8.6 KB), and 1,024 of them, zeroed before the call, were
// 9 MB touched at every refresh and kept by malloc.
constexpr size_t kBatchBytes = 256 << 10;

// Keys and raw values (value_size bytes each) of every entry.
template <class K>
void read_all(int fd, size_t value_size, std::vector<K>& keys, std::vector<uint8_t>& vals) {
  uint32_t chunk = static_cast<uint32_t>(std::clamp<size_t>(kBatchBytes / std::max<size_t>(value_size, 1), 1, 1024));
  uint32_t in = 0, out = 0;
  bool first = true;
  for (;;) {
    size_t have = keys.size();
    keys.resize(have + chunk);
    vals.resize((have + chunk) * value_size);
    uint32_t n = chunk;
    int err = bpf_map_lookup_batch(fd, first ? nullptr : &in, &out, &keys[have], &vals[have * value_size], &n, nullptr);
    int e = err ? errno : 0;
    if (err && e != ENOENT) n = 0;
    keys.resize(have + n);
    vals.resize((have + n) * value_size);
    if (err && e == ENOSPC) {  // a bucket holds more than one chunk
      chunk *= 4;
      continue;
    }
    if (err && e != ENOENT) break;  // no batch operations here: key by key
    first = false;
    in = out;
    if (err) return;  // ENOENT: that was the last batch
  }
  keys.clear();
  vals.clear();
  K key{}, next{};
  const void* cur = nullptr;
  std::vector<uint8_t> v(value_size);
  while (bpf_map_get_next_key(fd, cur, &next) == 0) {
    if (bpf_map_lookup_elem(fd, &next, v.data()) == 0) {
      keys.push_back(next);
      vals.insert(vals.end(), v.begin(), v.end());
    }
    key = next;
    cur = &key;
  }
}
}  // namespace detail

// f(const K&, const V&) for every entry of a hash map.
template <class K, class V, class F>
void for_each_entry(int fd, F f) {
  std::vector<K> keys;
  std::vector<uint8_t> vals;
  detail::read_all(fd, sizeof(V), keys, vals);
  for (size_t i = 0; i < keys.size(); i++) {
    V v;
    memcpy(&v, &vals[i * sizeof(V)], sizeof(V));
    f(keys[i], v);
  }
}

// f(const K&, const std::vector<V>&) for every entry of a per-CPU hash map, one value per
// possible CPU.
template <class K, class V, class F>
void for_each_percpu_entry(int fd, F f) {
  const int ncpus = libbpf_num_possible_cpus();
  if (ncpus <= 0) return;
  const size_t stride = (sizeof(V) + 7) / 8 * 8;  // the kernel rounds per-CPU values up to 8 bytes
  std::vector<K> keys;
  std::vector<uint8_t> vals;
  detail::read_all(fd, stride * static_cast<size_t>(ncpus), keys, vals);
  std::vector<V> per_cpu(static_cast<size_t>(ncpus));
  for (size_t i = 0; i < keys.size(); i++) {
    for (int c = 0; c < ncpus; c++)
      memcpy(&per_cpu[c], &vals[(i * static_cast<size_t>(ncpus) + static_cast<size_t>(c)) * stride], sizeof(V));
    f(keys[i], per_cpu);
  }
}

// Every key of a map.
template <class K>
std::vector<K> map_keys(int fd, size_t value_size) {
  std::vector<K> keys;
  std::vector<uint8_t> vals;
  detail::read_all(fd, value_size, keys, vals);
  return keys;
}

}  // namespace gpuscope
