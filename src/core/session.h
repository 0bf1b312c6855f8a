/* SPDX-License-Identifier: GPL-2.0 */
/* Records of core/session.bpf.c. */
#ifndef GPUSCOPE_CORE_SESSION_H
#define GPUSCOPE_CORE_SESSION_H
#ifdef __cplusplus
#include <linux/types.h>
#endif

enum gs_session_why { GS_SESSION_DLOPEN = 1, GS_SESSION_EXEC = 2 };
enum gs_session_drop { GS_SESSION_DROP_EVENTS, GS_SESSION_DROP_COUNT };

struct gs_session_event {
	__u32 pid; /* tgid, host pid namespace */
	__u32 why; /* enum gs_session_why */
};

#ifdef __cplusplus
static_assert(sizeof(gs_session_event) == 8);
#endif
#endif
