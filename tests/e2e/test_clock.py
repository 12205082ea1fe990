"""unittest's main with a clock: each test method's seconds as it ends, and
a table of them, slowest first, when the suite ends. The Python suites
(tests/e2e, tests/python) run through it, so ctest's log shows where a
suite's time goes (scripts/test.sh sums up the slowest ctest entries).

    import test_clock
    test_clock.main()           # instead of unittest.main(verbosity=2)
"""
import sys
import time
import unittest


class _TimedResult(unittest.TextTestResult):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seconds = []  # (seconds, test id)
        self._started = {}

    def startTest(self, test):
        self._started[test.id()] = time.monotonic()
        super().startTest(test)

    def stopTest(self, test):
        super().stopTest(test)
        took = time.monotonic() - self._started.pop(test.id(), time.monotonic())
        self.seconds.append((took, test.id()))
        self.stream.write(f"[clock] {took:7.1f} s  {test.id()}\n")
        self.stream.flush()


class _TimedRunner(unittest.TextTestRunner):
    resultclass = _TimedResult

    def run(self, test):
        t0 = time.monotonic()
        result = super().run(test)
        total = time.monotonic() - t0
        self.stream.write(f"[clock] {total:.1f} s in all; each test method, slowest first:\n")
        for took, name in sorted(result.seconds, reverse=True):
            self.stream.write(f"[clock] {took:7.1f} s  {name}\n")
        self.stream.flush()
        return result


def main(**kwargs):
    """unittest.main(verbosity=2, ...) with the clock; kwargs go to unittest.main."""
    kwargs.setdefault("verbosity", 2)
    unittest.main(testRunner=_TimedRunner(stream=sys.stderr, verbosity=kwargs.pop("verbosity")), **kwargs)
