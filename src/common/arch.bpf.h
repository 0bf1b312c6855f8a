/* SPDX-License-Identifier: GPL-2.0 */
/* The calling convention at a uprobe's entry: the one place in the BPF code that names
 * registers. Everything else reads arguments through PT_REGS_PARM1..5 (libbpf) or through
 * what this header provides:
 *
 *   GS_PT_REGS_PARM6(ctx) ..  arguments past libbpf 1.1's PT_REGS_PARM5 that sit in registers
 *   gs_arg(ctx, i)            argument i (0-based), register or stack
 *   gs_stack_pointer(ctx)     the stack pointer at entry
 *   gs_return_address(ctx)    where the probed call returns to
 *   GS_SYSCALL_NR_CORE(regs), GS_NR_*: a syscall's number in its registers, and the numbers
 *   struct gs_args, gs_args_load, gs_arg_at, gs_args_span:
 *                             the registers copied to the stack, then indexed by a runtime
 *                             value (indexing pt_regs itself by one makes clang emit a
 *                             variable ctx offset, which the verifier rejects)
 *
 * Debian 12's libbpf 1.1 has no PT_REGS_PARM6+ and its BPF_UPROBE takes at most 5 arguments,
 * hence the per-arch section below. Build for another arch with -D__TARGET_ARCH_<arch>
 * (cmake/Bpf.cmake: GPUSCOPE_BPF_ARCH). */
#ifndef GPUSCOPE_COMMON_ARCH_BPF_H
#define GPUSCOPE_COMMON_ARCH_BPF_H

#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#if defined(__TARGET_ARCH_x86)
/* x86-64 SysV: integer arguments in rdi rsi rdx rcx r8 r9, then the stack. At entry [sp] is
 * the return address, so the 7th argument sits at sp+8. */
#define GS_ARG_REGS 6
#define GS_PT_REGS_PARM6(ctx) (__PT_REGS_CAST(ctx)->r9)
#define GS_STACK_ARGS_OFF 8 /* first stack argument, from sp at entry */
/* Syscalls (raw_tp/sys_enter, sys_exit): the number, and the numbers gpuscope watches. */
#define GS_SYSCALL_NR_CORE(regs) BPF_CORE_READ(regs, orig_ax)
#define GS_NR_IOCTL 16
#define GS_NR_MMAP 9
#define GS_NR_OPENAT 257
#define GS_NR_OPENAT2 437

static __always_inline __u64 gs_return_address(struct pt_regs *ctx)
{
	__u64 ra = 0;
	bpf_probe_read_user(&ra, sizeof(ra), (void *)PT_REGS_SP(ctx));
	return ra;
}

#elif defined(__TARGET_ARCH_arm64)
/* arm64 (AAPCS64), not yet built or tested: integer arguments in x0..x7, then the stack from
 * sp itself; the return address is in the link register x30 at entry. Composites of up to
 * 16 bytes (dim3) take two registers, as on x86-64, so the argument slots are the same. */
#define GS_ARG_REGS 8
#define GS_PT_REGS_PARM6(ctx) (__PT_REGS_CAST(ctx)->regs[5])
#define GS_PT_REGS_PARM7(ctx) (__PT_REGS_CAST(ctx)->regs[6])
#define GS_PT_REGS_PARM8(ctx) (__PT_REGS_CAST(ctx)->regs[7])
#define GS_STACK_ARGS_OFF 0
#define GS_SYSCALL_NR_CORE(regs) BPF_CORE_READ((const struct user_pt_regs *)(regs), syscallno)
#define GS_NR_IOCTL 29
#define GS_NR_MMAP 222
#define GS_NR_OPENAT 56
#define GS_NR_OPENAT2 437

static __always_inline __u64 gs_return_address(struct pt_regs *ctx)
{
	return PT_REGS_RET(ctx); /* x30 */
}

#else
#error "gpuscope: no uprobe calling convention for this __TARGET_ARCH_* (src/common/arch.bpf.h)"
#endif

static __always_inline __u64 gs_stack_pointer(struct pt_regs *ctx)
{
	return PT_REGS_SP(ctx);
}

/* Where stack argument i (0-based, i >= GS_ARG_REGS) lives, from the stack pointer at entry. */
#define GS_STACK_ARG_ADDR(sp, i) ((sp) + 8 * ((i) - (GS_ARG_REGS - GS_STACK_ARGS_OFF / 8)))

static __always_inline __u64 gs_arg(struct pt_regs *ctx, unsigned int i)
{
	__u64 v = 0;

	switch (i) {
	case 0:
		return PT_REGS_PARM1(ctx);
	case 1:
		return PT_REGS_PARM2(ctx);
	case 2:
		return PT_REGS_PARM3(ctx);
	case 3:
		return PT_REGS_PARM4(ctx);
	case 4:
		return PT_REGS_PARM5(ctx);
	case 5:
		return GS_PT_REGS_PARM6(ctx);
#if GS_ARG_REGS > 6
	case 6:
		return GS_PT_REGS_PARM7(ctx);
	case 7:
		return GS_PT_REGS_PARM8(ctx);
#endif
	}
	bpf_probe_read_user(&v, sizeof(v), (void *)GS_STACK_ARG_ADDR(gs_stack_pointer(ctx), i));
	return v;
}

struct gs_args {
	__u64 reg[GS_ARG_REGS];
	__u64 sp;
};

static __always_inline void gs_args_load(struct pt_regs *ctx, struct gs_args *a)
{
	a->reg[0] = PT_REGS_PARM1(ctx);
	a->reg[1] = PT_REGS_PARM2(ctx);
	a->reg[2] = PT_REGS_PARM3(ctx);
	a->reg[3] = PT_REGS_PARM4(ctx);
	a->reg[4] = PT_REGS_PARM5(ctx);
	a->reg[5] = GS_PT_REGS_PARM6(ctx);
#if GS_ARG_REGS > 6
	a->reg[6] = GS_PT_REGS_PARM7(ctx);
	a->reg[7] = GS_PT_REGS_PARM8(ctx);
#endif
	a->sp = gs_stack_pointer(ctx);
}

static __always_inline __u64 gs_arg_at(const struct gs_args *a, unsigned int i)
{
	__u64 v = 0;
	if (i < GS_ARG_REGS)
		return a->reg[i];
	bpf_probe_read_user(&v, sizeof(v), (void *)GS_STACK_ARG_ADDR(a->sp, i));
	return v;
}

/* Arguments first .. first+n-1 into out[0..n-1]; first and n must be constants. Those in
 * registers are copied, those on the stack (adjacent slots) come in one read. */
static __always_inline void gs_args_span(const struct gs_args *a, const unsigned int first,
                                         const unsigned int n, __u64 *out)
{
	unsigned int i;

#pragma unroll
	for (i = first; i < first + n && i < GS_ARG_REGS; i++)
		out[i - first] = a->reg[i];
	if (i < first + n)
		bpf_probe_read_user(out + (i - first), 8 * (first + n - i),
		                    (void *)GS_STACK_ARG_ADDR(a->sp, i));
}

#endif
