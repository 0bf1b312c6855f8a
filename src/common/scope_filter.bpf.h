/* SPDX-License-Identifier: GPL-2.0 */
/* The scope's BPF side for the uprobe-driven capabilities (core/scope.h apply_scope): -c COMM,
 * compared with the process's name (its group leader's, not the calling thread's), and the
 * container filters, as the set of cgroup v2 ids in scope that userspace keeps in one map
 * shared by every program of the command. Userspace sets these before load. */
#ifndef GPUSCOPE_SCOPE_FILTER_BPF_H
#define GPUSCOPE_SCOPE_FILTER_BPF_H

#include "common/maps.bpf.h"

const volatile bool filter_comm = false;
const volatile char target_comm[GS_COMM_LEN] = {};
const volatile bool filter_cgroup = false;

GS_HASH(scope_cgroups, GS_MAX_SCOPE_CGROUPS, __u64, __u8);

static __always_inline bool comm_matches(void)
{
	struct task_struct *task;
	char comm[GS_COMM_LEN];
	if (!filter_comm)
		return true;
	task = (struct task_struct *)bpf_get_current_task();
	BPF_CORE_READ_STR_INTO(&comm, task, group_leader, comm);
	for (int i = 0; i < GS_COMM_LEN; i++) {
		if (comm[i] != target_comm[i])
			return false;
		if (!comm[i])
			break;
	}
	return true;
}

static __always_inline bool in_scope(void)
{
	__u64 cgroup_id;
	if (!comm_matches())
		return false;
	if (!filter_cgroup)
		return true;
	cgroup_id = bpf_get_current_cgroup_id();
	return bpf_map_lookup_elem(&scope_cgroups, &cgroup_id) != NULL;
}

#endif
