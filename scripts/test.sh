#!/usr/bin/env bash
# Sets up everything on a fresh Debian 12 machine and runs every test (ctest):
# unit tests (spec, store, scheduler, launcher, safetensors, the worker's
# linkage), distributed ones over real Gloo (DDP, comm hooks, FSDP,
# collectives, checkpoints), and end-to-end server + workers + trainctl on
# loopback. The CUDA and NCCL paths compile and link in every build; the gpu
# tests skip without a GPU (docs/gpu-status.md). Arguments go to ctest
# (bash scripts/test.sh -L unit).
#
# Two tests at a time (TEST_JOBS, default 2): every test that runs training
# processes claims both cores (PROCESSORS 2), so only light tests share them.
# At the end it prints the seconds of each phase and the 20 slowest tests,
# and checks the run against tests/time_budget.tsv (docs/testing.md): a
# warning past suite.warn or a test past 1.5x its budget, a failure past
# suite.fail (full runs only).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
start=$SECONDS
mkdir -p "$build"
: >"$build/phase-times.tsv"
bash "$root/scripts/build.sh"
test_start=$SECONDS
rm -f "$build/ctest-junit.xml"
rc=0
ctest --test-dir "$build" --output-on-failure --timeout 1200 -j "${TEST_JOBS:-2}" \
  --output-junit ctest-junit.xml --test-output-size-passed 65536 "$@" || rc=$?
printf 'test\t%s\n' $((SECONDS - test_start)) >>"$build/phase-times.tsv"
full=()
if [ $# -eq 0 ]; then full=(--full); fi
guard=0
python3 "$root/scripts/test_times.py" --phases "$build/phase-times.tsv" --junit "$build/ctest-junit.xml" \
  --budget "$root/tests/time_budget.tsv" --total $((SECONDS - start)) "${full[@]}" || guard=$?
if [ $rc -ne 0 ]; then exit $rc; fi
exit $guard
