#pragma once
// The NCCL collector: entry and return probes on libnccl.so.2's collectives, point-to-point,
// group and communicator functions (nccl.h), in every copy that processes in scope map (found
// like the graphics libraries: at every scan, exec and dlopen) and, host-wide, in the dynamic
// linker's cache. Communicators are named by an id equal on every rank (a hash of the
// ncclUniqueId given to init; for a split or shrink, of the parent's id, the split's number on
// the parent and its color), and take() gives what happened since the previous take: per
// communicator, rank and op the calls, bytes and call time, and the straggler view of the
// communicators with several ranks on this host.
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/event_loop.h"
#include "core/histogram.h"
#include "core/system.h"
#include "core/uprobe_session.h"
#include "nccl/nccl.h"

struct nccl_bpf;

namespace gpuscope {

// "ncclAllReduce"; "?" outside enum gs_nccl_op.
const char* nccl_op_name(uint32_t op);
// ncclGetErrorString's enum names: "ncclRemoteError"; "ncclResult(N)" for others.
std::string nccl_result_name(int32_t ret);
// Bytes of one element of an ncclDataType_t; 0 for an unknown type.
uint64_t nccl_type_bytes(int32_t datatype);
// nccl-tests' figures: the data size that algbw divides (the bytes counted here are the count
// argument times the element size; AllGather, ReduceScatter, AlltoAll, Gather and Scatter move
// nranks of them), and busbw's factor on algbw.
double nccl_algbw_size_factor(uint32_t op, int nranks);
double nccl_busbw_factor(uint32_t op, int nranks);
// A communicator id as shown: 16 hex digits.
std::string nccl_comm_id_str(uint64_t id);
// Parses 1-16 hex digits (an optional 0x); false when malformed.
bool nccl_parse_comm_id(const std::string& s, uint64_t* id);

// One communicator as one process holds it.
struct NcclRank {
  uint64_t comm_id = 0;  // 0: its init was not seen (attached later)
  int rank = -1;
  int nranks = -1;
  int device = -1;  // from ncclCommInitAll's devlist or the process's ncclCommCuDevice; -1: unknown
  pid_t pid = 0;
  std::string process;     // its name, read at its first NCCL call
  uint64_t cgroup_id = 0;  // its cgroup v2 id, from its calls: its container once it has gone
  uint64_t handle = 0;     // the ncclComm_t
  bool finalized = false;
  bool ended = false;  // destroyed, aborted, or its process exited
};

// Calls of one op by one rank, over the interval.
struct NcclOpRow {
  NcclRank rank;
  uint32_t op = 0;  // enum gs_nccl_op
  uint64_t calls = 0;
  uint64_t bytes = 0;                  // count x element size, summed
  uint64_t call_ns = 0;                // entry to return, summed
  Buckets call_buckets{};              // entry to return, per call (log2 ns)
  uint64_t grouped = 0;                // calls made inside ncclGroupStart/End
  std::map<int32_t, uint64_t> errors;  // ncclResult_t other than ncclSuccess -> calls
};

// One rank's arrivals at the communicator's collectives matched over the interval.
struct NcclStraggler {
  NcclRank rank;
  uint64_t matched = 0;                                     // collectives at which every rank on this host arrived
  uint64_t lag_p50_ns = 0, lag_p95_ns = 0, lag_max_ns = 0;  // behind the first arrival
  uint64_t last_arrivals = 0;                               // times it arrived last
  uint64_t lag_sum_ns = 0;                                  // over the matched collectives
  std::vector<uint64_t> lags_ns;                            // each matched collective's, ascending
  bool slowest = false;  // the rank that arrived last most often (ties: the larger total lag)
  // Before its late arrivals (those where it was last): the time since its previous collective
  // returned, and its thread's CPU time in that span, summed.
  uint64_t before_wall_ns = 0;
  uint64_t before_cpu_ns = 0;
  uint64_t before_count = 0;  // late arrivals with both known (the same thread as the previous)
};

struct NcclSnapshot {
  std::vector<NcclOpRow> rows;            // by (comm id, rank, pid, op)
  std::vector<NcclStraggler> stragglers;  // by (comm id, rank)
  std::vector<NcclRank> ended;            // communicators that ended in the interval
  struct AsyncError {
    NcclRank rank;
    int32_t error;
  };
  std::vector<AsyncError> async_errors;  // ncclCommGetAsyncError results other than success
  // Communicator calls (init, split, shrink, finalize, destroy, abort) that failed: the
  // communicator acted on (for an init, the rank and size asked for, no id).
  struct CommError {
    NcclRank rank;
    uint32_t op;
    int32_t error;
  };
  std::vector<CommError> comm_errors;
};

// One call on a communicator as it returned (Config::on_call): the timeline's spans.
struct NcclCall {
  NcclRank rank;
  uint32_t tid = 0;
  uint32_t op = 0;  // enum gs_nccl_op
  uint64_t bytes = 0;
  uint64_t entry_mono_ns = 0, call_ns = 0;  // CLOCK_MONOTONIC
  uint64_t seq = GS_NCCL_NO_SEQ;            // a collective's number on the communicator, where counted from its init
  int peer = -1;                            // send/recv: the peer; rooted ones: the root
  int32_t ret = 0;                          // ncclResult_t
};

class NcclCollector {
 public:
  struct Config {
    Scope scope;
    std::function<void(const NcclCall&)> on_call;  // each call on a communicator, as it is read
  };
  struct Stats {
    uint64_t delivered = 0;
    uint64_t lost_ringbuf = 0;  // records: the ring buffer was full
    uint64_t lost_state = 0;    // calls: no memory for the thread's state
    uint64_t lost_comms = 0;    // collectives without a sequence number: communicator map full
    uint64_t unmatched = 0;     // collectives dropped from the straggler view unmatched
  };
  // A copy of libnccl.so.2 attached: its path, the pid it was found in (0: the linker cache),
  // and the probed functions it lacks (an older NCCL).
  struct Attached {
    std::string path;
    pid_t pid;
    std::vector<std::string> missing;
  };

  NcclCollector(UprobeSession& session, Config cfg);
  ~NcclCollector();
  // Attaches the copies the dynamic linker's cache lists; returns their paths.
  std::vector<std::string> attach_system_libraries();
  // Attaches one copy by its path (a file beside the program, not yet mapped); false with why.
  bool attach_library(const std::string& path, std::string* err);
  void watch(EventLoop& loop) { loop.watch(*rb_); }
  void drain();
  // What happened since the previous take; communicators that ended are forgotten after it.
  NcclSnapshot take();
  Stats stats() const;
  size_t library_files() const;
  // Copies attached since the previous call.
  std::vector<Attached> take_attached() { return std::exchange(attached_, {}); }
  // Running processes seen mapping the library or calling it.
  const std::set<pid_t>& nccl_pids() const { return pids_; }
  void detach();

 private:
  struct Arrival {
    size_t rank;  // key of ranks_
    uint64_t entry_ns;
    uint64_t before_wall_ns, before_cpu_ns;
    bool before_known;
  };
  struct Pending {
    std::vector<Arrival> arrivals;
    uint64_t first_seen_ns = 0;
  };
  struct Lags {
    std::vector<uint64_t> lags;
    uint64_t last = 0, total = 0;
    uint64_t before_wall_ns = 0, before_cpu_ns = 0, before_count = 0;
  };
  struct ThreadMark {  // a thread's last return from NCCL
    uint64_t return_ns, cpu_ns;
  };
  void handle(const void* data, size_t size);
  void on_call(const gs_nccl_call& e);
  void on_life(const gs_nccl_life& e);
  size_t rank_of(pid_t pid, uint64_t handle, uint64_t cgroup_id);  // made where its init was not seen
  size_t add_rank(const NcclRank& r);
  void end_rank(size_t key);
  void process_exit(pid_t pid);
  void match(uint64_t now_ns);
  // A split's rank and size where every rank of its parent is on this host (NCCL orders a split's
  // ranks by key, then by parent rank).
  void infer_splits();

  Config cfg_;
  UprobeSession& session_;
  std::unique_ptr<nccl_bpf, void (*)(nccl_bpf*)> skel_;
  std::unique_ptr<RingBuffer> rb_;
  size_t lib_ = 0;
  Link exit_link_;
  std::set<const ElfSymbols*> reported_;  // copies whose missing functions were said
  std::vector<Attached> attached_;
  std::set<pid_t> pids_;
  struct RankState {
    NcclRank info;
    uint64_t parent_id = 0;  // a split's or shrink's parent, where seen
    int parent_rank = -1;
    int key = -1;              // ncclCommSplit's key
    uint64_t split_index = 0;  // the parent's how manieth split or shrink
    bool split = false, rank_known = false, nranks_known = false;
    int64_t last_seq = -1;  // the last collective it arrived at
  };
  std::map<size_t, RankState> ranks_;  // every communicator of every process
  size_t next_rank_ = 1;
  std::map<std::pair<pid_t, uint64_t>, size_t> by_handle_;  // live ones
  std::map<std::pair<pid_t, uint64_t>, uint64_t> splits_;   // per parent: splits and shrinks so far
  std::map<std::pair<pid_t, uint32_t>, ThreadMark> threads_;
  std::map<std::pair<size_t, uint32_t>, NcclOpRow> rows_;    // (rank, op)
  std::map<uint64_t, std::map<uint64_t, Pending>> pending_;  // comm id -> seq -> arrivals
  std::map<size_t, Lags> lags_;                              // by rank
  std::vector<NcclSnapshot::AsyncError> async_;
  std::vector<NcclSnapshot::CommError> comm_errors_;
  std::map<pid_t, uint64_t> init_alls_;
  ProcessNames names_;
  std::map<pid_t, std::string> process_names_;  // per process: ncclCommInitAll calls so far
  uint64_t delivered_ = 0, unmatched_ = 0;
  bool multi_ = false;
  bool detached_ = false;
};

}  // namespace gpuscope
