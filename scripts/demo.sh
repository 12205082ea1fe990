#!/usr/bin/env bash
# Sets up what the demo needs (Debian packages, the project venv with
# PyPI's torch, and the three programs: trainyard-server, trainyard-worker,
# trainctl), starts trainyard-server with its embedded defaults (SQLite state
# in ./trainyard-state, local launcher), submits examples/mnist-ddp.yaml
# (2 ranks), watches it to completion, prints the job's live lines from
# /metrics while it runs, leaves a screenshot of the job's page in the web
# UI (headless Chromium) at $state/job-page.png, and stops the server.
#
# Environment: BUILD_DIR (default build/); TRAINYARD_DEMO_NO_BUILD=1 uses the
# programs already built there (the demo ctest does); TRAINYARD_DEMO_STATE,
# TRAINYARD_DEMO_LISTEN, TRAINYARD_DEMO_METRICS, TRAINYARD_DEMO_HTTP move the
# state directory and the three addresses (defaults: trainyard-state,
# 127.0.0.1:50051, 127.0.0.1:9464, 127.0.0.1:9465).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
if [ "${TRAINYARD_DEMO_NO_BUILD:-0}" != 1 ]; then
  bash "$root/scripts/build.sh" trainyard-server trainyard-worker trainctl
fi
cd "$root"
bin="$build/bin"
state=${TRAINYARD_DEMO_STATE:-trainyard-state}
listen=${TRAINYARD_DEMO_LISTEN:-127.0.0.1:50051}
metrics_addr=${TRAINYARD_DEMO_METRICS:-127.0.0.1:9464}
metrics_url=http://$metrics_addr/metrics
http_addr=${TRAINYARD_DEMO_HTTP:-127.0.0.1:9465}
ui_url=http://$http_addr/ui/
mkdir -p "$state"
rm -f "$state/ready.json"
export TRAINYARD_SERVER=$listen

"$bin/trainyard-server" --state-dir "$state" --listen "$listen" --metrics-listen "$metrics_addr" \
  --http-listen "$http_addr" --ready-file "$state/ready.json" --on-shutdown stop \
  >> "$state/server.log" 2>&1 &
server=$!
# The demo's server takes its workers down with it (--on-shutdown stop), also on Ctrl-C.
trap 'kill -TERM $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
for _ in $(seq 300); do
  [ -f "$state/ready.json" ] && break
  kill -0 $server 2>/dev/null || { echo "trainyard-server failed to start:"; tail -20 "$state/server.log"; exit 1; }
  sleep 0.1
done
if [ ! -f "$state/ready.json" ]; then
  echo "trainyard-server did not come up in 30 s:"
  tail -20 "$state/server.log"
  exit 1
fi
echo "== trainyard-server is up (gRPC $listen, metrics $metrics_url, state in $state/)"
echo "== web UI: $ui_url (open it while the job runs: its loss curve, ranks, events and logs)"

job=$("$bin/trainctl" submit examples/mnist-ddp.yaml -o json | sed -n 's/^  "id": "\(.*\)",$/\1/p')
[ -n "$job" ] || { echo "submitting examples/mnist-ddp.yaml failed"; exit 1; }
echo "== submitted $job (examples/mnist-ddp.yaml); progress from trainctl watch, then /metrics:"
# The job's own series exist while it runs (they go away when it ends):
# the last scrape that has them is kept.
(
  seen=0
  for _ in $(seq 3000); do
    page=$(curl -sf "$metrics_url" || true)
    if grep -q "^trainyard_job_step{job_id=\"$job\"" <<< "$page"; then
      printf '%s\n' "$page" > "$state/metrics-during-run.txt"
      seen=1
    elif [ $seen = 1 ]; then
      exit 0
    fi
    sleep 0.2
  done
  [ $seen = 1 ]
) &
scraper=$!
rc=0
"$bin/trainctl" watch "$job" || rc=$?
if wait $scraper; then
  echo "== /metrics while $job ran (its step, loss, throughput and step time of rank 0):"
  grep -E "^trainyard_job_(step|loss|samples_per_second)\{job_id=\"$job\"" "$state/metrics-during-run.txt"
  grep -E "^trainyard_job_step_duration_seconds_(sum|count)\{job_id=\"$job\",phase=\"step\",rank=\"0\"" \
    "$state/metrics-during-run.txt"
else
  echo "== no scrape of /metrics showed $job running"
  rc=1
fi
# The job's page as a browser shows it (the demo's server has no users: no sign-in).
shot=$state/job-page.png
rm -f "$shot"
if command -v chromium > /dev/null; then
  chromium --headless=new --no-sandbox --disable-gpu --disable-dev-shm-usage --hide-scrollbars \
    --user-data-dir="$state/chromium-profile" --window-size=1400,1500 --virtual-time-budget=10000 \
    --screenshot="$shot" "${ui_url}jobs/$job" > "$state/chromium.log" 2>&1 || true
  rm -rf "$state/chromium-profile"
fi
if [ -s "$shot" ]; then
  echo "== the job's page (${ui_url}jobs/$job) as a browser shows it: $shot"
else
  echo "== no screenshot of the job's page (chromium: see $state/chromium.log)"
  rc=1
fi
echo "== /metrics now (jobs by state):"
curl -sf "$metrics_url" | grep -E '^trainyard_jobs\{state="(SUCCEEDED|FAILED|RUNNING|QUEUED)"'
"$bin/trainctl" list
exit $rc
