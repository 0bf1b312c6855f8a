// SPDX-License-Identifier: GPL-2.0
/* The floor for gpuscope ioctl: an empty program on the same tracepoint. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "GPL";

SEC("tp/syscalls/sys_enter_ioctl")
int empty_enter_ioctl(void *ctx)
{
	return 0;
}
