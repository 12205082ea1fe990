#!/usr/bin/env bash
# Sets up everything, starts trainyard-server with its embedded defaults
# (SQLite state in ./trainyard-state, local launcher), submits
# examples/mnist-ddp.yaml (2 ranks), watches it to completion, shows lines
# scraped from /metrics while it ran, and stops the server.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
bash "$root/scripts/build.sh"
cd "$root"
bin="$build/bin"
state=trainyard-state
mkdir -p "$state"
metrics_url=http://127.0.0.1:9464/metrics

"$bin/trainyard-server" --state-dir "$state" --ready-file "$state/ready.json" >> "$state/server.log" 2>&1 &
server=$!
trap 'kill -TERM $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
for _ in $(seq 100); do
  [ -f "$state/ready.json" ] && break
  kill -0 $server 2>/dev/null || { echo "trainyard-server failed to start:"; tail -20 "$state/server.log"; exit 1; }
  sleep 0.1
done
echo "== trainyard-server is up (gRPC 127.0.0.1:50051, metrics $metrics_url, state in $state/)"

job=$("$bin/trainctl" -o json submit examples/mnist-ddp.yaml | sed -n 's/^  "id": "\(.*\)",$/\1/p')
echo "== submitted $job (examples/mnist-ddp.yaml)"
# Scrape /metrics once the job reports steps (its series go away when it ends).
(
  for _ in $(seq 600); do
    if curl -sf "$metrics_url" | grep -q "trainyard_job_step{job_id=\"$job\""; then
      curl -sf "$metrics_url" > "$state/metrics-during-run.txt"
      exit 0
    fi
    sleep 0.2
  done
) &
scraper=$!
rc=0
"$bin/trainctl" watch "$job" || rc=$?
wait $scraper || true
echo "== /metrics while $job ran (selected lines):"
grep -E "^trainyard_(job_step|job_samples_per_second|job_loss|jobs)\{" "$state/metrics-during-run.txt" | grep -E "$job|state=\"RUNNING\"" || true
grep -E "^trainyard_job_step_duration_seconds_(sum|count)\{job_id=\"$job\",phase=\"(step|compute)\",rank=\"0\"" \
  "$state/metrics-during-run.txt" || true
echo "== /metrics now:"
curl -sf "$metrics_url" | grep -E '^trainyard_jobs\{state="(SUCCEEDED|FAILED|RUNNING)"' || true
"$bin/trainctl" list
exit $rc
