/* SPDX-License-Identifier: GPL-2.0 */
/* -c COMM for the uprobe-driven capabilities: userspace sets these before load. The name
 * compared is the process's (its group leader's), not the calling thread's. */
#ifndef GPUSCOPE_COMM_FILTER_BPF_H
#define GPUSCOPE_COMM_FILTER_BPF_H

const volatile bool filter_comm = false;
const volatile char target_comm[GS_COMM_LEN] = {};

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

#endif
