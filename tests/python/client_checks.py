"""trainyard.Client's API against a real server, run by client_package_e2e.py
with the Python of a venv the package was pip-installed into. The server has
users alice ($TRAINYARD_TOKEN) and bob, and a quota of 2 slots for alice."""
import os
import time

import pandas as pd

import trainyard
from trainyard import Client, InvalidArgument, NotFound, TrainyardError, Unauthenticated

SMALL = {
    "name": "client-small",
    "model": {"kind": "mlp", "hidden": [32]},
    "data": {"kind": "synthetic", "batch_size": 16, "num_samples": 1024},
    "max_steps": 120,
    "num_processes": 2,
    "checkpoint": {"every_steps": 60},
}
LONG_YAML = """
name: client-long
model: {kind: mlp, hidden: [256, 256]}
data: {kind: synthetic, batch_size: 64, num_samples: 65536}
max_steps: 1000000
num_processes: 2
"""


def wait(what, condition, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def expect(error, call):
    try:
        call()
    except error as e:
        assert isinstance(e, TrainyardError) and e.code and e.message, e
        return e
    raise AssertionError(f"expected {error.__name__}")


with Client() as c:
    # Submit from a dict; watch as an iterator until the job ends.
    job = c.submit(SMALL)
    assert job["state"] in ("QUEUED", "STARTING"), job
    updates = list(c.watch(job["id"]))
    steps = [u["metrics"]["step"] for u in updates if "metrics" in u]
    assert steps and steps[-1] == 120 and all(isinstance(s, int) for s in steps), steps[-5:]
    assert [u["job"]["state"] for u in updates if "job" in u][-1] == "SUCCEEDED"
    done = c.get(job["id"])
    assert done["state"] == "SUCCEEDED" and done["step"] == 120 and done["owner"] == "alice", done
    assert any(e["reason"] == "submitted" for e in done["events"])
    assert job["id"] in [j["id"] for j in c.list(states=["SUCCEEDED"])]
    assert "step 120" in c.logs(job["id"], rank=0)
    assert [ck["step"] for ck in c.checkpoints(job["id"]) if ck["ok"]][-1] == 120

    # History: plain lists, the same as a DataFrame.
    h = c.history(job["id"])
    loss = h["series"]["loss"]
    assert len(loss) == 120 and loss[0]["step"] == 1 and loss[-1]["step"] == 120, (len(loss), loss[:2])
    assert h["samples"]["loss"] == 120
    assert set(h["series"]) >= {"loss", "samples_per_second", "step_seconds", "learning_rate", "world_size"}
    assert h["series"]["world_size"][-1]["value"] == 2
    assert any("finished" in e["reason"] for e in h["events"]) and h["checkpoints"]
    only = c.history(job["id"], series=["loss"])
    assert list(only["series"]) == ["loss"]
    df = c.history(job["id"], dataframe=True)
    assert isinstance(df, pd.DataFrame) and list(df.columns) == ["series", "step", "time", "value"]
    assert df[df.series == "loss"].value.tolist() == [p["value"] for p in loss]
    assert str(df.time.dtype).startswith("datetime64")

    # Submit YAML; the queue with quota use and free slots; checkpoint, cancel, resume, diagnose.
    wait("the queue to show the server's 2 slots free", lambda: c.queue()["free_slots"] == 2)
    long = c.submit(LONG_YAML)
    wait("the long job running", lambda: c.get(long["id"])["state"] == "RUNNING")
    wait("its first steps", lambda: c.get(long["id"])["step"] > 0)
    q = c.queue()
    mine = [u for u in q["usage"] if u["name"] == "alice" and not u["group"]]
    assert mine and mine[0]["slots"] == 2 and mine[0]["slots_quota"] == 2, q
    assert q["free_slots"] == 0 and q["free_gpus"] == 0, q  # the server's 2 slots are the long job's
    d = c.diagnose(long["id"], timeout_ms=5000)
    assert isinstance(d["verdict"], str) and d["verdict"], d
    ck = c.checkpoint(long["id"])
    assert ck["ok"] and os.path.isdir(ck["path"]), ck
    # As `trainctl cancel`: it returns once the job ended.
    assert c.cancel(long["id"])["state"] == "CANCELLED"
    resumed = c.resume(long["id"])
    assert resumed["attempt"] == 2 and resumed["state"] in ("QUEUED", "STARTING"), resumed
    # A checkpoint asked for at once waits for the job to run, then for the save.
    ck2 = c.checkpoint(long["id"])
    assert ck2["ok"] and ck2["step"] > ck["step"] and ck2["index"] > ck["index"], (ck, ck2)
    ended = c.cancel(long["id"], wait=True)
    assert ended["state"] == "CANCELLED", ended

    # A sweep: two trials, one at a time; its best trial is the lower loss.
    sweep = c.submit_sweep(dict(SMALL, name="client-sweep", num_processes=1, max_steps=40, checkpoint={},
                                sweep={"parameters": {"optimizer.lr": {"choice": [0.01, 0.0001]}},
                                       "searcher": {"kind": "grid"}, "concurrency": 1}))
    assert sweep["state"] == "RUNNING" and sweep["parameters"] == ["optimizer.lr"], sweep
    done = wait("the sweep to end", lambda: (lambda w: w if w["state"] == "SUCCEEDED" else None)(
        c.get_sweep(sweep["id"])))
    assert [t["values"] for t in done["trials"]] == [{"optimizer.lr": "0.01"}, {"optimizer.lr": "0.0001"}], done
    # Listed sweeps page and carry no spec (get_sweep has it).
    assert all(not w["spec"] for w in c.list_sweeps()), c.list_sweeps()
    assert all(t["state"] == "SUCCEEDED" and t["step"] == 40 for t in done["trials"]), done["trials"]
    best = min(done["trials"], key=lambda t: t["best_metric"])
    assert done["best_trial"] == best["number"], done
    assert sweep["id"] in [w["id"] for w in c.list_sweeps()]
    assert c.get(done["trials"][0]["job_id"])["name"] == "client-sweep-t0"
    e = expect(InvalidArgument, lambda: c.submit_sweep(SMALL))
    assert "sweep" in e.message, e.message

    # Refused calls raise the error of their code.
    expect(NotFound, lambda: c.get("job-does-not-exist"))
    e = expect(InvalidArgument, lambda: c.submit(dict(SMALL, max_steps=-1)))
    assert "max_steps" in e.message, e.message
    expect(InvalidArgument, lambda: c.history(job["id"], series=["x" * 65]))  # no series' name
    assert not c.history(job["id"], series=["no-such-series"])["series"], "a series the job never had"
    try:
        c.list(states=["DONE"])
        raise AssertionError("an unknown state was accepted")
    except ValueError:
        pass

with Client(token="not-a-token") as nobody:
    expect(Unauthenticated, lambda: nobody.list())
with Client(token=os.environ["TRAINYARD_TOKEN"].replace("alice", "bob")) as bob:
    expect(NotFound, lambda: bob.history(job["id"]))  # not his: as if it did not exist
    expect(NotFound, lambda: bob.get_sweep(sweep["id"]))
    assert bob.list_sweeps() == []
    assert bob.list() == []

assert trainyard.Client is Client
print("client_checks: all passed")
