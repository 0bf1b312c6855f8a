// SPDX-License-Identifier: GPL-2.0
/* gpuscope ioctl: ioctl and mmap calls on NVIDIA and DRM device nodes, counted per (pid,
 * device, request). Every ioctl on the host passes through here, so the filter comes first
 * and stays cheap: fd -> file -> inode, and a char device with an NVIDIA or DRM major, or
 * nothing. */
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "ioctl/ioctl.h"
#include "common/maps.bpf.h"
#include "common/events.h"
#include "common/scope_filter.bpf.h"
#include "common/arch.bpf.h"

char LICENSE[] SEC("license") = "GPL";

const volatile __u32 uvm_major = 0;
const volatile bool emit_events = false;
const volatile bool filter_pids = false;

#define S_IFMT 00170000
#define S_IFCHR 0020000

struct inflight_call {
	__u64 start_ns;
	__u32 rdev;
	__u32 request;
	__u64 arg;      /* DRM_IOCTL_VERSION only: the user's struct drm_version */
	__u64 name_cap; /* and the name buffer's size it gave */
};

/* key: tid */
GS_HASH(inflight, 8192, __u32, struct inflight_call);

GS_HASH(ioctls, 16384, struct gs_ioctl_key, struct gs_ioctl_val);

GS_HASH(mmaps, 4096, struct gs_mmap_key, struct gs_mmap_val);

GS_HASH(opens, 4096, struct gs_open_key, struct gs_open_val);

GS_HASH(pids, 1024, __u32, __u8);

/* key: rdev */
GS_HASH(drm_drivers, 256, __u32, struct gs_drm_driver);

GS_RINGBUF(events, 1 << 20);

GS_DROP_COUNTERS(drops, GS_IOCTL_DROP_COUNT)

/* Calls in flight host-wide: while zero, every exit returns without a map lookup. */
__s64 pending = 0;
/* raw_tp only: opens in flight host-wide, so that other syscalls' exits need not read their
 * number (sys_enter gets it for free, sys_exit has to read it from the registers). */
__s64 pending_opens = 0;

extern void *bpf_rdonly_cast(const void *obj, __u32 btf_id) __ksym;

/* The device behind fd when it is an NVIDIA or DRM character device, else 0. This runs on every
 * ioctl of the host, so it walks task -> files -> fdtable -> file -> inode with direct BTF
 * loads (one helper call, for the fd slot) instead of a probe-read per hop. */
static __always_inline __u32 gpu_rdev(__u64 fd)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct files_struct *files = task->files;
	struct file *slot = NULL;
	if (!files)
		return 0;
	struct fdtable *fdt = files->fdt;
	if (!fdt || fd >= fdt->max_fds)
		return 0;
	if (bpf_probe_read_kernel(&slot, sizeof(slot), &fdt->fd[fd]) || !slot)
		return 0;
	struct file *f = bpf_rdonly_cast(slot, bpf_core_type_id_kernel(struct file));
	struct inode *inode = f->f_inode;
	if (!inode || (inode->i_mode & S_IFMT) != S_IFCHR)
		return 0;
	__u32 rdev = inode->i_rdev;
	__u32 major = rdev >> GS_KDEV_MINORBITS;
	if (major == GS_NV_MAJOR || major == GS_DRM_MAJOR || (uvm_major && major == uvm_major))
		return rdev;
	return 0;
}

static __always_inline bool pid_wanted(__u32 pid)
{
	return (!filter_pids || bpf_map_lookup_elem(&pids, &pid)) && in_scope();
}

/* NVIDIA requests are _IOC numbers of type 'F' (major 195) or plain integers (nvidia-uvm:
 * small ones and 0x3000000x); DRM's are of type 'd', driver-specific ones included. Anything
 * else cannot be a GPU call, so most ioctls on the host return here without the fd walk; the
 * rest are still checked by device. */
static __always_inline bool maybe_gpu_request(__u32 request)
{
	__u32 type = (request >> 8) & 0xff;
	return type == 'F' || type == 'd' || request < 0x1000 || (request & ~0xfu) == 0x30000000;
}

/* The driver's name from a DRM_IOCTL_VERSION that succeeded: the kernel copied at most the
 * buffer's size, without a NUL, and wrote the name's full length back into name_len. */
static __always_inline void learn_drm_driver(const struct inflight_call *c)
{
	__u64 len = 0, name = 0;
	if (bpf_probe_read_user(&len, sizeof(len),
	                        (void *)(c->arg + GS_DRM_VERSION_NAME_LEN_OFF)) ||
	    bpf_probe_read_user(&name, sizeof(name), (void *)(c->arg + GS_DRM_VERSION_NAME_OFF)) ||
	    !name)
		return;
	if (len > c->name_cap)
		len = c->name_cap;
	if (len > GS_DRM_DRIVER_NAME_MAX - 1)
		len = GS_DRM_DRIVER_NAME_MAX - 1;
	if (!len)
		return;
	struct gs_drm_driver d = {};
	if (bpf_probe_read_user(d.name, len & (GS_DRM_DRIVER_NAME_MAX - 1), (void *)name))
		return;
	__u32 rdev = c->rdev;
	if (bpf_map_update_elem(&drm_drivers, &rdev, &d, BPF_ANY))
		count_drop(GS_IOCTL_DROP_MAP_FULL);
}

static __always_inline void on_ioctl_enter(__u64 fd, __u64 request, __u64 arg)
{
	if (!maybe_gpu_request(request))
		return;
	__u32 rdev = gpu_rdev(fd);
	if (!rdev)
		return;
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id;
	if (!pid_wanted(id >> 32))
		return;
	struct inflight_call c = {
	        .start_ns = bpf_ktime_get_boot_ns(), .rdev = rdev, .request = (__u32)request};
	if ((__u32)request == GS_DRM_IOCTL_VERSION && rdev >> GS_KDEV_MINORBITS == GS_DRM_MAJOR &&
	    arg &&
	    !bpf_probe_read_user(&c.name_cap, sizeof(c.name_cap),
	                         (void *)(arg + GS_DRM_VERSION_NAME_LEN_OFF)))
		c.arg = arg;
	if (bpf_map_update_elem(&inflight, &tid, &c, BPF_ANY)) {
		count_drop(GS_IOCTL_DROP_STATE_FULL);
		return;
	}
	__sync_fetch_and_add(&pending, 1);
}

static __always_inline void on_ioctl_exit(__s64 ret)
{
	if (pending <= 0)
		return;
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id;
	struct inflight_call *c = bpf_map_lookup_elem(&inflight, &tid);
	if (!c)
		return;
	__u64 now = bpf_ktime_get_boot_ns();
	__u64 dur = now - c->start_ns;
	struct gs_ioctl_key k = {.pid = id >> 32, .rdev = c->rdev, .request = c->request};
	if (c->arg && ret == 0)
		learn_drm_driver(c);
	bpf_map_delete_elem(&inflight, &tid);
	__sync_fetch_and_sub(&pending, 1);

	struct gs_ioctl_val *v = bpf_map_lookup_elem(&ioctls, &k);
	if (!v) {
		struct gs_ioctl_val zero = {};
		bpf_get_current_comm(zero.comm, sizeof(zero.comm));
		bpf_map_update_elem(&ioctls, &k, &zero, BPF_NOEXIST);
		v = bpf_map_lookup_elem(&ioctls, &k);
	}
	if (v) {
		__sync_fetch_and_add(&v->count, 1);
		if (ret < 0)
			__sync_fetch_and_add(&v->errors, 1);
		__sync_fetch_and_add(&v->total_ns, dur);
		if (dur > v->max_ns)
			v->max_ns = dur; /* a racing writer may win; the max is advisory */
	} else {
		count_drop(GS_IOCTL_DROP_MAP_FULL);
	}
	if (!emit_events)
		return;
	struct gs_ioctl_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count_drop(GS_IOCTL_DROP_RINGBUF);
		return;
	}
	e->ts_boot_ns = now;
	e->dur_ns = dur;
	e->ret = ret;
	e->pid = k.pid;
	e->tid = tid;
	e->rdev = k.rdev;
	e->request = k.request;
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	bpf_ringbuf_submit(e, 0);
}

static __always_inline void on_mmap(__u64 fd, __u64 len)
{
	__u32 rdev = gpu_rdev(fd);
	if (!rdev)
		return;
	__u32 pid = bpf_get_current_pid_tgid() >> 32;
	if (!pid_wanted(pid))
		return;
	struct gs_mmap_key k = {.pid = pid, .rdev = rdev};
	struct gs_mmap_val *v = bpf_map_lookup_elem(&mmaps, &k);
	if (!v) {
		struct gs_mmap_val zero = {};
		bpf_get_current_comm(zero.comm, sizeof(zero.comm));
		bpf_map_update_elem(&mmaps, &k, &zero, BPF_NOEXIST);
		v = bpf_map_lookup_elem(&mmaps, &k);
	}
	if (!v) {
		count_drop(GS_IOCTL_DROP_MAP_FULL);
		return;
	}
	__sync_fetch_and_add(&v->count, 1);
	__sync_fetch_and_add(&v->bytes, len);
}

/* At the exit of an open the fd says which node it was, whatever path led there; a failed
 * open touched no GPU. */
static __always_inline void on_open_exit(__s64 fd)
{
	if (fd < 0)
		return;
	__u32 rdev = gpu_rdev(fd);
	if (!rdev)
		return;
	__u64 now = bpf_ktime_get_boot_ns();
	__u32 pid = bpf_get_current_pid_tgid() >> 32;
	if (!pid_wanted(pid))
		return;
	struct gs_open_key k = {.pid = pid, .rdev = rdev};
	struct gs_open_val *v = bpf_map_lookup_elem(&opens, &k);
	if (!v) {
		struct gs_open_val zero = {.first_boot_ns = now};
		bpf_get_current_comm(zero.comm, sizeof(zero.comm));
		bpf_map_update_elem(&opens, &k, &zero, BPF_NOEXIST);
		v = bpf_map_lookup_elem(&opens, &k);
	}
	if (!v) {
		count_drop(GS_IOCTL_DROP_MAP_FULL);
		return;
	}
	__sync_fetch_and_add(&v->count, 1);
}

SEC("tp/syscalls/sys_exit_openat")
int gs_openat_exit(struct trace_event_raw_sys_exit *ctx)
{
	on_open_exit(ctx->ret);
	return 0;
}

SEC("tp/syscalls/sys_exit_openat2")
int gs_openat2_exit(struct trace_event_raw_sys_exit *ctx)
{
	on_open_exit(ctx->ret);
	return 0;
}

SEC("tp/syscalls/sys_enter_ioctl")
int gs_ioctl_enter(struct trace_event_raw_sys_enter *ctx)
{
	on_ioctl_enter(ctx->args[0], ctx->args[1], ctx->args[2]);
	return 0;
}

SEC("tp/syscalls/sys_exit_ioctl")
int gs_ioctl_exit(struct trace_event_raw_sys_exit *ctx)
{
	on_ioctl_exit(ctx->ret);
	return 0;
}

SEC("tp/syscalls/sys_enter_mmap")
int gs_mmap_enter(struct trace_event_raw_sys_enter *ctx)
{
	on_mmap(ctx->args[4], ctx->args[1]);
	return 0;
}

/* Without tracefs: every syscall, filtered on its number. Syscall arguments live in the
 * user registers (libbpf's PT_REGS_PARM*_CORE_SYSCALL; the number from common/arch.bpf.h). */
SEC("raw_tp/sys_enter")
int gs_raw_enter(struct bpf_raw_tracepoint_args *ctx)
{
	struct pt_regs *regs = (struct pt_regs *)ctx->args[0];
	long nr = ctx->args[1];
	if (nr == GS_NR_IOCTL)
		on_ioctl_enter(PT_REGS_PARM1_CORE_SYSCALL(regs), PT_REGS_PARM2_CORE_SYSCALL(regs),
		               PT_REGS_PARM3_CORE_SYSCALL(regs));
	else if (nr == GS_NR_MMAP)
		on_mmap(PT_REGS_PARM5_CORE_SYSCALL(regs), PT_REGS_PARM2_CORE_SYSCALL(regs));
	else if (nr == GS_NR_OPENAT || nr == GS_NR_OPENAT2)
		__sync_fetch_and_add(&pending_opens, 1);
	return 0;
}

SEC("raw_tp/sys_exit")
int gs_raw_exit(struct bpf_raw_tracepoint_args *ctx)
{
	struct pt_regs *regs = (struct pt_regs *)ctx->args[0];
	if (pending <= 0 && pending_opens <= 0)
		return 0;
	long nr = GS_SYSCALL_NR_CORE(regs);
	if (nr == GS_NR_IOCTL) {
		on_ioctl_exit(ctx->args[1]);
	} else if (nr == GS_NR_OPENAT || nr == GS_NR_OPENAT2) {
		__sync_fetch_and_sub(&pending_opens, 1);
		on_open_exit(ctx->args[1]);
	}
	return 0;
}
