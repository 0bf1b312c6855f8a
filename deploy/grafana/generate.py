#!/usr/bin/env python3
"""Writes the Grafana dashboards of deploy/grafana/ (importable as they are). Edit here, then run
python3 deploy/grafana/generate.py; the JSON files are committed."""
import json
import os

DS = {"type": "prometheus", "uid": "${datasource}"}
PROC = 'instance=~"$instance",pod=~"$pod"'


def var_ds():
    return {"name": "datasource", "label": "Prometheus", "type": "datasource", "query": "prometheus",
            "current": {}, "hide": 0, "refresh": 1}


def var(name, query, label=None):
    return {"name": name, "label": label or name, "type": "query", "datasource": DS,
            "query": {"query": query, "refId": name}, "definition": query, "refresh": 2,
            "includeAll": True, "allValue": ".*", "multi": True, "current": {"text": "All", "value": "$__all"},
            "sort": 1, "hide": 0}


def standard_vars():
    return [var_ds(), var("instance", "label_values(gpuscope_collector_up, instance)"),
            var("pod", 'label_values(gpuscope_memory_outstanding_bytes{instance=~"$instance"}, pod)'),
            var("gpu", 'label_values(gpuscope_gpu_utilization_ratio{instance=~"$instance"}, gpu)')]


class Board:
    def __init__(self, uid, title, description):
        self.uid, self.title, self.description = uid, title, description
        self.panels, self.y, self.x, self.row_h, self.next_id = [], 0, 0, 0, 1
        self.vars = standard_vars()

    def panel(self, title, targets, kind="timeseries", unit="short", w=12, h=8, desc="", **extra):
        if self.x + w > 24:
            self.x, self.y = 0, self.y + self.row_h
            self.row_h = 0
        p = {"id": self.next_id, "type": kind, "title": title, "description": desc, "datasource": DS,
             "gridPos": {"x": self.x, "y": self.y, "w": w, "h": h},
             "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
             "targets": [dict({"datasource": DS, "refId": chr(65 + i)}, **t) for i, t in enumerate(targets)]}
        p.update(extra)
        self.panels.append(p)
        self.next_id += 1
        self.x += w
        self.row_h = max(self.row_h, h)
        return p

    def json(self):
        return {"uid": self.uid, "title": self.title, "description": self.description, "tags": ["gpuscope", "gpu"],
                "editable": True, "schemaVersion": 39, "version": 1, "time": {"from": "now-1h", "to": "now"},
                "refresh": "30s", "timezone": "", "graphTooltip": 1, "panels": self.panels,
                "templating": {"list": self.vars}, "annotations": {"list": []}, "links": [
                    {"title": "gpuscope dashboards", "type": "dashboards", "tags": ["gpuscope"], "asDropdown": True}],
                "__inputs": [], "__requires": [
                    {"type": "datasource", "id": "prometheus", "name": "Prometheus", "version": "1.0.0"}]}


def t(expr, legend=""):
    return {"expr": expr, "legendFormat": legend}


def node():
    b = Board("gpuscope-node", "gpuscope / node overview", "Devices (from the bridge) and GPU memory per process")
    dev = 'instance=~"$instance",gpu=~"$gpu"'
    b.panel("Device utilization", [t(f"gpuscope_gpu_utilization_ratio{{{dev}}}", "{{instance}} gpu {{gpu}}")],
            unit="percentunit")
    b.panel("Device memory used", [t(f"gpuscope_gpu_memory_used_bytes{{{dev}}}", "used {{instance}} gpu {{gpu}}"),
                                   t(f"gpuscope_gpu_memory_total_bytes{{{dev}}}", "total {{instance}} gpu {{gpu}}")],
            unit="bytes")
    b.panel("Power", [t(f"gpuscope_gpu_power_watts{{{dev}}}", "{{instance}} gpu {{gpu}}")], unit="watt")
    b.panel("Throttling (clock event reasons, NVML bitmask; 0 = none)",
            [t(f"gpuscope_gpu_clock_event_reasons{{{dev}}}", "{{instance}} gpu {{gpu}}"),
             t(f"gpuscope_gpu_sm_clock_hertz{{{dev}}}", "SM clock {{instance}} gpu {{gpu}}")])
    b.panel("GPU memory per process", [t(
        f'sum by (instance, pod, comm, pid) (gpuscope_memory_outstanding_bytes{{{PROC},category="device"}})',
        "{{comm}} {{pid}} {{pod}}")], unit="bytes", w=24)
    b.panel("Collectors up", [t('gpuscope_collector_up{instance=~"$instance"}', "{{instance}} {{collector}}")],
            kind="stat", w=8)
    b.panel("Events lost /s", [t('sum by (instance, collector, reason) (rate(gpuscope_events_lost_total{instance=~"$instance"}[$__rate_interval]))',
                                 "{{collector}} {{reason}}")], w=8)
    b.panel("Agent: governor level and anomalies", [
        t('gpuscope_governor_level{instance=~"$instance"}', "governor {{instance}}"),
        t('sum by (instance, rule) (increase(gpuscope_anomalies_total{instance=~"$instance"}[$__rate_interval]))',
          "anomaly {{rule}}")], w=8)
    # A table of counts, not a rate: most GPUs see an Xid once, and a counter's first sample has no rate.
    b.panel("Xid errors per GPU, Xid and process (since the agent started)", [dict(t(
        'sum by (instance, gpu, uuid, xid, class, action, comm, pid, pod) '
        '(gpuscope_xid_errors_total{instance=~"$instance",gpu=~"$gpu"})'), format="table", instant=True)],
        kind="table", w=24, desc="From the kernel log and NVML (gpuscope_xid_errors_total); class and action "
        "after NVIDIA's Xid catalogue. /api/errors on the agent has each record.")
    return b


def process():
    b = Board("gpuscope-process", "gpuscope / processes", "Kernel launches, CUDA API latency and errors, memory")
    b.vars.append({"name": "topn", "label": "top N", "type": "custom", "query": "10,20,50",
                   "current": {"text": "10", "value": "10"}, "hide": 0})
    b.vars.append(var("api", 'label_values(gpuscope_api_calls_total{instance=~"$instance"}, api)', "API"))
    b.panel("Launches per kernel (top N)", [t(
        f"topk($topn, sum by (comm, kernel) (rate(gpuscope_kernel_launches_total{{{PROC}}}[$__rate_interval])))",
        "{{comm}} {{kernel}}")], unit="ops", w=24)
    b.panel("CUDA API latency", [dict(t(
        'sum by (le) (rate(gpuscope_api_duration_seconds_bucket{instance=~"$instance",api=~"$api"}[$__rate_interval]))',
        "{{le}}"), format="heatmap")], kind="heatmap", unit="s",
        options={"calculate": False, "yAxis": {"unit": "s"}, "cellGap": 1})
    b.panel("CUDA API errors /s", [t(
        'sum by (api, result) (rate(gpuscope_api_calls_total{instance=~"$instance",api=~"$api",'
        'result!~"cudaSuccess|CUDA_SUCCESS"}[$__rate_interval]))', "{{api}} {{result}}")], unit="ops")
    b.panel("CUDA API error ratio", [t(
        'sum by (api) (rate(gpuscope_api_calls_total{instance=~"$instance",api=~"$api",'
        'result!~"cudaSuccess|CUDA_SUCCESS"}[$__rate_interval])) / sum by (api) '
        '(rate(gpuscope_api_calls_total{instance=~"$instance",api=~"$api"}[$__rate_interval]))', "{{api}}")],
        unit="percentunit")
    b.panel("Outstanding GPU memory", [t(f"gpuscope_memory_outstanding_bytes{{{PROC}}}",
                                         "{{comm}} {{pid}} {{category}}")], unit="bytes")
    b.panel("Leaked at exit (per process name)", [t(
        'sum by (comm, container) (increase(gpuscope_memory_leaked_bytes_total{instance=~"$instance"}[$__rate_interval]))',
        "{{comm}} {{container}}")], unit="bytes")
    b.panel("Allocation failures and bad frees /s", [
        t(f'sum by (comm, pid) (rate(gpuscope_memory_allocations_total{{{PROC},result="failed"}}[$__rate_interval]))',
          "alloc failed {{comm}} {{pid}}"),
        t(f'sum by (comm, pid) (rate(gpuscope_memory_frees_total{{{PROC},result="bad"}}[$__rate_interval]))',
          "bad free {{comm}} {{pid}}")], unit="ops")
    b.panel("Sticky CUDA errors and the kernel launched before them (since the agent started)", [dict(t(
        f"sum by (instance, comm, pid, pod, api, error, kernel) (gpuscope_cuda_sticky_errors_total{{{PROC}}})"),
        format="table", instant=True)], kind="table", w=24,
        desc="A process whose CUDA context died (gpuscope_cuda_sticky_errors_total); /api/errors joins it to its Xid")
    return b


def starvation():
    b = Board("gpuscope-starvation", "gpuscope / starvation",
              "CPU burned while every GPU the process holds memory on sits idle (gpuscope starvation)")
    b.panel("CPU seconds per second while the GPU idled, per thread", [t(
        f"topk(20, sum by (instance, comm, pid, tid) "
        f"(rate(gpuscope_starvation_cpu_seconds_total{{{PROC}}}[$__rate_interval])))",
        "{{comm}} {{pid}}/{{tid}}")], unit="s", w=24,
        links=[{"title": "Folded stacks of ${__field.labels.instance}",
                "url": "http://${__field.labels.instance}/api/starvation/folded", "targetBlank": True}])
    b.panel("Folded stacks", [], kind="text", w=24, h=4, options={"mode": "markdown", "content": (
        "Each agent serves its folded stacks at `http://INSTANCE/api/starvation/folded` (the link on each "
        "series above); `flamegraph.pl` or speedscope draws them.")})
    return b


def gputime():
    b = Board("gpuscope-kernel-time", "gpuscope / kernel GPU time",
              "GPU time per kernel and busy time per process and device, from libgpuscope-cupti.so's records "
              "(gpuscope run -- CMD, or CUDA_INJECTION64_PATH); empty for processes without it")
    b.panel("GPU time per kernel (top 20)", [t(
        f"topk(20, sum by (comm, kernel) (rate(gpuscope_kernel_duration_seconds_sum{{{PROC}}}[$__rate_interval])))",
        "{{comm}} {{kernel}}")], unit="percentunit", w=24,
        desc="Seconds of GPU time per second: 1 = one kernel busy all the time")
    b.panel("Mean kernel duration (top 20 by GPU time)", [t(
        f"topk(20, sum by (comm, kernel) (rate(gpuscope_kernel_duration_seconds_sum{{{PROC}}}[$__rate_interval])) "
        f"/ sum by (comm, kernel) (rate(gpuscope_kernel_duration_seconds_count{{{PROC}}}[$__rate_interval])))",
        "{{comm}} {{kernel}}")], unit="s")
    b.panel("Kernel durations", [dict(t(
        f"sum by (le) (rate(gpuscope_kernel_duration_seconds_bucket{{{PROC}}}[$__rate_interval]))", "{{le}}"),
        format="heatmap")], kind="heatmap", unit="s",
        options={"calculate": False, "yAxis": {"unit": "s"}, "cellGap": 1})
    b.panel("GPU busy per process and device", [t(
        f"sum by (comm, pid, device) (rate(gpuscope_gpu_busy_seconds_total{{{PROC}}}[$__rate_interval]))",
        "{{comm}} {{pid}} device {{device}}")], unit="percentunit", w=24,
        desc="Share of the time in which at least one kernel of the process ran on the device")
    return b


def frames():
    b = Board("gpuscope-frames", "gpuscope / graphics frames",
              "Frame times of Vulkan, EGL and GLX renderers (present to present, swap to swap, or fenced submit "
              "to fenced submit offscreen), their waits and Vulkan device memory; empty without renderers")
    b.panel("Frame time p95 and p99 per process", [
        t(f"histogram_quantile(0.95, sum by (le, comm, pid, api) "
          f"(rate(gpuscope_frame_duration_seconds_bucket{{{PROC}}}[$__rate_interval])))", "p95 {{comm}} {{pid}} {{api}}"),
        t(f"histogram_quantile(0.99, sum by (le, comm, pid, api) "
          f"(rate(gpuscope_frame_duration_seconds_bucket{{{PROC}}}[$__rate_interval])))", "p99 {{comm}} {{pid}} {{api}}")],
        unit="s", w=24, desc="Log2 buckets: 16.7 ms (60 FPS) and 33.3 ms (30 FPS) frames fall in different buckets")
    b.panel("Frames per second", [t(
        f"sum by (comm, pid, api) (rate(gpuscope_frame_duration_seconds_count{{{PROC}}}[$__rate_interval]))",
        "{{comm}} {{pid}} {{api}}")], unit="short")
    b.panel("Frame times", [dict(t(
        f"sum by (le) (rate(gpuscope_frame_duration_seconds_bucket{{{PROC}}}[$__rate_interval]))", "{{le}}"),
        format="heatmap")], kind="heatmap", unit="s",
        options={"calculate": False, "yAxis": {"unit": "s"}, "cellGap": 1})
    b.panel("Share of frame time spent waiting (fences, queues, images, glFinish)", [t(
        f"sum by (comm, pid, api) (rate(gpuscope_graphics_wait_seconds_total{{{PROC}}}[$__rate_interval])) / "
        f"sum by (comm, pid, api) (rate(gpuscope_frame_duration_seconds_sum{{{PROC}}}[$__rate_interval]))",
        "{{comm}} {{pid}} {{api}}")], unit="percentunit")
    b.panel("Vulkan submits and presents /s", [
        t(f"sum by (comm, pid) (rate(gpuscope_graphics_submits_total{{{PROC}}}[$__rate_interval]))",
          "submits {{comm}} {{pid}}"),
        t(f"sum by (comm, pid) (rate(gpuscope_graphics_presents_total{{{PROC}}}[$__rate_interval]))",
          "presents {{comm}} {{pid}}")], unit="ops")
    b.panel("Vulkan device memory outstanding", [t(
        f"gpuscope_graphics_memory_outstanding_bytes{{{PROC}}}", "{{comm}} {{pid}}")], unit="bytes", w=24)
    return b


def nccl():
    b = Board("gpuscope-nccl", "gpuscope / NCCL",
              "NCCL collectives per communicator, rank and op, and the rank the others wait for (gpuscope nccl); "
              "ranks on every host join by their communicator id")
    b.vars.append(var("comm_id", 'label_values(gpuscope_nccl_calls_total{instance=~"$instance"}, comm_id)',
                      "communicator"))
    c = 'comm_id=~"$comm_id"'
    b.panel("Slowest rank per communicator: mean arrival lag (5 min)", [t(
        f"gpuscope:nccl_slowest_rank:arrival_lag_seconds{{{c}}}",
        "{{comm_id}} rank {{rank}}/{{nranks}} {{comm}} {{pid}} on {{instance}}")], unit="s", w=24,
        desc="From the recording rule gpuscope:nccl_slowest_rank:arrival_lag_seconds: per communicator, the rank "
        "that enters its collectives furthest behind the first rank on its host (alert GpuscopeNcclStraggler "
        "above 50 ms for 10 min)")
    b.panel("Mean arrival lag per rank", [t(
        f"sum by (instance, comm_id, rank, comm, pid) (rate(gpuscope_nccl_arrival_lag_seconds_sum{{{PROC},{c}}}"
        f"[$__rate_interval])) / sum by (instance, comm_id, rank, comm, pid) "
        f"(rate(gpuscope_nccl_arrival_lag_seconds_count{{{PROC},{c}}}[$__rate_interval]))",
        "{{comm_id}} rank {{rank}} on {{instance}}")], unit="s")
    b.panel("Collectives at which each rank arrived last /s", [t(
        f"sum by (instance, comm_id, rank) (rate(gpuscope_nccl_last_arrivals_total{{{PROC},{c}}}[$__rate_interval]))",
        "{{comm_id}} rank {{rank}} on {{instance}}")], unit="ops")
    b.panel("Bytes per second per op", [t(
        f"sum by (comm_id, op) (rate(gpuscope_nccl_bytes_total{{{PROC},{c}}}[$__rate_interval]))",
        "{{comm_id}} {{op}}")], unit="Bps")
    b.panel("Mean call time per rank and op", [t(
        f"sum by (instance, comm_id, rank, op) (rate(gpuscope_nccl_call_seconds_sum{{{PROC},{c}}}[$__rate_interval])) "
        f"/ sum by (instance, comm_id, rank, op) (rate(gpuscope_nccl_call_seconds_count{{{PROC},{c}}}"
        f"[$__rate_interval]))", "{{comm_id}} rank {{rank}} {{op}}")], unit="s",
        desc="Entry to return: ranks that wait for a late one spend longer inside the call")
    return b


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    for name, board in [("node", node), ("process", process), ("starvation", starvation), ("kernel-time", gputime),
                        ("frames", frames), ("nccl", nccl)]:
        with open(os.path.join(here, f"gpuscope-{name}.json"), "w") as f:
            json.dump(board().json(), f, indent=2)
            f.write("\n")
