#!/usr/bin/env python3
"""The folders of server/ and worker/ are libraries in layers: a file may
include its own folder, the folders below it, and common/ — never a folder
above. This check reads every #include "server/..." and "worker/..." and
fails on one that runs the wrong way.

The layers mirror the CMake libraries (each folder's CMakeLists.txt links
only the ones below it); docs/architecture.md draws them.

  include_layers.py SOURCE_ROOT          check the tree
  include_layers.py --self-test          a wrong-way include must fail
"""
import os
import re
import sys
import tempfile

# folder -> the folders it may include (besides itself and common/, proto).
LAYERS = {
    "server/scheduling": [],
    "server/metrics": ["server/scheduling"],
    "server/store": [],
    "server/auth": [],
    "server/launch": [],
    "server/health": [],
    "server/replicas": ["server/health", "server/metrics", "server/scheduling"],
    "server/jobs": ["server/scheduling", "server/metrics", "server/store", "server/auth", "server/launch",
                    "server/health", "server/replicas"],
    "server/sweeps": ["server/scheduling", "server/metrics", "server/store", "server/auth", "server/launch",
                      "server/health", "server/replicas", "server/jobs", "server/notify"],
    "server/notify": ["server/store"],
    "server/leadership": ["server/store"],
    "server/api": ["server/scheduling", "server/metrics", "server/store", "server/auth", "server/launch",
                   "server/health", "server/replicas", "server/jobs", "server/sweeps", "server/notify",
                   "server/leadership"],
    # The worker: a rank's libraries in layers; the binary (worker/main.cc,
    # worker/worker_main.*) composes them all.
    "worker/base": [],
    "worker/collectives": ["worker/base"],
    "worker/data": ["worker/base"],
    "worker/models": ["worker/base"],
    "worker/control": ["worker/base"],
    "worker/parallel": ["worker/base", "worker/collectives", "worker/models"],
    "worker/checkpoint": ["worker/base", "worker/collectives", "worker/data", "worker/models", "worker/parallel"],
    "worker/script": ["worker/base", "worker/control"],
    "worker/train": ["worker/base", "worker/collectives", "worker/data", "worker/models", "worker/parallel",
                     "worker/checkpoint", "worker/control"],
    "worker/replicas": ["worker/base", "worker/collectives", "worker/data", "worker/models", "worker/parallel",
                        "worker/checkpoint", "worker/control", "worker/train"],
    "worker/bin": ["worker/base", "worker/collectives", "worker/data", "worker/models", "worker/parallel",
                   "worker/checkpoint", "worker/control", "worker/script", "worker/train", "worker/replicas"],
    "client": [],
    "common": [],
}
BINARY = {"worker/main.cc", "worker/worker_main.cc", "worker/worker_main.h"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"((?:server|worker|client|common)/[^"]+)"', re.M)


def folder_of(path):
    if path in BINARY:
        return "worker/bin"
    d = os.path.dirname(path)
    while d and d not in LAYERS:
        d = os.path.dirname(d)
    return d or None


def check(root):
    errors = []
    for top in ("server", "worker", "client", "common"):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for f in files:
                if not f.endswith((".h", ".cc")):
                    continue
                path = os.path.relpath(os.path.join(dirpath, f), root)
                mine = folder_of(path)
                if mine is None:
                    errors.append(f"{path}: in no layer (add its folder to tests/include_layers.py)")
                    continue
                allowed = {mine, "common", *LAYERS[mine]}
                text = open(os.path.join(dirpath, f), encoding="utf-8", errors="replace").read()
                for m in INCLUDE.finditer(text):
                    target = folder_of(m.group(1))
                    if target not in allowed:
                        line = text.count("\n", 0, m.start()) + 1
                        errors.append(f"{path}:{line}: includes {m.group(1)} ({target}), above {mine}: "
                                      f"{mine} may include {', '.join(sorted(allowed))}")
    return errors


def self_test():
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(os.path.join(d, "server/scheduling"))
        os.makedirs(os.path.join(d, "server/jobs"))
        with open(os.path.join(d, "server/jobs/a.h"), "w") as f:
            f.write('#include "server/scheduling/b.h"\n')
        with open(os.path.join(d, "server/scheduling/b.h"), "w") as f:
            f.write("// fine\n")
        assert check(d) == [], check(d)
        with open(os.path.join(d, "server/scheduling/b.h"), "w") as f:
            f.write('#include "server/jobs/a.h"\n')
        errors = check(d)
        assert len(errors) == 1 and "server/scheduling/b.h:1: includes server/jobs/a.h" in errors[0], errors
    print("include_layers self-test: a wrong-way include is caught")


def main():
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        return 0
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    errors = check(root)
    for e in errors:
        print(e)
    if errors:
        print(f"include_layers: {len(errors)} include(s) run the wrong way")
        return 1
    print("include_layers: every include of server/, worker/, client/ and common/ runs downward")
    return 0


if __name__ == "__main__":
    sys.exit(main())
