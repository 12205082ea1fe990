"""The `trainyard` package against a stand-in for the worker's end of the
channel: what a script sends (reports, saved checkpoints), what it is told
(a checkpoint request, a stop), and the same script outside Trainyard (no
channel: every call is a no-op and the answers are "no").

    python3 tests/python/package_test.py
"""
import json
import os
import socket
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "e2e"))
import test_clock  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCRIPT = r"""
import json, os, sys, trainyard
print(json.dumps({"in": trainyard.in_trainyard(), "resume": trainyard.resume_dir()}), flush=True)
sys.stdin.readline()                      # the test has told the worker's state
trainyard.report(1, samples=32, loss=2.5, accuracy=0.25, note="not a number")
trainyard.report(2, samples=32, loss=2.0)
print(json.dumps({"checkpoint": trainyard.checkpoint_requested(), "stop": trainyard.should_stop(),
                  "dir": trainyard.checkpoint_dir(2)}), flush=True)
trainyard.checkpoint_saved(trainyard.checkpoint_dir(2), 2)
"""


class Package(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.script = os.path.join(self.tmp.name, "s.py")
        with open(self.script, "w") as f:
            f.write(SCRIPT)

    def tearDown(self):
        self.tmp.cleanup()

    def run_script(self, env, pass_fds=()):
        env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"), **env)
        return subprocess.Popen([sys.executable, self.script], env=env, pass_fds=pass_fds, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)

    def test_messages_both_ways(self):
        ours, theirs = socket.socketpair()
        with tempfile.TemporaryDirectory() as root:
            os.makedirs(os.path.join(root, "checkpoint_4"))
            p = self.run_script({"TRAINYARD_CHANNEL_FD": str(theirs.fileno()), "TRAINYARD_CHECKPOINT_DIR": root,
                                 "TRAINYARD_RESUME_DIR": "/ckpt/checkpoint_3"}, pass_fds=(theirs.fileno(),))
            theirs.close()
            first = json.loads(p.stdout.readline())
            self.assertEqual(first, {"in": True, "resume": "/ckpt/checkpoint_3"})
            ours.sendall(b'{"checkpoint": "sharded", "request_id": 9, "stop": true}\n')
            p.stdin.write("go\n")
            p.stdin.flush()
            answer = json.loads(p.stdout.readline())
            self.assertEqual(answer["checkpoint"], "sharded")
            self.assertTrue(answer["stop"])
            self.assertEqual(answer["dir"], os.path.join(root, "checkpoint_5"), "numbered after what is there")
            p.wait(timeout=30)
            p.stdin.close()
            p.stdout.close()
            self.assertEqual(p.returncode, 0)
            data = b""
            while True:
                chunk = ours.recv(65536)
                if not chunk:
                    break
                data += chunk
            ours.close()
        msgs = [json.loads(line) for line in data.decode().splitlines()]
        # The package says hello when it opens the channel (at import): the
        # worker then knows the script can hear checkpoint requests.
        self.assertEqual([m["op"] for m in msgs], ["hello", "report", "report", "saved"])
        msgs = msgs[1:]
        self.assertEqual(msgs[0]["step"], 1)
        self.assertEqual(msgs[0]["samples"], 32)
        self.assertEqual(msgs[0]["loss"], 2.5)
        self.assertEqual(msgs[0]["values"], {"accuracy": 0.25}, "numbers only")
        self.assertIsNone(msgs[0]["seconds"])
        self.assertGreater(msgs[1]["seconds"], 0, "the time per step between two reports")
        self.assertEqual(msgs[2]["step"], 2)
        self.assertEqual(msgs[2]["request_id"], 9, "the save answers the request")

    def test_outside_trainyard_everything_is_a_no_op(self):
        env = {k: "" for k in ("TRAINYARD_CHANNEL_FD", "TRAINYARD_RESUME_DIR")}
        p = self.run_script(env)
        self.assertEqual(json.loads(p.stdout.readline()), {"in": False, "resume": None})
        p.stdin.write("go\n")
        p.stdin.flush()
        answer = json.loads(p.stdout.readline())
        self.assertIsNone(answer["checkpoint"])
        self.assertFalse(answer["stop"])
        p.wait(timeout=30)
        p.stdin.close()
        p.stdout.close()
        self.assertEqual(p.returncode, 0)


if __name__ == "__main__":
    test_clock.main()
