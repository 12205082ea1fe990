#!/usr/bin/env bash
# Runs scripts/demo.sh (README's first command) against the built tree, with
# its own state directory and free ports, and checks what a new user should
# see: the job SUCCEEDED, the job's live lines from /metrics, the jobs gauge,
# and no error output from the script's own commands.
# Usage: demo_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1
build=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
rc=0
TRAINYARD_DEMO_NO_BUILD=1 BUILD_DIR=$build TRAINYARD_DEMO_STATE=$tmp/state \
  TRAINYARD_DEMO_LISTEN=127.0.0.1:$(free_port) TRAINYARD_DEMO_METRICS=127.0.0.1:$(free_port) \
  TRAINYARD_DEMO_HTTP=127.0.0.1:$(free_port) \
  bash "$src/scripts/demo.sh" > "$tmp/out.txt" 2>&1 || rc=$?
cat "$tmp/out.txt"
fail() { echo "demo_test: $*"; exit 1; }
[ "$rc" -eq 0 ] || fail "scripts/demo.sh exited with $rc"
job=$(sed -n 's/^== submitted \(job-[0-9a-f]*\) .*/\1/p' "$tmp/out.txt")
[ -n "$job" ] || fail "no job id in the output"
grep -q "SUCCEEDED" "$tmp/out.txt" || fail "the job did not report SUCCEEDED"
for series in trainyard_job_step trainyard_job_loss trainyard_job_samples_per_second; do
  grep -Eq "^${series}\{job_id=\"$job\",rank=\"[01]\"\} [0-9.e+-]+$" "$tmp/out.txt" ||
    fail "no live $series line of $job"
done
step_count="^trainyard_job_step_duration_seconds_count\{job_id=\"$job\",phase=\"step\",rank=\"0\"\} [1-9]"
grep -Eq "$step_count" "$tmp/out.txt" ||
  fail "no step-time line of $job"
grep -Eq '^trainyard_jobs\{state="SUCCEEDED"\} 1$' "$tmp/out.txt" ||
  fail "the jobs gauge does not count one SUCCEEDED job"
grep -Eq '^== web UI: http://127\.0\.0\.1:[0-9]+/ui/' "$tmp/out.txt" ||
  fail "the demo does not print the web UI's address"
shot=$tmp/state/job-page.png
[ "$(head -c 8 "$shot" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] || fail "no PNG screenshot at $shot"
# A page with its charts drawn, not a blank or an error page.
python3 - "$shot" <<'PY' || fail "the screenshot is not the job's page with its charts"
import struct, sys, zlib
data = open(sys.argv[1], "rb").read()
w, h, depth, ctype = struct.unpack(">IIBB", data[16:26])
assert w >= 1000 and h >= 1000 and depth == 8 and ctype in (2, 6), (w, h, depth, ctype)
chunks, i = [], 8
while i < len(data):
    n, kind = struct.unpack(">I4s", data[i:i + 8])
    if kind == b"IDAT":
        chunks.append(data[i + 8:i + 8 + n])
    i += 12 + n
raw, bpp = zlib.decompress(b"".join(chunks)), 3 if ctype == 2 else 4
stride, prev, blue = w * bpp, bytearray(w * bpp), 0
for y in range(h):
    f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
    for x in range(stride):
        a = line[x - bpp] if x >= bpp else 0
        b, c = prev[x], prev[x - bpp] if x >= bpp else 0
        p = a + b - c
        pred = [0, a, b, (a + b) // 2, a if abs(p - a) <= abs(p - b) and abs(p - a) <= abs(p - c)
                else b if abs(p - b) <= abs(p - c) else c][f]
        line[x] = (line[x] + pred) & 255
    blue += sum(1 for x in range(0, stride, bpp) if abs(line[x] - 0x1f) < 24 and abs(line[x + 1] - 0x77) < 24
                and abs(line[x + 2] - 0xb4) < 24)
    prev = line
# The charts' lines are #1f77b4: a page with its charts drawn has many such pixels.
assert blue > 1000, f"only {blue} pixels of the charts' blue"
PY
mkdir -p "$build/test-artifacts" && cp "$shot" "$build/test-artifacts/demo-job-page.png"
if grep -Eiq "no such file|command not found|error" "$tmp/out.txt"; then fail "error output above"; fi
echo "demo_test: ok ($job)"
