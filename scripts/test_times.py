#!/usr/bin/env python3
"""Where a test run's time went, and the guard on it (scripts/test.sh runs it
after ctest).

Prints the seconds of each phase (set-up, configure, compile, test: the
lines scripts/build.sh and scripts/test.sh wrote to phase-times.tsv), the
total, and the slowest ctest entries (from ctest's JUnit file), each beside
its budget in tests/time_budget.tsv. Then the guard:
  - a test over 1.5x its budget: a warning naming it;
  - the whole run over the budget's `suite.warn` seconds: a warning;
  - the whole run over `suite.fail` seconds: exit 1 (only for a full run:
    --full, i.e. scripts/test.sh without ctest arguments).
The budget checks wall time only: no test asserts a time.

    scripts/test_times.py --phases build/phase-times.tsv --junit build/ctest-junit.xml \
        --budget tests/time_budget.tsv --total SECONDS [--full] [--slowest 20]
"""
import argparse
import re
import sys
import xml.etree.ElementTree as ET


def read_budget(path):
    budget = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            parts = line.split()
            if len(parts) != 2:
                sys.exit(f"{path}:{n}: expected 'NAME SECONDS', got {line!r}")
            try:
                budget[parts[0]] = float(parts[1])
            except ValueError:
                sys.exit(f"{path}:{n}: {parts[1]!r} is not a number of seconds")
    for key in ("suite.warn", "suite.fail"):
        if key not in budget:
            sys.exit(f"{path}: no {key} line")
    return budget


def read_phases(path):
    phases = []
    try:
        with open(path) as f:
            for line in f:
                name, _, secs = line.strip().partition("\t")
                if name:
                    phases.append((name, float(secs)))
    except FileNotFoundError:
        pass
    return phases


CLOCK_LINE = re.compile(r"^\[clock\]\s+([0-9.]+) s  (\S+)$", re.M)


def methods_of(case):
    """{test method: seconds} from the [clock] lines (tests/e2e/test_clock.py)
    in a ctest entry's output."""
    out = case.find("system-out")
    found = {}
    for secs, name in CLOCK_LINE.findall(out.text or "" if out is not None else ""):
        found[name.removeprefix("__main__.")] = float(secs)
    return found


def read_junit(path):
    """[(seconds, test name, status, {method: seconds})] from ctest's --output-junit file."""
    try:
        root = ET.parse(path).getroot()
    except (FileNotFoundError, ET.ParseError) as e:
        print(f"test-times: no ctest timings ({path}: {e})")
        return []
    out = []
    for case in root.iter("testcase"):
        status = case.get("status", "run")
        if case.find("failure") is not None:
            status = "failed"
        elif case.find("skipped") is not None:
            status = "skipped"
        out.append((float(case.get("time", 0) or 0), case.get("name", "?"), status, methods_of(case)))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--phases", required=True)
    ap.add_argument("--junit", required=True)
    ap.add_argument("--budget", required=True)
    ap.add_argument("--total", type=float, required=True, help="the whole run's wall seconds")
    ap.add_argument("--full", action="store_true", help="the whole suite ran: check the suite's lines")
    ap.add_argument("--slowest", type=int, default=20)
    a = ap.parse_args()
    budget = read_budget(a.budget)
    phases = read_phases(a.phases)
    tests = read_junit(a.junit)

    print("test-times: phases (seconds)")
    for name, secs in phases:
        print(f"test-times:   {name:<10} {secs:8.0f}")
    print(f"test-times:   {'total':<10} {a.total:8.0f}")
    if tests:
        summed = sum(t[0] for t in tests)
        print(f"test-times: {len(tests)} ctest entries, {summed:.0f} s of test time in all; the "
              f"{min(a.slowest, len(tests))} slowest (seconds, budget; a Python suite's slowest methods below it):")
        for secs, name, status, methods in sorted(tests, key=lambda t: -t[0])[:a.slowest]:
            b = budget.get(name)
            mark = f"{b:6.0f}" if b is not None else "     -"
            print(f"test-times:   {secs:8.1f} {mark}  {name}{'' if status == 'run' else '  (' + status + ')'}")
            for m, m_secs in sorted(methods.items(), key=lambda kv: -kv[1])[:3]:
                print(f"test-times:   {m_secs:8.1f}           {m}")

    warnings = []
    for secs, name, _, _ in tests:
        b = budget.get(name)
        if b is not None and secs > 1.5 * b:
            warnings.append(f"{name} took {secs:.0f} s, over 1.5x its budget of {b:.0f} s "
                            f"(tests/time_budget.tsv)")
    failed = False
    if a.full:
        if a.total > budget["suite.fail"]:
            failed = True
            print(f"test-times: FAIL: the whole run took {a.total:.0f} s, over the limit of "
                  f"{budget['suite.fail']:.0f} s (suite.fail in tests/time_budget.tsv): make the slowest "
                  f"tests above smaller or faster before adding more")
        elif a.total > budget["suite.warn"]:
            warnings.append(f"the whole run took {a.total:.0f} s, over the warning line of "
                            f"{budget['suite.warn']:.0f} s (suite.warn in tests/time_budget.tsv)")
    for w in warnings:
        print(f"test-times: WARNING: {w}")
    if not warnings and not failed:
        print("test-times: within budget")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
