"""Two "hosts" on one machine: network namespaces ty-hosta (10.231.0.1) and
ty-hostb (10.231.0.2) joined by a veth pair (bench/netns.sh). The server runs
in host A with --launcher external; two ranks join from each host with
`trainyard-worker --join`. DDP (shared memory within a host, Gloo across)
and HYBRID_SHARD (sharded within a host,
replicated across) must end with the parameters of a single-process run on
the same data, and their traffic must cross the veth link.

Needs root and network namespaces; otherwise skipped (exit code 77).
Run by ctest with the build's bin directory as the first argument.
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures"))
from e2e_test import wait_for, write_spec  # noqa: E402
import safetensors_check  # noqa: E402
import test_clock  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
NETNS = os.path.join(HERE, "..", "..", "bench", "netns.sh")
SKIP = 77
BIN = None
HOSTS = {"ty-hosta": "10.231.0.1", "ty-hostb": "10.231.0.2"}


def in_ns(ns, args):
    return ["ip", "netns", "exec", ns, *args]


def training(name, steps, batch):
    """The model, data and optimizer every job of this test shares."""
    return f"""name: {name}
model: {{kind: mlp, hidden: [64, 32]}}
data: {{kind: synthetic, batch_size: {batch}, num_samples: 4096}}
optimizer: {{kind: sgd, lr: 0.05}}
max_steps: {steps}
"""


def read(path):
    with open(path, errors="replace") as f:
        return f.read()


def veth_bytes(ns, dev):
    r = subprocess.run(in_ns(ns, ["cat", "/proc/net/dev"]), capture_output=True, text=True, check=True)
    for line in r.stdout.splitlines():
        if line.strip().startswith(dev + ":"):
            fields = line.split(":", 1)[1].split()
            return int(fields[0]) + int(fields[8])  # received + transmitted
    raise AssertionError(f"no {dev} in {ns}")


class MultiHost(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="trainyard-multihost-")
        subprocess.run(["bash", NETNS, "up"], check=True, capture_output=True)
        cls.ready = os.path.join(cls.tmp.name, "ready.json")
        cls.log = open(os.path.join(cls.tmp.name, "server.log"), "ab")
        cls.server = subprocess.Popen(
            in_ns("ty-hosta", [os.path.join(BIN, "trainyard-server"), "--listen", "10.231.0.1:0",
                               "--metrics-listen", "10.231.0.1:0", "--http-listen", "10.231.0.1:0",
                               "--state-dir", cls.tmp.name, "--slots", "2",
                               "--launcher", "external", "--ready-file", cls.ready, "--stop-grace-ms", "3000"]),
            stdout=cls.log, stderr=subprocess.STDOUT)

        def ready():
            if cls.server.poll() is not None:
                raise AssertionError(f"server exited with {cls.server.returncode}")
            try:
                with open(cls.ready) as f:
                    return json.load(f)
            except (FileNotFoundError, json.JSONDecodeError):
                return None

        info = wait_for(ready, 30, "the server's ready file")
        cls.addr = f"10.231.0.1:{info['grpc_port']}"
        cls.workers = []

    @classmethod
    def tearDownClass(cls):
        for p in cls.workers:
            if p.poll() is None:
                p.kill()
                p.wait()
        cls.server.terminate()
        cls.server.wait(timeout=30)
        cls.log.close()
        subprocess.run(["bash", NETNS, "down"], capture_output=True)
        cls.tmp.cleanup()

    def ctl(self, *args):
        return subprocess.run(in_ns("ty-hosta", [os.path.join(BIN, "trainctl"), "--server", self.addr, *args]),
                              capture_output=True, text=True, timeout=300)

    def job(self, job_id):
        r = self.ctl("-o", "json", "get", job_id)
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout)

    def submit(self, name, text):
        r = self.ctl("-o", "json", "submit", write_spec(self.tmp.name, name, text))
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout)["id"]

    def final_params(self, job_id):
        r = self.ctl("-o", "json", "checkpoints", job_id)
        self.assertEqual(r.returncode, 0, r.stderr)
        final = [c for c in json.loads(r.stdout) if c["trigger"] == "final" and c["ok"]]
        self.assertEqual(len(final), 1, r.stdout)
        return safetensors_check.read(os.path.join(final[0]["path"], "model.safetensors"))[1]

    def run_joined(self, job_id):
        """Two ranks join from each host; returns when the job has ended."""
        r = self.ctl("-o", "json", "join-info", job_id)
        self.assertEqual(r.returncode, 0, r.stderr)
        info = json.loads(r.stdout)
        self.assertEqual(info["world_size"], 4)
        self.assertEqual(info["coordinator_addr"], self.addr)
        env = dict(os.environ, TRAINYARD_WORKER_TOKEN=info["token"])
        procs = []
        # Ranks 2, 3 first: they wait for rank 0 to say where the rendezvous is.
        for rank, ns in ((2, "ty-hostb"), (3, "ty-hostb"), (0, "ty-hosta"), (1, "ty-hosta")):
            log = open(os.path.join(self.tmp.name, f"{job_id}-rank-{rank}.log"), "wb")
            procs.append((rank, log, subprocess.Popen(
                in_ns(ns, [os.path.join(BIN, "trainyard-worker"), "--join", job_id, "--server", self.addr,
                           "--rank", str(rank)]),
                env=env, stdout=log, stderr=subprocess.STDOUT)))
            self.workers.append(procs[-1][2])
        for rank, log, p in procs:
            p.wait(timeout=600)
            log.close()
            text = read(log.name)
            self.assertEqual(p.returncode, 0, f"rank {rank}:\n{text[-3000:]}")
            if rank in (0, 2):
                # Every rank's transport is on its own host's address.
                self.assertIn("rendezvous at 10.231.0.1:", text)
        job = self.job(job_id)
        self.assertEqual(job["state"], "SUCCEEDED", job.get("reason"))
        return [read(log.name) for _, log, _ in procs]

    def reference(self, name, steps, batch):
        """The same training in one local process with the world's batch."""
        job_id = self.submit(f"{name}-ref.yaml", training(f"{name}-ref", steps, batch * 4) +
                             "launcher: local\nnum_processes: 1\ndistributed_type: NO\n")
        r = self.ctl("watch", job_id)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        return self.final_params(job_id)

    def check_equal(self, got, want):
        self.assertEqual(sorted(got), sorted(want))
        for name in want:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-6, err_msg=name)

    def test_ddp_across_two_hosts(self):
        before = veth_bytes("ty-hostb", "ty-veth-b")
        job_id = self.submit("ddp.yaml", training("mh-ddp", 12, 8) + "launcher: external\nnum_processes: 4\n")
        self.assertEqual(self.job(job_id)["state"], "STARTING")
        logs = self.run_joined(job_id)
        # Shared memory within each host, Gloo across the link between them.
        for t in logs:
            self.assertIn("ranks on 2 hosts, 2 on each; gradients travel through shared memory within a host and "
                          "Gloo across hosts", t)
        crossed = veth_bytes("ty-hostb", "ty-veth-b") - before
        # 12 all-reduces of ~53k parameters (fp32) at least cross the link.
        self.assertGreater(crossed, 12 * 53000 * 4)
        want = self.reference("mh-ddp", 12, 8)
        self.check_equal(self.final_params(job_id), want)
        # The comparison can tell one step from another.
        fewer = self.reference("mh-ddp-11", 11, 8)
        self.assertFalse(all(np.allclose(fewer[n], want[n], rtol=1e-4, atol=1e-6) for n in want))

    def test_hybrid_shard_sharded_within_replicated_across(self):
        before = veth_bytes("ty-hostb", "ty-veth-b")
        job_id = self.submit("hybrid.yaml", training("mh-hybrid", 12, 8) + """launcher: external
num_processes: 4
distributed_type: FSDP
fsdp_config: {fsdp_sharding_strategy: HYBRID_SHARD, ranks_per_node: 2}
""")
        self.run_joined(job_id)
        self.assertGreater(veth_bytes("ty-hostb", "ty-veth-b") - before, 0)
        self.check_equal(self.final_params(job_id), self.reference("mh-hybrid", 12, 8))


def main():
    global BIN
    BIN = sys.argv.pop(1)
    if os.geteuid() != 0:
        print("multihost_e2e: SKIPPED — network namespaces need root", file=sys.stderr)
        sys.exit(SKIP)
    r = subprocess.run(["bash", NETNS, "check"], capture_output=True, text=True)
    if r.returncode != 0:
        print(f"multihost_e2e: SKIPPED — {r.stdout.strip()} {r.stderr.strip()}", file=sys.stderr)
        sys.exit(SKIP)
    test_clock.main()


if __name__ == "__main__":
    main()
