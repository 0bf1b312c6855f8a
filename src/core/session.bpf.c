// SPDX-License-Identifier: GPL-2.0
/* The uprobe session's own hooks: a process whose mappings may have changed (it exec'd, or its
 * dynamic linker is adding or removing a library) is sent to userspace at once, so that a
 * library opened with dlopen is probed before its first calls rather than at the next scan. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "common/maps.bpf.h"
#include "core/session.h"

char LICENSE[] SEC("license") = "GPL";

GS_RINGBUF(session_events, 1 << 16);

GS_DROP_COUNTERS(session_drops, GS_SESSION_DROP_COUNT)

static __always_inline void maps_changed(__u32 why)
{
	struct gs_session_event *e = bpf_ringbuf_reserve(&session_events, sizeof(*e), 0);
	if (!e) {
		count_drop(GS_SESSION_DROP_EVENTS);
		return;
	}
	e->pid = bpf_get_current_pid_tgid() >> 32;
	e->why = why;
	bpf_ringbuf_submit(e, BPF_RB_FORCE_WAKEUP);
}

/* void _dl_debug_state(void): the dynamic linker calls it around every dlopen and dlclose. */
SEC("uprobe")
int gs_session_dl_change(struct pt_regs *ctx)
{
	maps_changed(GS_SESSION_DLOPEN);
	return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(gs_session_exec, struct task_struct *p)
{
	maps_changed(GS_SESSION_EXEC);
	return 0;
}
