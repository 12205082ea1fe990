"""Hyperparameter sweeps end to end: a real server, real MLP jobs, trainctl.

- A 12-trial ASHA sweep on a 4-slot server: every trial is an ordinary job
  (its own history; `trainctl history --jobs` puts them side by side);
  each trial stopped at a rung was not the best of the
  trials that had reached that rung before it, and the best at each rung
  went on (from the trials' histories); the best trial's final loss equals that of the
  same hyperparameters run alone (same seed); the sweep used fewer
  rank-seconds than running all 12 to the end (measured from the jobs);
  the sweep's events name each trial's submission, stop and promotion.
- A kill -9 of the coordinator mid-sweep: the restarted one finishes the
  sweep with every trial started once (one job per trial number).
- `trainctl sweep cancel --keep-best` stops every trial but the best.
- A trial's freed slots go to a live elastic trial of the sweep (grown to
  its size) before its next trial starts on what is left.
- PBT with a population of 2: the poorer trial is replaced by a new one
  that resumes the better one's checkpoint (its spec and events name it)
  and whose first loss is the better one's at that step; the exploit is
  an event of both trials.
- A metric a script reports under a name of its own (not one of the
  coordinator's series) ranks script trials; their histories keep it.
- ASHA over script trials (their length sweep.max_steps): every decision
  is ASHA's rule over the losses the scripts reported (replayed from the
  trials' histories in the order of the sweep's events); a stopped trial's
  job is cancelled by the sweep before its end.
- PBT over script trials: the poor trial's copy resumes from the checkpoint
  the good one saved at the sweep's request (trainyard.resume_dir(); its
  first loss is the source's at that step) and trains at its own explored
  LR (its env; its loss falls at that LR's rate).
- Specs that are not sweeps are refused, naming the field.

Run by ctest with the build's bin directory as the first argument.
"""
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_test  # noqa: E402
from e2e_test import Server, wait_for, write_spec  # noqa: E402
import test_clock  # noqa: E402

PYTHON = os.environ.get("TRAINYARD_PYTHON", "")

SWEEP = """
name: %(name)s
model: {kind: mlp, hidden: [256, 256]}
data: {kind: synthetic, batch_size: 64, num_samples: 4096}
optimizer: {kind: adamw, lr: 0.001}
max_steps: %(steps)d
num_processes: 1
seed: 5
metrics_every_steps: 1
sweep:
  parameters:
    optimizer.lr: {log_uniform: [1.0e-6, 3.0e-3]}
  metric: {name: loss, goal: minimize}
  searcher: %(searcher)s
  max_trials: %(trials)d
  concurrency: %(concurrency)d
  seed: 11
"""

ENDED = ("SUCCEEDED", "FAILED", "CANCELLED")


def sweep_json(server, sweep_id):
    r = server.ctl("-o", "json", "sweep", "get", sweep_id)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def submit_sweep(test, server, path):
    r = server.ctl("sweep", "submit", "-q", path)
    test.assertEqual(r.returncode, 0, r.stderr)
    return r.stdout.strip()


def history(server, job_id):
    r = server.ctl("-o", "json", "history", job_id, "--series", "loss")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["series"]["loss"]["points"]


def at_step(points, step):
    """The first point at or past `step`: (value, unix_millis), or None."""
    for p in points:
        if p["step"] >= step:
            return p["value"], p["unix_millis"]
    return None


class Sweeps(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="trainyard-sweep-")
        cls.server = Server(cls.tmp.name, slots=4)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        cls.tmp.cleanup()

    def wait_ended(self, sweep_id, timeout):
        def ended():
            w = sweep_json(self.server, sweep_id)
            return w if w["state"] in ENDED and all(t["state"] in ENDED for t in w["trials"]) else None
        return wait_for(ended, timeout, f"sweep {sweep_id} to end",
                        lambda: json.dumps(sweep_json(self.server, sweep_id), indent=1)[-3000:])

    def test_1_asha_stops_the_poor_trials_and_keeps_the_best(self):
        s = self.server
        steps = 900
        path = write_spec(self.tmp.name, "asha.yaml", SWEEP % dict(
            name="asha", steps=steps, trials=12, concurrency=4,
            searcher="{kind: asha, reduction_factor: 3, min_steps: 100}"))
        sweep_id = submit_sweep(self, s, path)
        w = self.wait_ended(sweep_id, 240)
        self.assertEqual(w["state"], "SUCCEEDED", w["reason"])
        self.assertEqual(w["rungs"], [100, 300])
        trials = w["trials"]
        self.assertEqual([t["number"] for t in trials], list(range(12)))
        self.assertEqual(len({t["job_id"] for t in trials}), 12, "one job per trial")
        stopped = [t for t in trials if t["early_stopped"]]
        self.assertTrue(stopped, "ASHA stopped no trial")
        self.assertTrue(any(not t["early_stopped"] for t in trials), "ASHA stopped every trial")
        # A stopped trial is shown as of the decision: its step is the rung's
        # (its job trained on a few steps while its ranks stopped).
        for t in stopped:
            self.assertTrue(any(r <= t["step"] <= r + 5 for r in w["rungs"]), t)
        # `sweep watch` names the best so far.
        watched = s.ctl("sweep", "watch", sweep_id)
        best = trials[w["best_trial"]]
        self.assertIn(f"best: trial {best['number']} ({best['job_id']}), loss ", watched.stdout)
        self.assertIn("12 of 12, 4 at once", watched.stdout)
        # The sweep's events say each decision: one stop per stopped trial,
        # one "goes on" per rung a trial passed, each trial submitted once.
        ev = [e["reason"] for e in w["events"]]
        for t in trials:
            mine = [e for e in ev if e.startswith(f"trial {t['number']} ")]
            self.assertEqual(sum(e.startswith(f"trial {t['number']} submitted as {t['job_id']}") for e in mine), 1, ev)
            self.assertEqual(sum(" stopped at step " in e for e in mine), int(t["early_stopped"]), mine)
            self.assertEqual(sum(" goes on at step " in e for e in mine), t["rungs_passed"], mine)
        self.assertEqual(ev[-1], "SUCCEEDED: " + w["reason"])

        # Each trial's value at each rung, from its own history.
        hist = {t["number"]: history(s, t["job_id"]) for t in trials}
        for t in trials:
            self.assertEqual(s.job(t["job_id"])["name"], f"asha-t{t['number']}")
        # The trials side by side, as a notebook reads them.
        ids = [t["job_id"] for t in trials[:3]]
        r = s.ctl("-o", "csv", "history", "--jobs", ",".join(ids), "--series", "loss")
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertEqual(lines[0], "job,series,step,unix_millis,value")
        for t in trials[:3]:
            rows = [ln.split(",") for ln in lines[1:] if ln.startswith(t["job_id"] + ",")]
            want = hist[t["number"]]
            self.assertEqual([int(x[2]) for x in rows], [p["step"] for p in want])
            for x, p in zip(rows, want):  # csv has 9 significant digits
                self.assertAlmostEqual(float(x[4]), p["value"], delta=1e-8 * max(1.0, abs(p["value"])))
        for t in stopped:
            self.assertEqual(t["state"], "CANCELLED")
            rung = w["rungs"][t["rungs_passed"]]
            mine = at_step(hist[t["number"]], rung)
            self.assertIsNotNone(mine, f"trial {t['number']} never reached rung {rung}")
            self.assertLess(t["step"], steps, f"trial {t['number']} was stopped, yet trained to the end")
            # Those that reached the rung before it: it was not the best of them.
            before = [at_step(hist[n], rung) for n in hist if n != t["number"]]
            # (A second of slack: trials that reach a rung in the same look
            # are decided in their numbers' order.)
            before = [v for v, ms in filter(None, before) if ms <= mine[1] + 1000]
            self.assertTrue(before, f"trial {t['number']} was the first at rung {rung}, which always goes on")
            self.assertGreater(mine[0], min(before),
                               f"trial {t['number']} was stopped at rung {rung} as the best there so far")
        # The best value at a rung goes on whenever it comes (it is within
        # the best third of any set it is in).
        for k, rung in enumerate(w["rungs"]):
            reached = {n: at_step(hist[n], rung) for n in hist}
            reached = {n: v for n, v in reached.items() if v is not None}
            if reached:
                first = min(reached, key=lambda n: reached[n][0])
                self.assertGreater(trials[first]["rungs_passed"], k,
                                   f"trial {first}, the best at rung {rung}, did not go on")
        best = trials[w["best_trial"]]
        self.assertFalse(best["early_stopped"])
        self.assertEqual(best["state"], "SUCCEEDED")
        # The same hyperparameters alone (same seed) reach the same loss.
        base = SWEEP.split("sweep:")[0] % dict(name="alone", steps=steps)
        alone_path = write_spec(self.tmp.name, "alone.yaml", base)
        r = s.ctl("submit", alone_path, "--set", f"optimizer.lr={best['values']['optimizer.lr']}", "--watch",
                  timeout=240)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        alone_id = r.stdout.split()[1]
        self.assertEqual(s.job(alone_id)["step"], steps)
        self.assertAlmostEqual(history(s, alone_id)[-1]["value"], hist[best["number"]][-1]["value"], places=6)

        # Rank-seconds: ASHA against all 12 trials run to the end, at the
        # rank-seconds per step of the trials that did.
        full = [t for t in trials if t["state"] == "SUCCEEDED" and t["step"] == steps]
        per_step = sum(t["rank_seconds"] for t in full) / sum(t["step"] for t in full)
        used = sum(t["rank_seconds"] for t in trials)
        grid = 12 * steps * per_step
        print(f"\nASHA: {len(stopped)} of 12 stopped early; {used:.1f} rank-s against {grid:.1f} for all 12 "
              f"to the end ({used / grid:.0%}); best lr {best['values']['optimizer.lr']}", flush=True)
        self.assertLess(used, grid)

    def test_2_a_coordinator_killed_mid_sweep_finishes_it_starting_each_trial_once(self):
        tmp = tempfile.TemporaryDirectory(prefix="trainyard-sweep-restart-")
        self.addCleanup(tmp.cleanup)
        s = Server(tmp.name, slots=2)
        try:
            # A trial whose ranks ended while the coordinator was away is
            # given up on after reattach_timeout_s (and restarted).
            path = write_spec(tmp.name, "random.yaml", (SWEEP % dict(
                name="restart", steps=300, trials=4, concurrency=2, searcher="{kind: random}")).replace(
                "seed: 5\n", "seed: 5\nreattach_timeout_s: 5\n"))
            sweep_id = submit_sweep(self, s, path)
            wait_for(lambda: len(sweep_json(s, sweep_id)["trials"]) >= 3, 120, "a third trial to start")
            t0 = time.monotonic()
            s.proc.send_signal(signal.SIGKILL)
            s.proc.wait(timeout=30)
            s.log.close()
            s = Server(tmp.name, slots=2)
            w = wait_for(lambda: (lambda w: w if w["state"] in ENDED else None)(sweep_json(s, sweep_id)), 240,
                         "the sweep to end after the restart")
            print(f"\nthe sweep ended {time.monotonic() - t0:.1f} s after the kill -9", flush=True)
            self.assertEqual(w["state"], "SUCCEEDED", w["reason"])
            self.assertEqual([t["number"] for t in w["trials"]], list(range(4)))
            jobs = json.loads(s.ctl("-o", "json", "list").stdout)
            names = sorted(j["name"] for j in jobs if j["name"].startswith("restart-t"))
            self.assertEqual(names, [f"restart-t{n}" for n in range(4)], "a trial started twice or never")
        finally:
            s.stop()

    def test_3_cancel_keep_best_stops_every_other_trial(self):
        s = self.server
        path = write_spec(self.tmp.name, "cancel.yaml", SWEEP % dict(
            name="cancel", steps=100000, trials=20, concurrency=3, searcher="{kind: random}"))
        sweep_id = submit_sweep(self, s, path)

        def three_reporting():
            w = sweep_json(s, sweep_id)
            return w if sum(1 for t in w["trials"] if t["best_metric"] is not None) >= 3 else None
        wait_for(three_reporting, 120, "three trials reporting loss")
        # Each trial's job names its sweep and its number (trainctl get).
        first = sweep_json(s, sweep_id)["trials"][1]
        self.assertEqual(s.job(first["job_id"])["sweep"], {"id": sweep_id, "trial": 1})
        got = s.ctl("get", first["job_id"])
        self.assertIn(f"sweep:        {sweep_id}, trial 1", got.stdout)
        cancelled_at = time.monotonic()
        r = s.ctl("sweep", "cancel", sweep_id, "--keep-best")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("waiting for 2 trials' workers to stop", r.stdout)

        # It returned once they had ended, as `cancel` does for a job.
        w = sweep_json(s, sweep_id)
        others = [t for t in w["trials"] if t["number"] != w["best_trial"]]
        self.assertTrue(all(t["state"] in ENDED for t in others), json.dumps(w["trials"], indent=1))
        print(f"\ncancel --keep-best: {len(w['trials']) - 1} trials ended "
              f"{time.monotonic() - cancelled_at:.1f} s after the cancel", flush=True)
        self.assertEqual(w["state"], "CANCELLED")
        self.assertEqual(len(w["trials"]), 3, "a trial started after the cancel")
        best = w["trials"][w["best_trial"]]
        self.assertEqual(s.job(best["job_id"])["state"], "RUNNING", "the best trial was stopped too")
        for t in w["trials"]:
            if t["number"] != w["best_trial"]:
                self.assertEqual(s.job(t["job_id"])["state"], "CANCELLED")
        s.ctl("cancel", best["job_id"])
        listed = s.ctl("sweep", "list")
        self.assertIn(sweep_id, listed.stdout)
        # A sweep that has ended has nothing to cancel, and says so.
        again = s.ctl("sweep", "cancel", sweep_id)
        self.assertEqual(again.returncode, 1)
        self.assertIn(f"sweep {sweep_id} had already ended CANCELLED", again.stderr)
        self.assertIn("nothing to cancel", again.stderr)

    def test_5_pbt_replaces_the_poor_trial_by_a_copy_of_the_good_one(self):
        s = self.server
        # 1,800 steps: every step's loss is in the histories (2,000 points).
        text = (SWEEP % dict(name="pbt", steps=1800, trials=2, concurrency=2,
                             searcher="{kind: pbt, perturbation_interval: 600, quantile: 0.5}")).replace(
            "num_samples: 4096", "num_samples: 65536")
        sweep_id = submit_sweep(self, s, write_spec(self.tmp.name, "pbt.yaml", text))
        w = self.wait_ended(sweep_id, 240)
        self.assertEqual(w["state"], "SUCCEEDED", w["reason"])
        trials = w["trials"]
        copies = [t for t in trials if t["parent"] >= 0]
        self.assertTrue(copies, "no exploit: " + json.dumps(trials, indent=1))
        for t in copies:
            parent = trials[t["parent"]]
            poor = [p for p in trials if f"replaced by trial {t['number']} " in p["reason"]]
            self.assertEqual(len(poor), 1, [p["reason"] for p in trials])
            poor = poor[0]
            self.assertEqual(poor["state"], "CANCELLED")
            # It resumed the parent's checkpoint of that step...
            cks = json.loads(s.ctl("-o", "json", "checkpoints", parent["job_id"]).stdout)
            ck = [c for c in cks if c["step"] == t["resumed_from_step"] and c["ok"]]
            self.assertEqual(len(ck), 1, cks)
            spec = s.job(t["job_id"])["spec"]
            self.assertEqual(spec["checkpoint"]["resume_from"], ck[0]["path"])
            events = " | ".join(e["reason"] for e in s.job(t["job_id"])["events"])
            self.assertIn(f"resumed at step {t['resumed_from_step']} from {ck[0]['path']}", events)
            # ...so its first loss is the parent's at that step: the same
            # parameters on the same batch (its learning rate acts after).
            mine, theirs = history(s, t["job_id"]), history(s, parent["job_id"])
            first = mine[0]
            self.assertEqual(first["step"], t["resumed_from_step"] + 1)
            at = [p for p in theirs if p["step"] == first["step"]]
            self.assertTrue(at, f"the parent has no point at step {first['step']}: its steps "
                                f"{theirs[0]['step']}..{theirs[-1]['step']}; trials {json.dumps(trials)}")
            self.assertAlmostEqual(first["value"], at[0]["value"], delta=1e-6 * abs(at[0]["value"]))
            # The exploit is an event of both trials.
            for job in (poor["job_id"], parent["job_id"]):
                reasons = [e["reason"] for e in s.job(job)["events"]]
                self.assertTrue(any(f"trial {t['number']} ({t['job_id']}) takes trial {parent['number']}'s state" in r
                                    for r in reasons), reasons)
            # Its values are the parent's, explored.
            self.assertNotEqual(t["values"], parent["values"])
        best = trials[w["best_trial"]]
        print(f"\nPBT: {len(copies)} exploits; best trial {best['number']}, loss {best['best_metric']}", flush=True)

    def test_6_a_freed_slot_grows_a_live_elastic_trial_before_a_new_trial_takes_it(self):
        tmp = tempfile.TemporaryDirectory(prefix="trainyard-sweep-grow-")
        self.addCleanup(tmp.cleanup)
        s = Server(tmp.name, slots=3)
        try:
            # Elastic trials of 2 ranks on 3 slots: trial 0 (short) takes 2,
            # trial 1 starts on the 1 left; when trial 0 ends, trial 1 grows
            # into its slots (the scheduler grows a running elastic job
            # before it starts a waiting one) before trial 2 (next) starts
            # on what is left.
            text = (SWEEP % dict(name="grow", steps=100000, trials=3, concurrency=2, searcher="{kind: grid}")).replace(
                "num_processes: 1\n", "num_processes: 2\nfault_tolerance: {mode: replica, min_replicas: 1}\n"
                "elastic: {min_processes: 1}\n").replace(
                "optimizer.lr: {log_uniform: [1.0e-6, 3.0e-3]}", "max_steps: {choice: [1500, 100000, 100001]}")
            sweep_id = submit_sweep(self, s, write_spec(tmp.name, "grow.yaml", text))

            def size(job_id):
                r = (s.job(job_id).get("replicas") or {})
                return int(r.get("size", 0)) if s.job(job_id)["state"] == "RUNNING" else 0
            w = wait_for(lambda: (lambda w: w if len(w["trials"]) == 2 and size(w["trials"][1]["job_id"]) == 1
                                  and size(w["trials"][0]["job_id"]) == 2 else None)(sweep_json(s, sweep_id)),
                         120, "trial 0 on 2 ranks, trial 1 on 1")
            one = w["trials"][1]["job_id"]
            w = wait_for(lambda: (lambda w: w if len(w["trials"]) == 3 else None)(sweep_json(s, sweep_id)), 120,
                         "trial 0 to end and trial 2 to be submitted")
            ended = time.monotonic()
            wait_for(lambda: size(one) == 2, 60, "trial 1 grown to 2 ranks",
                     lambda: json.dumps(s.job(one), indent=1)[-2000:])
            print(f"\nelastic trial 1 back on 2 ranks {time.monotonic() - ended:.1f} s after trial 0 ended "
                  f"(target <= 2 s)", flush=True)
            two = w["trials"][2]["job_id"]
            wait_for(lambda: size(two) > 0, 60, "trial 2 running")
            self.assertEqual(size(two), 1, "the new trial took the slot the live trial should have grown into")
            events = " | ".join(e["reason"] for e in s.job(one)["events"])
            self.assertIn("growing to 2 ranks (slots came free)", events)
            self.assertEqual(w["trials"][0]["state"], "SUCCEEDED")
            s.ctl("sweep", "cancel", sweep_id)
        finally:
            s.stop()

    def test_7_a_metric_a_script_names_itself(self):
        # Three script trials report `accuracy` (not a series of the
        # coordinator's) as SCALE * step / steps: the sweep ranks them by it.
        script = os.path.join(self.tmp.name, "scored.py")
        with open(script, "w") as f:
            f.write("import os, sys, time\nimport trainyard\n"
                    "scale, steps = float(os.environ['SCALE']), int(sys.argv[1])\n"
                    "for step in range(1, steps + 1):\n"
                    "    time.sleep(0.01)\n"
                    "    trainyard.report(step, samples=4, loss=1.0 / step, accuracy=scale * step / steps)\n")
        spec = (f"name: scored\nscript: {{path: {script}, python: {PYTHON}, args: ['40'], env: {{SCALE: '1'}}}}\n"
                "num_processes: 1\nmetrics_every_steps: 1\nsweep:\n"
                "  parameters:\n    script.env.SCALE: {choice: ['2', '5', '3']}\n"
                "  metric: {name: accuracy, goal: maximize}\n  searcher: {kind: grid}\n"
                "  max_trials: 3\n  concurrency: 3\n")
        sweep_id = submit_sweep(self, self.server, write_spec(self.tmp.name, "scored.yaml", spec))
        w = self.wait_ended(sweep_id, 120)
        self.assertEqual(w["state"], "SUCCEEDED", w.get("reason"))
        self.assertEqual([t["state"] for t in w["trials"]], ["SUCCEEDED"] * 3, w["trials"])
        best = w["trials"][w["best_trial"]]
        self.assertEqual(best["values"], {"script.env.SCALE": "5"}, w["trials"])
        for t in w["trials"]:
            r = self.server.ctl("-o", "json", "history", t["job_id"], "--series", "accuracy")
            self.assertEqual(r.returncode, 0, r.stderr)
            points = json.loads(r.stdout)["series"]["accuracy"]["points"]
            scale = float(t["values"]["script.env.SCALE"])
            # The history keeps the script's own series; the trial's metric is its best point.
            self.assertEqual(points[-1]["step"], 40)
            self.assertAlmostEqual(points[-1]["value"], scale)
            self.assertAlmostEqual(t["best_metric"], max(p["value"] for p in points))
        r = self.server.ctl("history", w["trials"][0]["job_id"], "--series", "x" * 65)
        self.assertEqual(r.returncode, 2)
        self.assertIn("INVALID_ARGUMENT: field 'series'", r.stderr)

    def script_sweep(self, name, searcher, steps, step_seconds, trials, concurrency, seed):
        """A sweep of tests/e2e/scripts/sweep_trial.py over its $LR: its
        length, `steps`, is sweep.max_steps (the script sets its own)."""
        script = os.path.join(self.tmp.name, "sweep_trial.py")
        shutil.copy(os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts", "sweep_trial.py"), script)
        return (f"name: {name}\n"
                f"script: {{path: {script}, python: {PYTHON}, args: ['{steps}', '{step_seconds}'], "
                "env: {LR: '0.01'}}\n"
                "num_processes: 1\nmetrics_every_steps: 1\nsweep:\n"
                "  parameters:\n    script.env.LR: {log_uniform: [1.0e-3, 5.0e-2]}\n"
                f"  metric: {{name: loss, goal: minimize}}\n  searcher: {searcher}\n  max_steps: {steps}\n"
                f"  max_trials: {trials}\n  concurrency: {concurrency}\n  seed: {seed}\n")

    def test_8_asha_stops_script_trials_by_the_steps_they_report(self):
        # Four script trials, two at once, rungs at steps 10 and 20 of
        # sweep.max_steps 40: the decisions come from what the scripts report
        # with trainyard.report. Seed 16 draws LR 0.031, 0.020, 0.015 and
        # 0.0084: trials 2 and 3, which start once 0 and 1 have passed the
        # first rung, are poorer than both there, so are stopped whatever
        # the order the trials reach it in.
        s = self.server
        steps = 40
        text = self.script_sweep("sasha", "{kind: asha, reduction_factor: 2, min_steps: 10}", steps, 0.1, 4, 2, 16)
        # Without its length (the spec's max_steps is a built-in model's) it is refused, naming the field.
        for wrong, field in ((text.replace(f"  max_steps: {steps}\n", ""), "'sweep.max_steps': an ASHA sweep of"),
                             (f"max_steps: {steps}\n" + text, "'max_steps': a script sets its own length")):
            r = s.ctl("sweep", "submit", write_spec(self.tmp.name, "script-asha-bad.yaml", wrong))
            self.assertEqual(r.returncode, 2, r.stdout)
            self.assertIn("INVALID_ARGUMENT", r.stderr)
            self.assertIn(field, r.stderr)
        sweep_id = submit_sweep(self, s, write_spec(self.tmp.name, "script-asha.yaml", text))
        w = self.wait_ended(sweep_id, 150)
        self.assertEqual(w["state"], "SUCCEEDED", w["reason"])
        self.assertEqual(w["rungs"], [10, 20])
        trials = w["trials"]
        self.assertEqual([t["number"] for t in trials], list(range(4)))
        hist = {t["number"]: history(s, t["job_id"]) for t in trials}
        for t in trials:
            lr = float(t["values"]["script.env.LR"])
            # The trial ran its own LR: the script's loss at step k is 9 (1 - 2 LR)^(2 (k - 1)).
            for p in hist[t["number"]][:12]:
                self.assertAlmostEqual(p["value"], 9 * (1 - 2 * lr) ** (2 * (p["step"] - 1)),
                                       delta=1e-4 * p["value"])
        # Replay ASHA's rule over the decisions in the order the sweep made
        # them (its events), each at the trial's first report at or past the
        # rung, with the value its history holds there: every decision is the
        # rule's over the values the script reported.
        decided = [re.match(r"trial (\d+) \(job-\w+\) (goes on|stopped) at step (\d+): ", e["reason"])
                   for e in w["events"]]
        decided = [(int(m.group(1)), m.group(2) == "goes on", int(m.group(3))) for m in decided if m]
        recorded = {rung: [] for rung in w["rungs"]}
        passed = {t["number"]: 0 for t in trials}
        for number, on, step in decided:
            rung = w["rungs"][passed[number]]
            first = [p for p in hist[number] if p["step"] >= rung][0]
            self.assertEqual(step, first["step"], (number, rung, decided))
            before = sorted(recorded[rung])
            if before:  # the 100/reduction_factor-th percentile of those before it, interpolated
                at = (len(before) - 1) / 2
                lo = int(at)
                cutoff = before[lo] + (at - lo) * (before[min(lo + 1, len(before) - 1)] - before[lo])
            self.assertEqual(on, not before or first["value"] <= cutoff, (number, rung, before, first, decided))
            recorded[rung].append(first["value"])
            passed[number] += on
        stopped = [t for t in trials if t["early_stopped"]]
        self.assertTrue(stopped, "ASHA stopped no script trial: " + json.dumps(trials, indent=1))
        for t in trials:
            self.assertEqual(t["rungs_passed"], passed[t["number"]], decided)
            job = s.job(t["job_id"])
            if t["early_stopped"]:
                # Stopped at once: its job cancelled by the sweep, before its end.
                self.assertEqual(job["state"], "CANCELLED")
                self.assertIn(f"stopped by sweep {sweep_id} (ASHA, step ", job["reason"])
                self.assertLess(hist[t["number"]][-1]["step"], steps)
            else:
                self.assertEqual(job["state"], "SUCCEEDED", job["reason"])
                self.assertEqual(t["rungs_passed"], 2)
                self.assertEqual(hist[t["number"]][-1]["step"], steps)
        best = trials[w["best_trial"]]
        self.assertEqual(best["values"]["script.env.LR"],
                         max((t["values"]["script.env.LR"] for t in trials), key=float), "the largest LR fits best")
        print(f"\nscript ASHA: {len(stopped)} of 4 stopped; best LR {best['values']['script.env.LR']}", flush=True)

    def test_9_pbt_copies_a_script_trial_through_its_checkpoint(self):
        # A population of 2 script trials (seed 8 draws LR 0.020 and 0.0016:
        # the second is far the poorer), ranked every 20 of sweep.max_steps
        # 60 (9 s of steps: the two overlap though one starts seconds
        # later). The poor one is replaced by a copy that resumes from the
        # good one's checkpoint (saved when the sweep asked, through
        # trainyard.checkpoint_saved) and trains at its own explored LR.
        s = self.server
        text = self.script_sweep("spbt", "{kind: pbt, perturbation_interval: 20, quantile: 0.5}", 60, 0.15, 2, 2, 8)
        sweep_id = submit_sweep(self, s, write_spec(self.tmp.name, "script-pbt.yaml", text))
        w = self.wait_ended(sweep_id, 150)
        self.assertEqual(w["state"], "SUCCEEDED", w["reason"])
        trials = w["trials"]
        copies = [t for t in trials if t["parent"] >= 0]
        self.assertTrue(copies, "no exploit: " + json.dumps(w, indent=1)[-3000:])
        self.assertEqual(copies[0]["parent"], 0, "the poor trial 1 copies trial 0")
        for t in copies:
            parent = trials[t["parent"]]
            poor = [p for p in trials if f"replaced by trial {t['number']} " in p["reason"]]
            self.assertEqual(len(poor), 1, [p["reason"] for p in trials])
            self.assertEqual(s.job(poor[0]["job_id"])["state"], "CANCELLED")
            # The checkpoint the script saved at the sweep's request...
            cks = json.loads(s.ctl("-o", "json", "checkpoints", parent["job_id"]).stdout)
            ck = [c for c in cks if c["step"] == t["resumed_from_step"] and c["ok"]]
            self.assertEqual(len(ck), 1, cks)
            job = s.job(t["job_id"])
            # (A copy may be replaced in its turn; else it trains to the end.)
            replaced = "replaced by trial" in t["reason"]
            self.assertEqual(job["state"], "CANCELLED" if replaced else "SUCCEEDED", job["reason"])
            self.assertEqual(job["spec"]["checkpoint"]["resume_from"], ck[0]["path"])
            # ...is the copy's trainyard.resume_dir(), and its env its own LR.
            lr = float(t["values"]["script.env.LR"])
            self.assertEqual(job["spec"]["script"]["env"]["LR"], t["values"]["script.env.LR"])
            self.assertNotEqual(t["values"], parent["values"])
            log = s.ctl("logs", t["job_id"]).stdout
            self.assertIn(f"resumed at step {t['resumed_from_step']} from {ck[0]['path']}", log)
            mine, theirs = history(s, t["job_id"]), history(s, parent["job_id"])
            # Its first loss is the parent's at that step (the same w)...
            self.assertEqual(mine[0]["step"], t["resumed_from_step"] + 1)
            at = [p for p in theirs if p["step"] == mine[0]["step"]]
            self.assertTrue(at, f"the parent has no point at step {mine[0]['step']}")
            self.assertAlmostEqual(mine[0]["value"], at[0]["value"], delta=1e-6 * at[0]["value"])
            # ...and from there it falls at its own LR's rate, (1 - 2 LR)^2 a step.
            if not replaced:
                self.assertEqual(mine[-1]["step"], 60)
            for a, b in zip(mine, mine[1:]):
                self.assertAlmostEqual(b["value"] / a["value"], (1 - 2 * lr) ** 2, delta=1e-4)
            r = s.ctl("-o", "json", "history", t["job_id"], "--series", "lr")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual({p["value"] for p in json.loads(r.stdout)["series"]["lr"]["points"]}, {lr})
        print(f"\nscript PBT: {len(copies)} exploits; trial {copies[0]['number']} at LR "
              f"{copies[0]['values']['script.env.LR']} from trial 0's step {copies[0]['resumed_from_step']}",
              flush=True)

    def test_4_bad_sweeps_are_refused_naming_the_field(self):
        s = self.server
        base = SWEEP % dict(name="bad", steps=100, trials=2, concurrency=1, searcher="{kind: random}")
        cases = [
            (base.split("sweep:")[0], "sweep"),
            (base.replace("{name: loss,", "{name: 'two words',"), "sweep.metric.name"),
            (base.replace("[1.0e-6, 3.0e-3]", "[3.0e-3, 1.0e-6]"), "sweep.parameters.optimizer.lr"),
            (base.replace("optimizer.lr:", "optimizer.nonsense:"), "optimizer.nonsense"),
        ]
        for i, (text, field) in enumerate(cases):
            r = s.ctl("sweep", "submit", write_spec(self.tmp.name, f"bad{i}.yaml", text))
            self.assertEqual(r.returncode, 2, r.stdout)
            self.assertIn("INVALID_ARGUMENT", r.stderr)
            self.assertIn(field, r.stderr)
        r = s.ctl("sweep", "get", "sweep-nothere")
        self.assertEqual(r.returncode, 2)
        self.assertIn("NOT_FOUND", r.stderr)


if __name__ == "__main__":
    e2e_test.BIN = sys.argv.pop(1)
    test_clock.main()
