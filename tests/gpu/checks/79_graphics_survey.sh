#!/usr/bin/env bash
# usage: 79_graphics_survey.sh GPUSCOPE_BIN OUT_DIR
# The GPU host's graphics stack, recorded as it is (issue 27): Vulkan ICDs (NVIDIA's among them),
# the loader and the GL dispatch libraries, /dev/dri, NVML's graphics processes, doctor's view.
# Where /dev/dri has nodes, gpuscope ioctl names each node's driver as DRM_IOCTL_VERSION answered.
# Where the loader and NVIDIA's ICD are there, the lavapipe fixture vk_frames (built on the build
# machine, carried in tests/gpu/bin/) renders 30 offscreen frames on the GPU while gpuscope frames
# follows it: 30 frames, 2 submits and 2 waits each, the 2 MiB allocation left at exit. Where no
# graphics stack exists the check passes with the survey and says so.
set -euo pipefail
# shellcheck source=../lib/common.sh
source "$(dirname "$0")/../lib/common.sh"
{
  echo "## ICDs"
  ls -l /usr/share/vulkan/icd.d /etc/vulkan/icd.d 2>&1 || true
  echo "## loader and GL dispatch libraries (ldconfig -p)"
  ldconfig -p | grep -E 'libvulkan\.so|libEGL|libGLX|libGL\.so|libGLESv2|libnvidia-(glcore|eglcore|glsi)' || echo "none"
  echo "## /dev/dri"
  ls -l /dev/dri 2>&1 || true
  echo "## nvidia-smi processes (type C compute, G graphics)"
  nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv 2>&1 || true
  nvidia-smi 2>&1 | sed -n '/Processes:/,$p' || true
  echo "## vulkaninfo --summary"
  if command -v vulkaninfo >/dev/null; then timeout 30 vulkaninfo --summary 2>&1 | head -60; else echo "no vulkaninfo"; fi
} >"$OUT/survey.txt"
"$GPUSCOPE" doctor --json >"$OUT/doctor.json" 2>&1 || true
grep -E '"graphics_libraries"|"dri"|"frames"' "$OUT/doctor.json" >&2 || true

# DRM: where /dev/dri has nodes, python asks each its DRM_IOCTL_VERSION (lengths, then strings, as
# libdrm does) under `gpuscope ioctl -c gs79drm`; each node's driver must come out as answered.
if compgen -G "/dev/dri/*" >/dev/null; then
  "$GPUSCOPE" ioctl --json -c gs79drm >"$OUT/drm.jsonl" 2>"$OUT/drm.err" &
  IOP=$!
  track "$IOP"
  wait_for "$OUT/drm.err" 'counting' 30 "$IOP" || fail "gpuscope ioctl did not start: $(tail -c 300 "$OUT/drm.err")"
  python3 - >"$OUT/drm_answers.txt" <<'PY'
import ctypes, fcntl, glob, os, struct
ctypes.CDLL(None).prctl(15, b"gs79drm", 0, 0, 0)  # PR_SET_NAME
VERSION = 0xC0406400  # DRM_IOCTL_VERSION
for node in sorted(glob.glob("/dev/dri/*")):
    try:
        fd = os.open(node, os.O_RDWR)
    except OSError as e:
        print(node, "open failed:", e)
        continue
    buf = bytearray(64)
    try:
        fcntl.ioctl(fd, VERSION, buf)
        n = struct.unpack_from("Q", buf, 16)[0]
        name = ctypes.create_string_buffer(n + 1)
        req = bytearray(64)
        struct.pack_into("QQ", req, 16, n, ctypes.addressof(name))
        fcntl.ioctl(fd, VERSION, req)
        st = os.fstat(fd)
        print("%d:%d %s" % (os.major(st.st_rdev), os.minor(st.st_rdev), name.value.decode()[:31]))
    except OSError as e:
        print(node, "DRM_IOCTL_VERSION failed:", e)
    os.close(fd)
PY
  sleep 1.5
  stop "$IOP" 20
  cat "$OUT/drm_answers.txt" >&2
  python3 - "$OUT/drm.jsonl" "$OUT/drm_answers.txt" <<'PY' || fail "ioctl's DRM drivers differ from the answers (drm.jsonl, drm_answers.txt)"
import json, sys
want = dict(l.split()[:2] for l in open(sys.argv[2]) if l[0].isdigit())
got = {}
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r.get("type") == "ioctl" and r.get("name") == "DRM_IOCTL_VERSION" and "driver" in r:
        got[r["dev"]] = r["driver"]
print("answered", want, "gpuscope", got)
assert want and got == want
PY
  echo "DRM drivers named as answered: $(tr '\n' ' ' <"$OUT/drm_answers.txt")" >&2
fi

APP="$GPU_TESTS_DIR/bin/vk_frames"
if ! ldconfig -p | grep -q 'libvulkan\.so\.1'; then
  pass "no Vulkan loader on this host (survey in survey.txt): nothing to render with"
fi
[[ -x $APP ]] || fail "no $APP: build it on the build machine (build/tests/fixtures/graphics/vk_frames) and carry it"
"$APP" --frames 30 --slow-every 10 --slow-ms 30 >"$OUT/vk_frames.out" 2>&1 &
APID=$!
track "$APID"
wait_for "$OUT/vk_frames.out" '^ready' 30 "$APID" ||
  pass "the loader could not make a Vulkan device here ($(tail -c 200 "$OUT/vk_frames.out")); survey in survey.txt"
"$GPUSCOPE" frames -p "$APID" --json --every-frame --slowest 10 >"$OUT/frames.json" 2>"$OUT/frames.err" &
GPID=$!
track "$GPID"
wait_for "$OUT/frames.err" 'watching frames' 30 "$GPID" || fail "frames did not start: $(tail -c 300 "$OUT/frames.err")"
kill -USR1 "$APID"
wait_exit "$APID" 60
[[ $WAIT_RC == 0 ]] || fail "vk_frames did not finish well (rc $WAIT_RC): $(tail -c 300 "$OUT/vk_frames.out")"
wait_exit "$GPID" 30
[[ $WAIT_RC == 0 ]] || fail "frames did not end with its target (rc $WAIT_RC): $(tail -c 300 "$OUT/frames.err")"
python3 - "$OUT/frames.json" <<'PY' || fail "frames' output is not what vk_frames did (frames.json)"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
frames = [r for r in rows if r["type"] == "frame"]
mem = [r for r in rows if r["type"] == "memory"]
assert len(frames) == 30, len(frames)
assert all(f["submits"] == 2 and f["waits"] == 2 for f in frames)
slow = [f["number"] for f in frames if f["duration_ns"] >= 30e6]
assert slow == [10, 20, 30], slow
assert mem and mem[0]["outstanding_bytes"] == 2 << 20, mem
print("device:", open(sys.argv[1].replace("frames.json", "vk_frames.out")).read().strip()[:200])
PY
pass "30 Vulkan frames on this host's ICD, slow frames 10/20/30 found, the 2 MiB leak at exit (survey in survey.txt)"
