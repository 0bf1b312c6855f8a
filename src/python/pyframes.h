/* gpuscope CPython frames: layouts shared by pyframes.bpf.h (the walk, included by a
 * capability's BPF object) and userspace (src/python/pystacks.*). The walk records, per
 * interpreter frame, the code object's address and the instruction it stands at; names come
 * later, from the process's memory. */
#ifndef GPUSCOPE_PYFRAMES_H
#define GPUSCOPE_PYFRAMES_H
#ifdef __cplusplus
#include <linux/types.h>
#endif

#define GS_PY_MAX_DEPTH 64   /* frames walked per sample; a deeper chain is cut and counted */
#define GS_PY_MAX_THREADS 64 /* thread states looked at to find the sampled thread's */
#define GS_PY_MAX_PROCS 4096
#define GS_PY_MAX_TSTATES 16384 /* host tid -> its PyThreadState, found once */
#define GS_PY_MAX_STACKS 8192   /* distinct Python chains kept */
#define GS_PY_NONE 0xffff       /* an offset that does not exist in this version */

/* Where to find things in one process's interpreter (written by userspace per process, from
 * _Py_DebugOffsets or the per-version table). Offsets in bytes. */
struct gs_py_proc {
	__u64 interp_head_addr;    /* address of _PyRuntime.interpreters.head */
	__u16 interp_threads_head; /* PyInterpreterState.threads.head */
	__u16 tstate_next;         /* PyThreadState.next */
	__u16 tstate_native_thread_id; /* PyThreadState.native_thread_id (tid in the process's pid namespace) */
	__u16 tstate_frame;         /* PyThreadState.cframe (3.11, 3.12) or .current_frame (3.13) */
	__u16 cframe_current_frame; /* _PyCFrame.current_frame; GS_PY_NONE: tstate_frame is the frame */
	__u16 frame_code;           /* _PyInterpreterFrame.f_code / f_executable */
	__u16 frame_previous;
	__u16 frame_instr; /* prev_instr (3.11, 3.12) / instr_ptr (3.13) */
	__u16 frame_owner;
	__u16 frame_is_entry; /* 3.11; GS_PY_NONE: entries are marked by C-stack shim frames */
	__u16 code_qualname;  /* PyCodeObject.co_qualname: its address tags a code object's life */
	__u16 code_adaptive;  /* PyCodeObject.co_code_adaptive: instruction 0 */
};

/* Frame owner values (pycore_frame.h, the same from 3.11 to 3.13). */
#define GS_PY_OWNED_BY_CSTACK 3

#define GS_PY_ENTRY (1u << 31) /* the frame a C-level call of the interpreter loop started with */

struct gs_py_frame {
	__u64 code;  /* PyCodeObject address */
	__u32 lasti; /* code units from instruction 0 to the one the frame stands at */
	__u32 tag;   /* GS_PY_ENTRY | low 31 bits of co_qualname's address >> 3 */
};

#define GS_PY_TRUNCATED 1 /* more than GS_PY_MAX_DEPTH frames: the outermost are missing */

struct gs_py_stack {
	__u32 depth;
	__u32 flags;
	struct gs_py_frame frames[GS_PY_MAX_DEPTH]; /* innermost first; past depth: left over */
};

/* Distinct chains, per process: a hash over the frames. */
struct gs_py_stack_key {
	__u32 pid; /* host tgid */
	__u32 pad;
	__u64 hash;
};

/* A chain seen for the first time: userspace reads its code objects while the process lives.
 * hash 0: the process exec'd (gs_py_exec), its interpreter is to be looked at again. */
struct gs_py_new_stack {
	struct gs_py_stack_key key;
};

struct gs_py_tstate {
	__u64 addr;    /* PyThreadState; 0: the thread had none at the last look */
	__u32 pid;     /* host tgid: entries of an exited process are deleted by it */
	__u32 skipped; /* addr 0: samples since that look (the list is walked again every 64th) */
};

enum gs_py_counter {
	GS_PY_CNT_WALKS,     /* samples of a known Python process walked */
	GS_PY_CNT_TRUNCATED, /* chains cut at GS_PY_MAX_DEPTH */
	GS_PY_CNT_NO_TSTATE, /* thread without a PyThreadState (not a Python thread, or past the bound) */
	GS_PY_CNT_READ_ERR,    /* interpreter memory unreadable mid-walk (paged out, or changing) */
	GS_PY_CNT_STACKS_FULL, /* chain map full: the sample keeps native frames only */
	GS_PY_CNT_EVENTS_LOST, /* new-chain notice lost (ring buffer full): named at report time instead */
	GS_PY_CNT_COUNT
};

#ifdef __cplusplus
#include <cstddef>
static_assert(sizeof(gs_py_proc) == 32);
static_assert(offsetof(gs_py_proc, interp_threads_head) == 8);
static_assert(sizeof(gs_py_frame) == 16);
static_assert(sizeof(gs_py_stack) == 8 + 16 * GS_PY_MAX_DEPTH);
static_assert(sizeof(gs_py_stack_key) == 16);
static_assert(sizeof(gs_py_tstate) == 16);
#endif

#endif
