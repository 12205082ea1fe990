"""README's walkthrough, typed as written, in its order, against a real server.

Each `trainctl` and `curl` line of the walkthrough's bash blocks runs as the
README gives it, one right after the other (a fast typist), from the
checkout, with the server's address in TRAINYARD_SERVER. What the test
changes, and only that: the job ids (the README's are examples), the
server's metrics port, and the long job's `--set max_steps=20000` (3,000
here, so that the test ends in under a minute). The build and server lines
are the test's own: the built tree's programs and a server on free ports.
Then the torchrun example's script job, checkpointed, cancelled, resumed
and deleted as docs/reference/trainctl.md says.
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_test  # noqa: E402
from e2e_test import REPO, Server  # noqa: E402
import test_clock  # noqa: E402

README_JOB = re.compile(r"job-[0-9a-f]{8}\b")


def walkthrough_blocks():
    text = open(os.path.join(REPO, "README.md")).read()
    section = text[text.index("## A walkthrough"):]
    section = section[:section.index("\n## ", 1)]
    blocks = re.findall(r"```bash\n(.*?)```", section, re.S)
    assert len(blocks) == 2, f"README's walkthrough has {len(blocks)} bash blocks, the test knows 2"
    return [[re.sub(r"\s+# .*$", "", line).strip() for line in b.splitlines() if line.strip()] for b in blocks]


class Walkthrough(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        # The checkout: where the torchrun example's script lies.
        # A relative script.path is resolved against the server's working
        # directory (docs/reference/job-spec.md): the checkout, as in the README.
        cls.server = Server(cls.tmp.name, slots=2, extra=("--allowed-root", REPO), cwd=REPO)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        cls.tmp.cleanup()

    def type(self, line, job, cwd=REPO):
        line = README_JOB.sub(job, line) if job else line
        line = line.replace("127.0.0.1:9464", f"127.0.0.1:{self.server.metrics_port}")
        line = line.replace("--set max_steps=20000", "--set max_steps=3000")
        env = dict(os.environ, TRAINYARD_SERVER=self.server.addr,
                   PATH=e2e_test.BIN + os.pathsep + os.environ["PATH"])
        r = subprocess.run(["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, f"`{line}` exited {r.returncode}:\n{r.stdout}{r.stderr}")
        return r.stdout

    def run_block(self, lines, checks):
        """Types each line; checks[word] (the line's trainctl subcommand or its
        first word) checks that line's output. Returns the job id."""
        job, seen = None, []
        for line in lines:
            word = line.split()[0]
            if word in ("bash", "export", "trainyard-server", "kill"):
                continue  # the build, PATH, the server and its stop: the test's own
            if word == "trainctl":
                word = line.split()[1]
            out = self.type(line, job)
            if word == "submit":
                job = re.search(r"^submitted (job-[0-9a-f]+) ", out, re.M).group(1)
            if word in checks:
                checks[word](out, job)
            seen.append(word)
        self.assertEqual(sorted(set(checks) - set(seen)), [], "lines the test expected in the README's block")
        return job

    def test_1_run_and_inspect(self):
        def checkpoints(out, job):
            self.assertRegex(out, rf"jobs/{job}/checkpoints/checkpoint_0")
        job = self.run_block(walkthrough_blocks()[0], {
            "watch": lambda out, job: self.assertIn("SUCCEEDED", out),
            "list": lambda out, job: self.assertIn(job, out),
            "get": lambda out, job: self.assertRegex(out, r"state:\s+SUCCEEDED"),
            "logs": lambda out, job: self.assertIn("rank 1", out),
            "checkpoints": checkpoints,
            "curl": lambda out, job: self.assertRegex(out, r'trainyard_jobs{state="SUCCEEDED"} 1\b'),
        })
        self.assertEqual(self.server.job(job)["state"], "SUCCEEDED")
        # A long log: trainctl takes the server's largest answer (16 MiB), past gRPC's 4 MiB default.
        with open(os.path.join(self.tmp.name, "jobs", job, "attempt-1", "rank-0.log"), "a") as f:
            f.write(("x" * 99 + "\n") * 60000)
        r = self.server.ctl("logs", job, "--limit-bytes", str(16 << 20))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertGreater(len(r.stdout), 6_000_000)
        self.assertIn("rank 0", r.stdout)

    def test_2_checkpoint_cancel_resume_while_it_runs(self):
        saved = []

        def checkpoint(out, job):
            path = out.strip().splitlines()[-1]
            self.assertTrue(os.path.isdir(path), out)
            saved.append(path)

        def cancel(out, job):
            self.assertIn("CANCELLED", out)
            cks = json.loads(self.server.ctl("-o", "json", "checkpoints", job).stdout)
            self.assertEqual([c["trigger"] for c in cks if c["ok"]][-1], "cancel", cks)

        job = self.run_block(walkthrough_blocks()[1], {
            "checkpoint": checkpoint,
            "diagnose": lambda out, job: self.assertRegex(out, r"rank 0"),
            "cancel": cancel,
            "resume": lambda out, job: self.assertIn("SUCCEEDED", out),
        })
        j = self.server.job(job)
        self.assertEqual((j["state"], j["attempt"], j["step"]), ("SUCCEEDED", 2, 3000), j)
        self.assertTrue(any("resum" in e["reason"] and "checkpoint_" in e["reason"] for e in j["events"]), j["events"])

    def test_3_a_script_job_checkpointed_cancelled_resumed(self):
        """A script job's remote checkpoint is one entry of `checkpoints`; cancel
        stops it and resume starts it from that checkpoint (issue 64)."""
        # The torchrun example as its job.yaml says to submit it, with steps
        # that last a while (its own --step-sleep) and no periodic checkpoint.
        line = ("trainctl submit examples/torchrun_script/job.yaml "
                "--set 'script.args=[--steps, \"1000\", --step-sleep, \"0.005\"]'")
        out = self.type(line, None)
        job = re.search(r"\b(job-[0-9a-f]{8})\b", out).group(1)
        path = self.type(f"trainctl checkpoint {job} --wait", job).strip().splitlines()[-1]
        self.assertTrue(os.path.isdir(path), path)
        cks = json.loads(self.type(f"trainctl checkpoints {job} -o json", job))
        self.assertEqual([(c["trigger"], c["ok"], c["path"]) for c in cks], [("request", True, path)], cks)
        # A live job is not deleted.
        r = self.server.ctl("delete", job)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("FAILED_PRECONDITION", r.stderr)
        self.assertIn("cancel it first", r.stderr)
        self.assertIn("CANCELLED", self.type(f"trainctl cancel {job}", job))
        self.assertEqual(len(json.loads(self.type(f"trainctl checkpoints {job} -o json", job))), 1)
        self.assertIn("SUCCEEDED", self.type(f"trainctl resume {job} --watch", job))
        j = self.server.job(job)
        # The example reports its length (report(total=...)): the job's
        # max_steps, whence watch's bar and ETA.
        self.assertEqual((j["state"], j["attempt"], j["step"], j["max_steps"]), ("SUCCEEDED", 2, 1000, 1000), j)
        self.assertTrue(any("resum" in e["reason"] and path in e["reason"] for e in j["events"]), j["events"])
        # Ended, it leaves the list; its checkpoint stays on disk.
        self.assertIn(f"{job}: deleted", self.type(f"trainctl delete {job}", job))
        self.assertNotIn(job, self.type("trainctl list", None))
        self.assertTrue(os.path.isdir(path), path)


if __name__ == "__main__":
    e2e_test.BIN = os.path.abspath(sys.argv.pop(1))
    test_clock.main()
