/* gpuscope starvation: layouts shared by starvation.bpf.c and userspace. Units are in the names;
 * padding is spelled out. Times are CLOCK_BOOTTIME nanoseconds unless a name says otherwise. */
#ifndef GPUSCOPE_STARVATION_H
#define GPUSCOPE_STARVATION_H
#ifdef __cplusplus
#include <linux/types.h>
#endif

#define GS_S_COMM_LEN 16
#define GS_S_MAX_THREADS 16384
#define GS_S_MAX_SAMPLE_KEYS 16384
#define GS_S_MAX_STACKS 8192
#define GS_S_STACK_DEPTH 127

/* Bits of the host tgids the bridge lists, tgid % GS_S_TGID_BITS, kept by userspace from
 * gpu_per_pid: a clear bit lets a context switch skip the hash lookup. */
#define GS_S_TGID_BITS 65536
#define GS_S_TGID_WORDS (GS_S_TGID_BITS / 64)

/* Per CPU: the thread of a GPU process switched in there, counted from start_ns. A thread runs on
 * one CPU at a time and is switched out where it was switched in, so this is all the slice state. */
struct gs_s_cpu {
	__u64 start_ns; /* switch-in, or the last sample since */
	__u32 tid;      /* 0: the thread on this CPU is not counted */
	__u32 pad;
	/* The last process looked up in the bridge's maps, valid for one bridge tick (the maps and
	 * the latch change only with a tick): switches between threads of one process skip the
	 * hash lookups. */
	__u64 seen_update_ns;   /* the tick it was looked up in */
	__u64 newest_active_ns; /* newest last-active of its devices */
	__u32 tgid;
	__u32 holds_gpu; /* 1: it holds min_gpu_mem_bytes on at least one device */
};

/* Per thread (key: host tid), written only from BPF; counters only grow, userspace reports deltas. */
struct gs_s_thread {
	__u64 cpu_time_ns; /* on-CPU time while its GPU(s) had been idle for at least min_idle */
	__u64 hit_count;   /* slices (switch-outs) and samples that added to cpu_time_ns */
	__u64 idle_ns; /* GPU idle time at the latest hit: now - newest last-active of its devices */
	__u64 last_hit_ns; /* boot time of the latest hit */
	__u64 samples; /* cpu-clock samples taken while starving (each weighs sample_period_ns) */
	__u32 pid;     /* host tgid */
	__u32 tid;
	__s32 switch_ustack_id;     /* user stack at the latest starving switch-out; <0: none */
	__s32 switch_kstack_id;     /* kernel stack there */
	char thread[GS_S_COMM_LEN]; /* the thread's comm */
	char comm[GS_S_COMM_LEN];   /* the group leader's comm */
};

/* Sampled stacks: key of the per-stack sample counter. */
struct gs_s_sample_key {
	__u32 pid;
	__u32 tid;
	__s32 ustack_id; /* <0: none */
	__s32 kstack_id; /* <0: none (a sample in user mode has no kernel stack) */
	__u64 py_hash;   /* the CPython frame chain (python/pyframes.h); 0: none */
};

enum gs_s_counter {
	GS_S_CNT_SAMPLES,       /* cpu-clock samples seen */
	GS_S_CNT_LATCH_TICKS,   /* bridge ticks folded into the last-active latch */
	GS_S_CNT_NO_THREAD,     /* thread map full: time not counted */
	GS_S_CNT_NO_SAMPLE_KEY, /* sample map full: sample not kept */
	GS_S_CNT_STACK_ERR,     /* stack map full or collided: stack not kept */
	GS_S_CNT_COUNT
};

#ifdef __cplusplus
#include <cstddef>
static_assert(sizeof(gs_s_cpu) == 40);
static_assert(sizeof(gs_s_thread) == 88);
static_assert(offsetof(gs_s_thread, pid) == 40);
static_assert(offsetof(gs_s_thread, switch_ustack_id) == 48);
static_assert(offsetof(gs_s_thread, thread) == 56);
static_assert(offsetof(gs_s_thread, comm) == 72);
static_assert(sizeof(gs_s_sample_key) == 24);
static_assert(offsetof(gs_s_sample_key, py_hash) == 16);
#endif

#endif
