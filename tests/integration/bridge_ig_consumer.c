// The userspace half of a consumer written from Inspektor Gadget's header alone:
//   bridge_ig_consumer PIN_DIR PID... -- PID:DEVICE...   (4 of each at most)
// loads bridge_ig_consumer.bpf.c with PIN_DIR as its pin root (libbpf reuses the pins or refuses
// to load), runs its program once, and prints what the program read, one JSON line per entry,
// by Inspektor Gadget's field names. Exit 1 when libbpf does not load it.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/types.h>

#include "bridge_ig_types.h"
#include "bridge_ig_consumer.skel.h"

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  LIBBPF_OPTS(bpf_object_open_opts, oo, .pin_root_path = argv[1]);
  struct bridge_ig_consumer_bpf* c = bridge_ig_consumer_bpf__open_opts(&oo);
  if (!c) return 1;
  int err = bridge_ig_consumer_bpf__load(c);
  if (err) {
    fprintf(stderr, "load: %s\n", strerror(-err));
    return 1;
  }
  int np = 0, nk = 0, keys = 0;
  for (int i = 2; i < argc; i++) {
    if (!strcmp(argv[i], "--"))
      keys = 1;
    else if (!keys && np < 4)
      c->bss->want_pid[np++] = (__u32)strtoul(argv[i], NULL, 0);
    else if (keys && nk < 4) {
      char* colon = strchr(argv[i], ':');
      if (!colon) return 2;
      c->bss->want_pid_dev[nk++] = ((__u64)strtoul(argv[i], NULL, 0) << 32) | strtoul(colon + 1, NULL, 0);
    }
  }
  __u64 args[2] = {0, 0};
  LIBBPF_OPTS(bpf_test_run_opts, opts, .ctx_in = args, .ctx_size_in = sizeof args);
  if (bpf_prog_test_run_opts(bpf_program__fd(c->progs.read_bridge), &opts)) {
    fprintf(stderr, "run: %s\n", strerror(errno));
    return 1;
  }
  const struct gpu_meta* m = &c->bss->meta_seen;
  printf(
      "{\"map\":\"gpu_meta\",\"schema_version\":%u,\"n_devices\":%u,\"last_update_boottime_ns\":%llu,"
      "\"helper_pid\":%u,\"_reserved\":%u,\"clock_offset_ns\":%lld}\n",
      m->schema_version, m->n_devices, (unsigned long long)m->last_update_boottime_ns, m->helper_pid, m->_reserved,
      (long long)m->clock_offset_ns);
  for (int i = 0; i < 2; i++) {
    const struct gpu_device_metrics* d = &c->bss->device_seen[i];
    printf(
        "{\"map\":\"gpu_device\",\"device\":%d,\"timestamp_ns\":%llu,\"sm_util_pct\":%u,\"mem_util_pct\":%u,"
        "\"mem_total\":%llu,\"mem_used\":%llu,\"mem_reserved\":%llu,\"temp_c\":%u,\"power_mw\":%u,"
        "\"sm_clock_mhz\":%u,\"mem_clock_mhz\":%u,\"throttle_reasons\":%llu,\"pcie_tx_kbps\":%llu,"
        "\"pcie_rx_kbps\":%llu,\"enc_util_pct\":%u,\"dec_util_pct\":%u,\"nvlink_tx_kbps\":%llu,"
        "\"nvlink_rx_kbps\":%llu,\"ecc_corrected_total\":%llu,\"ecc_uncorrected_total\":%llu,"
        "\"fan_speed_pct\":%u,\"compute_mode\":%u}\n",
        i, (unsigned long long)d->timestamp_ns, d->sm_util_pct, d->mem_util_pct, (unsigned long long)d->mem_total,
        (unsigned long long)d->mem_used, (unsigned long long)d->mem_reserved, d->temp_c, d->power_mw, d->sm_clock_mhz,
        d->mem_clock_mhz, (unsigned long long)d->throttle_reasons, (unsigned long long)d->pcie_tx_kbps,
        (unsigned long long)d->pcie_rx_kbps, d->enc_util_pct, d->dec_util_pct, (unsigned long long)d->nvlink_tx_kbps,
        (unsigned long long)d->nvlink_rx_kbps, (unsigned long long)d->ecc_corrected_total,
        (unsigned long long)d->ecc_uncorrected_total, d->fan_speed_pct, d->compute_mode);
  }
  for (int i = 0; i < np; i++) {
    if (!(c->bss->found & (1u << i))) continue;
    const struct gpu_pid_metrics_aggregated* a = &c->bss->pid_seen[i];
    printf(
        "{\"map\":\"gpu_per_pid\",\"pid\":%u,\"timestamp_ns\":%llu,\"used_gpu_memory_total\":%llu,"
        "\"sm_util_pct_max\":%u,\"mem_util_pct_max\":%u,\"gpu_device_primary\":%u,\"device_count\":%u}\n",
        c->bss->want_pid[i], (unsigned long long)a->timestamp_ns, (unsigned long long)a->used_gpu_memory_total,
        a->sm_util_pct_max, a->mem_util_pct_max, a->gpu_device_primary, a->device_count);
  }
  for (int i = 0; i < nk; i++) {
    if (!(c->bss->found & (1u << (8 + i)))) continue;
    const struct gpu_pid_metrics* p = &c->bss->pid_dev_seen[i];
    printf(
        "{\"map\":\"gpu_per_pid_per_device\",\"key\":%llu,\"timestamp_ns\":%llu,\"used_gpu_memory\":%llu,"
        "\"sm_util_pct\":%u,\"mem_util_pct\":%u,\"enc_util_pct\":%u,\"dec_util_pct\":%u,\"gpu_device\":%u,"
        "\"mig_instance\":%u}\n",
        (unsigned long long)c->bss->want_pid_dev[i], (unsigned long long)p->timestamp_ns,
        (unsigned long long)p->used_gpu_memory, p->sm_util_pct, p->mem_util_pct, p->enc_util_pct, p->dec_util_pct,
        p->gpu_device, p->mig_instance);
  }
  bridge_ig_consumer_bpf__destroy(c);
  return 0;
}
