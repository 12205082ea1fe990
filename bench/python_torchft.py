"""The torchft peer of bench/faults: the same MLP job trained by torchft 0.2.0's
Manager (its train_ddp.py loop: a replica group of one process per replica,
torchft's DistributedDataParallel and Optimizer wrappers, ProcessGroupGloo,
healing from a live peer over its PG transport), with a SIGKILL of a random
replica every K seconds; the driver restarts a killed replica at once (what
Trainyard's coordinator does for its own replacement).

    PYTHONPATH=TORCHFT_SITE python bench/python_torchft.py --replicas 3 --steps 4000 --kill-every 30

Every replica trains until torchft has committed `steps x replicas` batches of
64 samples (Manager.batches_committed), the samples of bench/faults' jobs.
Each replica prints a line per committed step ("commit STEP UNIX_TIME"); the
driver prints a JSON row: wall seconds, kills, survivor stalls (a kill to a
survivor's next commit) and heals (a kill to the restarted replica's first
commit). Its settings are train_ddp.py's: Gloo timeout 5 s, Manager timeout
30 s, the Lighthouse's defaults (heartbeats every 100 ms, a replica dead after
5 s without one), min_replica_size 1. Threads: OMP_NUM_THREADS=1 and
torch.set_num_threads(1) per replica; glibc's allocator thresholds as the
worker's (MALLOC_MMAP_THRESHOLD_ 256 MiB, MALLOC_TRIM_THRESHOLD_ 512 MiB).
"""
import argparse
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from datetime import timedelta


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def replica(args):
    import torch
    from torch import nn
    from torchft import DistributedDataParallel, Manager, Optimizer, ProcessGroupGloo
    from torchft.ddp import PureDistributedDataParallel
    from torchft.checkpointing.pg_transport import PGTransport

    torch.set_num_threads(1)
    rid = int(os.environ["REPLICA_GROUP_ID"])
    sizes = [784] + args.hidden + [10]
    layers = []
    for a, b in zip(sizes, sizes[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    torch.manual_seed(0)  # every replica starts from the same weights, as DDP's broadcast gives
    m = nn.Sequential(*layers[:-1])
    opt_inner = torch.optim.AdamW(m.parameters(), lr=5e-4)

    def load_state_dict(state):
        m.load_state_dict(state["model"])
        opt_inner.load_state_dict(state["optim"])

    def state_dict():
        return {"model": m.state_dict(), "optim": opt_inner.state_dict()}

    # The replica group's store, which torchrun's agent would host.
    store = torch.distributed.TCPStore("127.0.0.1", int(os.environ["MASTER_PORT"]), is_master=True,
                                       wait_for_workers=False)
    pg = ProcessGroupGloo(timeout=timedelta(seconds=5))
    manager = Manager(pg=pg, min_replica_size=1, load_state_dict=load_state_dict, state_dict=state_dict,
                      replica_id=f"bench_{rid}", timeout=timedelta(seconds=30),
                      checkpoint_transport=PGTransport(pg, timeout=timedelta(seconds=10), device="cpu"))
    if args.ddp == "reducer":
        model = DistributedDataParallel(manager, m)
    else:
        model = PureDistributedDataParallel(manager, m)
    optimizer = Optimizer(manager, opt_inner)
    loss_fn = nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(1000 + rid)
    target = args.steps * args.replicas
    while manager.batches_committed() < target:
        x = torch.randn(64, 784, generator=gen)
        y = torch.randint(0, 10, (64,), generator=gen)
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        before = manager.current_step()
        optimizer.step()
        if manager.current_step() > before:
            print(f"commit {manager.current_step()} {time.time():.6f}", flush=True)
    manager.shutdown(wait=False)
    del store


def drive(args):
    from torchft._torchft import LighthouseServer

    lighthouse = LighthouseServer(bind="127.0.0.1:0", min_replicas=1)
    env = dict(os.environ, TORCHFT_LIGHTHOUSE=lighthouse.address(), MASTER_ADDR="127.0.0.1", OMP_NUM_THREADS="1",
               MALLOC_MMAP_THRESHOLD_=str(256 << 20), MALLOC_TRIM_THRESHOLD_=str(512 << 20))
    logdir = args.logdir
    os.makedirs(logdir, exist_ok=True)
    procs, logs = {}, {}

    def start(rid, n):
        path = os.path.join(logdir, f"replica-{rid}-{n}.log")
        logs.setdefault(rid, []).append(path)
        e = dict(env, REPLICA_GROUP_ID=str(rid), MASTER_PORT=str(free_port()), RANK="0", WORLD_SIZE="1")
        cmd = [sys.executable, os.path.abspath(__file__), "--role", "replica", "--ddp", args.ddp,
               "--replicas", str(args.replicas),
               "--steps", str(args.steps), "--hidden", *map(str, args.hidden)]
        procs[rid] = subprocess.Popen(cmd, env=e, stdout=open(path, "w"), stderr=subprocess.STDOUT)

    rng = random.Random(args.seed)
    t0 = time.monotonic()
    for rid in range(args.replicas):
        start(rid, 0)
    kills = []  # (unix time, rid, the restarted replica's log)
    next_kill = t0 + args.kill_every if args.kill_every else None
    while any(p.poll() is None for p in procs.values()):
        now = time.monotonic()
        if next_kill is not None and now >= next_kill:
            live = [rid for rid, p in procs.items() if p.poll() is None]
            if len(live) == args.replicas:
                rid = rng.choice(live)
                procs[rid].send_signal(signal.SIGKILL)
                procs[rid].wait()
                t_kill = time.time()
                start(rid, len(logs[rid]))
                kills.append((t_kill, rid, logs[rid][-1]))
            next_kill = now + args.kill_every
        time.sleep(0.05)  # polling the replicas' processes
    wall = time.monotonic() - t0
    lighthouse.shutdown()
    failed = [rid for rid, p in procs.items() if p.returncode != 0]
    commits = {}
    for paths in logs.values():
        for path in paths:
            with open(path, errors="replace") as f:
                commits[path] = [float(line.split()[2]) for line in f if line.startswith("commit ")]
    stalls, heals = [], []
    for t_kill, rid, restarted in kills:
        after = [t for path, ts in commits.items() if not path.startswith(os.path.join(logdir, f"replica-{rid}-"))
                 for t in ts if t > t_kill]
        if after:
            stalls.append(min(after) - t_kill)
        mine = [t for t in commits.get(restarted, []) if t > t_kill]
        if mine:
            heals.append(min(mine) - t_kill)
    print(json.dumps(dict(label=f"torchft-{args.ddp}-{int(args.kill_every)}", mode="torchft",
                          kill_every=args.kill_every, kills=len(kills), wall=wall, failed=failed, stalls=stalls,
                          heals=heals)), flush=True)
    return 1 if failed else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--role", choices=["drive", "replica"], default="drive")
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--steps", type=int, default=4000)
    ap.add_argument("--hidden", type=int, nargs="+", default=[1024, 1024])
    ap.add_argument("--kill-every", type=float, default=0)
    ap.add_argument("--seed", type=int, default=35)
    ap.add_argument("--ddp", choices=["reducer", "pure"], default="reducer",
                    help="torchft's DistributedDataParallel (a comm hook on PyTorch's Reducer) or its "
                         "PureDistributedDataParallel (an allreduce per gradient)")
    ap.add_argument("--logdir", default="/tmp/trainyard-bench-torchft")
    args = ap.parse_args()
    if args.role == "replica":
        replica(args)
        return 0
    return drive(args)


if __name__ == "__main__":
    sys.exit(main())
