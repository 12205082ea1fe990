#!/usr/bin/env bash
# Builds the spec parser's libFuzzer target with clang (-fsanitize=fuzzer,
# address) and runs it for a bounded time on a copy of the seed corpus in
# tests/fuzz/corpus. Exits non-zero on a crash, leak or failed round trip.
#   run.sh SOURCE_DIR BUILD_DIR [SECONDS]
set -euo pipefail
src=$1
out=$2/fuzz
seconds=${3:-60}
mkdir -p "$out"
clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address -I"$src" \
  "$src/tests/fuzz/spec_fuzzer.cc" "$src"/common/spec/*.cc \
  "$src/common/accelerate_config.cc" "$src/common/accelerate_keys.cc" \
  "$src/common/job_state.cc" "$src/common/progress_pattern.cc" -o "$out/spec_fuzzer" \
  $(pkg-config --libs absl_status absl_statusor absl_strings absl_str_format yaml-cpp re2)
rm -rf "$out/corpus"
cp -r "$src/tests/fuzz/corpus" "$out/corpus"
cp "$src"/examples/*.yaml "$out/corpus/"
"$out/spec_fuzzer" -artifact_prefix="$out/" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 \
  -print_final_stats=1 "$out/corpus"
