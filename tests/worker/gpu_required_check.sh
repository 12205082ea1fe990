#!/usr/bin/env bash
# TRAINYARD_REQUIRE_GPU turns the GPU tests' skip into a failure: asked for
# more GPUs than any machine has, gpu_test and gpu_e2e fail (exit 1, naming
# the variable) instead of skipping (77); a value that is not a number is
# refused; without it, a machine with no NVIDIA GPU skips.
set -uo pipefail
gpu_test=${1:?usage: gpu_required_check.sh GPU_TEST GPU_E2E_PY BIN_DIR}
gpu_e2e=${2:?usage: gpu_required_check.sh GPU_TEST GPU_E2E_PY BIN_DIR}
bin=${3:?usage: gpu_required_check.sh GPU_TEST GPU_E2E_PY BIN_DIR}
fail() { echo "gpu_required_check: $*" >&2; exit 1; }
expect() {  # expect RC PATTERN -- COMMAND...
  local want=$1 pattern=$2 out rc
  shift 3
  out=$("$@" 2>&1)
  rc=$?
  [ "$rc" = "$want" ] || fail "$* exited $rc, want $want:"$'\n'"$out"
  grep -q -- "$pattern" <<<"$out" || fail "$* did not say '$pattern':"$'\n'"$out"
}
expect 1 "TRAINYARD_REQUIRE_GPU=999" -- env TRAINYARD_REQUIRE_GPU=999 "$gpu_test"
expect 1 "must be a number" -- env TRAINYARD_REQUIRE_GPU=yes "$gpu_test"
expect 1 "TRAINYARD_REQUIRE_GPU=999" -- env TRAINYARD_REQUIRE_GPU=999 /usr/bin/python3 "$gpu_e2e" "$bin"
expect 1 "must be a number" -- env TRAINYARD_REQUIRE_GPU=yes /usr/bin/python3 "$gpu_e2e" "$bin"
if ! ls /proc/driver/nvidia/gpus/* >/dev/null 2>&1 && ! ls /dev/nvidia[0-9]* >/dev/null 2>&1; then
  expect 77 "skipped" -- env -u TRAINYARD_REQUIRE_GPU "$gpu_test"
  expect 77 "skipped" -- env -u TRAINYARD_REQUIRE_GPU /usr/bin/python3 "$gpu_e2e" "$bin"
fi
echo "gpu_required_check: ok"
