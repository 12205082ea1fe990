"""Checks that every relative link in README.md, docs/**/*.md and
deploy/**/*.md resolves to a file, and every #anchor to a heading of the
target page (GitHub's heading ids). Exits 1 and lists the broken ones.

    python3 docs/check_links.py [REPO_ROOT]
"""
import glob
import os
import re
import sys

ROOT = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
files = [os.path.join(ROOT, "README.md")]
files += glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True)
files += glob.glob(os.path.join(ROOT, "deploy", "**", "*.md"), recursive=True)

def slug(h):
    h = h.strip().lower()
    h = re.sub(r"[^\w\- ]", "", h)   # GitHub: drop punctuation except - and _
    return h.replace(" ", "-")

def anchors(path):
    out, seen, fence = set(), {}, False
    for line in open(path, encoding="utf-8"):
        if line.lstrip().startswith("```"):
            fence = not fence
            continue
        if fence:
            continue
        m = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if m:
            s = slug(m.group(2))
            n = seen.get(s, 0)
            out.add(s if n == 0 else f"{s}-{n}")
            seen[s] = n + 1
    return out

bad = 0
link_re = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
for f in sorted(files):
    fence = False
    for no, line in enumerate(open(f, encoding="utf-8"), 1):
        if line.lstrip().startswith("```"):
            fence = not fence
            continue
        if fence:
            continue
        line = re.sub(r"`[^`]*`", "", line)
        for m in link_re.finditer(line):
            target = m.group(1) or m.group(2)
            if re.match(r"^[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(f), path)) if path else f
            if not os.path.exists(dest):
                print(f"{f}:{no}: missing file {target}"); bad += 1; continue
            if anchor:
                if not dest.endswith(".md") or os.path.isdir(dest):
                    print(f"{f}:{no}: anchor on non-markdown {target}"); bad += 1; continue
                if anchor not in anchors(dest):
                    print(f"{f}:{no}: missing anchor {target}"); bad += 1
print(f"{len(files)} files, {bad} broken links")
sys.exit(1 if bad else 0)
