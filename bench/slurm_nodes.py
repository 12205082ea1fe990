"""bench/slurm_nodes: jobs across the nodes of a real Slurm, and what a dead
node costs. The cluster is the test's (tests/e2e/slurm-multinode/: three
nodes, each a slurmd in namespaces of its own on one machine), started
afresh for every round; trainyard-server runs on the host with
--launcher slurm.

- start: `trainctl submit` of a 2-node x 2-rank DDP job -> its first step
  (seen in `trainctl get`, polled every 20 ms), against Slurm's own
  `sbatch --nodes=2 --ntasks=4` of a script whose `srun` step prints the
  time -> that step's tasks running (their clocks).
- whole_group: a 2-node x 2-rank DDP job with checkpoints every 20 steps;
  the node of ranks 2-3 is killed (every process in its namespace) past
  step 70, between two checkpoints: kill -> the node presumed lost (event), -> attempt 2 running
  without it, -> attempt 2's first new step, and the steps lost.
- transport: the same 2-node x 2-rank DDP job (checkpoints off) with
  ddp.intra_host_transport process_group (every gradient through Gloo,
  across the link) and auto (shared memory within each node, Gloo across
  nodes): the median step time of steps 50..max, from the job's history.
- replica: a 3-node job, one replica per node (fault_tolerance.mode
  replica); the node of rank 1 is killed past step 50: kill -> the
  survivors' first step committed in a new membership (their logs'
  clocks), -> the replacement healed (event seen), and the job's attempt
  (1: no restart).

    sudo python3 bench/slurm_nodes.py BUILD_BIN [--rounds 3] [--only start,whole_group,transport,replica]
"""
import argparse
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "e2e"))
import e2e_test  # noqa: E402
from e2e_test import Server, read, wait_for, write_spec  # noqa: E402
from slurm_multinode_e2e import HOST, REPO, Cluster  # noqa: E402

DDP = ("name: {name}\nmodel: {{kind: mlp, hidden: [512, 512]}}\n"
       "data: {{kind: synthetic, batch_size: 64, num_samples: 1000000, seed: 8}}\nseed: 8\n"
       "optimizer: {{kind: adamw, lr: 0.001}}\nmax_steps: 100000\nnum_processes: 4\nmetrics_every_steps: 1\n"
       "slurm: {{nodes: 2}}\nmax_restarts: 3\ncheckpoint: {{every_steps: 20, async: false}}\n")
REPLICA = ("name: {name}\nmodel: {{kind: mlp, hidden: [64]}}\ndata: {{kind: synthetic, batch_size: 16, "
           "num_samples: 48}}\nseed: 11\noptimizer: {{kind: adamw, lr: 0.003}}\nmax_steps: 1000000\n"
           "num_processes: 3\nmetrics_every_steps: 1\nslurm: {{nodes: 3}}\n"
           "fault_tolerance: {{mode: replica, min_replicas: 1}}\n")
STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+)\].*replica rank (\d+) epoch (\d+) step (\d+)", re.M)


def submit(server, tmp, name, text):
    r = server.ctl("-o", "json", "submit", write_spec(tmp, name + ".yaml", text))
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["id"]


def events(server, job_id):
    return [e["reason"] for e in server.job(job_id)["events"]]


def poll(predicate, timeout, what):
    """The first truthy value of predicate(), polled every 20 ms: the time it took is the caller's clock."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = predicate()
        if v:
            return v
        time.sleep(0.02)
    raise RuntimeError(f"timed out waiting for {what}")


def start_round(cluster, server, tmp, n):
    cluster.restart()
    # Slurm alone: a batch job's 2-node step running, by its tasks' clocks.
    out = os.path.join(tmp, f"sbatch-{n}.out")
    t0 = time.time()
    cluster.slurm("sbatch", "--parsable", "--nodes=2", "--ntasks=4", f"--output={out}", "--wrap",
                  "srun date +%s.%N")
    stamps = poll(lambda: (lambda lines: lines if len(lines) == 4 else None)(
        read(out).split() if os.path.exists(out) else []), 120, "the sbatch step")
    slurm_s = min(float(x) for x in stamps) - t0
    t0 = time.monotonic()
    job_id = submit(server, tmp, f"start-{n}", DDP.format(name=f"start-{n}"))
    poll(lambda: server.job(job_id)["step"] >= 1, 120, "the first step")
    ours = time.monotonic() - t0
    server.ctl("cancel", job_id)
    server.ctl("watch", job_id, timeout=120)
    return slurm_s, ours


def whole_group_round(cluster, server, tmp, n):
    cluster.restart()
    job_id = submit(server, tmp, f"wg-{n}", DDP.format(name=f"wg-{n}"))
    job = wait_for(lambda: (lambda j: j if j["state"] == "RUNNING" and len(j.get("places", [])) == 4
                            and j["step"] >= 70 else None)(server.job(job_id)), 300, "step 70")
    victim = {p["rank"]: p["node"] for p in job["places"]}[2]
    cluster.kill_node(victim)
    t_kill = time.monotonic()
    poll(lambda: any(e.startswith(f"node {victim} presumed lost") for e in events(server, job_id)), 60, "the loss")
    noticed = time.monotonic() - t_kill
    last = server.job(job_id)["step"]
    poll(lambda: (lambda j: j["attempt"] == 2 and j["state"] == "RUNNING")(server.job(job_id)), 120, "attempt 2")
    running = time.monotonic() - t_kill
    log0 = os.path.join(tmp, "jobs", job_id, "attempt-2", "rank-0.log")
    resumed = int(poll(lambda: re.search(r"resumed from \S+ at step (\d+)", read(log0)), 60, "the resume").group(1))
    poll(lambda: server.job(job_id)["step"] > resumed, 60, "a new step")
    stepped = time.monotonic() - t_kill
    server.ctl("cancel", job_id)
    server.ctl("watch", job_id, timeout=120)
    return noticed, running, stepped, last - resumed


def transport_round(cluster, server, tmp, n, transport, model="[512, 512]", steps=400):
    """The median step time (s) of a 2 x 2 DDP job's steps past the 50th."""
    cluster.restart()
    spec = DDP.format(name=f"tr-{transport}-{n}").replace("checkpoint: {every_steps: 20, async: false}\n", "")
    spec = spec.replace("max_steps: 100000", f"max_steps: {steps}").replace("hidden: [512, 512]", f"hidden: {model}")
    job_id = submit(server, tmp, f"tr-{transport}-{n}", spec + f"ddp: {{intra_host_transport: {transport}}}\n")
    server.ctl("watch", job_id, timeout=600)
    job = server.job(job_id)
    assert job["state"] == "SUCCEEDED", job["events"][-5:]
    history = json.loads(server.ctl("-o", "json", "history", job_id, "--series", "step_seconds").stdout)
    times = [p["value"] for p in history["series"]["step_seconds"]["points"] if p["step"] > 50]
    return statistics.median(times)


def replica_round(cluster, server, tmp, n):
    cluster.restart()
    job_id = submit(server, tmp, f"rep-{n}", REPLICA.format(name=f"rep-{n}"))
    job = wait_for(lambda: (lambda j: j if j["state"] == "RUNNING" and len((j.get("replicas") or {}).get("live", []))
                            == 3 and j["step"] >= 50 else None)(server.job(job_id)), 300, "step 50")
    nodes = {p["rank"]: p["node"] for p in job["places"]}
    epoch = job["replicas"]["epoch"]
    cluster.kill_node(nodes[1])
    t_kill = time.time()
    t_kill_mono = time.monotonic()
    poll(lambda: any(" healed in " in e for e in events(server, job_id)), 180, "the heal")
    healed = time.monotonic() - t_kill_mono
    attempt = server.job(job_id)["attempt"]
    server.ctl("cancel", job_id)
    server.ctl("watch", job_id, timeout=120)
    # The survivors' first commit in a newer membership, by their own clocks.
    first = None
    for rank in (0, 2):
        for m in STAMP.finditer(read(os.path.join(tmp, "jobs", job_id, "attempt-1", f"rank-{rank}.log"))):
            if int(m.group(3)) > epoch:
                t = datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S.%f").timestamp()
                first = t if first is None else min(first, t)
                break
    return (first - t_kill if first is not None else float("nan")), healed, attempt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", default="start,whole_group,transport,replica")
    a = ap.parse_args()
    only = set(a.only.split(","))
    if os.geteuid() != 0:
        sys.exit("bench/slurm_nodes needs root (namespaces, Slurm's daemons)")
    e2e_test.BIN = os.path.abspath(a.bin)
    tmp = tempfile.mkdtemp(prefix="trainyard-bench-slurm-")
    os.chmod(tmp, 0o755)
    os.environ["TRAINYARD_REPLICA_HASH"] = "1"  # the replicas log each commit with its time
    cluster = Cluster()
    os.environ["SLURM_CONF"] = cluster.slurm_conf
    server = Server(tmp, slots=4, listen="0.0.0.0:0",
                    extra=["--launcher", "slurm", "--advertise-addr", HOST, "--allowed-root", tmp,
                           "--allowed-root", REPO])
    try:
        rounds = range(a.rounds)
        starts = [start_round(cluster, server, tmp, n) for n in rounds] if "start" in only else []
        wg = [whole_group_round(cluster, server, tmp, n) for n in rounds] if "whole_group" in only else []
        transports = {}
        if "transport" in only:
            for model in ("[512, 512]", "[2048, 2048]"):
                for t in ("process_group", "auto"):
                    transports[(model, t)] = [transport_round(cluster, server, tmp, n, t, model) for n in rounds]
        rep = [replica_round(cluster, server, tmp, n) for n in rounds] if "replica" in only else []
    finally:
        server.stop()
        cluster.stop()

    def mm(xs):
        return f"{statistics.median(xs):.2f} / {max(xs):.2f}"
    print("| measure | rounds | seconds (median / max) |\n|---|---|---|")
    if starts:
        print(f"| Slurm alone: `sbatch --nodes=2 --ntasks=4` -> its `srun` step's tasks running | {a.rounds} | "
              f"{mm([s for s, _ in starts])} |")
        print(f"| submit -> first step, 2 nodes x 2 ranks | {a.rounds} | {mm([o for _, o in starts])} |")
    if wg:
        print(f"| whole_group: node killed -> presumed lost | {a.rounds} | {mm([r[0] for r in wg])} |")
        print(f"| whole_group: node killed -> attempt 2 running without it | {a.rounds} | {mm([r[1] for r in wg])} |")
        print(f"| whole_group: node killed -> attempt 2's first new step | {a.rounds} | {mm([r[2] for r in wg])} |")
        print(f"| whole_group: steps lost (checkpoints every 20) | {a.rounds} | "
              f"{statistics.median([r[3] for r in wg]):.0f} / {max(r[3] for r in wg)} |")
    for (model, t), xs in transports.items():
        print(f"| transport: step time, 2 x 2 DDP, MLP {model}, intra_host_transport {t} | {a.rounds} | "
              f"{statistics.median(xs) * 1000:.2f} / {max(xs) * 1000:.2f} ms |")
    if rep:
        print(f"| replica: node killed -> survivors' first commit in a new membership | {a.rounds} | "
              f"{mm([r[0] for r in rep])} |")
        print(f"| replica: node killed -> replacement healed (event seen) | {a.rounds} | {mm([r[1] for r in rep])} |")
        print(f"| replica: attempts (1: no restart) | {a.rounds} | {max(r[2] for r in rep)} |")
    print(f"cluster: 3 nodes of tests/e2e/slurm-multinode/ (Slurm's default timeouts), server --node-loss-grace-ms "
          f"default.\ncommand: sudo python3 bench/slurm_nodes.py {a.bin} --rounds {a.rounds} --only {a.only}")


if __name__ == "__main__":
    main()
