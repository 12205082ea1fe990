"""GPU end to end: a real trainyard-server runs CUDA jobs on this machine's
GPU — one rank (NCCL), two ranks sharing one GPU over Gloo, an FSDP job, and a
TorchScript attention module — each to SUCCEEDED, and reports the rank's peak
GPU memory on /metrics, and its GPU as NVML reads it (utilization, memory,
temperature...) on /metrics and in `trainctl get`.

Exits 77 (ctest: skipped) when no NVIDIA GPU is visible; with
TRAINYARD_REQUIRE_GPU=N (the number of GPUs the machine has) that and every
other skip is a failure. Needs only the
binaries (trainyard-server, trainyard-worker, trainctl) and, for the
TorchScript case, a Python with torch (TRAINYARD_PYTHON, else skipped there).

    python3 tests/e2e/gpu_e2e.py build/bin
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_test  # noqa: E402  (Server, wait_for, write_spec)
from e2e_test import Server, wait_for, write_spec  # noqa: E402
import test_clock  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def required_gpus():
    """TRAINYARD_REQUIRE_GPU as a number (0 when unset); exits 1 when it is not one."""
    value = os.environ.get("TRAINYARD_REQUIRE_GPU", "")
    if value == "":
        return 0
    if not value.isdigit():
        print("gpu_e2e: TRAINYARD_REQUIRE_GPU must be a number of GPUs (0, 1, 2...)")
        sys.exit(1)
    return int(value)


def gpu_count():
    try:
        return len(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        pass
    if shutil.which("nvidia-smi"):
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
        return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))
    return 0


JOB = """
name: gpu-%(name)s
model: {kind: %(model)s, hidden: [256, 256]}
data: {kind: synthetic, batch_size: 32, num_samples: 2048}
optimizer: {kind: adamw, lr: 0.001}
max_steps: 300
num_processes: %(ranks)d
device: cuda
backend: %(backend)s
distributed_type: %(dist)s
mixed_precision: %(mp)s
metrics_every_steps: 5
fsdp_config: {fsdp_sharding_strategy: FULL_SHARD, fsdp_auto_wrap_policy: SIZE_BASED_WRAP, fsdp_min_num_params: 10000}
"""


class GpuEndToEnd(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="trainyard-gpu-e2e-")
        # Two ranks share GPU 0 in the Gloo cases on a machine with one GPU:
        # the server lets two ranks take it (--ranks-per-gpu 2).
        cls.gpus = gpu_count()
        # The workers (the server's children) read their GPU through NVML
        # every 200 ms instead of every 5 s: these jobs last seconds.
        os.environ["TRAINYARD_GPU_METRICS_INTERVAL_MS"] = "200"
        share = ("--ranks-per-gpu", "2") if cls.gpus == 1 else ()
        cls.server = Server(cls.tmp.name, slots=4, extra=("--gpus", str(max(1, cls.gpus)), *share))

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        cls.tmp.cleanup()

    def run_job(self, spec_text, name):
        s = self.server
        path = write_spec(self.tmp.name, name + ".yaml", spec_text)
        r = s.ctl("-o", "json", "submit", path)
        self.assertEqual(r.returncode, 0, r.stderr)
        job_id = re.search(r'"id": "([^"]+)"', r.stdout).group(1)
        peak, gpu_total, gpu_temperature, get_gpu = {}, {}, {}, {}

        def done():
            text = s.scrape()
            for m in re.finditer(r'trainyard_job_memory_bytes\{job_id="%s",kind="device_peak",rank="(\d+)"\} (\S+)'
                                 % re.escape(job_id), text):
                peak[m.group(1)] = float(m.group(2))
            for m in re.finditer(r'trainyard_job_gpu_memory_bytes\{job_id="%s",kind="total",rank="(\d+)"\} (\S+)'
                                 % re.escape(job_id), text):
                gpu_total[m.group(1)] = float(m.group(2))
            for m in re.finditer(r'trainyard_job_gpu_temperature_celsius\{job_id="%s",rank="(\d+)"\} (\S+)'
                                 % re.escape(job_id), text):
                gpu_temperature[m.group(1)] = float(m.group(2))
            job = s.job(job_id)
            for r in job.get("ranks", []):
                if "gpu" in r:
                    get_gpu[str(r["rank"])] = r["gpu"]
            state = job["state"]
            return state if state in ("SUCCEEDED", "FAILED", "CANCELLED") else None

        state = wait_for(done, 300, f"{name} to finish")
        job = s.job(job_id)
        self.assertEqual(state, "SUCCEEDED", f"{name}: {job.get('reason')}\n{s.ctl('logs', job_id).stdout[-3000:]}")
        self.assertTrue(peak, f"{name}: no device_peak memory series while it ran")
        for rank, value in peak.items():
            self.assertGreater(value, 0, f"{name}: rank {rank} reported no GPU memory")
        # NVML's view of the rank's GPU, on /metrics and in `trainctl get`.
        self.assertEqual(set(gpu_total), set(peak), f"{name}: NVML series per rank on /metrics: {gpu_total}")
        for rank, total in gpu_total.items():
            self.assertGreater(total, 1e9, f"{name}: rank {rank}'s GPU memory total")
            self.assertGreater(gpu_temperature.get(rank, 0), 0, f"{name}: rank {rank}'s GPU temperature")
        self.assertTrue(get_gpu, f"{name}: trainctl get never showed a rank's GPU while the job ran")
        for rank, gpu in get_gpu.items():
            self.assertGreater(gpu["memory_total_bytes"], 1e9, f"{name}: rank {rank} in trainctl get: {gpu}")
            self.assertGreaterEqual(gpu["utilization"], 0, f"{name}: rank {rank} in trainctl get: {gpu}")
        return job

    def test_1_one_rank_over_nccl(self):
        self.run_job(JOB % dict(name="nccl1", model="mlp", ranks=1, backend="nccl", dist="DDP", mp="no"), "nccl1")

    def test_2_two_ranks_on_one_gpu_over_gloo_fp16(self):
        self.run_job(JOB % dict(name="gloo2", model="mlp", ranks=2, backend="gloo", dist="DDP", mp="fp16"), "gloo2")

    def test_3_fsdp_bf16(self):
        backend = "nccl" if self.gpus >= 2 else "gloo"
        self.run_job(JOB % dict(name="fsdp", model="mlp", ranks=2, backend=backend, dist="FSDP", mp="bf16"), "fsdp")

    def test_4_torchscript_attention(self):
        python = os.environ.get("TRAINYARD_PYTHON")
        if not python:
            if required_gpus() > 0:
                self.fail("TRAINYARD_REQUIRE_GPU is set but TRAINYARD_PYTHON (a Python with torch) is not")
            self.skipTest("TRAINYARD_PYTHON (a Python with torch) is not set")
        pt = os.path.join(self.tmp.name, "attention.pt")
        subprocess.run([python, os.path.join(REPO, "examples", "export_attention.py"), pt], check=True)
        spec = (JOB % dict(name="attention", model="'torchscript:%s'" % pt, ranks=1, backend="nccl", dist="DDP",
                           mp="bf16")).replace("hidden: [256, 256]", "input_size: 784")
        self.run_job(spec, "attention")


if __name__ == "__main__":
    required = required_gpus()
    if gpu_count() < required:
        print(f"gpu_e2e: TRAINYARD_REQUIRE_GPU={required} but {gpu_count()} NVIDIA GPU(s) are visible")
        sys.exit(1)
    if gpu_count() == 0:
        print("gpu_e2e: no NVIDIA GPU is visible; skipped")
        sys.exit(77)
    e2e_test.BIN = os.path.abspath(sys.argv.pop(1))
    test_clock.main()
