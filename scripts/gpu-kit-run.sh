#!/usr/bin/env bash
# The GPU kit's one command (packed as .gpukit/run.sh by scripts/gpu-kit.sh
# pack): on a machine with an NVIDIA GPU, its driver and a Python whose
# torch is the kit's version (python3, or TRAINYARD_PYTHON), runs every GPU
# test and benchmark with TRAINYARD_REQUIRE_GPU=1 (a missing GPU fails), one
# part after the other, each within a time limit, and writes a log per part
# and summary.md (the machine, the versions, a row per part, the benchmark
# tables) to $OUT (default ./gpukit-out). A part that fails does not stop the
# others; the exit code is 0 only when every part passed.
#
#   run.sh [PART...]   parts: programs gpu_test gpu_e2e bench_llama
#                      bench_resnet bench_checkpoint (default: all, in
#                      that order); `programs` loads every program of the
#                      kit (ldd -r): a missing library or symbol shows there
#
# Limits in seconds: GPUKIT_LIMIT_<PART> (defaults 120 90 200 100 120; a
# whole run took 309 s at kit 6; bench_resnet runs ResNet-18 and ResNet-50,
# bench_llama a torch.compile peer too); a part still running at its limit has the stacks of
# its threads written to its log (cuda-gdb or gdb), then is ended.
# GPUKIT_GTEST_FILTER narrows gpu_test, GPUKIT_BENCH_ARGS adds arguments
# to gpu_bench. The torch libraries come from the Python's torch
# (torch/lib, nvidia/*/lib), the rest from bin/lib beside the programs.
set -uo pipefail
kit=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=${OUT:-$PWD/gpukit-out}
mkdir -p "$out"
python=${TRAINYARD_PYTHON:-python3}
summary=$out/summary.md
started=$SECONDS

torch_dir=$("$python" -c 'import os, torch; print(os.path.dirname(torch.__file__))' 2> "$out/torch-import.err")
if [ -z "$torch_dir" ]; then
  echo "run.sh: $python cannot import torch: $(tail -1 "$out/torch-import.err")" | tee "$summary"
  exit 1
fi
rm -f "$out/torch-import.err"
libs="$torch_dir/lib"
for d in "$(dirname "$torch_dir")"/nvidia/*/lib; do [ -d "$d" ] && libs="$libs:$d"; done
export LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export TRAINYARD_PYTHON="$python" TRAINYARD_REQUIRE_GPU=${TRAINYARD_REQUIRE_GPU:-1} PYTHONUNBUFFERED=1

{
  echo "# GPU kit run"
  echo
  echo '```'
  cat "$kit/MANIFEST" 2> /dev/null
  echo "date $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host $(uname -srm), $(nproc) CPUs"
  if command -v nvidia-smi > /dev/null; then
    nvidia-smi --query-gpu=index,name,driver_version,memory.total,pci.bus_id --format=csv,noheader 2>&1 |
      sed 's/^/gpu /'
    echo "cuda driver $(nvidia-smi 2> /dev/null | grep -o 'CUDA Version: [0-9.]*' | head -1)"
  else
    echo "gpu none (no nvidia-smi)"
  fi
  "$python" -c "import torch; ok = torch.cuda.is_available()
print('python torch', torch.__version__, 'CUDA', torch.version.cuda, 'NCCL',
      '.'.join(map(str, torch.cuda.nccl.version())) if ok else '-', 'cuda available', ok)" 2>&1
  echo '```'
  echo
} > "$summary"
kit_torch=$(awk '$1 == "torch" {print $2}' "$kit/MANIFEST" 2> /dev/null | cut -d+ -f1)
here_torch=$("$python" -c 'import torch; print(torch.__version__.split("+")[0])' 2> /dev/null)
if [ -n "$kit_torch" ] && [ "${kit_torch%.*}" != "${here_torch%.*}" ]; then
  echo "run.sh: the kit was built against torch $kit_torch but $python has torch $here_torch:" \
    "pack again with scripts/gpu-kit.sh pack --torch $here_torch" | tee -a "$summary"
  exit 1
fi

declare -A limit=([programs]=30 [gpu_test]=${GPUKIT_LIMIT_GPU_TEST:-120} [gpu_e2e]=${GPUKIT_LIMIT_GPU_E2E:-90}
  [bench_llama]=${GPUKIT_LIMIT_BENCH_LLAMA:-200} [bench_resnet]=${GPUKIT_LIMIT_BENCH_RESNET:-100}
  [bench_checkpoint]=${GPUKIT_LIMIT_BENCH_CHECKPOINT:-120})
# Each program of the kit as the loader would start it (ldd -r): every
# library found, every symbol resolved.
check_programs() {
  local failed=0 b trace
  for b in "$kit"/bin/*; do
    [ -f "$b" ] || continue
    trace=$(LD_TRACE_LOADED_OBJECTS=1 LD_WARN=yes LD_BIND_NOW=yes "$b" 2>&1)
    if echo "$trace" | grep -E -q "not found|undefined symbol"; then
      echo "programs: $(basename "$b") cannot start: $(echo "$trace" | grep -E -m3 'not found|undefined symbol')"
      failed=1
    fi
  done
  [ "$failed" -eq 0 ] && echo "programs: all started ($(cd "$kit/bin" && ls -p | grep -v / | tr '\n' ' '))"
  return "$failed"
}

command_of() {
  case "$1" in
    programs) echo "check_programs" ;;
    gpu_test) echo "$kit/bin/gpu_test ${GPUKIT_GTEST_FILTER:+--gtest_filter=$GPUKIT_GTEST_FILTER}" ;;
    gpu_e2e) echo "$python $kit/tests/e2e/gpu_e2e.py $kit/bin" ;;
    bench_llama | bench_resnet)
      echo "$kit/bin/gpu_bench --only ${1#bench_} --python $python --peer-dir $kit/bench ${GPUKIT_BENCH_ARGS:-}" ;;
    bench_checkpoint) echo "$kit/bin/gpu_bench --only checkpoint --dir ${TMPDIR:-/tmp} ${GPUKIT_BENCH_ARGS:-}" ;;
    *) return 1 ;;
  esac
}
parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(programs gpu_test gpu_e2e bench_llama bench_resnet bench_checkpoint)
for p in "${parts[@]}"; do command_of "$p" > /dev/null || { echo "run.sh: unknown part $p" >&2; exit 2; }; done

# The stacks of every thread of a hung part's processes (at most 4), with
# cuda-gdb or gdb where the machine has one: which call each thread waits in.
dump_stacks() {
  local debugger proc
  debugger=$(command -v cuda-gdb || command -v gdb) || { echo "run.sh: no gdb or cuda-gdb for stacks"; return; }
  for proc in $(pgrep -g "$1" | head -4); do
    echo "===== run.sh: stacks of pid $proc ($(tr '\0' ' ' < "/proc/$proc/cmdline" 2> /dev/null | cut -c1-200))"
    timeout 25 "$debugger" -batch -nx -p "$proc" -ex "thread apply all bt 25" 2>&1 | grep -E '^(Thread|#)' | head -400
  done
}

# What a part's log says of its tests: gtest's and unittest's closing lines.
counts() {
  local log=$1
  local g
  g=$(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ test' "$log" | sed -E 's/^\[ *([A-Z]+) *\] ([0-9]+) .*/\2 \1/' |
    tr '\n' ' ')
  [ -n "$g" ] && { echo "gtest: ${g,,}"; return; }
  local ran result
  ran=$(grep -E -o '^Ran [0-9]+ tests?' "$log" | tail -1)
  result=$(grep -E '^(OK|FAILED)( \(.*\))?$' "$log" | tail -1)
  [ -n "$ran" ] && { echo "unittest: $ran, $result"; return; }
  grep -c '^| ' "$log" | sed 's/$/ table rows/'
}

echo "| part | result | seconds | limit | tests |" >> "$summary"
echo "|---|---|---|---|---|" >> "$summary"
failures=0
for p in "${parts[@]}"; do
  log=$out/$p.log
  t0=$SECONDS
  echo "run.sh: $p (limit ${limit[$p]} s)"
  timed_out=0
  if [ "$p" = programs ]; then
    check_programs > "$log" 2>&1
    rc=$?
  else
    # A process group of its own, so that a part that outlives its limit is
    # ended whole, after its threads' stacks were written to its log.
    # shellcheck disable=SC2046
    setsid $(command_of "$p") > "$log" 2>&1 &
    pid=$!
    while kill -0 "$pid" 2> /dev/null && [ $((SECONDS - t0)) -lt "${limit[$p]}" ]; do sleep 1; done
    if kill -0 "$pid" 2> /dev/null; then
      timed_out=1
      dump_stacks "$pid" >> "$log" 2>&1
      kill -TERM -- "-$pid" 2> /dev/null
      for _ in 1 2 3 4 5; do kill -0 "$pid" 2> /dev/null || break; sleep 1; done
      kill -KILL -- "-$pid" 2> /dev/null
    fi
    wait "$pid"
    rc=$?
  fi
  [ "$timed_out" -eq 0 ] || rc=124
  case $rc in
    0) result=passed ;;
    124) result="TIMED OUT"; failures=$((failures + 1)) ;;
    77) result="SKIPPED (77)"; failures=$((failures + 1)) ;;
    *) result="FAILED (exit $rc)"; failures=$((failures + 1)) ;;
  esac
  echo "| $p | $result | $((SECONDS - t0)) | ${limit[$p]} | $(counts "$log") |" >> "$summary"
  echo "run.sh: $p: $result in $((SECONDS - t0)) s"
  [ "$result" = passed ] || tail -15 "$log" | sed 's/^/    /'
done

{
  echo
  echo "total $((SECONDS - started)) s, $failures part(s) not passed"
  for p in "${parts[@]}"; do
    case "$p" in
      bench_*)
        echo
        echo "## $p"
        grep -E '^(###|\||model:|command:|Conditions:|[0-9]+ measured)' "$out/$p.log"
        ;;
      gpu_test | gpu_e2e)
        if grep -E -q '^\[  FAILED  \]|^(FAIL|ERROR):' "$out/$p.log"; then
          echo
          echo "## $p failures"
          grep -E '^\[  FAILED  \]|^(FAIL|ERROR):' "$out/$p.log" | sort -u
        fi
        ;;
    esac
  done
} >> "$summary"
cat "$summary"
[ "$failures" -eq 0 ]
