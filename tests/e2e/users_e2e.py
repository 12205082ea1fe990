"""End to end: a server shared by two users and an admin (--policy-file).

Ownership (a user cannot see, cancel, checkpoint or read the logs of
another's job; refusals are events), allowed roots per user, a forged owner,
a quota holding a job QUEUED with its reason, SIGHUP adding a user and
removing another without a restart, and priority preemption: a high-priority
job preempts a low-priority preemptible one, which resumes and ends with the
weights of an uninterrupted run.

Run by ctest with the build's bin directory as the first argument.
"""
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_test  # noqa: E402
from e2e_test import Server, read, wait_for, write_spec  # noqa: E402
import test_clock  # noqa: E402

LONG = """
name: %(name)s
model: {kind: mlp, hidden: [64]}
data: {kind: synthetic, batch_size: 16, num_samples: 2048, seed: 7}
optimizer: {kind: adamw, lr: 0.003}
max_steps: %(steps)d
num_processes: %(procs)d
metrics_every_steps: 1
priority: %(priority)s
preemptible: %(preemptible)s
"""


def spec(name, steps=100000, procs=1, priority="normal", preemptible="false", extra=""):
    return LONG % dict(name=name, steps=steps, procs=procs, priority=priority, preemptible=preemptible) + extra


def policy(users, quotas, fields=None, extra=""):
    """A policy file's text: `fields` adds "key: value" fields to a user's
    entry, `extra` top-level lines."""
    lines = ["users:"]
    for name, (token, groups, role, roots) in users.items():
        more = "".join(f", {f}" for f in (fields or {}).get(name, []))
        lines.append(f"  - {{name: {name}, token_sha256: \"{hashlib.sha256(token.encode()).hexdigest()}\", "
                     f"groups: [{', '.join(groups)}], role: {role}, roots: [{', '.join(roots)}]{more}}}")
    lines.append("priority_classes: {low: 0, normal: 100, high: 1000}")
    lines.append("quotas:")
    lines.append("  users: {" + ", ".join(f"{u}: {{slots: {n}}}" for u, n in quotas.items()) + "}")
    return "\n".join(lines) + "\n" + extra


def digest_of(server, token, job_id, step):
    listed = json.loads(server.ctl("--token-file", token, "-o", "json", "checkpoints", job_id).stdout)
    final = [c for c in listed if c["ok"] and c["step"] == step and c["type"] == "full"]
    assert final, f"{job_id}: no FULL checkpoint at step {step}: {listed}"
    with open(os.path.join(final[-1]["path"], "model.safetensors"), "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


class SharedServer(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="trainyard-users-")
        d = self.tmp.name
        self.roots = {u: os.path.join(d, u) for u in ("alice", "bob", "carol")}
        for r in self.roots.values():
            os.makedirs(r)
        self.tokens = {}
        for u in ("alice", "bob", "ops", "carol", "mallory"):
            self.tokens[u] = write_spec(d, f"{u}.token", f"token-of-{u}-{os.getpid()}\n")
        self.users = {
            "alice": (f"token-of-alice-{os.getpid()}", ["vision"], "user", [self.roots["alice"]]),
            "bob": (f"token-of-bob-{os.getpid()}", ["nlp"], "user", [self.roots["bob"]]),
            "ops": (f"token-of-ops-{os.getpid()}", [], "admin", []),
            "mallory": (f"token-of-mallory-{os.getpid()}", [], "user", [self.roots["bob"]]),
        }
        self.policy_path = write_spec(d, "policy.yaml", policy(self.users, {"bob": 1}))
        # The state directory is never a user's: the roots lie beside it.
        self.state = os.path.join(d, "state")
        os.makedirs(self.state)
        self.server = Server(self.state, slots=2,
                             extra=("--policy-file", self.policy_path, "--preemption-min-run-time-s", "0"))

    def tearDown(self):
        self.server.stop()
        self.tmp.cleanup()

    def as_(self, user, *args, timeout=300):
        return self.server.ctl("--token-file", self.tokens[user], *args, timeout=timeout)

    def submit(self, user, name, text):
        path = write_spec(self.roots.get(user, self.tmp.name), name + ".yaml", text)
        r = self.as_(user, "-o", "json", "submit", path)
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout)["id"]

    def job(self, user, job_id):
        r = self.as_(user, "-o", "json", "get", job_id)
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout)

    def test_a_users_see_and_act_on_their_own_jobs_only(self):
        s = self.server
        a = self.submit("alice", "a", spec("alice-job"))
        wait_for(lambda: self.job("alice", a)["step"] > 0, 120, "alice's job to train")
        self.assertEqual(self.job("alice", a)["owner"], "alice")
        self.assertEqual(self.job("alice", a)["group"], "vision")
        for args, action in [(("get", a), "see"), (("cancel", a), "cancel"), (("checkpoint", a), "checkpoint"),
                             (("logs", a), "read the logs of"), (("watch", a), "watch"),
                             (("checkpoints", a), "see the checkpoints of"), (("diagnose", a), "diagnose")]:
            # Not his to see: not found, as a job that does not exist.
            r = self.as_("bob", *args, timeout=60)
            self.assertEqual(r.returncode, 2, f"bob {args}: {r.stdout}")
            self.assertIn("NOT_FOUND", r.stderr)
            self.assertIn(f"job {a} not found", r.stderr)
        r = self.as_("bob", "get", "job-00000000", timeout=60)
        self.assertIn("NOT_FOUND", r.stderr)
        self.assertIn("job job-00000000 not found", r.stderr)
        self.assertEqual(self.job("alice", a)["state"], "RUNNING", "bob's cancel did nothing")
        # Alice's events name bob's first refusal, once.
        events = [e["reason"] for e in self.job("alice", a)["events"]]
        refused = [e for e in events if e.startswith("refused: user bob")]
        self.assertEqual(len(refused), 1, events)
        self.assertIn(f"refused: user bob may not see job {a}", refused[0])
        # Lists: each their own; an admin everyone's; no group visibility here.
        bob_list = json.loads(self.as_("bob", "-o", "json", "list").stdout)
        self.assertEqual([j["id"] for j in bob_list], [])
        r = self.as_("bob", "list", "--all-users")
        self.assertEqual(r.returncode, 2)
        self.assertIn("may not list other users' jobs", r.stderr)
        self.assertIn(a, [j["id"] for j in json.loads(self.as_("alice", "-o", "json", "list").stdout)])
        everyone = json.loads(self.as_("ops", "-o", "json", "list", "--all-users").stdout)
        self.assertEqual([(j["id"], j["owner"]) for j in everyone], [(a, "alice")])
        # No token, a wrong token.
        r = s.ctl("list")
        self.assertEqual(r.returncode, 2)
        self.assertIn("UNAUTHENTICATED", r.stderr)
        bad = write_spec(self.tmp.name, "bad.token", "not-a-token\n")
        self.assertIn("invalid token", s.ctl("--token-file", bad, "list").stderr)
        # A forged owner is refused; the job is not created.
        r = self.as_("bob", "submit", write_spec(self.roots["bob"], "forged.yaml", spec("forged") + "owner: alice\n"))
        self.assertEqual(r.returncode, 2)
        self.assertIn("spec field 'owner': a job belongs to the user who submits it", r.stderr)
        self.assertEqual(json.loads(self.as_("ops", "-o", "json", "list", "--all-users").stdout)[-1]["id"], a)
        # Paths outside the user's roots are refused, naming the field.
        into_alice = spec("sneaky", extra=f"checkpoint: {{project_dir: {self.roots['alice']}/stolen}}\n")
        r = self.as_("bob", "submit", write_spec(self.roots["bob"], "sneaky.yaml", into_alice))
        self.assertEqual(r.returncode, 2)
        self.assertIn("checkpoint.project_dir", r.stderr)
        own = spec("own-dir", steps=3, extra=f"checkpoint: {{project_dir: {self.roots['bob']}/run}}\n")
        self.assertEqual(self.as_("bob", "submit", write_spec(self.roots["bob"], "own.yaml", own)).returncode, 0)
        # Alice may cancel her own job.
        r = self.as_("alice", "cancel", a)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn('trainyard_permission_denied_total{user="bob"}', s.scrape())

    def test_b_quota_holds_a_job_and_sighup_changes_users_without_a_restart(self):
        s = self.server
        # A job larger than bob's whole quota could never start: refused at
        # submit, naming the quota (as Slurm's EnforcePartLimits).
        big = write_spec(self.roots.get("bob", self.tmp.name), "big.yaml", spec("bob-big", steps=5, procs=2))
        r = self.as_("bob", "submit", big)
        self.assertEqual(r.returncode, 2, r.stdout)
        self.assertIn("the job needs 2 slots at least, more than user bob's whole quota (slots: 1)", r.stderr)
        # One that fits it waits while the quota is in use.
        first = self.submit("bob", "b1", spec("bob-long"))
        wait_for(lambda: self.job("bob", first)["step"] > 0, 120, "bob's first job to train")
        b = self.submit("bob", "b", spec("bob-job", steps=5))
        job = self.job("bob", b)
        self.assertEqual(job["state"], "QUEUED")
        self.assertEqual(job["reason"], "waiting: user bob uses 1 of 1 slots; this job needs 1")
        queue = json.loads(self.as_("bob", "-o", "json", "queue").stdout)
        self.assertEqual([(q["id"], q["position"], q["priority_class"]) for q in queue], [(b, 1, "normal")])
        self.assertEqual(self.as_("mallory", "list").returncode, 0)
        self.assertEqual(self.as_("carol", "list").returncode, 2, "carol is not a user yet")
        # Carol joins, mallory leaves, bob's quota grows: SIGHUP, same process.
        users = dict(self.users)
        del users["mallory"]
        users["carol"] = (f"token-of-carol-{os.getpid()}", ["vision"], "user", [self.roots["carol"]])
        with open(self.policy_path, "w") as f:
            f.write(policy(users, {"bob": 2}))
        pid = s.proc.pid
        s.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: self.as_("carol", "list").returncode == 0, 30, "carol's token to be accepted")
        r = self.as_("mallory", "list")
        self.assertEqual(r.returncode, 2)
        self.assertIn("invalid token", r.stderr)
        terminal = ("SUCCEEDED", "FAILED", "CANCELLED")
        wait_for(lambda: self.job("bob", b)["state"] in terminal, 120, "bob's job to run under his new quota",
                 lambda: f"{self.job('bob', b)}\nserver log:\n{read(s.log.name)[-4000:]}")
        job = self.job("bob", b)
        self.assertEqual(job["state"], "SUCCEEDED", " | ".join(e["reason"] for e in job["events"]))
        self.assertEqual(self.as_("bob", "cancel", first).returncode, 0)
        self.assertEqual(s.proc.pid, pid)
        self.assertIsNone(s.proc.poll())
        # A policy file with an error keeps the previous policy.
        with open(self.policy_path, "w") as f:
            f.write("users: [{name: x, token_sha256: nothex}]\n")
        s.proc.send_signal(signal.SIGHUP)
        log = os.path.join(self.state, "server.log")
        wait_for(lambda: "token_sha256" in read(log), 30, "the reload error in the server's log")
        self.assertEqual(self.as_("carol", "list").returncode, 0)

    def test_c_high_priority_preempts_low_which_resumes_with_no_step_lost(self):
        s = self.server
        steps = 4000  # long enough that it is still training when the high-priority job comes
        checkpointed = "checkpoint: {every_steps: 4000}\n"
        low = self.submit("alice", "low", spec("low", steps=steps, procs=2, priority="low", preemptible="true",
                                               extra=checkpointed))
        wait_for(lambda: self.job("alice", low)["step"] >= 20, 120, "the low-priority job to train")
        high = self.submit("ops", "high", spec("high", steps=5, procs=2, priority="high"))
        wait_for(lambda: self.job("ops", high)["state"] == "SUCCEEDED", 180, "the high-priority job to run")
        wait_for(lambda: self.job("alice", low)["state"] in ("SUCCEEDED", "FAILED"), 300, "the low job to end")
        job = self.job("alice", low)
        events = " | ".join(e["reason"] for e in job["events"])
        self.assertEqual(job["state"], "SUCCEEDED", events)
        self.assertIn(f"preempted for job {high} (priority 1000", events)
        self.assertIn("preempted for a job of higher priority: resumes from its latest checkpoint", events)
        self.assertGreaterEqual(job["attempt"], 2)
        # It resumed where it was preempted: from the checkpoint it saved then.
        m = re.search(r"resumed at step (\d+) from", events)
        self.assertIsNotNone(m, events)
        resumed = int(m.group(1))
        self.assertGreaterEqual(resumed, 20)
        listed = json.loads(self.as_("alice", "-o", "json", "checkpoints", low).stdout)
        self.assertIn(resumed, [c["step"] for c in listed if c["ok"] and c["attempt"] == 1])
        self.assertIn('trainyard_preemptions_total{user="alice"} 1', s.scrape())
        # The same job uninterrupted ends with the same weights.
        ref = self.submit("alice", "ref", spec("ref", steps=steps, procs=2, priority="low", extra=checkpointed))
        wait_for(lambda: self.job("alice", ref)["state"] == "SUCCEEDED", 300, "the reference run")
        self.assertEqual(digest_of(s, self.tokens["alice"], low, steps), digest_of(s, self.tokens["alice"], ref, steps))


class GroupVisibility(unittest.TestCase):
    """group_visibility: a member of the owner's group may get, list and
    read the logs of a job, but not cancel, resume, checkpoint or fetch its
    join-info, and never sees its script's env values. The queue shows each
    user their own jobs; users with no usage are ordered by submit time."""

    def test_members_look_but_do_not_act(self):
        with tempfile.TemporaryDirectory(prefix="trainyard-users-group-") as d:
            tokens, users = {}, {}
            for u, groups in (("alice", ["vision"]), ("carol", ["vision"]), ("bob", ["nlp"])):
                tokens[u] = write_spec(d, f"{u}.token", f"token-of-{u}-{os.getpid()}\n")
                users[u] = (f"token-of-{u}-{os.getpid()}", groups, "user", [d])
            users["ops"] = (f"token-of-ops-{os.getpid()}", [], "admin", [])
            tokens["ops"] = write_spec(d, "ops.token", f"token-of-ops-{os.getpid()}\n")
            pol = write_spec(d, "policy.yaml",
                             policy(users, {}, extra="group_visibility: true\nshared_account: true\n"))
            state = os.path.join(d, "state")
            os.makedirs(state)
            s = Server(state, slots=1, extra=("--policy-file", pol))
            try:
                def as_(u, *args):
                    return s.ctl("--token-file", tokens[u], *args, timeout=120)

                def submit(u, name, text):
                    r = as_(u, "-o", "json", "submit", write_spec(d, f"{name}.yaml", text))
                    self.assertEqual(r.returncode, 0, r.stderr)
                    return json.loads(r.stdout)["id"]

                running = submit("alice", "running", spec("running"))
                wait_for(lambda: json.loads(as_("alice", "-o", "json", "get", running).stdout)["step"] > 0, 120,
                         "alice's job to train")
                script = write_spec(d, "loop.py", "import time\ntime.sleep(60)\n")
                secret = submit("alice", "secret", f"name: secret\nscript: {{path: {script}, "
                                "env: {API_KEY: s3cret-value}}\nnum_processes: 1\n")
                bob_job = submit("bob", "bobq", spec("bob-queued"))
                carol_job = submit("carol", "carolq", spec("carol-queued"))
                # Carol sees alice's jobs, and their logs, but not the script's secret.
                r = as_("carol", "-o", "json", "get", secret)
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertNotIn("s3cret-value", r.stdout)
                self.assertIn("(hidden)", r.stdout)
                self.assertIn("s3cret-value", as_("alice", "-o", "json", "get", secret).stdout)
                self.assertEqual(as_("carol", "logs", running).returncode, 0)
                listed = [j["id"] for j in json.loads(as_("carol", "-o", "json", "list", "-A").stdout)]
                self.assertIn(running, listed)
                for args in (("cancel", running), ("checkpoint", running), ("join-info", running),
                             ("resume", running)):
                    r = as_("carol", *args)
                    self.assertEqual(r.returncode, 2, f"carol {args}: {r.stdout}")
                    self.assertIn("PERMISSION_DENIED", r.stderr, args)
                # Bob, of another group, sees none of it.
                r = as_("bob", "get", running)
                self.assertIn("NOT_FOUND", r.stderr)
                # The queue: each their own; an admin sees both, bob's first
                # (neither has usage: the earlier submission).
                bob_queue = [q["id"] for q in json.loads(as_("bob", "-o", "json", "queue").stdout)]
                self.assertEqual(bob_queue, [bob_job])
                order = [q["id"] for q in json.loads(as_("ops", "-o", "json", "queue", "-A").stdout)]
                self.assertLess(order.index(bob_job), order.index(carol_job), order)
            finally:
                s.stop()


class MutualTls(unittest.TestCase):
    """Under mutual TLS, a client certificate whose subject is a user's
    tls_subject is that user; one that names nobody needs a token; a call
    without a certificate, or with the server's own, is refused; the workers
    connect with the CA alone (the server's key is on no command line)."""

    def test_the_certificate_names_the_user(self):
        with tempfile.TemporaryDirectory(prefix="trainyard-users-tls-") as d:
            def openssl(*args):
                subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=d)

            openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
                    "-days", "2", "-subj", "/CN=trainyard-test-ca")
            with open(os.path.join(d, "ext.cnf"), "w") as f:
                f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n")
            for name, subject in (("localhost", "/CN=localhost"), ("alice", "/O=Example/CN=alice"),
                                  ("bob", "/CN=bob"), ("stranger", "/CN=stranger")):
                openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
                        "-subj", subject)
                openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                        "-CAcreateserial", "-out", f"{name}.pem", "-days", "2", "-extfile", "ext.cnf")
            bob_token = write_spec(d, "bob.token", "token-of-bob-over-tls\n")
            users = {"alice": ("token-of-alice-over-tls", ["vision"], "user", []),
                     "bob": ("token-of-bob-over-tls", ["nlp"], "user", [])}
            pol = write_spec(d, "policy.yaml", policy(users, {}, {"alice": ['tls_subject: "CN=alice,O=Example"']}))
            s = Server(d, extra=["--policy-file", pol, "--tls-cert", os.path.join(d, "localhost.pem"),
                                 "--tls-key", os.path.join(d, "localhost.key"),
                                 "--tls-client-ca", os.path.join(d, "ca.pem")])
            try:
                def as_cert(name, *args):
                    return s.ctl("--ca", os.path.join(d, "ca.pem"), "--cert", os.path.join(d, f"{name}.pem"),
                                 "--key", os.path.join(d, f"{name}.key"), *args)

                r = as_cert("alice", "-o", "json", "submit", write_spec(d, "a.yaml", spec("tls-alice", steps=300)))
                self.assertEqual(r.returncode, 0, r.stderr)
                job_id = json.loads(r.stdout)["id"]
                self.assertEqual(json.loads(as_cert("alice", "-o", "json", "get", job_id).stdout)["owner"], "alice")
                wait_for(lambda: e2e_test.worker_pids(job_id), 60, "the job's worker")
                for pid in e2e_test.worker_pids(job_id):
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        args = f.read().split(b"\0")
                    self.assertIn(b"--coordinator-ca", args)
                    self.assertNotIn(b"--tls-key", args)
                    self.assertFalse([a for a in args if b"localhost.key" in a], args)
                for name, why in (("stranger", "needs a token"), ("bob", "needs a token"),
                                  ("localhost", "the server's own")):
                    r = as_cert(name, "list")
                    self.assertEqual(r.returncode, 2, f"{name}: {r.stdout}")
                    self.assertIn("UNAUTHENTICATED", r.stderr)
                    self.assertIn(why, r.stderr)
                r = s.ctl("--ca", os.path.join(d, "ca.pem"), "--token-file", bob_token, "list")
                self.assertEqual(r.returncode, 2, r.stdout)
                self.assertIn("requires a client certificate", r.stderr)
                # A token names its own user, whatever the certificate says.
                r = as_cert("alice", "--token-file", bob_token, "get", job_id)
                self.assertEqual(r.returncode, 2)
                self.assertIn(f"job {job_id} not found", r.stderr)
                w = as_cert("alice", "watch", job_id)
                self.assertEqual(w.returncode, 0, w.stdout + w.stderr)
            finally:
                s.stop()


if __name__ == "__main__":
    e2e_test.BIN = os.path.abspath(sys.argv.pop(1))
    test_clock.main()
