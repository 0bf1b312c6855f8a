/* GPU activity records: what libgpuscope-cupti.so hands to gpuscope (through its exported
 * gpuscope_cupti_* functions, one uprobe per buffer), and what gputime.bpf.c passes on to
 * userspace. Plain C, fixed layout; see the static_asserts. Prefix gs_gt_. */
#ifndef GPUSCOPE_GPUTIME_H
#define GPUSCOPE_GPUTIME_H

#ifdef __BPF__
#include "vmlinux.h"
#else
#include <linux/types.h>
#include <stddef.h>
#endif

/* Records per hand-off call: the library splits larger buffers, and the BPF program copies at
 * most this many (GS_GT_CHUNK at a time) so its loop stays bounded. */
#define GS_GT_CHUNK 32
#define GS_GT_BATCH_MAX 2048
#define GS_GT_NAME_MAX 4096

#define GS_GT_MAGIC 0x67737470u /* "gstp" */
#define GS_GT_VERSION 1

enum gs_gt_kind {
	GS_GT_KERNEL = 1,
	GS_GT_MEMCPY = 2,
	GS_GT_MEMSET = 3,
	GS_GT_SYNC = 4,
	GS_GT_API = 5, /* a launch API call: the CPU side of a correlation */
};

/* One completed GPU activity (or launch call), compacted from CUPTI's record. */
struct gs_gt_record {
	__u64 start_ns; /* CLOCK_BOOTTIME once the batch's clock_offset_ns is subtracted */
	__u64 end_ns;
	__u64 bytes; /* memcpy, memset */
	__u32 device;
	__u32 context;
	__u32 stream;
	__u32 correlation;
	__u32 name_id; /* kernel: id in the name table; api: CUPTI callback id */
	__u32 tid;     /* api: the calling OS thread */
	__u32 grid[3];
	__u32 block[3];
	__u8 kind;     /* enum gs_gt_kind */
	__u8 sub_kind; /* memcpy: CUpti_ActivityMemcpyKind; sync: type; api: 1 runtime, 2 driver */
	__u16 reserved16;
	__u32 reserved;
};

/* Per hand-off call. */
struct gs_gt_batch {
	__s64 clock_offset_ns; /* record clock minus CLOCK_BOOTTIME (0 when CUPTI keeps boot time) */
	__u64 cupti_dropped;   /* records CUPTI dropped so far in this process */
	__u64 lib_dropped; /* records the library dropped so far (no buffer, too long a name, incomplete) */
	__u32 version; /* GS_GT_VERSION */
	/* Share of the time the batch's records were recorded in, parts per million: 0 = all of it
	 * (exact); a duty cycle's on/period otherwise (the agent scales busy time by its inverse). */
	__u32 share_ppm;
};

/* The control word: gpuscope writes it in the workload (process_vm_writev), after checking the
 * magic; the library's thread reads it every GPUSCOPE_CUPTI_FLUSH_MS.
 *
 * Version 1 had only `attached`: one generation, any gpuscope's, meaning "record everything".
 * Version 2 keeps it (a version-1 gpuscope still works: it gets exact records with API records)
 * and adds a slot per gpuscope client saying what it wants. The library merges them: exact if
 * any client asks for exact (or v1 `attached`, or GPUSCOPE_CUPTI_ALWAYS), API records only if a
 * timeline asks, else the duty cycle with the largest share (windows aligned to CLOCK_BOOTTIME
 * modulo the period, so every process on a host records at the same time), else off: no CUPTI
 * activity enabled at all. A client claims a free slot (generation 0) by writing it whole with
 * its generation last, reads it back (two claims may race: the loser takes another slot on its
 * next write), and rewrites it with `beat` + 1 every 0.5 s. A slot whose beat stops for
 * GS_GT_LEASE_MS is freed by the library: a gpuscope that was killed stops costing.
 *
 * Version 3 adds a flush on request: CUPTI hands over only buffers that are full or whose
 * records are all complete, which a process launching all the time seldom has, so a gpuscope
 * that stops (a timeline attached to a running process) would miss the records of the last
 * buffer. It bumps its slot's `flush`; the library flushes every buffer (forced: a kernel
 * still running then comes without its end, and is counted as dropped) and writes the value
 * into `flushed`. */
#define GS_GT_CONTROL_VERSION 3
#define GS_GT_CLIENTS 16
#define GS_GT_LEASE_MS 5000

enum gs_gt_mode {
	GS_GT_MODE_KERNELS = 1,  /* exact kernels, copies, memsets, syncs */
	GS_GT_MODE_TIMELINE = 2, /* the same and the launch calls (API records) */
	GS_GT_MODE_DUTY = 3,     /* kernels etc. only in windows of on_ms every period_ms */
};

struct gs_gt_client {
	__u32 mode; /* enum gs_gt_mode */
	__u32 on_ms;
	__u32 period_ms;
	__u32 beat;
	__u32 generation; /* written last; 0: a free slot */
	__u32 flush;      /* version 3: the client bumps it to ask for a forced flush */
	__u32 flushed;    /* version 3: the library writes the `flush` it has done */
	__u32 reserved;
};

enum gs_gt_recording { GS_GT_REC_OFF = 0, GS_GT_REC_WINDOW = 1, GS_GT_REC_EXACT = 2 };

struct gs_gt_control {
	__u32 magic; /* GS_GT_MAGIC */
	__u32 version;
	__u32 attached; /* version-1 clients: a generation, 0: none */
	__u32 clients;  /* version 2: slots in client[] (0 in version 1) */
	__u64 records_handed;
	__u64 names_handed;
	/* Version 2. Written by the library: what it records now, for gpuscope and its tests. */
	__u32 recording; /* enum gs_gt_recording */
	__u32 api;       /* 1 while API records are on */
	__u64 windows;   /* duty windows opened */
	struct gs_gt_client client[GS_GT_CLIENTS];
};

/* BPF to userspace. */
enum gs_gt_event_type { GS_GT_EV_RECORDS = 1, GS_GT_EV_NAME = 2 };

struct gs_gt_chunk {
	__u32 type; /* GS_GT_EV_RECORDS */
	__u32 pid;
	__u32 n;
	__u32 reserved;
	struct gs_gt_batch batch;
	struct gs_gt_record recs[GS_GT_CHUNK];
};

struct gs_gt_name {
	__u32 type; /* GS_GT_EV_NAME */
	__u32 pid;
	__u32 id;
	__u32 len; /* bytes in name, without the NUL */
	char name[GS_GT_NAME_MAX];
};

enum gs_gt_drop {
	GS_GT_DROP_RINGBUF = 0, /* records: counted one by one */
	GS_GT_DROP_READ,        /* records whose memory could not be read */
	GS_GT_DROP_TOO_MANY,    /* records past GS_GT_BATCH_MAX in one call */
	GS_GT_DROP_NAME,        /* names */
	GS_GT_DROP_COUNT,
};

#ifndef __BPF__
#ifdef __cplusplus
#define GS_GT_ASSERT static_assert
#else
#define GS_GT_ASSERT _Static_assert
#endif
GS_GT_ASSERT(sizeof(struct gs_gt_record) == 80, "gs_gt_record layout");
GS_GT_ASSERT(offsetof(struct gs_gt_record, device) == 24, "gs_gt_record layout");
GS_GT_ASSERT(offsetof(struct gs_gt_record, grid) == 48, "gs_gt_record layout");
GS_GT_ASSERT(offsetof(struct gs_gt_record, kind) == 72, "gs_gt_record layout");
GS_GT_ASSERT(sizeof(struct gs_gt_batch) == 32, "gs_gt_batch layout");
GS_GT_ASSERT(sizeof(struct gs_gt_client) == 32, "gs_gt_client layout");
GS_GT_ASSERT(offsetof(struct gs_gt_client, generation) == 16, "gs_gt_client layout");
GS_GT_ASSERT(offsetof(struct gs_gt_client, flush) == 20, "gs_gt_client layout");
GS_GT_ASSERT(offsetof(struct gs_gt_client, flushed) == 24, "gs_gt_client layout");
GS_GT_ASSERT(offsetof(struct gs_gt_control, client) == 48, "gs_gt_control layout");
GS_GT_ASSERT(sizeof(struct gs_gt_control) == 48 + 32 * GS_GT_CLIENTS, "gs_gt_control layout");
GS_GT_ASSERT(offsetof(struct gs_gt_control, attached) == 8, "gs_gt_control layout");
GS_GT_ASSERT(sizeof(struct gs_gt_chunk) == 48 + 80 * GS_GT_CHUNK, "gs_gt_chunk layout");
GS_GT_ASSERT(offsetof(struct gs_gt_chunk, recs) == 48, "gs_gt_chunk layout");
GS_GT_ASSERT(sizeof(struct gs_gt_name) == 16 + GS_GT_NAME_MAX, "gs_gt_name layout");
#endif

#endif
