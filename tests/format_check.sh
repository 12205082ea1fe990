#!/usr/bin/env bash
# The house style: every tracked C++ source is as clang-format (.clang-format
# at the root) writes it, and no line of source, script or CMake file is
# longer than 120 columns. Usage: format_check.sh SOURCE_DIR
set -euo pipefail
cd "$1"
fail=0
mapfile -t cpp < <(git ls-files '*.cc' '*.h')
if ! clang-format --dry-run --Werror "${cpp[@]}" 2> /tmp/format_check.$$; then
  grep -E "^[^ ].*: (error|warning):" /tmp/format_check.$$ | cut -d: -f1 | sort -u | sed 's/^/needs clang-format: /'
  fail=1
fi
rm -f /tmp/format_check.$$
mapfile -t files < <(git ls-files '*.cc' '*.h' '*.py' '*.sh' '*.cmake' 'CMakeLists.txt' '*/CMakeLists.txt' '*.proto')
long=$(awk 'length($0) > 120 { printf "%s:%d: %d columns\n", FILENAME, FNR, length($0) }' "${files[@]}")
if [ -n "$long" ]; then
  echo "$long"
  fail=1
fi
[ $fail -eq 0 ] && echo "format_check: ${#cpp[@]} C++ files formatted, ${#files[@]} files within 120 columns"
exit $fail
