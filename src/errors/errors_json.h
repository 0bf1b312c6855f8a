#pragma once
// One GPU error's JSON fields, as `gpuscope errors --json` writes each line and the agent's
// /api/errors each object: one writer, so that the two keep the same names.
#include "core/output.h"
#include "core/where.h"
#include "errors/errors_collector.h"

namespace gpuscope {

// Its type and ts_ns, then every field; the caller closes the line or object.
inline void put_gpu_error(JsonLine& j, const GpuError& r) {
  j.record(error_kind_name(r.kind), r.realtime_ns).num("id", r.id);
  if (r.pid) put_process_fields(j, *r.pid, r.comm, r.container);
  if (r.kind == ErrorKind::kSticky) {
    j.num("tid", r.tid)
        .str("api", r.api_name)
        .str("layer", r.layer)
        .num("code", r.code)
        .str("code_name", r.code_name)
        .num("last_ok_sync_ns", r.last_ok_sync_ns);
    j.begin_array("kernels");
    for (auto& k : r.kernels_since) {
      j.begin_object().str("kernel", k.kernel).str("module", k.module).num("launches", k.launches);
      if (k.samples) {
        j.str("site", k.site).begin_array("stack");
        for (auto& f : k.stack) j.str(f);
        j.end_array().num("site_samples", k.site_samples).num("samples", k.samples);
      }
      j.end_object();
    }
    j.end_array().boolean("kernels_truncated", r.kernels_truncated);
  } else {
    j.num("gpu", r.device.index).str("uuid", r.device.uuid).str("pci_bus_id", r.device.pci_bus_id);
    if (r.kind == ErrorKind::kXid)
      j.num("xid", r.xid)
          .str("meaning", r.info.meaning)
          .str("class", xid_class_name(r.info.cls))
          .str("action", xid_action_name(r.info.action));
    else
      j.str("event", r.nvml_event).num("event_type", r.nvml_event_type);
    j.str("source", r.from_kmsg && r.from_nvml ? "kmsg+nvml"
                    : r.from_kmsg              ? "kmsg"
                                               : "nvml")
        .boolean("injected", r.injected)
        .num("kmsg_seq", r.kmsg_seq)
        .num("kmsg_ts_us", r.kmsg_ts_us)
        .str("message", r.message)
        .num("gpu_instance", r.gpu_instance)
        .num("compute_instance", r.compute_instance);
  }
  if (r.joined)
    j.num("joined", *r.joined);
  else
    j.null("joined");
}

}  // namespace gpuscope
