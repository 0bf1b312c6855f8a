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
	__u64 lib_dropped;     /* records the library dropped so far (no buffer, too long a name) */
	__u32 version;         /* GS_GT_VERSION */
	__u32 reserved;
};

/* The library's one global that gpuscope writes (process_vm_writev): while `attached` is 0 the
 * library keeps CUPTI's activity off and does nothing beyond reading it. Each gpuscope that
 * attaches writes a new generation, which makes the library hand its name table over again. */
struct gs_gt_control {
	__u32 magic; /* GS_GT_MAGIC */
	__u32 version;
	__u32 attached; /* generation, 0: no gpuscope */
	__u32 reserved;
	__u64 records_handed;
	__u64 names_handed;
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
GS_GT_ASSERT(sizeof(struct gs_gt_control) == 32, "gs_gt_control layout");
GS_GT_ASSERT(offsetof(struct gs_gt_control, attached) == 8, "gs_gt_control layout");
GS_GT_ASSERT(sizeof(struct gs_gt_chunk) == 48 + 80 * GS_GT_CHUNK, "gs_gt_chunk layout");
GS_GT_ASSERT(offsetof(struct gs_gt_chunk, recs) == 48, "gs_gt_chunk layout");
GS_GT_ASSERT(sizeof(struct gs_gt_name) == 16 + GS_GT_NAME_MAX, "gs_gt_name layout");
#endif

#endif
