#!/usr/bin/env bash
# Runs the spec parser's libFuzzer target (built by the main build into
# BUILD_DIR/fuzz/spec_fuzzer, target spec_fuzzer) for a bounded time on a
# copy of the seed corpus in tests/fuzz/corpus and the examples. Exits
# non-zero on a crash, leak or failed round trip.
#   run.sh SOURCE_DIR BUILD_DIR [SECONDS]
set -euo pipefail
src=$1
out=$2/fuzz
seconds=${3:-60}
if [ ! -x "$out/spec_fuzzer" ]; then
  echo "run.sh: $out/spec_fuzzer is not built: build the target spec_fuzzer" >&2
  exit 1
fi
rm -rf "$out/corpus"
cp -r "$src/tests/fuzz/corpus" "$out/corpus"
cp "$src"/examples/*.yaml "$out/corpus/"
"$out/spec_fuzzer" -artifact_prefix="$out/" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 \
  -print_final_stats=1 "$out/corpus"
