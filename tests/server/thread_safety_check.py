"""Compiles the coordinator's sources (server/, no LibTorch) with clang's
thread-safety analysis as errors: state marked ABSL_GUARDED_BY(mu) may only
be touched with mu held, and functions marked
ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) only called with it held. Then checks that
the check can fail: a sample with an unguarded access must be refused.

    python3 tests/server/thread_safety_check.py BUILD_DIR SOURCE_DIR

Flags come from BUILD_DIR/compile_commands.json (CMake's), with the compiler
swapped for clang++ and -fsyntax-only -Wthread-safety -Werror added.
"""
import concurrent.futures
import json
import os
import shlex
import shutil
import subprocess
import sys


def clang_command(entry, source):
    args = shlex.split(entry["command"])
    out = ["clang++"]
    skip = False
    for a in args[1:]:
        if skip:
            skip = False
            continue
        if a in ("-o", "-c"):
            skip = True
            continue
        if a.startswith("-g") or a.startswith("-O"):
            continue
        out.append(a)
    return out + ["-fsyntax-only", "-Wthread-safety", "-Werror", source]


def main():
    build, src = sys.argv[1], os.path.realpath(sys.argv[2])
    if shutil.which("clang++") is None:
        print("thread_safety_check: clang++ is not installed (scripts/install-deps.sh installs clang)")
        return 1
    with open(os.path.join(build, "compile_commands.json")) as f:
        entries = [e for e in json.load(f)
                   if os.path.realpath(e["file"]).startswith(os.path.join(src, "server") + os.sep)]
    if len(entries) < 10:
        print(f"thread_safety_check: only {len(entries)} server sources in compile_commands.json")
        return 1

    def check(entry):
        r = subprocess.run(clang_command(entry, entry["file"]), cwd=entry["directory"], capture_output=True, text=True)
        return entry["file"], r.returncode, r.stderr

    failed = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        for path, rc, err in pool.map(check, entries):
            print(f"{'ok  ' if rc == 0 else 'FAIL'} {os.path.relpath(path, src)}")
            if rc != 0:
                failed += 1
                print(err)
    # The analysis is on: an access without the lock must be refused.
    sample = os.path.join(src, "tests", "server", "thread_safety_violation.cc")
    _, rc, err = check(dict(entries[0], file=sample))
    if rc == 0 or "requires holding mutex" not in err:
        print(f"thread_safety_check: {os.path.relpath(sample, src)} compiled without the expected error:\n{err}")
        failed += 1
    else:
        print("ok   the unguarded access in thread_safety_violation.cc is refused")
    print(f"thread_safety_check: {len(entries)} sources, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
