"""End to end across nodes of a real Slurm: a cluster of 3 nodes, each a
slurmd in a network, host-name and mount namespace of its own on one bridge
(tests/e2e/slurm-multinode/), with trainyard-server on the host as the
coordinator its ranks reach at the bridge's address.

- A DDP job over 2 nodes x 2 ranks: SUCCEEDED, each rank on the node
  Slurm gave it (trainctl get, /metrics), and the same weights, bit for
  bit, as the same spec run by 4 local ranks (both through the process
  group); with the default transport (shared memory within a node, Gloo
  across), the same weights within fp32 rounding.
- FSDP HYBRID_SHARD over 2 nodes: a shard group per node (the job's events
  say so), weights as the local run's.
- GPUs from Slurm's GRES (device files stand in for them): a job asking
  for GPUs gets --gres, and each rank of a node sees a GPU of its own.
- A node that dies (every process in its namespace killed) under a
  whole-group job: noticed from its ranks' lost streams within seconds,
  the group restarted without that node (sbatch --exclude) from the
  newest checkpoint.
- The same under fault_tolerance.mode replica: the other replicas go on,
  the lost rank is replaced by a batch job of its own on another node and
  heals; no step goes back, every sample is trained once.
- External ranks (trainyard-worker --join) started on the nodes by hand.

Needs root (namespaces, Slurm's daemons); exits 77 (skipped) without it.
Run by ctest with the build's bin directory as the first argument.
"""
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_test  # noqa: E402
from e2e_test import Server, read, wait_for, write_spec  # noqa: E402
from replica_e2e import commits, forks, job_logs  # noqa: E402
import test_clock  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
CLUSTER = os.path.join(HERE, "slurm-multinode")
MN_DIR = "/tmp/trainyard-slurm-multinode"
NET = "10.79.0"
PFX = "ty"  # its namespaces and links: tyn1.., tybr0
REPO = os.path.dirname(os.path.dirname(HERE))
PYTHON = os.environ.get("TRAINYARD_PYTHON", os.path.join(REPO, ".venv", "bin", "python"))
HOST = f"{NET}.1"


class Cluster:
    """The multi-node Slurm of tests/e2e/slurm-multinode/, started afresh."""

    def __init__(self, nodes=3, gpus=2, extra_env=None):
        self.env = dict(os.environ, MN_DIR=MN_DIR, MN_NET=NET, MN_PFX=PFX, MN_NODES=str(nodes),
                        MN_GPUS=str(gpus), MN_CTLD_PORT="6927", **(extra_env or {}))
        self.stop()
        r = subprocess.run(["bash", os.path.join(CLUSTER, "start-cluster.sh")], env=self.env, capture_output=True,
                           text=True, timeout=120)
        if r.returncode != 0:
            raise AssertionError(f"the multi-node cluster did not start:\n{r.stdout}\n{r.stderr[-3000:]}")
        self.slurm_conf = os.path.join(MN_DIR, "etc", "slurm.conf")

    def stop(self):
        subprocess.run(["bash", os.path.join(CLUSTER, "stop-cluster.sh")], env=self.env, capture_output=True,
                       timeout=120)

    def slurm(self, *args):
        return subprocess.run(list(args), env=dict(self.env, SLURM_CONF=self.slurm_conf), capture_output=True,
                              text=True, timeout=60).stdout

    def restart(self):
        """A fresh cluster, every node up (the same configuration and paths)."""
        self.stop()
        r = subprocess.run(["bash", os.path.join(CLUSTER, "start-cluster.sh")], env=self.env, capture_output=True,
                           text=True, timeout=120)
        if r.returncode != 0:
            raise AssertionError(f"the multi-node cluster did not start again:\n{r.stderr[-3000:]}")

    def cut_link(self, node, up=False):
        """The node's link to the others goes down (a partition: its
        processes run on), or comes back."""
        subprocess.run(["ip", "link", "set", f"{PFX}v{node[1:]}", "up" if up else "down"], check=True)

    def kill_node(self, node):
        """The node loses power: every process in its namespace is killed."""
        pids = subprocess.run(["ip", "netns", "pids", f"{PFX}{node}"], capture_output=True, text=True).stdout.split()
        if pids:
            subprocess.run(["kill", "-9", *pids])
        return len(pids)


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


class MultiNode(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cluster = Cluster()
        cls.tmp = tempfile.TemporaryDirectory(prefix="trainyard-slurm-mn-")
        os.chmod(cls.tmp.name, 0o755)
        os.environ["SLURM_CONF"] = cls.cluster.slurm_conf
        os.environ["TRAINYARD_REPLICA_HASH"] = "1"  # replica ranks log each commit; sbatch passes it on
        # The coordinator listens everywhere; the nodes reach it at the
        # bridge's address.
        cls.server = Server(cls.tmp.name, slots=4, listen="0.0.0.0:0",
                            extra=["--launcher", "slurm", "--advertise-addr", HOST, "--allowed-root", cls.tmp.name,
                                   "--allowed-root", REPO])

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        cls.cluster.stop()
        cls.tmp.cleanup()

    def submit(self, name, text):
        r = self.server.ctl("-o", "json", "submit", write_spec(self.tmp.name, name + ".yaml", text))
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout)["id"]

    def finish(self, job_id, state="SUCCEEDED"):
        self.server.ctl("watch", job_id, timeout=600)
        job = self.server.job(job_id)
        self.assertEqual(job["state"], state, json.dumps(job["events"][-8:], indent=1) + "\n" +
                         self.server.ctl("logs", job_id).stdout[-3000:])
        return job

    def final_checkpoint(self, job_id):
        listed = json.loads(self.server.ctl("-o", "json", "checkpoints", job_id).stdout)
        final = [c for c in listed if c["ok"] and c["trigger"] == "final"]
        self.assertTrue(final, listed)
        return final[-1]["path"]

    def max_difference(self, checkpoint_a, checkpoint_b):
        """The largest elementwise difference between two checkpoints' models
        (the venv's torch reads them)."""
        check = subprocess.run(
            [PYTHON, "-c", "import sys, torch; from safetensors.torch import load_file as l; "
             "a, b = l(sys.argv[1]), l(sys.argv[2]); assert a.keys() == b.keys(), (a.keys(), b.keys()); "
             "assert any((a[k] != 0).any() for k in a); print(max((a[k] - b[k]).abs().max().item() for k in a))",
             os.path.join(checkpoint_a, "model.safetensors"), os.path.join(checkpoint_b, "model.safetensors")],
            capture_output=True, text=True)
        self.assertEqual(check.returncode, 0, check.stderr)
        return float(check.stdout)

    def events(self, job_id):
        return [e["reason"] for e in self.server.job(job_id)["events"]]

    def replica_job(self, name, steps, world, batch, extra="", ft_extra=""):
        """An MLP replica job over 3 nodes, one rank each."""
        return (f"name: {name}\nmodel: {{kind: mlp, hidden: [64]}}\n"
                f"data: {{kind: synthetic, batch_size: {batch}, num_samples: 48}}\nseed: 11\n"
                f"optimizer: {{kind: adamw, lr: 0.003}}\nmax_steps: {steps}\nnum_processes: {world}\n"
                f"metrics_every_steps: 1\nslurm: {{nodes: 3}}\n{extra}"
                f"fault_tolerance: {{mode: replica, min_replicas: 1{ft_extra}}}\n")

    def preemptible_past_step_120(self, name, steps, slurm):
        """A preemptible 2-rank MLP job with checkpoints every 50 steps,
        submitted and waited for until it runs past step 120: (id, job)."""
        job_id = self.submit(name, (
            f"name: {name}\nmodel: {{kind: mlp, hidden: [64]}}\n"
            f"data: {{kind: synthetic, batch_size: 16, num_samples: 4096}}\nmax_steps: {steps}\nnum_processes: 2\n"
            f"metrics_every_steps: 1\nslurm: {slurm}\npreemptible: true\ncheckpoint: {{every_steps: 50}}\n"))
        job = wait_for(lambda: (lambda j: j if j["state"] == "RUNNING" and j["step"] >= 120 else None)(
            self.server.job(job_id)), 300, "the job past step 120", lambda: "\n".join(self.events(job_id)[-8:]))
        return job_id, job

    def three_replicas_past(self, job_id, step):
        def running_past():
            j = self.server.job(job_id)
            reps = j.get("replicas") or {}
            return j if j["state"] == "RUNNING" and len(reps.get("live", [])) == 3 and j["step"] >= step else None
        return wait_for(running_past, 300, f"three replicas past step {step}",
                        lambda: json.dumps(self.server.job(job_id), indent=1)[-3000:])

    DDP = ("name: %s\nmodel: {kind: mlp, hidden: [64, 64]}\n"
           "data: {kind: synthetic, batch_size: 16, num_samples: 4096, seed: 5}\nseed: 5\n"
           "optimizer: {kind: adamw, lr: 0.003}\nmax_steps: 60\nnum_processes: 4\nmetrics_every_steps: 1\n"
           "ddp: {intra_host_transport: process_group}\n")

    def test_1_ddp_over_two_nodes_is_the_local_run_bit_for_bit(self):
        spec = self.DDP
        job_id = self.submit("ddp2", spec % "ddp-2-nodes" + "slurm: {nodes: 2}\n")
        s = self.server

        def placed():
            j = s.job(job_id)
            return j if j["state"] == "RUNNING" and len(j.get("places", [])) == 4 else None
        job = wait_for(placed, 120, "four ranks placed", lambda: json.dumps(s.job(job_id), indent=1)[-3000:])
        nodes = {p["rank"]: p["node"] for p in job["places"]}
        # Slurm's block distribution: ranks 0-1 on one node, 2-3 on another.
        self.assertEqual(nodes[0], nodes[1])
        self.assertEqual(nodes[2], nodes[3])
        self.assertNotEqual(nodes[0], nodes[2])
        self.assertTrue(set(nodes.values()) <= {"n1", "n2", "n3"}, nodes)
        self.assertTrue(job.get("slurm_job_id"), job)
        text = s.ctl("get", job_id).stdout
        self.assertIn(f"slurm job:    {job['slurm_job_id']}", text)
        self.assertRegex(text, r"\n  2 +%s " % nodes[2])
        info = self.cluster.slurm("scontrol", "show", "job", job["slurm_job_id"])
        self.assertIn("NumNodes=2", info)
        scrape = s.scrape()
        for rank, node in nodes.items():
            self.assertIn(f'trainyard_job_rank_info{{job_id="{job_id}",node="{node}",rank="{rank}"}} 1', scrape)
        self.assertTrue(any(f"runs as slurm job {job['slurm_job_id']}" in e for e in self.events(job_id)))
        self.finish(job_id)
        local = self.submit("ddp-local", spec % "ddp-local" + "launcher: local\n")
        self.finish(local)
        self.assertEqual(sha256(os.path.join(self.final_checkpoint(job_id), "model.safetensors")),
                         sha256(os.path.join(self.final_checkpoint(local), "model.safetensors")),
                         "2 nodes x 2 ranks and 4 local ranks ended with different weights")
        # The default transport over 2 nodes: shared memory within each
        # node and Gloo across them; the same model within fp32 rounding.
        hier = self.submit("ddp-hier", spec.replace("ddp: {intra_host_transport: process_group}\n", "") %
                           "ddp-hierarchical" + "slurm: {nodes: 2}\n")
        self.finish(hier)
        for rank in range(4):
            log = s.ctl("logs", hier, "--rank", str(rank)).stdout
            self.assertIn(f"rank {rank}: ranks on 2 hosts, 2 on each; gradients travel through shared memory within "
                          "a host and Gloo across hosts", log, log[-3000:])
        self.assertLess(self.max_difference(self.final_checkpoint(hier), self.final_checkpoint(job_id)), 1e-5)

    def test_2_hybrid_shard_groups_stay_inside_nodes(self):
        spec = ("name: %s\nmodel: {kind: mlp, hidden: [64, 64]}\n"
                "data: {kind: synthetic, batch_size: 16, num_samples: 4096, seed: 6}\nseed: 6\n"
                "optimizer: {kind: adamw, lr: 0.003}\nmax_steps: 40\nnum_processes: 4\n"
                "distributed_type: FSDP\nfsdp_config: {fsdp_sharding_strategy: HYBRID_SHARD%s}\n")
        # No ranks_per_node: a node's ranks are a shard group.
        job_id = self.submit("hybrid2", spec % ("hybrid-2-nodes", "") + "slurm: {nodes: 2}\n")
        job = self.finish(job_id)
        groups = [e for e in self.events(job_id) if e.startswith("shard groups")]
        self.assertEqual(len(groups), 1, self.events(job_id))
        self.assertRegex(groups[0], r"^shard groups \(2 of 2 ranks, replicated across them\): 0-1 on n\d; 2-3 on n\d$")
        self.assertNotIn("span nodes", groups[0])
        local = self.submit("hybrid-local", spec % ("hybrid-local", ", ranks_per_node: 2") + "launcher: local\n")
        self.finish(local)
        self.assertLess(self.max_difference(self.final_checkpoint(job_id), self.final_checkpoint(local)), 1e-5,
                        "HYBRID over 2 nodes and locally differ")

    def test_3_each_rank_gets_a_gpu_of_its_own_from_slurm(self):
        out = os.path.join(self.tmp.name, "gres-env")
        os.makedirs(out)
        script = os.path.join(REPO, "tests", "fixtures", "dump_env.py")
        job_id = self.submit("gres", f"name: gres\nscript: {{path: {script}, python: {PYTHON}, args: [{out}]}}\n"
                                     "num_processes: 4\ndevice: cuda\nslurm: {nodes: 2}\n")
        self.finish(job_id)
        envs = []
        for rank in range(4):
            with open(os.path.join(out, f"env-{rank}.json")) as f:
                envs.append(json.load(f))
        seen = set()
        for rank, env in enumerate(envs):
            # One GPU each, the one Slurm bound the task to (without
            # cgroup device constraints, by its index on the node).
            self.assertRegex(env.get("CUDA_VISIBLE_DEVICES", ""), r"^[01]$", env)
            self.assertEqual(env["CUDA_VISIBLE_DEVICES"], env.get("SLURM_STEP_GPUS"), env)
            seen.add((env["SLURMD_NODENAME"], env["CUDA_VISIBLE_DEVICES"]))
            self.assertEqual(env["LOCAL_RANK"], env["SLURM_LOCALID"])
        self.assertEqual(len(seen), 4, f"two ranks share a GPU: {sorted(seen)}")

    def test_4_a_dead_node_is_left_out_of_the_restart(self):
        s = self.server
        self.cluster.restart()
        every = 20
        job_id = self.submit("node-loss", (
            "name: node-loss\nmodel: {kind: mlp, hidden: [512, 512]}\n"
            "data: {kind: synthetic, batch_size: 64, num_samples: 1000000, seed: 8}\nseed: 8\n"
            "optimizer: {kind: adamw, lr: 0.001}\nmax_steps: 100000\nnum_processes: 4\nmetrics_every_steps: 1\n"
            "ddp: {intra_host_transport: process_group}\nslurm: {nodes: 2}\nmax_restarts: 2\n"
            f"checkpoint: {{every_steps: {every}, async: false}}\n"))

        def running_past(step):
            j = s.job(job_id)
            return j if j["state"] == "RUNNING" and len(j.get("places", [])) == 4 and j["step"] >= step else None
        job = wait_for(lambda: running_past(60), 300, "the job past step 60",
                       lambda: json.dumps(s.job(job_id), indent=1)[-3000:])
        nodes = {p["rank"]: p["node"] for p in job["places"]}
        victim = nodes[2]
        self.assertNotEqual(victim, nodes[0])
        killed = self.cluster.kill_node(victim)
        t_kill = time.monotonic()
        self.assertGreater(killed, 0, f"no process in {victim}'s namespace")

        def presumed_lost():
            return any(e.startswith(f"node {victim} presumed lost") for e in self.events(job_id))
        wait_for(presumed_lost, 60, f"{victim} presumed lost", lambda: "\n".join(self.events(job_id)[-10:]))
        noticed_s = time.monotonic() - t_kill
        last_step = s.job(job_id)["step"]  # attempt 1's last reported step: about where the node died

        def second_attempt():
            j = s.job(job_id)
            return j if j["attempt"] == 2 and j["state"] == "RUNNING" and len(j.get("places", [])) == 4 else None
        job = wait_for(second_attempt, 120, "attempt 2 running", lambda: "\n".join(self.events(job_id)[-10:]))
        restarted_s = time.monotonic() - t_kill
        self.assertNotIn(victim, {p["node"] for p in job["places"]}, job["places"])
        info = self.cluster.slurm("scontrol", "show", "job", job["slurm_job_id"])
        self.assertIn(f"ExcNodeList={victim}", info)
        # Resumed from the newest checkpoint: at most `every` steps lost.
        log0 = os.path.join(self.tmp.name, "jobs", job_id, "attempt-2", "rank-0.log")
        m = wait_for(lambda: re.search(r"resumed from \S+ at step (\d+)", read(log0)), 60,
                     "attempt 2 resumed")
        resumed = int(m.group(1))
        self.assertLessEqual(resumed, last_step)
        self.assertGreaterEqual(resumed, last_step - every, f"lost {last_step - resumed} steps")
        self.assertLess(noticed_s, 15, "the lost node was noticed late")
        s.ctl("cancel", job_id)
        self.finish(job_id, "CANCELLED")
        print(f"\nnode {victim} killed at step >= 60: presumed lost after {noticed_s:.1f} s, "
              f"attempt 2 running on {sorted(set(p['node'] for p in job['places']))} after {restarted_s:.1f} s, "
              f"resumed at step {resumed}", flush=True)

    def test_5_replicas_go_on_and_a_dead_nodes_replica_is_replaced_elsewhere(self):
        s = self.server
        self.cluster.restart()
        steps, world, batch = 4000, 3, 16
        job_id = self.submit("replica-node-loss", self.replica_job("replica-node-loss", steps, world, batch))
        job = self.three_replicas_past(job_id, 50)
        nodes = {p["rank"]: p["node"] for p in job["places"]}
        self.assertEqual(len(set(nodes.values())), 3, nodes)
        victim_rank = 1
        victim = nodes[victim_rank]
        self.assertGreater(self.cluster.kill_node(victim), 0)
        t_kill = time.monotonic()

        def healed():
            j = s.job(job_id)
            if j["state"] != "RUNNING":
                return j
            reps = j.get("replicas") or {}
            places = {p["rank"]: p["node"] for p in j.get("places", [])}
            ok = len(reps.get("live", [])) == 3 and not reps.get("healing") and \
                places.get(victim_rank) not in (None, victim) and any(" healed in " in e["reason"] for e in j["events"])
            return j if ok else None
        job = wait_for(healed, 180, f"rank {victim_rank} replaced off {victim} and healed",
                       lambda: "\n".join(self.events(job_id)[-12:]))
        healed_s = time.monotonic() - t_kill
        self.assertEqual(job["state"], "RUNNING", "\n".join(self.events(job_id)[-12:]))
        self.assertEqual(job["attempt"], 1, "the node's loss restarted the group")
        new_node = {p["rank"]: p["node"] for p in job["places"]}[victim_rank]
        events = self.events(job_id)
        self.assertTrue(any(e.startswith(f"node {victim} presumed lost") for e in events), events)
        name = f"trainyard-{job_id}-a1-r{victim_rank}-1"
        info = self.cluster.slurm("scontrol", "show", "job", self.cluster.slurm("squeue", "-h", "-t", "all", "-n",
                                                                                  name, "-o", "%i").strip())
        self.assertIn(f"ExcNodeList={victim}", info)
        job = self.finish(job_id)
        self.assertEqual(job["attempt"], 1)
        # The workers' own account of every commit: no rank log goes back;
        # every sample of the fault-free run is trained, none twice.
        rows = commits(job_logs(self.tmp.name, job_id))
        self.assertTrue(rows, "no replica hash lines in the rank logs")
        last = {}
        for path, rank, epoch, step, cursor, digest in rows:
            self.assertGreaterEqual(step, last.get(path, 0), f"{path}: step went back to {step}")
            last[path] = step
        self.assertEqual(forks(rows), [], "members disagree (hash, cursor)\n" + "\n".join(self.events(job_id)[:30]))
        self.assertEqual(max(r[4] for r in rows), steps * world * batch)
        print(f"\nnode {victim} killed: rank {victim_rank} replaced on {new_node} and healed after {healed_s:.1f} s; "
              f"{steps} steps, cursor {max(r[4] for r in rows)}", flush=True)

    def test_7_a_cut_off_node_is_fenced_and_the_others_go_on(self):
        s = self.server
        self.cluster.restart()
        steps, world, batch = 3000, 3, 16
        job_id = self.submit("replica-partition", self.replica_job(
            "replica-partition", steps, world, batch,
            "step_timeout_s: 6\ncheckpoint: {every_steps: 200}\n", ", collective_timeout_s: 3"))
        job = self.three_replicas_past(job_id, 50)
        nodes = {p["rank"]: p["node"] for p in job["places"]}
        victim_rank = 2
        victim = nodes[victim_rank]
        epoch = job["replicas"]["epoch"]  # the membership the orphan is left in
        self.cluster.cut_link(victim)
        t_cut = time.time()
        try:
            def replaced():
                j = s.job(job_id)
                if j["state"] != "RUNNING":
                    return j
                reps = j.get("replicas") or {}
                places = {p["rank"]: p["node"] for p in j.get("places", [])}
                ok = len(reps.get("live", [])) == 3 and not reps.get("healing") and \
                    places.get(victim_rank) not in (None, victim)
                return j if ok else None
            job = wait_for(replaced, 120, f"rank {victim_rank} replaced off {victim} while cut off",
                           lambda: "\n".join(self.events(job_id)[-14:]))
            self.assertEqual(job["state"], "RUNNING", "\n".join(self.events(job_id)[-14:]))
            replaced_s = time.time() - t_cut
            # The partition lasts 20 s, however soon the others went on.
            time.sleep(max(0.0, t_cut + 20 - time.time()))
        finally:
            self.cluster.cut_link(victim, up=True)
        t_back = time.time()
        job = self.finish(job_id)
        self.assertEqual(job["attempt"], 1, "the partition restarted the group")
        # Fencing: every step has one (hash, cursor) over every rank log —
        # an orphan committing on its own would disagree — no log goes back,
        # and the orphan's rank commits nothing from the cut on.
        rows = commits(job_logs(self.tmp.name, job_id))
        last = {}
        for path, rank, epoch, step, cursor, digest in rows:
            self.assertGreaterEqual(step, last.get((path, rank, epoch), 0), f"{path}: step went back to {step}")
            last[(path, rank, epoch)] = step
        self.assertEqual(forks(rows), [], "ranks disagree (hash, cursor)\n" + "\n".join(self.events(job_id)[:30]))
        self.assertEqual(max(r[4] for r in rows), steps * world * batch)
        # In the membership it was cut off in, the orphan committed no step the others did not.
        theirs = [r[3] for r in rows if r[2] == epoch and r[1] != victim_rank]
        orphans = [r[3] for r in rows if r[2] == epoch and r[1] == victim_rank]
        self.assertTrue(theirs and orphans, (epoch, len(theirs), len(orphans)))
        self.assertLessEqual(max(orphans), max(theirs), "the orphan committed after it was cut off")
        self.assertFalse([r for r in rows if r[1] == victim_rank and r[2] == epoch + 1],
                         "the orphan joined the membership that replaced it")
        events = self.events(job_id)
        self.assertTrue(any(victim in e for e in events), events)
        print(f"\n{victim} cut off for {t_back - t_cut:.0f} s: rank {victim_rank} replaced after {replaced_s:.1f} s; "
              f"{steps} steps", flush=True)

    def test_8_an_operators_scancel_is_named_and_a_preemptible_job_resumes(self):
        s = self.server
        job_id, job = self.preemptible_past_step_120("operator-scancel", 1500, "{nodes: 2}")
        slurm_id = job["slurm_job_id"]
        self.assertTrue(slurm_id, job)
        # An operator cancels the batch job with Slurm's own command: the
        # ranks get SIGTERM, checkpoint and stop; the job is queued again.
        self.cluster.slurm("scancel", slurm_id)
        wait_for(lambda: s.job(job_id)["attempt"] == 2, 120, "a second attempt",
                 lambda: "\n".join(self.events(job_id)[-8:]))
        job = self.finish(job_id)
        events = self.events(job_id)
        self.assertIn(f"Slurm job {slurm_id} was cancelled outside Trainyard (scancel)", events)
        resumed = [int(m.group(1)) for e in events for m in [re.search(r"resumed at step (\d+) from", e)] if m]
        self.assertTrue(resumed and resumed[0] >= 100, events)
        self.assertEqual(job["attempt"], 2)

    def test_9_slurm_preempts_a_preemptible_job_which_resumes(self):
        """A cluster with preemption by partition priority: a job in the
        higher partition takes every node; Slurm preempts the Trainyard job
        (SIGTERM, then cancelled after the partition's GraceTime)."""
        s = self.server
        self.cluster.stop()
        preempting = Cluster(extra_env={
            "MN_EXTRA_CONF": "PreemptType=preempt/partition_prio\nPreemptMode=CANCEL",
            "MN_EXTRA_PARTITIONS": "PartitionName=low Nodes=ALL PriorityTier=1 GraceTime=30 State=UP\n"
                                   "PartitionName=high Nodes=ALL PriorityTier=10 State=UP"})
        try:
            job_id, job = self.preemptible_past_step_120("slurm-preempted", 3000, "{nodes: 2, partition: low}")
            slurm_id = job["slurm_job_id"]
            urgent = preempting.slurm("sbatch", "--parsable", "-p", "high", "-N3", "--exclusive", "--output=/dev/null",
                                      "--wrap", "sleep 5").strip()
            self.assertTrue(urgent.isdigit(), urgent)
            wait_for(lambda: s.job(job_id)["attempt"] == 2, 120, "a second attempt",
                     lambda: "\n".join(self.events(job_id)[-8:]))
            job = self.finish(job_id)
            events = self.events(job_id)
            self.assertTrue([e for e in events if e.startswith(f"Slurm job {slurm_id} was preempted by Slurm (at ")],
                            events)
            resumed = [int(m.group(1)) for e in events for m in [re.search(r"resumed at step (\d+) from", e)] if m]
            self.assertTrue(resumed and resumed[0] >= 100, events)
            listed = json.loads(s.ctl("-o", "json", "checkpoints", job_id).stdout)
            self.assertIn("preemption", [c["trigger"] for c in listed])
            self.assertEqual(job["attempt"], 2)
        finally:
            preempting.stop()
            self.cluster.restart()

    def test_6_external_ranks_join_from_the_nodes(self):
        """trainyard-worker --join on the cluster's hosts, started by hand (no Slurm)."""
        s = self.server
        self.cluster.restart()
        job_id = self.submit("external", self.DDP % "external-2-hosts" + "launcher: external\n")
        info = json.loads(s.ctl("-o", "json", "join-info", job_id).stdout)
        self.assertEqual(info["coordinator_addr"].split(":")[0], HOST)
        env = dict(os.environ, TRAINYARD_WORKER_TOKEN=info["token"], MN_DIR=MN_DIR, MN_PFX=PFX)
        env.pop("SLURM_CONF", None)
        procs = []
        for rank, node in ((2, "n2"), (3, "n2"), (0, "n1"), (1, "n1")):
            log = open(os.path.join(self.tmp.name, f"external-rank-{rank}.log"), "wb")
            procs.append((rank, log, subprocess.Popen(
                ["bash", os.path.join(CLUSTER, "node-exec.sh"), node, os.path.join(e2e_test.BIN, "trainyard-worker"),
                 "--join", job_id, "--server", info["coordinator_addr"], "--rank", str(rank)],
                env=env, stdout=log, stderr=subprocess.STDOUT)))
        try:
            def placed():
                j = s.job(job_id)
                return j if len(j.get("places", [])) == 4 else None
            job = wait_for(placed, 120, "four ranks joined", lambda: json.dumps(s.job(job_id), indent=1)[-2000:])
            self.assertEqual({p["rank"]: p["node"] for p in job["places"]}, {0: "n1", 1: "n1", 2: "n2", 3: "n2"})
            for rank, log, p in procs:
                p.wait(timeout=300)
                self.assertEqual(p.returncode, 0, f"rank {rank}:\n{read(log.name)[-3000:]}")
        finally:
            for _, log, p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
                log.close()
        self.finish(job_id)
        text = read(os.path.join(self.tmp.name, "external-rank-0.log"))
        self.assertRegex(text, r"rendezvous at 10\.79\.0\.1[1-3]:")  # rank 0's own node address
        local = self.submit("external-local", self.DDP % "external-local" + "launcher: local\n")
        self.finish(local)
        self.assertEqual(sha256(os.path.join(self.final_checkpoint(job_id), "model.safetensors")),
                         sha256(os.path.join(self.final_checkpoint(local), "model.safetensors")),
                         "ranks joined from 2 hosts and 4 local ranks ended with different weights")


if __name__ == "__main__":
    if os.geteuid() != 0:
        print("slurm_multinode_e2e needs root (namespaces, Slurm's daemons)")
        sys.exit(77)
    e2e_test.BIN = os.path.abspath(sys.argv.pop(1))
    test_clock.main()
