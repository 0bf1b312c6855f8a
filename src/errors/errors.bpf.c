// SPDX-License-Identifier: GPL-2.0
/* gpuscope errors: the calls that surface an asynchronous fault (synchronizations, queries,
 * copies, allocations), probed at their return only. Per process, the time of the last
 * synchronizing call that succeeded, and its first sticky error sent as one event; later ones
 * are counted here. Launches are not probed: a fault shows at the next of these calls. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "common/events.h"
#include "common/cuda_api.h"
#include "common/scope_filter.bpf.h"
#include "common/maps.bpf.h"
#include "errors/errors.h"

char LICENSE[] SEC("license") = "GPL";

GS_HASH(err_procs, GS_ERR_MAX_PROCS, __u32, struct gs_err_proc);

GS_HASH(err_counts, GS_ERR_MAX_COUNTS, struct gs_err_count_key, __u64);

GS_RINGBUF(err_events, 1 << 16);

GS_DROP_COUNTERS(err_drops, GS_ERR_DROP_COUNT)

/* The sticky codes: those whose text in the toolkit's headers (driver_types.h for cudaError_t,
 * cuda.h for CUresult, CUDA 13.0) says "This leaves the process in an inconsistent state and any
 * further CUDA work will return the same error. To continue using CUDA, the process must be
 * terminated and relaunched" or that the context "cannot be used anymore" (the assert), with the
 * uncorrectable ECC error. Both enums give each the same value. */
static __always_inline bool sticky(__s32 code)
{
	switch (code) {
	case 214: /* cudaErrorECCUncorrectable, CUDA_ERROR_ECC_UNCORRECTABLE */
	case 226: /* cudaErrorContained, CUDA_ERROR_CONTAINED */
	case 700: /* cudaErrorIllegalAddress, CUDA_ERROR_ILLEGAL_ADDRESS */
	case 702: /* cudaErrorLaunchTimeout, CUDA_ERROR_LAUNCH_TIMEOUT */
	case 710: /* cudaErrorAssert, CUDA_ERROR_ASSERT */
	case 714: /* cudaErrorHardwareStackError, CUDA_ERROR_HARDWARE_STACK_ERROR */
	case 715: /* cudaErrorIllegalInstruction, CUDA_ERROR_ILLEGAL_INSTRUCTION */
	case 716: /* cudaErrorMisalignedAddress, CUDA_ERROR_MISALIGNED_ADDRESS */
	case 717: /* cudaErrorInvalidAddressSpace, CUDA_ERROR_INVALID_ADDRESS_SPACE */
	case 718: /* cudaErrorInvalidPc, CUDA_ERROR_INVALID_PC */
	case 719: /* cudaErrorLaunchFailure, CUDA_ERROR_LAUNCH_FAILED */
	case 721: /* cudaErrorTensorMemoryLeak, CUDA_ERROR_TENSOR_MEMORY_LEAK */
	case 810: /* cudaErrorMpsClientTerminated, CUDA_ERROR_MPS_CLIENT_TERMINATED */
	case 911: /* cudaErrorExternalDevice, CUDA_ERROR_EXTERNAL_DEVICE */
		return true;
	}
	return false;
}

/* A call that waits for the work before it: its success means every earlier fault would have
 * shown, so the kernels launched before it are not suspects. */
static __always_inline bool synchronizing(__u32 row)
{
	switch (row) {
	case GS_API_CUDA_DEVICE_SYNCHRONIZE:
	case GS_API_CUDA_STREAM_SYNCHRONIZE:
	case GS_API_CUDA_EVENT_SYNCHRONIZE:
	case GS_API_CUDA_MEMCPY:
	case GS_API_CU_CTX_SYNCHRONIZE:
	case GS_API_CU_STREAM_SYNCHRONIZE:
	case GS_API_CU_EVENT_SYNCHRONIZE:
	case GS_API_CU_MEMCPY_HTOD:
	case GS_API_CU_MEMCPY_DTOH:
		return true;
	}
	return false;
}

SEC("uretprobe")
int gs_err_ret(struct pt_regs *ctx)
{
	__u32 row = (__u32)bpf_get_attach_cookie(ctx);
	__s32 code = (__s32)PT_REGS_RC(ctx);
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 pid = pid_tgid >> 32;
	struct gs_err_proc *p;

	if (code == 0) {
		if (!synchronizing(row) || !in_scope())
			return 0;
		__u64 now = bpf_ktime_get_ns();
		p = bpf_map_lookup_elem(&err_procs, &pid);
		if (p) {
			p->last_ok_sync_ns = now;
			return 0;
		}
		struct gs_err_proc np = {.last_ok_sync_ns = now};
		if (bpf_map_update_elem(&err_procs, &pid, &np, BPF_ANY))
			count_drop(GS_ERR_DROP_PROCS_FULL);
		return 0;
	}
	if (!sticky(code) || !in_scope())
		return 0;
	p = bpf_map_lookup_elem(&err_procs, &pid);
	if (!p) {
		struct gs_err_proc np = {};
		bpf_map_update_elem(&err_procs, &pid, &np, BPF_NOEXIST);
		p = bpf_map_lookup_elem(&err_procs, &pid);
		if (!p) {
			count_drop(GS_ERR_DROP_PROCS_FULL);
			return 0;
		}
	}
	/* Two threads failing at once may both send (no atomic exchange before BPF v3): userspace
	 * keeps the first and counts the other. */
	if (p->reported) {
		struct gs_err_count_key k = {.pid = pid, .api = row, .code = code};
		__u64 *n = bpf_map_lookup_elem(&err_counts, &k);
		if (n) {
			__sync_fetch_and_add(n, 1);
			return 0;
		}
		__u64 one = 1;
		if (bpf_map_update_elem(&err_counts, &k, &one, BPF_NOEXIST)) {
			n = bpf_map_lookup_elem(&err_counts, &k);
			if (n)
				__sync_fetch_and_add(n, 1);
			else
				count_drop(GS_ERR_DROP_COUNTS_FULL);
		}
		return 0;
	}
	p->reported = 1;
	struct gs_err_event *e = bpf_ringbuf_reserve(&err_events, sizeof(*e), 0);
	if (!e) {
		count_drop(GS_ERR_DROP_EVENTS);
		return 0;
	}
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	e->pid = pid;
	e->tid = (__u32)pid_tgid;
	e->ts_ns = bpf_ktime_get_ns();
	e->last_ok_sync_ns = p->last_ok_sync_ns;
	e->cgroup_id = bpf_get_current_cgroup_id();
	e->code = code;
	e->api = row;
	BPF_CORE_READ_STR_INTO(&e->comm, task, group_leader, comm);
	bpf_get_current_comm(e->thread, sizeof(e->thread));
	bpf_ringbuf_submit(e, 0);
	return 0;
}

/* A process exits when its last thread does (signal->live has dropped to zero by now). */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(gs_err_proc_exit, struct task_struct *task)
{
	__u32 pid = BPF_CORE_READ(task, tgid);
	if (BPF_CORE_READ(task, signal, live.counter) != 0)
		return 0;
	bpf_map_delete_elem(&err_procs, &pid);
	return 0;
}
