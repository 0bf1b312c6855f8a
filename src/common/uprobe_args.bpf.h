/* x86-64 SysV argument access at uprobe entry. libbpf 1.1 has no PT_REGS_PARM6 and its
 * BPF_UPROBE takes at most 5 arguments, so the 6th comes from r9 and the rest from the
 * stack: [sp] is the return address, argument 7 sits at sp+8.
 * The registers are copied to the stack first: indexing pt_regs by a runtime value makes
 * clang emit a variable ctx offset, which the verifier rejects. */
#ifndef GPUSCOPE_UPROBE_ARGS_BPF_H
#define GPUSCOPE_UPROBE_ARGS_BPF_H

#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

struct gs_args {
	__u64 reg[6];
	__u64 sp;
};

static __always_inline void gs_args_load(struct pt_regs *ctx, struct gs_args *a)
{
	a->reg[0] = ctx->di;
	a->reg[1] = ctx->si;
	a->reg[2] = ctx->dx;
	a->reg[3] = ctx->cx;
	a->reg[4] = ctx->r8;
	a->reg[5] = ctx->r9;
	a->sp = ctx->sp;
}

static __always_inline __u64 gs_arg_at(const struct gs_args *a, unsigned int i)
{
	__u64 v = 0;
	if (i < 6)
		return a->reg[i];
	bpf_probe_read_user(&v, sizeof(v), (void *)(a->sp + 8 * (i - 5)));
	return v;
}

static __always_inline __u64 gs_arg(struct pt_regs *ctx, unsigned int i)
{
	switch (i) {
	case 0: return ctx->di;
	case 1: return ctx->si;
	case 2: return ctx->dx;
	case 3: return ctx->cx;
	case 4: return ctx->r8;
	case 5: return ctx->r9;
	}
	__u64 v = 0;
	bpf_probe_read_user(&v, sizeof(v), (void *)(ctx->sp + 8 * (i - 5)));
	return v;
}

#endif
