"""The GPU kit (scripts/gpu-kit.sh) carries every Python module its Python
files import from this checkout: a module left out fails the kit's one
call on a GPU machine before any GPU check (ModuleNotFoundError). Packing
the kit takes a torch download and a build of its own, so this reads the
files the kit copies and follows their imports here instead.

    python3 tests/gpukit_files_check.py SOURCE_DIR
"""
import ast
import os
import re
import sys


def copied(script):
    """The checkout's files the kit copies: (source path, kit folder)."""
    out = []
    for line in open(script):
        line = line.strip()
        if not line.startswith("cp "):
            continue
        paths = re.findall(r'"\$root/([^"]+)"', line)
        for p in paths:
            out.append(p)
    return out


def local_imports(path, folder):
    tree = ast.parse(open(path).read(), path)
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return {n for n in names if os.path.exists(os.path.join(folder, n + ".py"))}


def main():
    src = os.path.realpath(sys.argv[1])
    files = copied(os.path.join(src, "scripts/gpu-kit.sh"))
    carried = {f for f in files if f.endswith(".py")}
    missing = []
    for f in sorted(carried):
        folder = os.path.dirname(os.path.join(src, f))
        for name in sorted(local_imports(os.path.join(src, f), folder)):
            need = os.path.relpath(os.path.join(folder, name + ".py"), src)
            if need not in carried:
                missing.append(f"{f} imports {name}, which the kit does not carry ({need})")
    if not carried:
        missing.append("found no Python file the kit copies: has gpu-kit.sh's layout changed?")
    for m in missing:
        print("gpukit_files:", m)
    if missing:
        return 1
    print(f"gpukit_files: the kit's {len(carried)} Python files import only what it carries")
    return 0


if __name__ == "__main__":
    sys.exit(main())
