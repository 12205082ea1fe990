#!/usr/bin/env bash
# Sets up everything on a fresh Debian 12 machine and runs every test (ctest):
# unit tests (spec, store, scheduler, launcher, DDP, comm hooks, FSDP,
# collectives, safetensors — distributed ones over real Gloo), end-to-end
# server + workers + trainctl on loopback, and the CUDA syntax check.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
bash "$root/scripts/build.sh"
ctest --test-dir "$build" --output-on-failure --timeout 1200 "$@"
