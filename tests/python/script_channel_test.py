"""The `trainyard` package's end of the script channel against the same lines
the worker's end is tested with (tests/fixtures/script_channel/,
tests/worker/script/script_channel_test.cc): each message the script sends is
written as the fixture's line byte for byte, and each state the worker sends
is read as the fixture says.

    python3 tests/python/script_channel_test.py
"""
import os
import sys
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(REPO, "tests", "fixtures", "script_channel")
sys.path.insert(0, os.path.join(REPO, "python"))
os.environ.pop("TRAINYARD_CHANNEL_FD", None)  # no worker here: importing opens nothing

from trainyard import _channel  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "e2e"))
import test_clock  # noqa: E402


def fixture(name):
    with open(os.path.join(FIXTURES, name), "rb") as f:
        return f.read()


class ScriptChannel(unittest.TestCase):
    def test_messages_the_script_sends(self):
        cases = {
            "hello.json": _channel.hello(),
            "report.json": _channel.report_message(7, samples=32, loss=2.5, seconds=0.25,
                                                   values={"accuracy": 0.75, "note": "not a number"}),
            "report_first.json": _channel.report_message(1),
            "saved_on_request.json": _channel.saved_message("/project/checkpoints/checkpoint_3", 12, 77),
            "saved_by_script.json": _channel.saved_message("/project/checkpoints/checkpoint_4", None, 0),
        }
        for name, message in cases.items():
            with self.subTest(name):
                self.assertEqual(_channel.encode(message), fixture(name))

    def test_states_the_worker_sends(self):
        cases = {
            "state_idle.json": {"checkpoint": None, "request_id": 0, "stop": False},
            "state_checkpoint.json": {"checkpoint": "sharded", "request_id": 77, "stop": False},
            "state_stop.json": {"checkpoint": "full", "request_id": 9, "stop": True},
        }
        for name, state in cases.items():
            with self.subTest(name):
                self.assertEqual(_channel.parse_state(fixture(name).rstrip(b"\n")), state)

    def test_what_is_no_state(self):
        self.assertIsNone(_channel.parse_state(b"not json"))
        self.assertIsNone(_channel.parse_state(b"[1, 2]"))

    def test_every_fixture_is_covered(self):
        # A line added to the fixtures is a message both ends must know.
        named = {"hello.json", "report.json", "report_first.json", "saved_on_request.json", "saved_by_script.json",
                 "state_idle.json", "state_checkpoint.json", "state_stop.json"}
        self.assertEqual({n for n in os.listdir(FIXTURES) if n.endswith(".json")}, named)


if __name__ == "__main__":
    test_clock.main()
