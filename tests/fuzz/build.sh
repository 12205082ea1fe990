#!/usr/bin/env bash
# Builds the spec parser's libFuzzer target with clang (-fsanitize=fuzzer,
# address): each source compiled on its own (through ccache when given), then
# linked. The main build runs it (target spec_fuzzer); run.sh runs the result.
#   build.sh SOURCE_DIR OUTPUT [LAUNCHER...]
set -euo pipefail
src=$1
out=$2
shift 2
launcher=("$@")
objs=$(dirname "$out")/spec_fuzzer_objs
mkdir -p "$objs"
flags=(-std=c++20 -O1 -g -fsanitize=fuzzer,address -I"$src")
files=("$src/tests/fuzz/spec_fuzzer.cc" "$src"/common/spec/*.cc "$src/common/accelerate_config.cc"
  "$src/common/accelerate_keys.cc" "$src/common/job_state.cc" "$src/common/progress_pattern.cc"
  "$src/common/webhook_url.cc")
linked=()
for f in "${files[@]}"; do
  o=$objs/$(basename "${f%.cc}").o
  "${launcher[@]}" clang++ "${flags[@]}" -c "$f" -o "$o"
  linked+=("$o")
done
clang++ "${flags[@]}" "${linked[@]}" -o "$out" \
  $(pkg-config --libs absl_status absl_statusor absl_strings absl_str_format yaml-cpp re2)
