"""Compiles the coordinator's sources (server/, no LibTorch) with clang's
thread-safety analysis as errors: state marked ABSL_GUARDED_BY(mu) may only
be touched with mu held, and functions marked
ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) only called with it held. Then checks that
the check can fail: a sample with an unguarded access must be refused.

    python3 tests/server/thread_safety_check.py BUILD_DIR SOURCE_DIR

Flags come from BUILD_DIR/compile_commands.json (CMake's), with the compiler
swapped for clang++ and -fsyntax-only -Wthread-safety -Werror added. Each
source is checked once (the sanitized test build compiles some again), and
only where the analysis has something to check: a source that, with the
project headers it includes (transitively), names no lock, no capability
annotation and no absl::Mutex cannot fail it.
"""
import concurrent.futures
import json
import functools
import os
import re
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


# What the analysis reads: absl's annotations and its annotated mutex.
LOCKS = re.compile(r"ABSL_[A-Z_]*(GUARDED|LOCK|CAPABILITY|ASSERT|THREAD_SAFETY)|"
                   r"absl::(Mutex|MutexLock|ReaderMutexLock|WriterMutexLock|ReleasableMutexLock|CondVar)\b|"
                   r"thread_annotations\.h")
PROJECT_INCLUDE = re.compile(r'#include "((?:server|common|tests)/[^"]+)"')


def uses_locks(path, src):
    """Whether `path` or a project header it includes, directly or not,
    names a lock or a thread-safety annotation."""
    @functools.lru_cache(maxsize=None)
    def text(p):
        try:
            with open(p) as f:
                return f.read()
        except OSError:
            return ""

    seen, todo = set(), [path]
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        t = text(p)
        if LOCKS.search(t):
            return True
        todo += [os.path.join(src, h) for h in PROJECT_INCLUDE.findall(t)]
    return False


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
    # One entry per source (the sanitized build's are the same code), those
    # that touch a lock.
    by_file = {}
    for e in entries:
        by_file.setdefault(os.path.realpath(e["file"]), e)
    sources = len(by_file)
    entries = [e for f, e in sorted(by_file.items()) if uses_locks(f, src)]
    if len(entries) < 10:
        print(f"thread_safety_check: only {len(entries)} of {sources} server sources name a lock")
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
    if not uses_locks(sample, src):
        print(f"thread_safety_check: {os.path.relpath(sample, src)} is not seen to use a lock")
        failed += 1
    _, rc, err = check(dict(entries[0], file=sample))
    if rc == 0 or "requires holding mutex" not in err:
        print(f"thread_safety_check: {os.path.relpath(sample, src)} compiled without the expected error:\n{err}")
        failed += 1
    else:
        print("ok   the unguarded access in thread_safety_violation.cc is refused")
    print(f"thread_safety_check: {len(entries)} of {sources} sources name a lock and were checked, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
