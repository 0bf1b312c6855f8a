// SPDX-License-Identifier: GPL-2.0
/* The bridge's four maps, created from this object so that they carry BTF: `bpftool map dump`
 * then prints every field by name. No programs; the bridge pins the maps itself. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "bridge/bridge_pins.bpf.h"

char LICENSE[] SEC("license") = "GPL";
