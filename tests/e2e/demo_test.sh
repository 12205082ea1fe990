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
if grep -Eiq "no such file|command not found|error" "$tmp/out.txt"; then fail "error output above"; fi
echo "demo_test: ok ($job)"
