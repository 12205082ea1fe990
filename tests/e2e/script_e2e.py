"""Script jobs end to end: a real trainyard-server runs the Accelerate script
of examples/accelerate_script/ (the venv's torch and accelerate) as a 2-rank
job — steps on /metrics, `trainctl checkpoint` honoured, kill -9 of one
rank's Python → the group restarts and the script resumes from its
checkpoint, ending with the same weights as an uninterrupted run (bit for
bit, CPU) — and scripts that fail: a Python error, a Python that does not
exist, a script that ends without reporting.

    python3 tests/e2e/script_e2e.py build/bin
"""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_test  # noqa: E402
from e2e_test import Server, read, wait_for, write_spec  # noqa: E402
import test_clock  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PYTHON = os.environ.get("TRAINYARD_PYTHON", "")
# The venv's own files (Accelerate's test scripts) may be job scripts too:
# the venv lives outside the checkout (scripts/pyenv.sh).
VENV = os.path.realpath(os.path.dirname(os.path.dirname(PYTHON))) if PYTHON else REPO
SCRIPT = os.path.join(REPO, "examples", "accelerate_script", "train.py")
ACCELERATE_CONFIG = os.path.join(REPO, "examples", "accelerate_script", "cpu.yaml")


def job_spec(name, steps, extra_args=(), sleep=0.0):
    args = ["--steps", str(steps), "--step-sleep", str(sleep), *extra_args]
    return (f"name: {name}\nscript:\n  path: {SCRIPT}\n  python: {PYTHON}\n  args: {json.dumps(args)}\n"
            "num_processes: 2\nddp: {comm_hook: fp16}\nmax_restarts: 2\nmetrics_every_steps: 1\n")


def free_port():
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def script_pids(job_id):
    """The Python processes of a job's ranks (children of its workers)."""
    out = subprocess.run(["pgrep", "-f", f"trainyard-worker --job {job_id} "], capture_output=True, text=True)
    pids = []
    for worker in out.stdout.split():
        kids = subprocess.run(["pgrep", "-P", worker], capture_output=True, text=True).stdout.split()
        pids.extend(int(k) for k in kids)
    return pids


class ScriptJobs(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="trainyard-script-e2e-")
        cls.server = Server(cls.tmp.name, extra=("--allowed-root", cls.tmp.name, "--allowed-root", REPO,
                                                 "--allowed-root", VENV))

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        cls.tmp.cleanup()

    def submit(self, name, text, accelerate=True):
        s = self.server
        spec = write_spec(self.tmp.name, name + ".yaml", text)
        args = ["-o", "json", "submit", spec] + (["--accelerate-config", ACCELERATE_CONFIG] if accelerate else [])
        r = s.ctl(*args)
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout)["id"]

    def finish(self, job_id, want="SUCCEEDED"):
        r = self.server.ctl("watch", job_id, timeout=600)
        job = self.server.job(job_id)
        self.assertEqual(job["state"], want, f"{job.get('reason')}\n{self.server.ctl('logs', job_id).stdout[-3000:]}")
        return job

    def test_1_accelerate_script_with_checkpoint_kill_and_resume(self):
        s = self.server
        # The uninterrupted run.
        ref_weights = os.path.join(self.tmp.name, "ref.safetensors")
        ref = self.submit("ref", job_spec("ref", 120, ["--save-weights", ref_weights]))
        self.finish(ref)

        weights = os.path.join(self.tmp.name, "run.safetensors")
        job_id = self.submit("run", job_spec("run", 120, ["--save-weights", weights], sleep=0.05))
        wait_for(lambda: s.job(job_id)["step"] >= 5, 180, "the script's fifth reported step")
        # Its steps are on /metrics, per rank.
        text = s.scrape()
        for rank in (0, 1):
            self.assertRegex(text, r'trainyard_job_step\{job_id="%s",rank="%d"\} \d+' % (job_id, rank))
        sps = [float(m.group(1)) for m in re.finditer(
            r'trainyard_job_samples_per_second\{job_id="%s",rank="\d"\} (\S+)' % job_id, text)]
        self.assertTrue(sps and all(v > 0 for v in sps), sps)
        # Every rank's Python stack (py-spy), with the step it reported last.
        d = s.ctl("-o", "json", "diagnose", job_id, "--wait", "20", timeout=120)
        self.assertEqual(d.returncode, 0, d.stderr)
        ranks = json.loads(d.stdout)["ranks"]
        self.assertEqual(sorted(r["rank"] for r in ranks), [0, 1], d.stdout)
        for r in ranks:
            self.assertIn("train.py", r["python_stack"], r)
            self.assertGreater(r["step"], 0, r)
        # A checkpoint on request.
        r = s.ctl("-o", "json", "checkpoint", job_id, "--wait", timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        listed = json.loads(s.ctl("-o", "json", "checkpoints", job_id).stdout)
        self.assertTrue(any(c["trigger"] == "request" and c["ok"] for c in listed), listed)
        saved_at = max(c["step"] for c in listed if c["ok"])
        # kill -9 one rank's Python: the group restarts from that checkpoint.
        wait_for(lambda: s.job(job_id)["step"] >= saved_at + 3, 180, "steps after the checkpoint")
        victims = script_pids(job_id)
        self.assertEqual(len(victims), 2, victims)
        os.kill(victims[1], signal.SIGKILL)
        job = self.finish(job_id)
        self.assertEqual(job["attempt"], 2, job)
        events = " | ".join(e["reason"] for e in job["events"])
        self.assertIn("killed by signal 9", events)
        self.assertIn("the script resumes from", events)
        # The example reports its length (trainyard.report(total=...)): that,
        # and nothing the server made up, is the job's max_steps.
        self.assertEqual(job["max_steps"], 120, "the script's own length, as it reported it")
        shown = s.ctl("get", job_id).stdout
        self.assertRegex(shown, r"step: +%d / 120\n" % job["step"], "the script's own total")
        got, want = read_bytes(weights), read_bytes(ref_weights)
        self.assertEqual(got, want, "the resumed run ends with the uninterrupted run's weights, bit for bit")

    def test_3_the_coordinator_restarts_while_a_script_trains(self):
        # --on-shutdown detach: the workers, and their scripts, keep training
        # and reattach to the next coordinator on the same address.
        state = os.path.join(self.tmp.name, "restart")
        os.makedirs(state)
        port = free_port()
        extra = ("--on-shutdown", "detach", "--allowed-root", self.tmp.name, "--allowed-root", REPO)
        s = Server(state, listen=f"127.0.0.1:{port}", extra=extra)
        try:
            spec = write_spec(state, "restart.yaml", job_spec("restart", 200, sleep=0.03))
            r = s.ctl("-o", "json", "submit", spec, "--accelerate-config", ACCELERATE_CONFIG)
            self.assertEqual(r.returncode, 0, r.stderr)
            job_id = json.loads(r.stdout)["id"]
            wait_for(lambda: s.job(job_id)["step"] >= 10, 180, "the script to train")
            pids = script_pids(job_id)
            self.assertEqual(s.stop(), 0)
            self.assertTrue(all(os.path.exists(f"/proc/{p}") for p in pids), "the scripts go on")
            s = Server(state, listen=f"127.0.0.1:{port}", extra=extra)
            r = s.ctl("watch", job_id, timeout=600)
            job = s.job(job_id)
            self.assertEqual(job["state"], "SUCCEEDED", job.get("reason"))
            self.assertEqual(job["attempt"], 1, "no restart: the same attempt reattached")
            self.assertEqual(job["step"], 200)
        finally:
            s.stop()

    def test_4_accelerates_own_distributed_test_scripts(self):
        # accelerate/test_utils/scripts: each one `accelerate launch` runs to
        # success on this machine (2 processes, torchrun) succeeds as a job.
        scripts_dir = subprocess.run([PYTHON, "-c", "import accelerate.test_utils.scripts as s, os; "
                                      "print(os.path.dirname(s.__file__))"],
                                     check=True, capture_output=True, text=True).stdout.strip()
        config = write_spec(self.tmp.name, "torchrun.yaml", "compute_environment: LOCAL_MACHINE\n"
                            "distributed_type: MULTI_GPU\nnum_machines: 1\nnum_processes: 2\nmixed_precision: 'no'\n")
        accelerate = os.path.join(os.path.dirname(PYTHON), "accelerate")
        ran, skipped = [], []
        # Not test_script.py: with no GPU, Accelerate runs each process of a
        # MULTI_GPU config as DistributedType.NO, and its main-process check
        # then has both processes write, read and delete one file in the
        # working directory: a race under `accelerate launch` as here.
        for name in ("test_ops.py", "test_sync.py", "test_distributed_data_loop.py", "test_ddp_comm_hook.py"):
            script = os.path.join(scripts_dir, name)
            r = subprocess.run([accelerate, "launch", "--config_file", config, "--num_processes", "2", script],
                               capture_output=True, text=True, timeout=600)
            if r.returncode != 0:
                skipped.append(f"{name} (accelerate launch: exit {r.returncode})")
                continue
            spec = write_spec(self.tmp.name, f"accel-{name}.yaml",
                              f"name: accel-{name[:-3]}\nscript: {{path: {script}, python: {PYTHON}}}\n"
                              "num_processes: 2\n")
            r = self.server.ctl("-o", "json", "submit", spec, "--accelerate-config", config)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.finish(json.loads(r.stdout)["id"])
            ran.append(name)
        print(f"accelerate's test scripts as jobs: {ran}; not run by accelerate launch here: {skipped}")
        self.assertTrue(ran, f"accelerate launch ran none of them here: {skipped}")

    def test_5_the_torchrun_example(self):
        # examples/torchrun_script: plain torch.distributed + DDP, no
        # Accelerate. It runs under torchrun as it is, and as a job from its
        # own spec (a shorter run), checkpoints registered on the way.
        example = os.path.join(REPO, "examples", "torchrun_script")
        script = os.path.join(example, "train.py")
        torchrun = os.path.join(os.path.dirname(PYTHON), "torchrun")
        r = subprocess.run([torchrun, "--nproc_per_node", "2", "--master_port", str(free_port()), script,
                            "--steps", "5"], capture_output=True, text=True, timeout=300,
                           env=dict(os.environ, PYTHONPATH=os.path.join(REPO, "python")))
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        with open(os.path.join(example, "job.yaml")) as f:
            text = f.read()
        text = text.replace("path: examples/torchrun_script/train.py", f"path: {script}\n  python: {PYTHON}")
        text = text.replace('[--steps, "300", --checkpoint-every, "100"]', '[--steps, "40", --checkpoint-every, "20"]')
        self.assertIn('"40"', text, "the example's spec changed: update this test")
        job_id = self.submit("torchrun-example", text, accelerate=False)
        job = self.finish(job_id)
        self.assertEqual(job["step"], 40, job)
        listed = json.loads(self.server.ctl("-o", "json", "checkpoints", job_id).stdout)
        self.assertEqual(sorted(c["step"] for c in listed if c["ok"]), [20, 40], listed)
        for c in listed:
            self.assertTrue(os.path.exists(os.path.join(c["path"], "state.pt")), c)

    def test_6_one_request_one_checkpoint(self):
        # Issue 64: one `trainctl checkpoint` made a script save at every
        # step after it. Both examples, asked twice while they train (20 ms a
        # step), then cancelled: two checkpoints, one per request.
        torchrun = os.path.join(REPO, "examples", "torchrun_script", "train.py")
        runs = {
            "accelerate": (job_spec("once-accelerate", 100000, sleep=0.02), True),
            "torchrun": (f"name: once-torchrun\nscript:\n  path: {torchrun}\n  python: {PYTHON}\n"
                         "  args: [--steps, '100000', --step-sleep, '0.02']\nnum_processes: 2\n"
                         "metrics_every_steps: 1\n", False),
        }
        s = self.server
        for kind, (spec, accelerate) in runs.items():
            with self.subTest(kind):
                job_id = self.submit("once-" + kind, spec, accelerate=accelerate)
                try:
                    self.asked_twice(job_id, kind)
                finally:
                    s.ctl("cancel", job_id)  # its slots, for the next run, should an assertion fail
                got = json.loads(s.ctl("-o", "json", "checkpoints", job_id).stdout)
                self.assertEqual(len(got), 2, [(c["trigger"], c["step"]) for c in got])
                self.assertEqual(len({c["path"] for c in got}), 2, got)
                for c in got:
                    self.assertTrue(os.path.isdir(c["path"]), c)

    def asked_twice(self, job_id, kind):
        s = self.server
        wait_for(lambda: s.job(job_id)["step"] >= 3, 180, "the script's first steps")

        def listed():
            return json.loads(s.ctl("-o", "json", "checkpoints", job_id).stdout)

        for n in (1, 2):
            r = s.ctl("checkpoint", job_id, "--wait", timeout=300)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            saved_at = max(c["step"] for c in listed())
            wait_for(lambda: s.job(job_id)["step"] >= saved_at + 20, 60, "20 steps after the checkpoint")
            got = listed()
            self.assertEqual([(c["trigger"], c["ok"]) for c in got], [("request", True)] * n,
                             f"{kind}: {n} request(s), one checkpoint each: {[c['step'] for c in got]}")

    def test_7_a_request_right_after_submit_waits_for_the_import(self):
        # Issue 64, "Annoying 1": the script imports torch and Accelerate
        # (seconds) before it gets to `import trainyard`; a request that
        # comes in between waits for it instead of being refused.
        s = self.server
        job_id = self.submit("early", job_spec("early", 100000, sleep=0.02))
        self.addCleanup(s.ctl, "cancel", job_id)
        r = s.ctl("checkpoint", job_id, "--wait", "--wait-timeout", "120", timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        listed = json.loads(s.ctl("-o", "json", "checkpoints", job_id).stdout)
        self.assertEqual([(c["trigger"], c["ok"]) for c in listed], [("request", True)], listed)
        r = s.ctl("cancel", job_id)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_2_failures_name_what_is_wrong(self):
        broken = write_spec(self.tmp.name, "broken.py", "import trainyard\nraise ValueError('bad learning rate')\n")
        job_id = self.submit("broken", f"name: broken\nscript: {{path: {broken}, python: {PYTHON}}}\n"
                                       "num_processes: 2\n", accelerate=False)
        job = self.finish(job_id, "FAILED")
        self.assertIn("ValueError: bad learning rate", job["reason"])
        self.assertIn("broken.py", job["reason"])

        nopython = write_spec(self.tmp.name, "ok.py", "print('hello')\n")
        job_id = self.submit("nopython", f"name: nopython\nscript: {{path: {nopython}, python: /nonexistent/python9}}\n"
                                         "num_processes: 1\nmax_restarts: 3\n", accelerate=False)
        job = self.finish(job_id, "FAILED")
        self.assertIn("/nonexistent/python9", job["reason"])
        self.assertEqual(job["attempt"], 1, "a usage error is not retried")

        silent = write_spec(self.tmp.name, "silent.py", "print('done')\n")
        job_id = self.submit("silent", f"name: silent\nscript: {{path: {silent}, python: {PYTHON}}}\n"
                                       "num_processes: 1\n", accelerate=False)
        job = self.finish(job_id)
        self.assertTrue(any("without reporting a step" in e["reason"] for e in job["events"]), job["events"])

        r = self.server.ctl("submit", write_spec(self.tmp.name, "escape.yaml",
                                                 "name: escape\nscript: {path: /etc/passwd}\n"))
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("script.path", r.stderr)


SCRIPTS = os.path.join(REPO, "tests", "e2e", "scripts")


class ScriptsAsWritten(unittest.TestCase):
    """Scripts that never import trainyard, as people bring them."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="trainyard-scripts-as-written-")
        cls.server = Server(cls.tmp.name, extra=("--allowed-root", cls.tmp.name, "--allowed-root", REPO))

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        cls.tmp.cleanup()

    def submit(self, name, script, args, num_processes=1, extra=""):
        spec = write_spec(self.tmp.name, name + ".yaml",
                          f"name: {name}\nscript:\n  path: {script}\n  python: {PYTHON}\n  args: {json.dumps(args)}\n"
                          f"num_processes: {num_processes}\n{extra}")
        r = self.server.ctl("-o", "json", "submit", spec)
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout)["id"]

    def ended(self, job_id, want, timeout=300):
        state = wait_for(lambda: (lambda st: st if st in ("SUCCEEDED", "FAILED", "CANCELLED") else None)(
            self.server.job(job_id)["state"]), timeout, f"{job_id} to end")
        job = self.server.job(job_id)
        self.assertEqual(state, want, f"{job.get('reason')}\n{self.server.ctl('logs', job_id).stdout[-3000:]}")
        return job

    def log(self, job_id, *args):
        r = self.server.ctl("logs", job_id, *args)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout

    def test_accelerate_without_a_config_is_one_multi_cpu_group(self):
        out = tempfile.mkdtemp(dir=self.tmp.name)
        job_id = self.submit("noconfig", os.path.join(SCRIPTS, "accelerate_no_config.py"), [out], num_processes=2)
        self.ended(job_id, "SUCCEEDED")
        for rank in (0, 1):
            self.assertIn("distributed_type=DistributedType.MULTI_CPU processes=2",
                          self.log(job_id, "--rank", str(rank)))
        hashes = [read(os.path.join(out, f"rank{r}.sha")) for r in (0, 1)]
        self.assertEqual(hashes[0], hashes[1], "the ranks started from different weights and did not end equal")

    def test_requests_a_script_cannot_honour_are_answered(self):
        job_id = self.submit("plain", os.path.join(SCRIPTS, "plain_loop.py"), ["120"])
        wait_for(lambda: "step 3" in self.server.ctl("logs", job_id).stdout, 60, "the script's first steps")
        t0 = time.monotonic()
        r = self.server.ctl("checkpoint", job_id, "--wait", "--wait-timeout", "60")
        self.assertLess(time.monotonic() - t0, 10, "a checkpoint request the script cannot hear is answered at once")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("FAILED_PRECONDITION: no checkpoint: the script has not imported trainyard", r.stderr)
        self.assertIn("trainyard.checkpoint_requested()", r.stderr + r.stdout)
        t0 = time.monotonic()
        r = self.server.ctl("cancel", "--checkpoint", job_id)
        self.assertEqual(r.returncode, 0, r.stderr)
        job = self.ended(job_id, "CANCELLED", timeout=30)
        self.assertLess(time.monotonic() - t0, 15, "the cancel waited for the script")
        self.assertTrue(any("cannot save on request" in e["reason"] for e in job["events"]), job["events"])

    def test_restarts_say_where_they_start_and_the_scripts_own_checkpoint_resumes(self):
        out = tempfile.mkdtemp(dir=self.tmp.name)
        job_id = self.submit("owncheckpoints", os.path.join(SCRIPTS, "resume_wrapper.py"), [out, "80"],
                             extra="max_restarts: 2\n")
        wait_for(lambda: "iter 35:" in self.server.ctl("logs", job_id).stdout, 60, "iteration 35")
        pids = script_pids(job_id)
        self.assertEqual(len(pids), 1, pids)
        os.kill(pids[0], signal.SIGKILL)
        # Follow the second attempt's log from its start to the job's end.
        wait_for(lambda: self.server.job(job_id)["attempt"] == 2, 60, "the restart")
        follower = subprocess.Popen([os.path.join(e2e_test.BIN, "trainctl"), "--server", self.server.addr, "logs",
                                     job_id, "-f"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        job = self.ended(job_id, "SUCCEEDED")
        followed, err = follower.communicate(timeout=30)
        self.assertEqual(follower.returncode, 0, err)
        self.assertIn("iter 79:", followed, "-f printed the log to the job's end")
        restarts = [e["reason"] for e in job["events"] if e["reason"].startswith("restart 1 of 2")]
        self.assertEqual(len(restarts), 1, job["events"])
        self.assertIn("no registered checkpoint: the script starts fresh (TORCHELASTIC_RESTART_COUNT=1)", restarts[0])
        self.assertIn("killed by signal 9", restarts[0])
        # The recipe resumed from the script's own checkpoint, not from 0.
        second = self.log(job_id)
        self.assertRegex(second, r"starting at iter [1-9]0\b")
        self.assertNotIn("starting at iter 0", second)
        first = self.log(job_id, "--attempt", "1")
        self.assertIn("starting at iter 0", first)
        self.assertIn("iter 35:", first)
        self.assertNotIn("iter 79:", first)
        both = self.log(job_id, "--all-attempts")
        self.assertIn("==> attempt 1, rank 0", both)
        self.assertIn("==> attempt 2, rank 0", both)
        self.assertEqual(self.log(job_id, "--tail", "1").strip().splitlines()[-1:],
                         [l for l in second.strip().splitlines()][-1:])
        self.assertEqual(len(self.log(job_id, "--tail", "3").strip().splitlines()), 3)
        r = self.server.ctl("logs", job_id, "--attempt", "3")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("attempt", r.stderr)

    def test_the_exception_raised_is_the_reason(self):
        job_id = self.submit("record", os.path.join(SCRIPTS, "record_error.py"), [])
        job = self.ended(job_id, "FAILED")
        self.assertIn("RuntimeError: boom from main", job["reason"])

    def test_a_missing_script_is_refused_at_submit(self):
        missing = os.path.join(self.tmp.name, "no_such_train.py")
        spec = write_spec(self.tmp.name, "missing.yaml", f"name: missing\nscript: {{path: {missing}}}\n")
        r = self.server.ctl("submit", spec)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("script.path", r.stderr)
        self.assertIn("does not exist", r.stderr)


class PythonClient(unittest.TestCase):
    """trainyard.Client (the package beside the binaries, with the messages
    the build generated) against a live server: submit -> SUCCEEDED, get,
    list, logs, checkpoints, and an error with its code."""

    def test_submit_watch_list_logs(self):
        sys.path.insert(0, os.path.join(os.path.dirname(e2e_test.BIN), "python"))
        import trainyard
        with tempfile.TemporaryDirectory(prefix="trainyard-client-") as tmp:
            server = Server(tmp)
            try:
                with trainyard.Client(server.addr) as c:
                    job = c.submit("name: from-python\nmodel: {kind: mlp, hidden: [16]}\nmax_steps: 30\n"
                                   "num_processes: 1\ndistributed_type: NO\n")
                    self.assertEqual(job["state"] in ("QUEUED", "STARTING"), True, job)
                    states = [u["job"]["state"] for u in c.watch(job["id"]) if "job" in u]
                    self.assertEqual(states[-1], "SUCCEEDED", states)
                    got = c.get(job["id"])
                    self.assertEqual(got["step"], 30, got)  # int64 fields as ints, not proto JSON strings
                    self.assertIn(job["id"], [j["id"] for j in c.list()])
                    self.assertEqual([j["id"] for j in c.list(states=["RUNNING"])], [])
                    self.assertIn("done at step 30 (30 steps this attempt)", c.logs(job["id"], rank=0))
                    self.assertEqual([ck["trigger"] for ck in c.checkpoints(job["id"])], ["final"])
                    with self.assertRaises(trainyard.TrainyardError) as e:
                        c.get("job-nope")
                    self.assertEqual(e.exception.code, "NOT_FOUND")
            finally:
                server.stop()


# Variables that differ between any two launches, or that only one side sets
# for its own bookkeeping: the port (each launch picks its own), torchrun's
# run id and error file, and Trainyard's own (TRAINYARD_*, PYTHONPATH).
VOLATILE = {"MASTER_PORT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_ERROR_FILE", "PYTHONPATH"}
# Different by design: torchrun's agent hosts the rendezvous store its
# workers connect to (True); a script job's rank 0 serves it (False).
BY_DESIGN = {"TORCHELASTIC_USE_AGENT_STORE": ("True", "False")}


def covering(names):
    """Of the configs TYPE-PRECISION, each distributed type once, the mixed
    precisions in turn: every type and every precision is launched, in 8
    configs, not 24. The variables are Accelerate's own launcher code's
    (worker/script/accelerate_env.h), which takes the precision the same
    way for every type: what is checked here is that each config's keys
    reach it."""
    types = list(dict.fromkeys(n.rsplit("-", 1)[0] for n in names))
    precisions = list(dict.fromkeys(n.rsplit("-", 1)[1] for n in names))
    return [f"{t}-{precisions[i % len(precisions)]}" for i, t in enumerate(types)]


class EnvironmentParity(unittest.TestCase):
    """For each distributed type `accelerate config` writes, under each mixed
    precision in turn, that `accelerate launch` accepts here, a script job's
    ranks get the variables `accelerate launch --config_file F
    --num_processes 2` gives, with the same values."""

    def test_each_distributed_type_and_precision(self):
        with tempfile.TemporaryDirectory(prefix="trainyard-env-parity-") as tmp:
            server = Server(tmp, extra=("--allowed-root", tmp, "--allowed-root", REPO))
            try:
                self.compare_all(tmp, server)
            finally:
                server.stop()

    def compare_all(self, tmp, server):
        configs = os.path.join(tmp, "configs")
        written = subprocess.run([PYTHON, os.path.join(REPO, "tests", "fixtures", "accelerate_configs.py"), configs],
                                 check=True, capture_output=True, text=True).stdout.split()
        names = covering(written)
        dump = os.path.join(REPO, "tests", "fixtures", "dump_env.py")
        accelerate = os.path.join(os.path.dirname(PYTHON), "accelerate")
        compared, refused = [], []
        parent = dict(os.environ)

        # accelerate launch of every config, one at a time (two would race
        # for its default rendezvous port, 29500), for the reference
        # environments, while the server runs the same configs' jobs.
        def reference(name):
            config = os.path.join(configs, name + ".yaml")
            theirs_dir = os.path.join(tmp, "theirs", name)
            launch = [accelerate, "launch", "--config_file", config, "--num_processes", "2", dump, theirs_dir]
            r = subprocess.run(launch, capture_output=True, text=True, timeout=300, env=parent)
            return r.returncode == 0 and os.path.isdir(theirs_dir)

        jobs = {}
        for name in names:
            config = os.path.join(configs, name + ".yaml")
            spec = write_spec(tmp, name + "-job.yaml",
                              f"name: parity-{name}\nscript: {{path: {dump}, python: {PYTHON}, "
                              f"args: [{os.path.join(tmp, 'ours', name)}]}}\nnum_processes: 2\n")
            sub = server.ctl("-o", "json", "submit", spec, "--accelerate-config", config)
            self.assertEqual(sub.returncode, 0, f"{name}: {sub.stderr}")
            jobs[name] = json.loads(sub.stdout)["id"]
        launched = {name: reference(name) for name in names}
        for name in names:
            theirs_dir, ours_dir = os.path.join(tmp, "theirs", name), os.path.join(tmp, "ours", name)
            job_id = jobs[name]
            if not launched[name]:  # nothing to compare with
                refused.append(name)
                server.ctl("cancel", job_id)
                continue
            server.ctl("watch", job_id, timeout=300)
            self.assertEqual(server.job(job_id)["state"], "SUCCEEDED", f"{name}: {server.job(job_id)['reason']}")
            for f in sorted(os.listdir(theirs_dir)):
                with open(os.path.join(theirs_dir, f)) as fh:
                    their = json.load(fh)
                with open(os.path.join(ours_dir, f)) as fh:
                    our = json.load(fh)
                added = {k: v for k, v in their.items() if parent.get(k) != v and k not in VOLATILE}
                wrong = {k: (v, our.get(k)) for k, v in added.items()
                         if our.get(k) != v and BY_DESIGN.get(k) != (v, our.get(k))}
                self.assertEqual(wrong, {}, f"{name} {f}: variable: (accelerate launch, Trainyard)")
            compared.append(name)
        print(f"environment parity: {len(compared)} configs compared ({', '.join(compared)}); "
              f"accelerate launch refused here: {', '.join(refused) or 'none'}")
        self.assertGreaterEqual(len(compared), 3, f"too few configs launched here: refused {refused}")


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


if __name__ == "__main__":
    if not PYTHON:
        print("script_e2e: TRAINYARD_PYTHON (the venv's python with torch and accelerate) is not set")
        sys.exit(1)
    e2e_test.BIN = os.path.abspath(sys.argv.pop(1))
    test_clock.main()
