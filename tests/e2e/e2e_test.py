"""End to end: a real trainyard-server, real workers and trainctl on loopback.

Run by ctest with the build's bin directory as the first argument. Ports are
chosen by the OS (port 0) and read back from the server's --ready-file.
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_clock  # noqa: E402

try:
    import grpc
except ImportError:  # Server, wait_for and write_spec need only trainctl (gpu_e2e.py on a GPU machine)
    grpc = None

BIN = None  # set from argv


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

def free_port():
    """A TCP port free on loopback now (for a server restarted on the same address)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(condition, timeout, what, detail=None):
    """Polls condition() until it is true; on timeout the error says what was
    awaited and, when given, what detail() says of the state then."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            more = f"\n{detail()}" if detail else ""
            raise AssertionError(f"timed out after {timeout}s waiting for {what}{more}")
        time.sleep(0.05)


class Server:
    def __init__(self, state_dir, slots=2, extra=(), listen="127.0.0.1:0", cwd=None):
        self.state_dir = state_dir
        if "--on-shutdown" not in extra:
            # A test's server stops its workers when it stops (the default,
            # detach, would leave them training for the next server).
            extra = (*extra, "--on-shutdown", "stop")
        self.ready = os.path.join(state_dir, "ready.json")
        if os.path.exists(self.ready):
            os.remove(self.ready)
        self.log = open(os.path.join(state_dir, "server.log"), "ab")
        # The workers' caches (the Accelerate environment of script jobs)
        # stay in the test's directory, not the user's home.
        self.cache_dir = os.path.join(state_dir, "cache")
        env = dict(os.environ, TRAINYARD_CACHE_DIR=self.cache_dir)
        self.proc = subprocess.Popen(
            [os.path.join(BIN, "trainyard-server"), "--listen", listen,
             "--metrics-listen", "127.0.0.1:0", "--state-dir", state_dir,
             *(() if "--http-listen" in extra else ("--http-listen", "127.0.0.1:0")),
             "--slots", str(slots), "--ready-file", self.ready, "--stop-grace-ms", "3000", *extra],
            stdout=self.log, stderr=subprocess.STDOUT, env=env, cwd=cwd)
        info = wait_for(lambda: self._read_ready(), 30, "the server's ready file")
        self.grpc_port = info["grpc_port"]
        self.metrics_port = info["metrics_port"]
        self.http_port = info["http_port"]
        self.addr = f"127.0.0.1:{self.grpc_port}"

    def _read_ready(self):
        if self.proc.poll() is not None:
            raise AssertionError(f"server exited with {self.proc.returncode}")
        try:
            with open(self.ready) as f:
                return json.load(f)
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def ctl(self, *args, timeout=300):
        return subprocess.run([os.path.join(BIN, "trainctl"), "--server", self.addr, *args],
                              capture_output=True, text=True, timeout=timeout)

    def job(self, job_id):
        r = self.ctl("-o", "json", "get", job_id)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    def scrape(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10) as resp:
            return resp.read().decode()

    def metric(self, name):
        """The value of an unlabelled series on /metrics (0 when absent)."""
        for line in self.scrape().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return 0.0

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=30)
        self.log.close()
        return self.proc.returncode


# A 1-slot job of the high class of priority_server: what takes room from
# lower-priority jobs (elastic_e2e, bench/elastic).
URGENT_JOB = """
name: urgent
model: {kind: mlp, hidden: [64]}
data: {kind: synthetic, batch_size: 16, num_samples: 480}
max_steps: 30
num_processes: 1
priority: high
"""


def priority_server(state_dir, slots):
    """A Server with priority classes low (0), normal (100) and high (1000),
    which come with a policy file, and so with tokens: an admin's, set in
    TRAINYARD_TOKEN (trainctl reads it). Preemption needs no minimum run time."""
    policy = write_spec(state_dir, "policy.yaml", "priority_classes: {low: 0, normal: 100, high: 1000}\n")
    os.environ["TRAINYARD_TOKEN"] = f"priority-admin-{os.getpid()}"
    token = write_spec(state_dir, "admin.token", os.environ["TRAINYARD_TOKEN"] + "\n")
    return Server(state_dir, slots=slots, extra=("--policy-file", policy, "--auth-token-file", token,
                                                 "--preemption-min-run-time-s", "0"))


def worker_pids(job_id):
    out = subprocess.run(["pgrep", "-f", f"trainyard-worker --job {job_id} "], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()]


def read(path):
    with open(path, errors="replace") as f:
        return f.read()


def write_spec(dir_, name, text):
    path = os.path.join(dir_, name)
    with open(path, "w") as f:
        f.write(text)
    return path


SMALL_JOB = """
name: e2e-small
model: {kind: mlp, hidden: [64]}
data: {kind: synthetic, batch_size: 32, num_samples: 4096}
optimizer: {kind: adamw, lr: 0.003}
max_steps: %d
num_processes: 2
metrics_every_steps: 5
"""


def submit_external(test, server, state, name, spec_text):
    """Submits a `launcher: external` job; returns its id and join info."""
    spec = write_spec(state, f"{name}.yaml", spec_text)
    r = server.ctl("-o", "json", "submit", spec)
    test.assertEqual(r.returncode, 0, r.stderr)
    job_id = json.loads(r.stdout)["id"]
    r = server.ctl("-o", "json", "join-info", job_id)
    test.assertEqual(r.returncode, 0, r.stderr)
    return job_id, json.loads(r.stdout)


def join_worker(server, job_id, token, rank, log_path):
    """Starts `trainyard-worker --join` as rank `rank`, its output in log_path."""
    with open(log_path, "wb") as log:
        return subprocess.Popen(
            [os.path.join(BIN, "trainyard-worker"), "--join", job_id, "--server", server.addr, "--rank", str(rank),
             "--advertise-addr", "127.0.0.1"],
            env=dict(os.environ, TRAINYARD_WORKER_TOKEN=token), stdout=log, stderr=subprocess.STDOUT)


class EndToEnd(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="trainyard-e2e-")
        cls.server = Server(cls.tmp.name)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        cls.tmp.cleanup()

    def run_to_success(self, spec):
        """Submits `spec`, watches it to the end; asserts SUCCEEDED and returns the job."""
        s = self.server
        r = s.ctl("-o", "json", "submit", spec)
        self.assertEqual(r.returncode, 0, r.stderr)
        job_id = json.loads(r.stdout)["id"]
        w = s.ctl("watch", job_id)
        self.assertEqual(w.returncode, 0, w.stdout + w.stderr + s.ctl("logs", job_id).stdout)
        job = s.job(job_id)
        self.assertEqual(job["state"], "SUCCEEDED")
        return job

    def test_1_ddp_job_succeeds_with_metrics(self):
        s = self.server
        spec = write_spec(self.tmp.name, "small.yaml", SMALL_JOB % 2000 + "max_grad_norm: 1000.0\n")
        r = s.ctl("-o", "json", "submit", spec)
        self.assertEqual(r.returncode, 0, r.stderr)
        job_id = json.loads(r.stdout)["id"]
        wait_for(lambda: s.job(job_id)["step"] > 0 or s.job(job_id)["state"] in ("SUCCEEDED", "FAILED"),
                 120, "the first reported step")
        self.assertEqual(s.job(job_id)["state"], "RUNNING", s.job(job_id))
        # While it runs, /metrics carries its throughput per rank.
        text = s.scrape()
        lines = [l for l in text.splitlines()
                 if l.startswith("trainyard_job_samples_per_second{") and f'job_id="{job_id}"' in l]
        self.assertEqual(len(lines), 2, text)
        self.assertTrue(all(float(l.rsplit(" ", 1)[1]) > 0 for l in lines), lines)
        self.assertIn('trainyard_jobs{state="RUNNING"} 1', text)
        # The gradient norm before clipping, per rank: DDP's averaged gradients
        # are the same on both ranks, so are their norms at the same step.
        norms = {}
        for l in text.splitlines():
            m = re.match(r'trainyard_job_grad_norm\{job_id="%s",rank="(\d)"\} (\S+)' % job_id, l)
            if m:
                norms[m.group(1)] = float(m.group(2))
        self.assertEqual(sorted(norms), ["0", "1"], text)
        self.assertTrue(all(0 < v < 1000 for v in norms.values()), norms)

        w = s.ctl("watch", job_id)
        self.assertEqual(w.returncode, 0, w.stdout + w.stderr)
        self.assertIn("SUCCEEDED", w.stdout)
        self.assertIn("samples/s", w.stdout)
        job = s.job(job_id)
        self.assertEqual(job["state"], "SUCCEEDED")
        self.assertEqual(job["step"], 2000)
        self.assertLess(job["loss"], job["first_loss"], job)
        self.assertEqual([e["state"] for e in job["events"]],
                         ["QUEUED", "STARTING", "RUNNING", "RUNNING", "SUCCEEDED"])
        # The final model as a FULL checkpoint, recorded as an event and listed.
        self.assertIn("final checkpoint 0 at step 2000", job["events"][3]["reason"])
        listed = json.loads(s.ctl("-o", "json", "checkpoints", job_id).stdout)
        self.assertEqual([(c["index"], c["step"], c["type"], c["trigger"]) for c in listed],
                         [(0, 2000, "full", "final")])
        self.assertTrue(os.path.isfile(os.path.join(listed[0]["path"], "model.safetensors")))
        # Series of an ended job are removed.
        self.assertNotIn(f'job_id="{job_id}"', s.scrape())
        logs = s.ctl("logs", job_id, "--rank", "1")
        self.assertEqual(logs.returncode, 0, logs.stderr)
        self.assertIn("rank 1: done at step 2000 (2000 steps this attempt)", logs.stdout)
        self.assertEqual(worker_pids(job_id), [])

    def test_2_cancel_running_job(self):
        s = self.server
        spec = write_spec(self.tmp.name, "long.yaml", SMALL_JOB % 10_000_000)
        r = s.ctl("-o", "json", "submit", spec)
        self.assertEqual(r.returncode, 0, r.stderr)
        job_id = json.loads(r.stdout)["id"]
        wait_for(lambda: s.job(job_id)["step"] > 10, 120, "the long job to train")
        self.assertEqual(len(worker_pids(job_id)), 2)
        c = s.ctl("cancel", job_id)
        self.assertEqual(c.returncode, 0, c.stdout + c.stderr)
        self.assertIn("CANCELLED", c.stdout)
        self.assertEqual(s.job(job_id)["state"], "CANCELLED")
        self.assertEqual(worker_pids(job_id), [])

    def test_2b_fsdp_gpt_job(self):
        spec = write_spec(self.tmp.name, "fsdp.yaml", """
name: e2e-fsdp
model: {kind: gpt, layers: 2, width: 32, heads: 4, context: 16, vocab: 64}
data: {kind: synthetic, batch_size: 4, num_samples: 2000}
optimizer: {kind: adamw, lr: 0.003}
max_steps: 60
num_processes: 2
distributed_type: FSDP
fsdp_config: {fsdp_sharding_strategy: 1, fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP,
              fsdp_transformer_layer_cls_to_wrap: Block}
""")
        job = self.run_to_success(spec)
        self.assertEqual(job["spec"]["fsdp_config"]["fsdp_sharding_strategy"], "FULL_SHARD")
        self.assertLess(job["loss"], job["first_loss"], job)

    def test_2bb_torchscript_attention_exported_by_current_torch(self):
        # A module with F.scaled_dot_product_attention, LayerNorm, GELU and a
        # buffer, scripted by the torch the worker is built against, trains
        # through the server under DDP on 2 ranks.
        python = os.environ.get("TRAINYARD_PYTHON")
        self.assertTrue(python, "TRAINYARD_PYTHON (the Python whose torch the worker uses) must be set")
        pt = os.path.join(self.tmp.name, "attention.pt")
        subprocess.run([python, os.path.join(REPO,
                                             "examples", "export_attention.py"), pt], check=True,
                       capture_output=True)
        spec = write_spec(self.tmp.name, "attention.yaml", """
name: e2e-attention
model: {kind: 'torchscript:%s', input_size: 784}
data: {kind: synthetic, batch_size: 16, num_samples: 1024}
optimizer: {kind: adamw, lr: 0.003}
max_steps: 80
num_processes: 2
""" % pt)
        job = self.run_to_success(spec)
        self.assertLess(job["loss"], job["first_loss"], job)

    def test_2c_remote_checkpoints_cancel_with_checkpoint_and_resume(self):
        s = self.server
        spec = write_spec(self.tmp.name, "ckpt.yaml", SMALL_JOB % 10_000_000)
        r = s.ctl("-o", "json", "submit", spec)
        self.assertEqual(r.returncode, 0, r.stderr)
        job_id = json.loads(r.stdout)["id"]
        wait_for(lambda: s.job(job_id)["step"] > 10, 120, "the job to train")
        paths = []
        for kind in ("sharded", "full"):
            c = s.ctl("checkpoint", job_id, "--type", kind, "--wait")
            self.assertEqual(c.returncode, 0, c.stdout + c.stderr)
            path = c.stdout.strip()
            self.assertTrue(os.path.isfile(os.path.join(path, "manifest.json")), path)
            paths.append(path)
        self.assertTrue(os.path.isfile(os.path.join(paths[0], "sharded_index.json")))
        self.assertTrue(os.path.isfile(os.path.join(paths[1], "model.safetensors")))
        # Training goes on after a checkpoint.
        step = s.job(job_id)["step"]
        wait_for(lambda: s.job(job_id)["step"] > step + 20, 60, "training to continue")
        self.assertEqual(s.job(job_id)["state"], "RUNNING")
        text = s.scrape()
        self.assertIn(f'trainyard_job_last_checkpoint_step{{job_id="{job_id}"}}', text)
        self.assertIn('trainyard_checkpoints_total{result="ok",type="sharded"}', text)

        c = s.ctl("cancel", job_id, "--checkpoint")
        self.assertEqual(c.returncode, 0, c.stdout + c.stderr)
        job = s.job(job_id)
        self.assertEqual(job["state"], "CANCELLED")
        listed = json.loads(s.ctl("-o", "json", "checkpoints", job_id).stdout)
        self.assertEqual([(c["type"], c["trigger"], c["ok"]) for c in listed],
                         [("sharded", "request", True), ("full", "request", True), ("full", "cancel", True)])
        self.assertEqual([c["path"] for c in listed[:2]], paths)
        last = listed[-1]
        self.assertEqual(last["step"], job["step"])
        self.assertEqual(worker_pids(job_id), [])

        # Resume from the latest checkpoint on one process (was two).
        r = s.ctl("resume", job_id, "--num-processes", "1")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        wait_for(lambda: s.job(job_id)["state"] == "RUNNING" and s.job(job_id)["step"] > last["step"], 120,
                 "the resumed job to train past its checkpoint")
        job = s.job(job_id)
        self.assertEqual(job["attempt"], 2)
        self.assertEqual(job["num_processes"], 1)
        log = s.ctl("logs", job_id).stdout
        self.assertIn(f"resumed from {last['path']} at step {last['step']}", log)
        self.assertEqual(s.ctl("cancel", job_id).returncode, 0)

        # A resume source outside the allowed roots is refused.
        r = s.ctl("resume", job_id, "--from", "/etc")
        self.assertEqual(r.returncode, 2)
        self.assertIn("outside the allowed roots", r.stderr)
        # Only running jobs checkpoint.
        r = s.ctl("checkpoint", job_id)
        self.assertEqual(r.returncode, 2)
        self.assertIn("FAILED_PRECONDITION", r.stderr)

    def test_2d_worker_killed_during_a_checkpoint_write(self):
        s = self.server
        spec = write_spec(self.tmp.name, "crash.yaml", """
name: e2e-crash
model: {kind: mlp, hidden: [2048, 2048]}
data: {kind: synthetic, batch_size: 8, num_samples: 4096}
max_steps: 10000000
num_processes: 2
checkpoint: {every_steps: 1, total_limit: 2}
""")
        r = s.ctl("-o", "json", "submit", spec)
        self.assertEqual(r.returncode, 0, r.stderr)
        job_id = json.loads(r.stdout)["id"]
        root = os.path.join(self.tmp.name, "jobs", job_id, "checkpoints")

        def writing():
            # A staging directory with data in it, after a complete checkpoint.
            try:
                names = os.listdir(root)
            except FileNotFoundError:
                return None
            if not any(n.startswith("checkpoint_") for n in names):
                return None
            for n in names:
                if n.startswith(".staging-checkpoint_"):
                    d = os.path.join(root, n)
                    try:
                        if any(os.path.getsize(os.path.join(d, f)) > 1 << 20 for f in os.listdir(d)):
                            return n
                    except FileNotFoundError:
                        pass
            return None

        # Freeze the workers while a write is under way (SIGSTOP), make sure
        # it still is, then kill -9 them; if the write completed in between,
        # let them go on and try again.
        deadline = time.monotonic() + 120
        while True:
            self.assertLess(time.monotonic(), deadline, "never caught a checkpoint write in progress")
            staging = wait_for(writing, 120, "a checkpoint write in progress")
            pids = worker_pids(job_id)
            self.assertEqual(len(pids), 2)
            for pid in pids:
                os.kill(pid, signal.SIGSTOP)
            if os.path.isdir(os.path.join(root, staging)):
                for pid in pids:
                    os.kill(pid, signal.SIGKILL)
                break
            for pid in pids:
                os.kill(pid, signal.SIGCONT)
        w = s.ctl("watch", job_id)
        self.assertEqual(w.returncode, 1, w.stdout + w.stderr)
        self.assertEqual(s.job(job_id)["state"], "FAILED")
        # What the kill left behind: a partial write that is no checkpoint.
        leftovers = [n for n in os.listdir(root) if n.startswith(".staging-checkpoint_")]
        self.assertTrue(leftovers, f"no write was under way at the kill (saw {staging})")
        partial = max(int(n.split("_", 1)[1].split(".")[0]) for n in leftovers)
        complete = sorted(int(n.split("_")[1]) for n in os.listdir(root) if n.startswith("checkpoint_"))
        self.assertTrue(complete and max(complete) < partial, (complete, partial))
        r = s.ctl("resume", job_id)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        wait_for(lambda: "resumed from" in s.ctl("logs", job_id).stdout, 120, "the resumed worker's log")
        log = s.ctl("logs", job_id).stdout
        self.assertIn(f"resumed from {os.path.join(root, 'checkpoint_%d' % max(complete))}", log)
        self.assertEqual(s.ctl("cancel", job_id).returncode, 0)

    def test_2e_accelerate_config_file(self):
        s = self.server
        # The default_config.yaml `accelerate config` writes for FSDP (Hugging
        # Face transformers' FSDP guide), as is: BertLayer and all.
        config = os.path.join(REPO, "examples",
                              "accelerate_fsdp_config.yaml")
        spec = write_spec(self.tmp.name, "accelerate-gpt.yaml", """
name: e2e-accelerate
model: {kind: gpt, layers: 2, width: 32, heads: 4, context: 16, vocab: 64}
data: {kind: synthetic, batch_size: 2, num_samples: 200}
optimizer: {kind: adamw, lr: 0.003}
max_steps: 20
""")
        r = s.ctl("-o", "json", "submit", spec, "--accelerate-config", config)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        job_id = json.loads(r.stdout)["id"]
        job = s.job(job_id)
        self.assertEqual(job["spec"]["distributed_type"], "FSDP")
        self.assertEqual(job["spec"]["mixed_precision"], "bf16")
        self.assertEqual(job["spec"]["num_processes"], 2)
        self.assertEqual(job["num_processes"], 2)
        fsdp = job["spec"]["fsdp_config"]
        self.assertEqual(fsdp["fsdp_sharding_strategy"], "FULL_SHARD")
        self.assertEqual(fsdp["fsdp_auto_wrap_policy"], "TRANSFORMER_BASED_WRAP")
        self.assertEqual(fsdp["fsdp_transformer_layer_cls_to_wrap"], ["Block"])
        self.assertEqual(fsdp["fsdp_state_dict_type"], "SHARDED_STATE_DICT")
        self.assertTrue(fsdp["fsdp_offload_params"])
        # Each ignored key and the renamed layer class is a QUEUED event.
        notes = [e for e in job["events"] if e["reason"].startswith("accelerate config: ")]
        self.assertTrue(notes, job["events"])
        self.assertTrue(all(e["state"] == "QUEUED" for e in notes), notes)
        reasons = "\n".join(e["reason"] for e in notes)
        for key in ("compute_environment", "downcast_bf16", "main_training_function", "rdzv_backend",
                    "same_network", "tpu_env"):
            self.assertIn(f"accelerate_config.{key} is ignored", reasons)
        self.assertIn("BertLayer", reasons)

        w = s.ctl("watch", job_id)
        self.assertEqual(w.returncode, 0, w.stdout + w.stderr + s.ctl("logs", job_id).stdout)
        self.assertIn("SUCCEEDED", w.stdout)
        job = s.job(job_id)
        self.assertEqual(job["state"], "SUCCEEDED")
        self.assertEqual(job["step"], 20)

    def test_2f_configs_written_by_accelerate(self):
        """Configs the venv's accelerate writes (FSDP2 with the layer class
        inferred, MULTI_CPU, NO) train to SUCCEEDED; MULTI_GPU on this
        server without GPUs is refused at submit, naming the GPUs."""
        s = self.server
        python = os.environ.get("TRAINYARD_PYTHON", sys.executable)
        configs = os.path.join(self.tmp.name, "accelerate-configs")
        subprocess.run([python, os.path.join(REPO, "tests", "fixtures", "accelerate_configs.py"),
                        configs], check=True, capture_output=True)
        spec = write_spec(self.tmp.name, "accelerate-written.yaml", """
name: e2e-accelerate-written
model: {kind: gpt, layers: 2, width: 32, heads: 4, context: 16, vocab: 64}
data: {kind: synthetic, batch_size: 2, num_samples: 200}
max_steps: 10
""")
        for name in ("fsdp2-inferred-bf16", "multi_cpu-no", "no-bf16"):
            r = s.ctl("-o", "json", "submit", spec, "--accelerate-config", os.path.join(configs, name + ".yaml"))
            self.assertEqual(r.returncode, 0, name + ": " + r.stdout + r.stderr)
            job_id = json.loads(r.stdout)["id"]
            w = s.ctl("watch", job_id)
            self.assertEqual(w.returncode, 0, name + ": " + w.stdout + w.stderr + s.ctl("logs", job_id).stdout)
            job = s.job(job_id)
            self.assertEqual(job["state"], "SUCCEEDED", name)
            if name.startswith("fsdp2"):
                self.assertEqual(job["spec"]["fsdp_config"]["fsdp_transformer_layer_cls_to_wrap"], ["Block"])
        r = s.ctl("submit", spec, "--accelerate-config", os.path.join(configs, "multi_gpu-no.yaml"))
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("INVALID_ARGUMENT", r.stderr)
        self.assertIn("GPU", r.stderr)

    def test_2g_init_from_outside_the_allowed_roots_is_refused(self):
        s = self.server
        spec = write_spec(self.tmp.name, "init-from-etc.yaml", """
name: e2e-init-from
model: {kind: mlp, init_from: /etc/trainyard-weights.safetensors}
max_steps: 5
""")
        r = s.ctl("submit", spec)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("INVALID_ARGUMENT", r.stderr)
        self.assertIn("model.init_from", r.stderr)

    def test_2h_finetune_example_starts_from_its_weights(self):
        """examples/finetune.yaml on the inputs its script makes: pretrained
        weights (Hugging Face sharded layout, "model." prefix) and tensors
        data. The first loss is the pretrained model's, far below a random
        start's ln(10) = 2.30."""
        s = self.server
        python = os.environ.get("TRAINYARD_PYTHON", sys.executable)
        repo = REPO
        inputs = os.path.join(self.tmp.name, "finetune-inputs")
        subprocess.run([python, os.path.join(repo, "examples", "make_finetune_inputs.py"), inputs], check=True,
                       capture_output=True)
        with open(os.path.join(repo, "examples", "finetune.yaml")) as f:
            text = f.read().replace("finetune-inputs/", inputs + "/")
        spec = write_spec(self.tmp.name, "finetune.yaml", text)
        job = self.run_to_success(spec)
        self.assertEqual(job["step"], 100)
        self.assertLess(job["first_loss"], 1.0, job)
        self.assertLess(job["loss"], job["first_loss"] + 0.2, job)

    def test_2i_image_folder_example_skips_a_corrupt_image_and_says_so(self):
        """examples/image-folder.yaml on the images its script makes (JPEG,
        PNG, one corrupt file): the job succeeds, and the corrupt file is
        named among the job's events by the rank that met it."""
        s = self.server
        python = os.environ.get("TRAINYARD_PYTHON", sys.executable)
        images = os.path.join(self.tmp.name, "image-folder")
        subprocess.run([python, os.path.join(REPO, "examples", "make_image_folder.py"), images, "24"], check=True,
                       capture_output=True)
        with open(os.path.join(REPO, "examples", "image-folder.yaml")) as f:
            text = f.read().replace("path: image-folder", "path: " + images)
        text = text.replace("max_steps: 60", "max_steps: 8").replace("eval_every_steps: 30", "eval_every_steps: 4")
        job = self.run_to_success(write_spec(self.tmp.name, "image-folder.yaml", text))
        self.assertEqual(job["step"], 8)
        skipped = [e["reason"] for e in job["events"] if "skipped an unreadable image" in e["reason"]]
        self.assertTrue(skipped, job["events"])
        self.assertRegex(skipped[0], r"^rank [01]: skipped an unreadable image \(1 so far\): .*corrupt\.jpg")

    def test_2k_llama_example_saves_a_model_transformers_loads(self):
        """examples/llama-finetune.yaml (shortened) on the inputs its script
        makes: a random Llama directory from transformers and a learnable
        token stream. FSDP over decoder layers with activation
        checkpointing; the loss falls; the final FULL checkpoint opens with
        LlamaForCausalLM.from_pretrained (no missing or unexpected key), and
        transformers' loss on the held-out windows equals the job's own
        evaluation loss at that step."""
        python = os.environ.get("TRAINYARD_PYTHON", sys.executable)
        inputs = os.path.join(self.tmp.name, "llama-inputs")
        subprocess.run([python, os.path.join(REPO, "examples", "make_llama_inputs.py"), inputs, "--hidden", "64",
                        "--layers", "2", "--vocab", "128", "--tokens", "60000"], check=True, capture_output=True)
        with open(os.path.join(REPO, "examples", "llama-finetune.yaml")) as f:
            text = f.read().replace("llama-inputs/", inputs + "/")
        for old, new in (("context: 128", "context: 32"), ("max_steps: 200", "max_steps: 60"),
                         ("eval_every_steps: 50", "eval_every_steps: 30\neval_batches: 2"),
                         ("every_steps: 100", "every_steps: 30")):
            self.assertIn(old, text, "the example changed: update this test")
            text = text.replace(old, new)
        job = self.run_to_success(write_spec(self.tmp.name, "llama-finetune.yaml", text))
        self.assertEqual(job["step"], 60)
        self.assertLess(job["loss"], job["first_loss"] - 1.0, job)
        logs = self.server.ctl("logs", job["id"]).stdout
        evals = re.findall(r"step 60 eval loss ([0-9.]+)", logs)
        self.assertTrue(evals, logs[-2000:])
        listed = json.loads(self.server.ctl("-o", "json", "checkpoints", job["id"]).stdout)
        final = [c for c in listed if c["step"] == 60]  # periodic at 60: also the final one
        self.assertEqual([c["type"] for c in final], ["full"], listed)
        path = final[0]["path"]
        self.assertTrue(os.path.isfile(os.path.join(path, "config.json")), os.listdir(path))
        r = subprocess.run([python, os.path.join(REPO, "tests", "fixtures", "llama_reference.py"), "heldout", path,
                            os.path.join(inputs, "tokens.bin"), "--context", "32", "--windows", str(2 * 8 * 2)],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        reference = json.loads(r.stdout)
        self.assertEqual(reference["architectures"], ["LlamaForCausalLM"])
        self.assertAlmostEqual(reference["loss"], float(evals[0]), delta=1e-3 * float(evals[0]) + 1e-4)
        print(f"llama example: loss {job['first_loss']:.4f} -> {job['loss']:.4f} in 60 steps; held-out loss "
              f"{evals[0]} (job) vs {reference['loss']:.6f} (transformers on the saved checkpoint)")

    def test_2l_bad_llama_inputs_are_named(self):
        """Another architecture and a context past the model's positions are
        refused at submit; a missing weight and a token id past the
        vocabulary fail the job, each naming what is wrong."""
        s = self.server
        python = os.environ.get("TRAINYARD_PYTHON", sys.executable)
        inputs = os.path.join(self.tmp.name, "bad-llama")
        subprocess.run([python, os.path.join(REPO, "examples", "make_llama_inputs.py"), inputs, "--hidden", "32",
                        "--layers", "1", "--vocab", "64", "--tokens", "5000"], check=True, capture_output=True)
        model = os.path.join(inputs, "model")
        bert = os.path.join(inputs, "bert.json")
        with open(os.path.join(model, "config.json")) as f:
            config = json.load(f)
        with open(bert, "w") as f:
            json.dump(dict(config, model_type="bert", architectures=["BertForMaskedLM"]), f)

        def submit(name, model_yaml, data_yaml="{kind: synthetic, batch_size: 2}"):
            spec = write_spec(self.tmp.name, name + ".yaml", f"name: {name}\nmodel: {model_yaml}\n"
                              f"data: {data_yaml}\nmax_steps: 2\nnum_processes: 1\ndistributed_type: NO\n")
            return s.ctl("-o", "json", "submit", spec)

        r = submit("bert", f"{{kind: llama, config: {bert}, context: 16}}")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("spec field 'model.config'", r.stderr)
        self.assertIn("bert", r.stderr)
        r = submit("long", f"{{kind: llama, init_from: {model}, context: 4096}}")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("spec field 'model.context'", r.stderr)
        self.assertIn("max_position_embeddings", r.stderr)

        # A weight missing from the directory: the job fails naming it.
        missing = os.path.join(inputs, "missing")
        os.makedirs(missing)
        subprocess.run([python, "-c", "import sys\nfrom safetensors.torch import load_file, save_file\n"
                        "t = load_file(sys.argv[1])\ndel t['model.layers.0.mlp.up_proj.weight']\n"
                        "save_file(t, sys.argv[2])", os.path.join(model, "model.safetensors"),
                        os.path.join(missing, "model.safetensors")], check=True)
        with open(os.path.join(missing, "config.json"), "w") as f:
            json.dump(config, f)
        r = submit("missing", f"{{kind: llama, init_from: {missing}, context: 16}}")
        self.assertEqual(r.returncode, 0, r.stderr)
        job_id = json.loads(r.stdout)["id"]
        self.assertNotEqual(s.ctl("watch", job_id).returncode, 0)
        job = s.job(job_id)
        self.assertEqual(job["state"], "FAILED")
        self.assertIn("model.layers.0.mlp.up_proj.weight", job["reason"], job)

        # A token id past the vocabulary (64): the job fails naming the file.
        bad_tokens = os.path.join(inputs, "bad.bin")
        with open(bad_tokens, "wb") as f:
            f.write(bytes([70, 0]) * 2000)
        r = submit("vocab", f"{{kind: llama, init_from: {model}, context: 16}}",
                   f"{{kind: tokens, path: {bad_tokens}, batch_size: 2}}")
        self.assertEqual(r.returncode, 0, r.stderr)
        job_id = json.loads(r.stdout)["id"]
        self.assertNotEqual(s.ctl("watch", job_id).returncode, 0)
        job = s.job(job_id)
        self.assertEqual(job["state"], "FAILED")
        self.assertIn("bad.bin: token 70", job["reason"], job)

    def test_2j_a_rank_accepts_the_spec_of_a_job_its_coordinator_accepted(self):
        # 12,000 ranks: over the default limit (10,000) a spec parser applies,
        # under this coordinator's --max-num-processes. The rank must get past
        # the spec (to the rendezvous, where it would wait for the others).
        state = os.path.join(self.tmp.name, "large-world")
        os.makedirs(state)
        server = Server(state, extra=("--max-num-processes", "16384"))
        worker = None
        try:
            job_id, info = submit_external(self, server, state, "large", "name: large\nmax_steps: 1\n"
                                           "num_processes: 12000\nlauncher: external\nreattach_timeout_s: 600\n")
            self.assertEqual(info["world_size"], 12000)
            log_path = os.path.join(state, "rank-0.log")
            worker = join_worker(server, job_id, info["token"], 0, log_path)

            def past_the_spec():
                if worker.poll() is not None:
                    raise AssertionError(f"rank 0 exited with {worker.returncode}:\n{read(log_path)[-3000:]}")
                return "spec accepted" in read(log_path)
            wait_for(past_the_spec, 120, "rank 0 to accept the spec")
            self.assertIn("12000 processes", read(log_path))
            self.assertNotIn("invalid here", read(log_path))
            self.assertEqual(server.job(job_id)["state"], "STARTING")
            # Waiting in the rendezvous for 11,999 ranks that never come, it
            # still hears SIGTERM (a cluster's grace period, Ctrl-C) ...
            wait_for(lambda: "rendezvous at" in read(log_path), 60, "rank 0 in the rendezvous")
            t0 = time.monotonic()
            worker.send_signal(signal.SIGTERM)
            self.assertEqual(worker.wait(timeout=30), 3, read(log_path)[-2000:])  # kExitStopped
            self.assertLess(time.monotonic() - t0, 5)
            self.assertIn("rank 0: stopped while waiting in the rendezvous for the other 11999 ranks", read(log_path))
            # ... and the coordinator's stop: a cancel of the STARTING job ends it.
            worker = join_worker(server, job_id, info["token"], 0, log_path)
            wait_for(lambda: "rendezvous at" in read(log_path), 120, "rank 0 in the rendezvous again")
            t0 = time.monotonic()
            r = server.ctl("cancel", job_id, timeout=60)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertEqual(worker.wait(timeout=30), 3, read(log_path)[-2000:])
            self.assertLess(time.monotonic() - t0, 10)
            self.assertIn("rank 0: stopped while waiting in the rendezvous", read(log_path))
            self.assertEqual(server.job(job_id)["state"], "CANCELLED")
        finally:
            if worker is not None and worker.poll() is None:
                worker.kill()
                worker.wait()
            server.stop()

    def test_2k_a_rank_blocked_in_a_collective_leaves_soon_after_a_stop(self):
        # Two ranks of an external job train; rank 1 freezes (SIGSTOP), so
        # rank 0 blocks in the step's collective, which would hold it until
        # the collective's timeout. Told to stop (SIGINT, as the coordinator
        # does), it leaves within 5 s, saying where it was.
        state = os.path.join(self.tmp.name, "blocked-stop")
        os.makedirs(state)
        server = Server(state)
        workers = []
        try:
            job_id, info = submit_external(self, server, state, "blocked", "name: blocked\nmax_steps: 1000000\n"
                                           "num_processes: 2\nlauncher: external\n")
            logs = [os.path.join(state, f"rank-{r}.log") for r in range(2)]
            workers = [join_worker(server, job_id, info["token"], rank, logs[rank]) for rank in range(2)]
            wait_for(lambda: server.job(job_id)["step"] >= 20, 120, "the job to train 20 steps")
            # Whether rank 0 is in a step or at its boundary, its next
            # collective waits for rank 1.
            workers[1].send_signal(signal.SIGSTOP)
            t0 = time.monotonic()
            workers[0].send_signal(signal.SIGINT)
            self.assertEqual(workers[0].wait(timeout=30), 3, read(logs[0])[-2000:])  # kExitStopped
            self.assertLess(time.monotonic() - t0, 5)
            self.assertRegex(read(logs[0]), r"rank 0: stopped, but still in [a-z ]+ after step \d+ 4 s later; "
                                            r"leaving without finishing it")
        finally:
            for w in workers:
                if w.poll() is None:
                    w.kill()
                    w.wait()
            server.stop()

    def test_3_bad_specs_are_rejected_and_the_server_keeps_serving(self):
        s = self.server
        os.symlink("/", os.path.join(self.tmp.name, "escape"))
        cases = {
            "checkpoint: {project_dir: /etc/trainyard}\n": "checkpoint.project_dir",
            "checkpoint: {project_dir: %s/escape/etc}\n" % self.tmp.name: "checkpoint.project_dir",
            "checkpoint: {resume_from: %s/../../etc}\n" % self.tmp.name: "checkpoint.resume_from",
            "checkpoint: {max_shard_size: 5XB}\n": "checkpoint.max_shard_size",
            "optimizer: {kind: adamw, lr: -1}\n": "optimizer.lr",
            "num_processes: 64\n": "num_processes",
            "model: {kind: mlp, widths: [3]}\n": "model.widths",
            "max_steps: 0\n": "max_steps",
            "model: {kind: [\n": "not valid YAML",
        }
        def rejected(text):
            m = re.search(r'^trainyard_job_submissions_total\{outcome="rejected"\} (\d+)$', text, re.M)
            return int(m.group(1)) if m else 0

        rejected_before = rejected(s.scrape())
        for text, field in cases.items():
            path = write_spec(self.tmp.name, "bad.yaml", text)
            r = s.ctl("submit", path)
            self.assertEqual(r.returncode, 2, text)
            self.assertIn("INVALID_ARGUMENT", r.stderr)
            self.assertIn(field, r.stderr)
        self.assertEqual(s.ctl("list").returncode, 0)
        self.assertEqual(rejected(s.scrape()), rejected_before + len(cases))

    def test_4_health_and_reflection(self):
        ch = grpc.insecure_channel(self.server.addr)
        check = ch.unary_unary("/grpc.health.v1.Health/Check")
        self.assertEqual(check(b"", timeout=10), b"\x08\x01")  # status: SERVING
        reflect = ch.stream_stream("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo")
        replies = b"".join(reflect(iter([b"\x3a\x00"]), timeout=10))  # list_services: ""
        self.assertIn(b"trainyard.v1.JobService", replies)
        self.assertIn(b"trainyard.v1.WorkerService", replies)
        ch.close()

    def test_5_errors_for_unknown_jobs_and_unreachable_server(self):
        r = self.server.ctl("get", "job-doesnotexist")
        self.assertEqual(r.returncode, 2)
        self.assertIn("NOT_FOUND", r.stderr)
        r = subprocess.run([os.path.join(BIN, "trainctl"), "--server", "127.0.0.1:1", "--timeout", "2", "list"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 2)
        self.assertIn("cannot reach the trainyard server at 127.0.0.1:1", r.stderr)

    def test_6_history_survives_a_server_restart(self):
        # A 10,000-step job: its series as the coordinator keeps them.
        spec = write_spec(self.tmp.name, "long-history.yaml", """
name: long-history
model: {kind: mlp, hidden: [4]}
data: {kind: synthetic, batch_size: 1, num_samples: 100000}
max_steps: 10000
num_processes: 1
""")
        r = self.server.ctl("-o", "json", "submit", spec)
        self.assertEqual(r.returncode, 0, r.stderr)
        long_id = json.loads(r.stdout)["id"]
        # The lead rank's losses as they come (a watcher may be sent fewer
        # than every step, never other numbers).
        seen = []
        with grpc.insecure_channel(self.server.addr) as ch:
            watch = ch.unary_stream("/trainyard.v1.JobService/WatchJob")
            sys.path.insert(0, os.path.join(os.path.dirname(BIN), "python"))  # the build's messages
            from trainyard.v1 import trainyard_pb2 as pb
            for raw in watch(pb.WatchJobRequest(id=long_id).SerializeToString(), timeout=600):
                u = pb.WatchJobResponse.FromString(raw)
                if u.HasField("metrics"):
                    seen.append((u.metrics.step, u.metrics.loss))
        job = self.server.job(long_id)
        self.assertEqual((job["state"], job["step"]), ("SUCCEEDED", 10000), job["reason"])
        r = self.server.ctl("-o", "json", "history", long_id)
        self.assertEqual(r.returncode, 0, r.stderr)
        history = json.loads(r.stdout)
        loss = history["series"]["loss"]
        self.assertEqual(loss["samples"], 10000)
        for name, series in history["series"].items():
            self.assertLessEqual(len(series["points"]), 2000, name)
        points = loss["points"]
        self.assertEqual((points[0]["step"], points[-1]["step"]), (1, 10000))
        self.assertAlmostEqual(points[0]["value"], job["first_loss"], places=6)  # the first, exact
        self.assertAlmostEqual(points[-1]["value"], job["loss"], places=6)  # the last, exact
        kept_min = min(p["value"] for p in points)
        self.assertLessEqual(kept_min, min(v for _, v in seen) + 1e-9)  # no loss seen below the kept minimum
        self.assertGreater(len(seen), 1000)
        csv = self.server.ctl("-o", "csv", "history", long_id, "--series", "loss").stdout.splitlines()
        self.assertEqual(csv[0], "series,step,unix_millis,value")
        self.assertEqual(len(csv) - 1, len(points))

        before = json.loads(self.server.ctl("-o", "json", "list").stdout)
        self.assertGreaterEqual(len(before), 2)
        self.assertEqual(self.server.stop(), 0)
        type(self).server = Server(self.tmp.name)
        after = json.loads(self.server.ctl("-o", "json", "list").stdout)
        self.assertEqual([(j["id"], j["state"], j["step"]) for j in after],
                         [(j["id"], j["state"], j["step"]) for j in before])
        # The series too.
        again = json.loads(self.server.ctl("-o", "json", "history", long_id).stdout)
        self.assertEqual(again["series"], history["series"])


if __name__ == "__main__":
    BIN = sys.argv.pop(1)
    test_clock.main()
