"""The `trainyard` package's end of the script channel against the same lines
the worker's end is tested with (tests/fixtures/script_channel/,
tests/worker/script/script_channel_test.cc): each message the script sends is
written as the fixture's line byte for byte, and each state the worker sends
is read as the fixture says.

    python3 tests/python/script_channel_test.py
"""
import json
import os
import socket
import sys
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(REPO, "tests", "fixtures", "script_channel")
sys.path.insert(0, os.path.join(REPO, "python"))
os.environ.pop("TRAINYARD_CHANNEL_FD", None)  # no worker here: importing opens nothing

import trainyard  # noqa: E402
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
            "report_total.json": _channel.report_message(3, total=1000),
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
        named = {"hello.json", "report.json", "report_first.json", "report_total.json", "saved_on_request.json",
                 "saved_by_script.json", "state_idle.json", "state_checkpoint.json", "state_stop.json"}
        self.assertEqual({n for n in os.listdir(FIXTURES) if n.endswith(".json")}, named)


class CheckpointRequests(unittest.TestCase):
    """The package's answers over a real socket pair, this test playing the
    worker: a request is saved for once, however often the script asks and
    however long the worker's state still names it (issue 64)."""

    def setUp(self):
        self.worker, script = socket.socketpair()
        script.setblocking(False)
        # What _open() makes of TRAINYARD_CHANNEL_FD, without the hello.
        _channel._sock, _channel._opened, _channel._buffer = script, True, b""
        _channel._state = {"checkpoint": None, "request_id": 0, "stop": False}
        _channel._answered = 0
        trainyard._agreed = None
        self.step = 0

    def tearDown(self):
        _channel._sock.close()
        _channel._sock, _channel._opened = None, False
        self.worker.close()

    def tell(self, checkpoint, request_id, stop=False):
        self.worker.sendall((json.dumps({"checkpoint": checkpoint, "request_id": request_id, "stop": stop}) +
                             "\n").encode())

    def saved(self):
        """The request ids of the checkpoints the script registered since the last call."""
        self.worker.setblocking(False)
        data = b""
        try:
            while True:
                data += self.worker.recv(65536)
        except BlockingIOError:
            pass
        return [m["request_id"] for m in map(json.loads, data.splitlines()) if m["op"] == "saved"]

    def run_steps(self, n):
        """n steps of the examples' loop, asking twice a step; the steps it saved at."""
        at = []
        for _ in range(n):
            self.step += 1
            trainyard.report(self.step)
            if trainyard.checkpoint_requested() or trainyard.should_stop():
                self.assertEqual(trainyard.checkpoint_requested(), trainyard.checkpoint_requested())
                trainyard.checkpoint_saved(f"/ckpt/{self.step}", self.step)
                at.append(self.step)
                self.assertIsNone(trainyard.checkpoint_requested(), "answered in this step")
        return at

    def test_one_request_one_checkpoint(self):
        self.assertEqual(self.run_steps(3), [])
        self.tell("full", 7)
        self.assertEqual(self.run_steps(20), [4], "the worker still names request 7: it was answered")
        self.assertEqual(self.saved(), [7])
        self.tell(None, 0)  # the worker read the "saved"
        self.assertEqual(self.run_steps(5), [])
        self.tell("sharded", 9)
        self.assertEqual(self.run_steps(1), [29])
        self.assertEqual(self.run_steps(10), [])
        self.assertEqual(self.saved(), [9])

    def test_a_second_request_before_the_worker_moved_on(self):
        self.tell("full", 3)
        self.assertEqual(self.run_steps(2), [1])
        self.tell("full", 4)  # no idle state between: an older worker never sends one
        self.assertEqual(self.run_steps(5), [3])
        self.assertEqual(self.saved(), [3, 4])

    def test_a_number_used_again_after_the_worker_moved_on_is_a_new_request(self):
        # A restarted coordinator numbers its requests from 1 again.
        self.tell("full", 1)
        self.assertEqual(self.run_steps(2), [1])
        self.tell(None, 0)
        self.tell("full", 1)
        self.assertEqual(self.run_steps(3), [3])
        self.assertEqual(self.saved(), [1, 1])

    def test_a_stop_still_saves_and_stops(self):
        self.tell("full", 5, stop=True)  # cancel --checkpoint
        self.assertEqual(self.run_steps(1), [1])
        self.assertTrue(trainyard.should_stop())
        self.assertEqual(self.saved(), [5])


if __name__ == "__main__":
    test_clock.main()
