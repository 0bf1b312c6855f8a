#include "nccl/nccl_collector.h"

#include <bpf/bpf.h>
#include <fmt/format.h>
#include <time.h>

#include <algorithm>
#include <cstring>

#include "core/bpf.h"
#include "core/discovery.h"
#include "core/scope.h"
#include "nccl.skel.h"

namespace gpuscope {

namespace {

struct Site {
  const char* symbol;
  uint32_t op;
};
// ncclAllReduce is in every NCCL: a file without it is not the library. Every other function is
// optional (ncclCommShrink came in 2.27, ncclCommInitRankScalable in 2.23): a copy without one
// is said once, and the rest is probed.
constexpr Site kSites[] = {
    {"ncclAllReduce", GS_NCCL_ALL_REDUCE},
    {"ncclBroadcast", GS_NCCL_BROADCAST},
    {"ncclBcast", GS_NCCL_BCAST},
    {"ncclReduce", GS_NCCL_REDUCE},
    {"ncclAllGather", GS_NCCL_ALL_GATHER},
    {"ncclReduceScatter", GS_NCCL_REDUCE_SCATTER},
    {"ncclAlltoAll", GS_NCCL_ALL_TO_ALL},
    {"ncclGather", GS_NCCL_GATHER},
    {"ncclScatter", GS_NCCL_SCATTER},
    {"ncclSend", GS_NCCL_SEND},
    {"ncclRecv", GS_NCCL_RECV},
    {"ncclGroupStart", GS_NCCL_GROUP_START},
    {"ncclGroupEnd", GS_NCCL_GROUP_END},
    {"ncclCommInitRank", GS_NCCL_INIT_RANK},
    {"ncclCommInitRankConfig", GS_NCCL_INIT_RANK_CONFIG},
    {"ncclCommInitRankScalable", GS_NCCL_INIT_RANK_SCALABLE},
    {"ncclCommInitAll", GS_NCCL_INIT_ALL},
    {"ncclCommSplit", GS_NCCL_SPLIT},
    {"ncclCommShrink", GS_NCCL_SHRINK},
    {"ncclCommFinalize", GS_NCCL_FINALIZE},
    {"ncclCommDestroy", GS_NCCL_DESTROY},
    {"ncclCommAbort", GS_NCCL_ABORT},
    {"ncclCommCuDevice", GS_NCCL_CU_DEVICE},
    {"ncclCommUserRank", GS_NCCL_USER_RANK},
    {"ncclCommCount", GS_NCCL_COUNT},
    {"ncclCommGetAsyncError", GS_NCCL_GET_ASYNC_ERROR},
};

constexpr uint64_t kPendingMaxNs = 30'000'000'000ull;  // a collective not matched by then never will be
constexpr size_t kPendingMax = 4096;                   // per communicator

uint64_t fnv1a(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}
constexpr uint64_t kFnvBasis = 0xcbf29ce484222325ull;
uint64_t nonzero(uint64_t h) { return h ? h : 1; }

uint64_t monotonic_ns() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<uint64_t>(t.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(t.tv_nsec);
}

uint64_t percentile(const std::vector<uint64_t>& sorted, double q) {
  if (sorted.empty()) return 0;
  size_t i = static_cast<size_t>(q * static_cast<double>(sorted.size()) + 0.999999);
  return sorted[std::min(sorted.size(), std::max<size_t>(i, 1)) - 1];
}

std::vector<std::string> missing_sites(const ElfSymbols& syms) {
  std::vector<std::string> out;
  for (const Site& s : kSites)
    if (!syms.find(s.symbol)) out.emplace_back(s.symbol);
  return out;
}

}  // namespace

const char* nccl_op_name(uint32_t op) {
  for (const Site& s : kSites)
    if (s.op == op) return s.symbol;
  return "?";
}

std::string nccl_result_name(int32_t ret) {
  static const char* const names[] = {"ncclSuccess",       "ncclUnhandledCudaError", "ncclSystemError",
                                      "ncclInternalError", "ncclInvalidArgument",    "ncclInvalidUsage",
                                      "ncclRemoteError",   "ncclInProgress"};
  if (ret >= 0 && ret < static_cast<int32_t>(std::size(names))) return names[ret];
  return "ncclResult(" + std::to_string(ret) + ")";
}

uint64_t nccl_type_bytes(int32_t datatype) {
  switch (datatype) {
    case 0:   // ncclInt8
    case 1:   // ncclUint8
    case 10:  // ncclFloat8e4m3
    case 11:  // ncclFloat8e5m2
      return 1;
    case 6:  // ncclFloat16
    case 9:  // ncclBfloat16
      return 2;
    case 2:  // ncclInt32
    case 3:  // ncclUint32
    case 7:  // ncclFloat32
      return 4;
    case 4:  // ncclInt64
    case 5:  // ncclUint64
    case 8:  // ncclFloat64
      return 8;
  }
  return 0;
}

double nccl_algbw_size_factor(uint32_t op, int nranks) {
  switch (op) {
    case GS_NCCL_ALL_GATHER:
    case GS_NCCL_REDUCE_SCATTER:
    case GS_NCCL_ALL_TO_ALL:
    case GS_NCCL_GATHER:
    case GS_NCCL_SCATTER: return nranks > 0 ? nranks : 1;
  }
  return 1;
}

double nccl_busbw_factor(uint32_t op, int nranks) {
  const double n = nranks > 0 ? nranks : 1;
  switch (op) {
    case GS_NCCL_ALL_REDUCE: return 2 * (n - 1) / n;
    case GS_NCCL_ALL_GATHER:
    case GS_NCCL_REDUCE_SCATTER:
    case GS_NCCL_ALL_TO_ALL:
    case GS_NCCL_GATHER:
    case GS_NCCL_SCATTER: return (n - 1) / n;
  }
  return 1;  // broadcast, reduce, send, recv
}

std::string nccl_comm_id_str(uint64_t id) { return fmt::format("{:016x}", id); }

bool nccl_parse_comm_id(const std::string& s, uint64_t* id) {
  std::string_view v = s;
  if (v.size() > 2 && v[0] == '0' && (v[1] == 'x' || v[1] == 'X')) v.remove_prefix(2);
  if (v.empty() || v.size() > 16) return false;
  uint64_t x = 0;
  for (char c : v) {
    int d = c >= '0' && c <= '9'   ? c - '0'
            : c >= 'a' && c <= 'f' ? c - 'a' + 10
            : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                   : -1;
    if (d < 0) return false;
    x = x << 4 | static_cast<uint64_t>(d);
  }
  *id = x;
  return true;
}

NcclCollector::NcclCollector(UprobeSession& session, Config cfg)
    : cfg_(std::move(cfg)), session_(session), skel_(nullptr, nccl_bpf__destroy) {
  multi_ = open_and_load_uprobes(skel_, nccl_bpf__open, nccl_bpf__load, [&](nccl_bpf* s) {
    apply_scope(s, session_.scope());
    return std::vector<bpf_program*>{s->progs.gs_nccl_enter, s->progs.gs_nccl_exit};
  });
  if (bpf_link* l = bpf_program__attach(skel_->progs.gs_nccl_proc_exit))
    exit_link_ = Link(l);
  else
    throw UsageError(std::string("cannot attach the process-exit tracepoint: ") + strerror(errno));
  rb_ = std::make_unique<RingBuffer>(bpf_map__fd(skel_->maps.gs_nccl_events),
                                     [this](const void* d, size_t n) { handle(d, n); });
  LibraryClient c{"libnccl.so",
                  {},
                  {},
                  [this](const LibraryMapping& m) {
                    pids_.insert(m.pid);
                    if (reported_.insert(&m.symbols).second) attached_.push_back({"", m.pid, missing_sites(m.symbols)});
                  },
                  multi_};
  for (const Site& s : kSites) {
    const bool optional = s.op != GS_NCCL_ALL_REDUCE;
    c.sites.push_back({skel_->progs.gs_nccl_enter, s.symbol, false, s.op, optional});
    c.sites.push_back({skel_->progs.gs_nccl_exit, s.symbol, true, s.op, optional});
  }
  lib_ = session_.add_library(std::move(c));
}

NcclCollector::~NcclCollector() { detach(); }

void NcclCollector::detach() {
  if (detached_) return;
  detached_ = true;
  session_.remove_library(lib_);
  exit_link_ = Link();
}

bool NcclCollector::attach_library(const std::string& path, std::string* err) {
  if (!session_.attach_library(lib_, path, err)) return false;
  try {
    ElfSymbols syms = ElfSymbols::read(path, [](std::string_view n) {
      return std::any_of(std::begin(kSites), std::end(kSites), [&](const Site& s) { return n == s.symbol; });
    });
    attached_.push_back({path, 0, missing_sites(syms)});
  } catch (const std::exception&) {
  }
  return true;
}

std::vector<std::string> NcclCollector::attach_system_libraries() {
  std::vector<std::string> out;
  for (const LdCacheEntry& e : ld_cache_entries()) {
    std::string err;
    if (e.name == "libnccl.so.2" && attach_library(e.path, &err)) out.push_back(e.path);
  }
  return out;
}

size_t NcclCollector::library_files() const { return session_.library_files(lib_); }

void NcclCollector::drain() { rb_->drain(); }

void NcclCollector::handle(const void* data, size_t size) {
  if (size < sizeof(uint32_t)) return;
  uint32_t op;
  memcpy(&op, data, sizeof op);
  delivered_++;
  if (op < GS_NCCL_FIRST_LIFE && size >= sizeof(gs_nccl_call)) {
    gs_nccl_call e;
    memcpy(&e, data, sizeof e);
    on_call(e);
  } else if (op >= GS_NCCL_FIRST_LIFE && size >= sizeof(gs_nccl_life)) {
    gs_nccl_life e;
    memcpy(&e, data, sizeof e);
    on_life(e);
  }
}

size_t NcclCollector::add_rank(const NcclRank& r) {
  auto it = by_handle_.find({r.pid, r.handle});
  if (it != by_handle_.end()) end_rank(it->second);  // a handle freed without our seeing it
  size_t key = next_rank_++;
  ranks_[key].info = r;
  if (auto n = process_names_.find(r.pid); n != process_names_.end() && r.process.empty())
    ranks_[key].info.process = n->second;
  else if (r.process.empty())
    ranks_[key].info.process = process_names_[r.pid] = proc_comm(r.pid);
  by_handle_[{r.pid, r.handle}] = key;
  return key;
}

size_t NcclCollector::rank_of(pid_t pid, uint64_t handle, uint64_t cgroup_id) {
  auto it = by_handle_.find({pid, handle});
  if (it != by_handle_.end()) return it->second;
  NcclRank r;
  r.pid = pid;
  r.cgroup_id = cgroup_id;
  r.handle = handle;
  return add_rank(r);
}

void NcclCollector::end_rank(size_t key) {
  auto it = ranks_.find(key);
  if (it == ranks_.end() || it->second.info.ended) return;
  NcclRank& r = it->second.info;
  r.ended = true;
  by_handle_.erase({r.pid, r.handle});
  splits_.erase({r.pid, r.handle});
}

void NcclCollector::process_exit(pid_t pid) {
  std::vector<size_t> keys;
  for (auto& [k, rs] : ranks_)
    if (rs.info.pid == pid && !rs.info.ended) keys.push_back(k);
  for (size_t k : keys) end_rank(k);
  threads_.erase(threads_.lower_bound({pid, 0}), threads_.upper_bound({pid, UINT32_MAX}));
  init_alls_.erase(pid);
  pids_.erase(pid);
  process_names_.erase(pid);
  names_.forget(static_cast<uint32_t>(pid));
  // The communicators it never destroyed: their sequence counters.
  int fd = bpf_map__fd(skel_->maps.gs_nccl_comms);
  std::vector<gs_nccl_comm_key> gone;
  gs_nccl_comm_key k{}, next{};
  const void* prev = nullptr;
  while (bpf_map_get_next_key(fd, prev, &next) == 0) {
    if (static_cast<pid_t>(next.pid) == pid) gone.push_back(next);
    k = next;
    prev = &k;
  }
  for (auto& g : gone) bpf_map_delete_elem(fd, &g);
}

void NcclCollector::on_call(const gs_nccl_call& e) {
  const pid_t pid = static_cast<pid_t>(e.pid);
  if (!cfg_.scope.wants_pid(e.pid)) return;
  pids_.insert(pid);
  ThreadMark* mark = nullptr;
  if (auto t = threads_.find({pid, e.tid}); t != threads_.end()) mark = &t->second;
  if (e.op != GS_NCCL_GROUP_START && e.op != GS_NCCL_GROUP_END) {
    size_t key = rank_of(pid, e.comm, e.cgroup_id);
    NcclOpRow& row = rows_[{key, e.op}];
    row.op = e.op;
    row.calls++;
    row.bytes += e.count * nccl_type_bytes(e.datatype);
    row.call_ns += e.call_ns;
    row.call_buckets[bucket_of(e.call_ns)]++;
    if (e.group_depth > 0) row.grouped++;
    if (e.ret != 0) row.errors[e.ret]++;
    const RankState& rs = ranks_[key];
    if (cfg_.on_call)
      cfg_.on_call({rs.info, e.tid, e.op, e.count * nccl_type_bytes(e.datatype), e.entry_mono_ns, e.call_ns,
                    e.flags & GS_NCCL_SEQ_UNSEEN ? GS_NCCL_NO_SEQ : e.seq, e.peer, e.ret});
    if (GS_NCCL_IS_COLLECTIVE(e.op) && e.seq != GS_NCCL_NO_SEQ && rs.info.comm_id != 0 &&
        !(e.flags & GS_NCCL_SEQ_UNSEEN)) {
      Arrival a{key, e.entry_mono_ns, 0, 0, false};
      if (mark && mark->return_ns <= e.entry_mono_ns && mark->cpu_ns <= e.thread_cpu_entry_ns) {
        a.before_known = true;
        a.before_wall_ns = e.entry_mono_ns - mark->return_ns;
        a.before_cpu_ns = e.thread_cpu_entry_ns - mark->cpu_ns;
      }
      ranks_[key].last_seq = std::max<int64_t>(ranks_[key].last_seq, static_cast<int64_t>(e.seq));
      auto& seqs = pending_[rs.info.comm_id];
      if (seqs.size() < kPendingMax || seqs.count(e.seq)) {
        Pending& p = seqs[e.seq];
        if (p.arrivals.empty()) p.first_seen_ns = e.entry_mono_ns;
        p.arrivals.push_back(a);
      } else {
        unmatched_++;
      }
    }
  }
  threads_[{pid, e.tid}] = {e.entry_mono_ns + e.call_ns, e.thread_cpu_exit_ns};
}

void NcclCollector::on_life(const gs_nccl_life& e) {
  const pid_t pid = static_cast<pid_t>(e.pid);
  if (e.op == GS_NCCL_PROC_EXIT) {
    process_exit(pid);
    return;
  }
  if (!cfg_.scope.wants_pid(e.pid)) return;
  pids_.insert(pid);
  if (!process_names_.count(pid))
    process_names_[pid] =
        std::string(names_.name(e.pid, e.tid, std::string_view(e.thread, strnlen(e.thread, sizeof e.thread))));
  auto live = [&](uint64_t handle) -> RankState* {
    auto it = by_handle_.find({pid, handle});
    return it == by_handle_.end() ? nullptr : &ranks_[it->second];
  };
  if (e.ret != 0 && e.op <= GS_NCCL_ABORT && comm_errors_.size() < 4096) {
    NcclSnapshot::CommError ce{{}, e.op, e.ret};
    const uint64_t on = e.op == GS_NCCL_SPLIT || e.op == GS_NCCL_SHRINK ? e.parent : e.comm;
    if (const RankState* rs = e.op >= GS_NCCL_SPLIT ? live(on) : nullptr) {
      ce.rank = rs->info;
    } else {
      ce.rank.pid = pid;
      ce.rank.process = process_names_[pid];
      ce.rank.cgroup_id = e.cgroup_id;
      if (e.op < GS_NCCL_SPLIT) ce.rank.rank = e.rank, ce.rank.nranks = e.nranks;
      ce.rank.handle = on;
    }
    comm_errors_.push_back(std::move(ce));
  }
  switch (e.op) {
    case GS_NCCL_INIT_RANK:
    case GS_NCCL_INIT_RANK_CONFIG:
    case GS_NCCL_INIT_RANK_SCALABLE: {
      if (e.ret != 0 || !e.comm || (e.flags & GS_NCCL_READ_FAILED)) break;
      NcclRank r;
      r.comm_id = nonzero(fnv1a(kFnvBasis, e.id, sizeof e.id));
      r.cgroup_id = e.cgroup_id;
      r.rank = e.rank;
      r.nranks = e.nranks;
      r.pid = pid;
      r.handle = e.comm;
      size_t k = add_rank(r);
      ranks_[k].rank_known = ranks_[k].nranks_known = true;
      break;
    }
    case GS_NCCL_INIT_ALL: {
      if (e.ret != 0) break;
      // One process holds every rank: the id needs only be its own.
      uint64_t n = init_alls_[pid]++;
      uint64_t h = fnv1a(kFnvBasis, "ncclCommInitAll", 15);
      h = fnv1a(h, &e.pid, sizeof e.pid);
      h = nonzero(fnv1a(h, &n, sizeof n));
      for (int i = 0; i < e.nranks && i < GS_NCCL_MAX_INIT_ALL; i++) {
        if (!e.init_all_comms[i]) continue;
        NcclRank r;
        r.comm_id = h;
        r.rank = i;
        r.nranks = e.nranks;
        r.device = e.ints[i] >= 0 ? e.ints[i] : i;
        r.cgroup_id = e.cgroup_id;
        r.pid = pid;
        r.handle = e.init_all_comms[i];
        size_t k = add_rank(r);
        ranks_[k].rank_known = ranks_[k].nranks_known = true;
      }
      break;
    }
    case GS_NCCL_SPLIT:
    case GS_NCCL_SHRINK: {
      // Splits are collective over the parent: its k-th split is the same on every rank.
      if (e.ret != 0) break;  // not counted: the ranks that succeed count theirs
      uint64_t n = splits_[{pid, e.parent}]++;
      if (!e.comm) break;  // NCCL_SPLIT_NOCOLOR
      const RankState* parent = live(e.parent);
      NcclRank r;
      r.pid = pid;
      r.handle = e.comm;
      r.device = parent ? parent->info.device : -1;
      r.cgroup_id = e.cgroup_id;
      RankState rs;
      if (parent && parent->info.comm_id) {
        const int32_t color = e.op == GS_NCCL_SPLIT ? e.color : INT32_MIN;  // a shrink: no color
        uint64_t h = fnv1a(kFnvBasis, &parent->info.comm_id, sizeof parent->info.comm_id);
        h = fnv1a(h, &n, sizeof n);
        r.comm_id = nonzero(fnv1a(h, &color, sizeof color));
        rs.parent_id = parent->info.comm_id;
        rs.parent_rank = parent->info.rank;
        if (e.op == GS_NCCL_SHRINK && parent->info.nranks > 0) r.nranks = parent->info.nranks - e.nranks;
        // A shrink keeps the order: its rank is the parent's less the ranks excluded below it.
        if (e.op == GS_NCCL_SHRINK && parent->info.rank >= 0 && e.nranks >= 0 && e.nranks <= GS_NCCL_MAX_INIT_ALL &&
            !(e.flags & GS_NCCL_READ_FAILED))
          r.rank = parent->info.rank - static_cast<int>(std::count_if(e.ints, e.ints + e.nranks, [&](int32_t x) {
                     return x < parent->info.rank;
                   }));
      }
      size_t k = add_rank(r);
      RankState& made = ranks_[k];
      made.parent_id = rs.parent_id;
      made.parent_rank = rs.parent_rank;
      made.key = e.rank;
      made.split_index = n;
      made.split = e.op == GS_NCCL_SPLIT;
      made.nranks_known = r.nranks > 0;
      made.rank_known = r.rank >= 0;
      break;
    }
    case GS_NCCL_FINALIZE:
      if (RankState* rs = live(e.comm)) rs->info.finalized = true;
      break;
    case GS_NCCL_DESTROY:
    case GS_NCCL_ABORT:
      if (auto it = by_handle_.find({pid, e.comm}); it != by_handle_.end()) end_rank(it->second);
      break;
    case GS_NCCL_CU_DEVICE:
      if (RankState* rs = live(e.comm); rs && e.ret == 0) rs->info.device = e.rank;
      break;
    case GS_NCCL_USER_RANK:
      if (RankState* rs = live(e.comm); rs && e.ret == 0) {
        rs->info.rank = e.rank;
        rs->rank_known = true;
      }
      break;
    case GS_NCCL_COUNT:
      if (RankState* rs = live(e.comm); rs && e.ret == 0) {
        rs->info.nranks = e.rank;
        rs->nranks_known = true;
      }
      break;
    case GS_NCCL_GET_ASYNC_ERROR:
      if (RankState* rs = live(e.comm)) async_.push_back({rs->info, e.ret});
      break;
  }
}

void NcclCollector::infer_splits() {
  // Parent id -> its live local ranks: (rank, splits done so far).
  std::map<uint64_t, std::vector<const RankState*>> parents;
  for (auto& [k, rs] : ranks_)
    if (!rs.info.ended && rs.info.comm_id) parents[rs.info.comm_id].push_back(&rs);
  std::map<uint64_t, std::vector<RankState*>> splits;
  for (auto& [k, rs] : ranks_)
    if (rs.split && !rs.info.ended && rs.info.comm_id && (!rs.rank_known || !rs.nranks_known))
      splits[rs.info.comm_id].push_back(&rs);
  for (auto& [id, members] : splits) {
    const RankState& first = *members[0];
    auto p = parents.find(first.parent_id);
    if (p == parents.end() || p->second.empty() || p->second[0]->info.nranks <= 0 ||
        p->second.size() != static_cast<size_t>(p->second[0]->info.nranks))
      continue;
    // Every rank of the parent is here: once each has made this split, its members are known.
    bool all_split = std::all_of(p->second.begin(), p->second.end(), [&](const RankState* r) {
      auto s = splits_.find({r->info.pid, r->info.handle});
      return s != splits_.end() && s->second > first.split_index;
    });
    if (!all_split) continue;
    std::sort(members.begin(), members.end(), [](const RankState* a, const RankState* b) {
      return std::pair(a->key, a->parent_rank) < std::pair(b->key, b->parent_rank);
    });
    for (size_t i = 0; i < members.size(); i++) {
      if (!members[i]->rank_known) members[i]->info.rank = static_cast<int>(i);
      if (!members[i]->nranks_known) members[i]->info.nranks = static_cast<int>(members.size());
    }
  }
}

void NcclCollector::match(uint64_t now_ns) {
  // comm id -> its ranks here, those that ended in this interval too: a rank that ended is
  // waited for only at the collectives it reached.
  std::map<uint64_t, std::vector<const std::pair<const size_t, RankState>*>> local;
  for (auto& kv : ranks_)
    if (kv.second.info.comm_id) local[kv.second.info.comm_id].push_back(&kv);
  for (auto c = pending_.begin(); c != pending_.end();) {
    const auto& members = local[c->first];
    if (members.size() < 2) {  // nothing to compare on this host
      unmatched_ += c->second.size();
      c = pending_.erase(c);
      continue;
    }
    for (auto s = c->second.begin(); s != c->second.end();) {
      const auto& arr = s->second.arrivals;
      const int64_t seq = static_cast<int64_t>(s->first);
      bool all = std::all_of(members.begin(), members.end(), [&](const auto* m) {
        if (m->second.info.ended && m->second.last_seq < seq) return true;
        return std::any_of(arr.begin(), arr.end(), [&](const Arrival& a) { return a.rank == m->first; });
      });
      if (!all || arr.size() < 2) {
        if (now_ns > s->second.first_seen_ns + kPendingMaxNs || (all && arr.size() < 2)) {
          unmatched_++;
          s = c->second.erase(s);
        } else {
          ++s;
        }
        continue;
      }
      auto [lo, hi] = std::minmax_element(arr.begin(), arr.end(),
                                          [](const Arrival& a, const Arrival& b) { return a.entry_ns < b.entry_ns; });
      for (const Arrival& a : arr) {
        Lags& l = lags_[a.rank];
        l.lags.push_back(a.entry_ns - lo->entry_ns);
        l.total += a.entry_ns - lo->entry_ns;
      }
      Lags& last = lags_[hi->rank];
      last.last++;
      if (hi->before_known) {
        last.before_wall_ns += hi->before_wall_ns;
        last.before_cpu_ns += hi->before_cpu_ns;
        last.before_count++;
      }
      s = c->second.erase(s);
    }
    ++c;
  }
}

NcclSnapshot NcclCollector::take() {
  drain();
  // Processes that mapped the library and never called it report no exit.
  for (auto it = pids_.begin(); it != pids_.end();) it = process_running(*it) ? std::next(it) : pids_.erase(it);
  infer_splits();
  match(monotonic_ns());
  NcclSnapshot snap;
  for (auto& [key, row] : rows_) {
    NcclOpRow r = row;
    r.rank = ranks_[key.first].info;
    snap.rows.push_back(std::move(r));
  }
  rows_.clear();
  std::sort(snap.rows.begin(), snap.rows.end(), [](const NcclOpRow& a, const NcclOpRow& b) {
    return std::tuple(a.rank.comm_id, a.rank.rank, a.rank.pid, a.rank.handle, a.op) <
           std::tuple(b.rank.comm_id, b.rank.rank, b.rank.pid, b.rank.handle, b.op);
  });
  std::map<uint64_t, NcclStraggler*> slowest;  // comm id -> its rank that arrived last most often
  for (auto& [key, l] : lags_) {
    NcclStraggler s;
    s.rank = ranks_[key].info;
    std::sort(l.lags.begin(), l.lags.end());
    s.matched = l.lags.size();
    s.lag_p50_ns = percentile(l.lags, 0.50);
    s.lag_p95_ns = percentile(l.lags, 0.95);
    s.lag_max_ns = l.lags.empty() ? 0 : l.lags.back();
    s.last_arrivals = l.last;
    s.lag_sum_ns = l.total;
    s.before_wall_ns = l.before_wall_ns;
    s.before_cpu_ns = l.before_cpu_ns;
    s.before_count = l.before_count;
    s.lags_ns = std::move(l.lags);
    snap.stragglers.push_back(std::move(s));
  }
  std::sort(snap.stragglers.begin(), snap.stragglers.end(), [](const NcclStraggler& a, const NcclStraggler& b) {
    return std::tuple(a.rank.comm_id, a.rank.rank, a.rank.pid) < std::tuple(b.rank.comm_id, b.rank.rank, b.rank.pid);
  });
  std::map<uint64_t, uint64_t> total_lag;
  for (auto& [key, l] : lags_) total_lag[key] = l.total;
  for (auto& s : snap.stragglers) {
    if (!s.last_arrivals) continue;
    NcclStraggler*& best = slowest[s.rank.comm_id];
    if (!best || s.last_arrivals > best->last_arrivals ||
        (s.last_arrivals == best->last_arrivals && s.lag_p50_ns > best->lag_p50_ns))
      best = &s;
  }
  for (auto& [id, s] : slowest) s->slowest = true;
  lags_.clear();
  snap.async_errors = std::move(async_);
  async_.clear();
  snap.comm_errors = std::move(comm_errors_);
  comm_errors_.clear();
  for (auto it = ranks_.begin(); it != ranks_.end();) {
    if (!it->second.info.ended) {
      ++it;
      continue;
    }
    snap.ended.push_back(it->second.info);
    const size_t key = it->first;
    for (auto& [id, seqs] : pending_)
      for (auto& [seq, p] : seqs)
        p.arrivals.erase(
            std::remove_if(p.arrivals.begin(), p.arrivals.end(), [&](const Arrival& a) { return a.rank == key; }),
            p.arrivals.end());
    it = ranks_.erase(it);
  }
  return snap;
}

NcclCollector::Stats NcclCollector::stats() const {
  int fd = bpf_map__fd(skel_->maps.gs_nccl_drops);
  Stats s;
  s.delivered = delivered_;
  s.lost_ringbuf = percpu_sum(fd, GS_NCCL_DROP_RINGBUF);
  s.lost_state = percpu_sum(fd, GS_NCCL_DROP_STATE);
  s.lost_comms = percpu_sum(fd, GS_NCCL_DROP_COMMS);
  s.unmatched = unmatched_;
  return s;
}

}  // namespace gpuscope
