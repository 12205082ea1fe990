"""Webhooks end to end: a real server calling a real local HTTP receiver.

- A job with notify.urls: the receiver gets a POST when it runs and when it
  succeeds, its JSON body names the job and the state, its
  X-Trainyard-Signature-256 verifies with the server's secret (HMAC-SHA256),
  and each delivery is in the job's events, the URL shown as
  scheme://host:port and the answer as its status class.
- A receiver answering 500 twice: the third try is delivered (the events
  say so; the same delivery id each time).
- A receiver that hangs: other calls are answered while it holds the
  request, and the delivery goes through once it answers again.
- A sweep with a budget of rank-hours and webhooks: it stops its trials
  once the budget is spent, and announces each new best trial and its end;
  its events list its trials, the budget, its end and each delivery.
- The policy's webhooks (every job's, and a user's for that user's jobs)
  are called for jobs that name none, and again as reloaded on SIGHUP;
  their outcomes are in the server's log, not in the job's events.
- URLs that are not http(s), that hold credentials or whose host the
  operator did not allow are refused at submit, naming the field.
- On a server with no --notify-allowed-host, the local network in any
  spelling (127.1, 2130706433, [::1], ...) is refused at submit, naming the
  field, a job's and a sweep's; a name that resolves to it (this machine's
  own) is refused at delivery, the receiver never called, and the job's
  event says so without a word of libcurl's.

Run by ctest with the build's bin directory as the first argument.
"""
import hashlib
import hmac
import http.server
import json
import os
import signal
import socket
import sys
import tempfile
import threading
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_test  # noqa: E402
from e2e_test import Server, wait_for, write_spec  # noqa: E402
import test_clock  # noqa: E402

SECRET = "a-webhook-secret-of-the-operator"

JOB = """
name: %(name)s
model: {kind: mlp, hidden: [32]}
data: {kind: synthetic, batch_size: 16, num_samples: 480}
max_steps: %(steps)d
notify:
  urls: [%(urls)s]
  on: [%(on)s]
"""


class Receiver(http.server.ThreadingHTTPServer):
    """Records every POST; /flaky answers 500 to its first two; /hang holds
    the request until `release` is set."""

    def __init__(self):
        super().__init__(("127.0.0.1", 0), Handler)
        self.requests = []
        self.lock = threading.Lock()
        self.flaky_left = 2
        self.release = threading.Event()
        self.holding = threading.Event()
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def url(self, path):
        return f"http://127.0.0.1:{self.server_address[1]}{path}"

    def shown(self):
        """How a job's events name its URLs: scheme://host:port."""
        return f"http://127.0.0.1:{self.server_address[1]}"

    def got(self, path):
        with self.lock:
            return [r for r in self.requests if r["path"] == path]


class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802
        body = self.rfile.read(int(self.headers["Content-Length"]))
        s = self.server
        with s.lock:
            s.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
            status = 200
            if self.path == "/flaky" and s.flaky_left > 0:
                s.flaky_left -= 1
                status = 500
        if self.path == "/hang" and not s.release.is_set():
            s.holding.set()
            s.release.wait(60)
            s.holding.clear()
            return  # no answer: the connection closes
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


class Webhooks(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="trainyard-notify-")
        cls.receiver = Receiver()
        secret = write_spec(cls.tmp.name, "notify.secret", SECRET + "\n")
        cls.server = Server(cls.tmp.name, slots=2, extra=("--notify-secret-file", secret,
                                                           "--notify-allowed-host", "127.0.0.1"))

    @classmethod
    def tearDownClass(cls):
        cls.receiver.release.set()
        cls.server.stop()
        cls.receiver.shutdown()
        cls.tmp.cleanup()

    def submit(self, name, steps, urls, on):
        text = JOB % dict(name=name, steps=steps, urls=", ".join(urls), on=", ".join(on))
        r = self.server.ctl("-o", "json", "submit", write_spec(self.tmp.name, name + ".yaml", text))
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout)["id"]

    def events(self, job_id):
        return [e["reason"] for e in self.server.job(job_id)["events"]]

    def test_1_running_and_succeeded_are_posted_signed_and_recorded(self):
        url = self.receiver.url("/ok")
        job = self.submit("hooked", 200, [url], ["RUNNING", "SUCCEEDED"])
        wait_for(lambda: len(self.receiver.got("/ok")) >= 2, 60, "two deliveries")
        got = self.receiver.got("/ok")
        self.assertEqual(len(got), 2)
        bodies = [json.loads(r["body"]) for r in got]
        self.assertEqual([b["event"] for b in bodies], ["RUNNING", "SUCCEEDED"])
        for r, b in zip(got, bodies):
            self.assertEqual(b["job"]["id"], job)
            self.assertEqual(b["job"]["state"], b["event"])
            self.assertEqual(r["headers"]["X-Trainyard-Event"], b["event"])
            self.assertEqual(r["headers"]["Content-Type"], "application/json")
            want = "sha256=" + hmac.new(SECRET.encode(), r["body"], hashlib.sha256).hexdigest()
            self.assertTrue(hmac.compare_digest(r["headers"]["X-Trainyard-Signature-256"], want))
            forged = "sha256=" + hmac.new(b"another-key", r["body"], hashlib.sha256).hexdigest()
            self.assertNotEqual(r["headers"]["X-Trainyard-Signature-256"], forged)
        self.assertEqual(bodies[1]["job"]["step"], 200)
        self.assertNotEqual(got[0]["headers"]["X-Trainyard-Delivery"], got[1]["headers"]["X-Trainyard-Delivery"])
        shown = self.receiver.shown()
        wait_for(lambda: sum(e.startswith(f"webhook {shown} ") for e in self.events(job)) == 2, 30,
                 "both in the job's events")
        ev = self.events(job)
        self.assertIn(f"webhook {shown} (RUNNING): delivered, HTTP 2xx", ev)
        self.assertIn(f"webhook {shown} (SUCCEEDED): delivered, HTTP 2xx", ev)
        self.assertFalse([e for e in ev if "/ok" in e], "the URL's path is shown")

    def test_2_a_receiver_answering_500_gets_the_delivery_again(self):
        url = self.receiver.url("/flaky")
        job = self.submit("flaky", 50, [url], ["SUCCEEDED"])
        wait_for(lambda: any("(SUCCEEDED): delivered" in e for e in self.events(job)), 60,
                 "the delivery after two 500s", lambda: "\n".join(self.events(job)))
        got = self.receiver.got("/flaky")
        self.assertEqual(len(got), 3)
        self.assertEqual(len({r["headers"]["X-Trainyard-Delivery"] for r in got}), 1, "one delivery, three tries")
        self.assertEqual(len({r["body"] for r in got}), 1)
        self.assertIn(f"webhook {self.receiver.shown()} (SUCCEEDED): delivered, HTTP 2xx at try 3", self.events(job))

    def test_3_a_hanging_receiver_delays_no_call(self):
        url = self.receiver.url("/hang")
        job = self.submit("hang", 50, [url], ["SUCCEEDED"])
        wait_for(self.receiver.holding.is_set, 60, "the receiver holding the delivery")
        # While it holds the request: the server answers, and runs jobs.
        other = self.submit("meanwhile", 30, [], ["SUCCEEDED"])
        r = self.server.ctl("watch", other, timeout=60)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(self.server.job(job)["state"], "SUCCEEDED")
        self.assertTrue(self.receiver.holding.is_set(), "the receiver let go before the calls were answered")
        self.receiver.release.set()
        wait_for(lambda: any("(SUCCEEDED): delivered" in e for e in self.events(job)), 60,
                 "the delivery once the receiver answers", lambda: "\n".join(self.events(job)))

    def test_5_a_sweep_announces_its_bests_and_its_end_and_keeps_to_its_budget(self):
        url = self.receiver.url("/sweep")
        text = (JOB % dict(name="budget", steps=100000, urls="", on="SUCCEEDED")).replace(
            "notify:\n  urls: []\n  on: [SUCCEEDED]\n", "") + f"""
sweep:
  parameters:
    optimizer.lr: {{log_uniform: [1.0e-5, 1.0e-2]}}
  searcher: {{kind: random}}
  max_trials: 10
  concurrency: 2
  max_rank_hours: 0.002
  notify: {{urls: [{url}], on: [BEST, SUCCEEDED]}}
"""
        r = self.server.ctl("sweep", "submit", "-q", write_spec(self.tmp.name, "budget.yaml", text))
        self.assertEqual(r.returncode, 0, r.stderr)
        sweep_id = r.stdout.strip()

        def ended():
            w = json.loads(self.server.ctl("-o", "json", "sweep", "get", sweep_id).stdout)
            return w if w["state"] == "SUCCEEDED" and all(t["state"] == "CANCELLED" for t in w["trials"]) else None
        w = wait_for(ended, 60, "the sweep to spend its budget")
        self.assertLess(len(w["trials"]), 10, "trials started past the budget")
        used = sum(t["rank_seconds"] for t in w["trials"])
        self.assertGreaterEqual(used, 0.002 * 3600)
        self.assertIn("budget", w["reason"])
        self.assertTrue(all("budget of 0.002 rank-hours" in t["reason"] for t in w["trials"]), w["trials"])
        wait_for(lambda: any(json.loads(x["body"])["event"] == "SUCCEEDED" for x in self.receiver.got("/sweep")), 30,
                 "the sweep's end announced")
        got = self.receiver.got("/sweep")
        events = [json.loads(x["body"])["event"] for x in got]
        self.assertEqual(events.count("SUCCEEDED"), 1, events)
        self.assertGreaterEqual(events.count("BEST"), 1, events)
        last = json.loads(got[-1]["body"])
        self.assertEqual(last["sweep"]["id"], sweep_id)
        self.assertEqual(last["sweep"]["best_trial"], w["best_trial"])
        self.assertEqual(last["sweep"]["best_job_id"], w["trials"][w["best_trial"]]["job_id"])
        for x in got:
            want = "sha256=" + hmac.new(SECRET.encode(), x["body"], hashlib.sha256).hexdigest()
            self.assertTrue(hmac.compare_digest(x["headers"]["X-Trainyard-Signature-256"], want))
        # The sweep's events: its trials, the budget, its end, each delivery.
        def reasons():
            return [e["reason"] for e in json.loads(self.server.ctl("-o", "json", "sweep", "get", sweep_id).stdout)[
                "events"]]
        shown = self.receiver.shown()
        wait_for(lambda: f"webhook {shown} (SUCCEEDED): delivered, HTTP 2xx" in reasons(), 30,
                 "the end's delivery in the sweep's events", lambda: "\n".join(reasons()))
        ev = reasons()
        self.assertTrue(ev[0].startswith("submitted: searcher random, up to 10 trials"), ev)  # a server without users
        for t in w["trials"]:
            self.assertEqual(sum(e.startswith(f"trial {t['number']} submitted as {t['job_id']} (optimizer.lr=")
                                 for e in ev), 1, ev)
        self.assertTrue(any("rank-hours used of its 0.002" in e for e in ev), ev)
        self.assertIn("SUCCEEDED: " + w["reason"], ev)
        self.assertEqual(sum(e.startswith(f"webhook {shown} (BEST): delivered") for e in ev), events.count("BEST"),
                         ev)
        table = self.server.ctl("sweep", "get", sweep_id).stdout
        self.assertIn("events:", table)
        self.assertIn(f"webhook {shown} (SUCCEEDED): delivered", table)

    def test_6_the_policys_webhooks_are_called_for_every_job_and_its_users(self):
        # The operator's policy: /ops for every job's failure or success,
        # /alice for alice's successes; then, reloaded (SIGHUP), /alice2.
        d = os.path.join(self.tmp.name, "policy-server")
        os.makedirs(d)
        tokens = {u: write_spec(d, u + ".token", f"token-of-{u}\n") for u in ("alice", "bob")}

        def policy(alice_url):
            users = "".join(f"  - {{name: {u}, token_sha256: \"{hashlib.sha256(f'token-of-{u}'.encode()).hexdigest()}\""
                            + (f", notify: {{urls: [{alice_url}], on: [SUCCEEDED]}}" if u == "alice" else "")
                            + "}\n" for u in tokens)
            return (f"users:\n{users}notify: {{urls: [{self.receiver.url('/ops')}], on: [FAILED, SUCCEEDED]}}\n")
        policy_file = write_spec(d, "policy.yaml", policy(self.receiver.url("/alice")))
        server = Server(d, slots=2, extra=("--policy-file", policy_file))
        try:
            def run(user, name):
                text = "name: %s\nmodel: {kind: mlp, hidden: [32]}\n" % name + \
                       "data: {kind: synthetic, batch_size: 16, num_samples: 480}\nmax_steps: 60\n"
                path = write_spec(d, name + ".yaml", text)
                r = server.ctl("--token-file", tokens[user], "-o", "json", "submit", path)
                self.assertEqual(r.returncode, 0, r.stderr)
                return json.loads(r.stdout)["id"]

            def bodies(path):
                return [json.loads(r["body"]) for r in self.receiver.got(path)]
            a, b = run("alice", "alices"), run("bob", "bobs")
            wait_for(lambda: {x["job"]["id"] for x in bodies("/ops")} == {a, b} and bodies("/alice"), 60,
                     "the policy's deliveries", lambda: str(self.receiver.requests[-4:]))
            self.assertEqual([(x["job"]["id"], x["event"]) for x in bodies("/alice")], [(a, "SUCCEEDED")])
            self.assertEqual(sorted((x["job"]["owner"], x["event"]) for x in bodies("/ops")),
                             [("alice", "SUCCEEDED"), ("bob", "SUCCEEDED")])
            # The operator's URLs (a secret may be in their path) and their
            # outcomes are in the server's log, not in the job's events.
            def logged():
                return f"policy webhook {self.receiver.shown()} (SUCCEEDED) for {a}: delivered, HTTP 2xx".encode() \
                    in open(os.path.join(d, "server.log"), "rb").read()
            wait_for(logged, 30, "the policy's delivery in the server's log")
            r = server.ctl("--token-file", tokens["alice"], "-o", "json", "history", a)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertFalse([e["reason"] for e in json.loads(r.stdout)["events"] if "webhook" in e["reason"]])
            # Reloaded: alice's webhook is another.
            write_spec(d, "policy.yaml", policy(self.receiver.url("/alice2")))
            server.proc.send_signal(signal.SIGHUP)
            wait_for(lambda: b"reloaded: 2 users" in open(os.path.join(d, "server.log"), "rb").read(), 30,
                     "the policy reloaded")
            c = run("alice", "alices-second")
            wait_for(lambda: bodies("/alice2"), 60, "the reloaded policy's delivery")
            self.assertEqual([(x["job"]["id"], x["event"]) for x in bodies("/alice2")], [(c, "SUCCEEDED")])
            self.assertEqual(len(bodies("/alice")), 1)
        finally:
            server.stop()

    def test_4_bad_urls_are_refused_naming_the_field(self):
        cases = [
            ("file:///etc/passwd", "notify.urls[0]", "only http and https"),
            ("127.0.0.1/hook", "notify.urls[0]", "must start with http"),
            ("gopher://127.0.0.1/", "notify.urls[0]", "only http and https"),
            ("https://user:secret@127.0.0.1/hook", "notify.urls[0]", "credentials"),
            ("https://evil.example/hook", "notify.urls[0]", "not one this server calls"),
        ]
        for i, (url, field, why) in enumerate(cases):
            text = JOB % dict(name=f"bad{i}", steps=10, urls=url, on="SUCCEEDED")
            r = self.server.ctl("submit", write_spec(self.tmp.name, f"bad{i}.yaml", text))
            self.assertEqual(r.returncode, 2, r.stdout)
            self.assertIn("INVALID_ARGUMENT", r.stderr)
            self.assertIn(field, r.stderr)
            self.assertIn(why, r.stderr)
            self.assertNotIn("secret@", r.stderr)
        text = JOB % dict(name="badon", steps=10, urls=self.receiver.url("/ok"), on="EXPLODED")
        r = self.server.ctl("submit", write_spec(self.tmp.name, "badon.yaml", text))
        self.assertEqual(r.returncode, 2)
        self.assertIn("notify.on", r.stderr)

    def test_7_the_local_network_is_refused_at_submit_and_at_delivery(self):
        # A server whose operator listed no host: any host but the local
        # network's.
        d = os.path.join(self.tmp.name, "open-server")
        os.makedirs(d)
        server = Server(d, slots=2)
        port = self.receiver.server_address[1]
        try:
            for i, url in enumerate([f"http://127.1:{port}/x", "http://2130706433/", f"http://[::1]:{port}/",
                                     "http://0x7f000001/", "http://0177.0.0.1/", "http://0/",
                                     f"http://[::ffff:127.0.0.1]:{port}/", "http://foo.localhost/",
                                     "http://169.254.169.254/latest/meta-data/", "http://10.0.0.1/"]):
                text = JOB % dict(name=f"local{i}", steps=10, urls=f"'{url}'", on="SUCCEEDED")
                r = server.ctl("submit", write_spec(d, f"local{i}.yaml", text))
                self.assertEqual(r.returncode, 2, url + ": " + r.stdout)
                self.assertIn("INVALID_ARGUMENT", r.stderr)
                self.assertIn("notify.urls[0]: host ", r.stderr)
                self.assertIn("address of the local network", r.stderr)
            # A sweep's URLs as well.
            sweep = (JOB % dict(name="localsweep", steps=10, urls="", on="SUCCEEDED")).replace(
                "notify:\n  urls: []\n  on: [SUCCEEDED]\n", "") + """
sweep:
  parameters:
    optimizer.lr: {log_uniform: [1.0e-5, 1.0e-2]}
  searcher: {kind: random}
  max_trials: 2
  concurrency: 1
  notify: {urls: ['http://127.1/x'], on: [SUCCEEDED]}
"""
            r = server.ctl("sweep", "submit", "-q", write_spec(d, "localsweep.yaml", sweep))
            self.assertEqual(r.returncode, 2, r.stdout)
            self.assertIn("sweep.notify.urls[0]", r.stderr)
            # This machine's own name resolves to the local network: the
            # check at submit cannot tell, the delivery does.
            host = socket.gethostname().lower()
            try:
                addresses = {a[4][0] for a in socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP)}
            except socket.gaierror:
                self.skipTest(f"{host} does not resolve")
            url = f"http://{host}:{port}/rebound?token=s3cret"
            job = self.submit_to(server, d, "rebound", [url])
            shown = f"http://{host}:{port}"
            want = f"webhook {shown} (SUCCEEDED): refused, its host resolves to an address of the local network"
            wait_for(lambda: want in [e["reason"] for e in server.job(job)["events"]], 60,
                     f"the delivery refused ({host}: {addresses})",
                     lambda: "\n".join(e["reason"] for e in server.job(job)["events"]))
            self.assertEqual(self.receiver.got("/rebound?token=s3cret"), [], "the receiver was called")
            hooks = [e["reason"] for e in server.job(job)["events"] if "webhook" in e["reason"]]
            self.assertEqual(hooks, [want])
            for e in server.job(job)["events"]:
                for leak in ("s3cret", "/rebound", "Couldn't", "Failed to"):
                    self.assertNotIn(leak, e["reason"])
            # The server's log says what it resolved to.
            self.assertIn(f"refused, {host} resolves to ".encode(), open(os.path.join(d, "server.log"), "rb").read())
        finally:
            server.stop()

    def submit_to(self, server, d, name, urls):
        text = JOB % dict(name=name, steps=30, urls=", ".join(f"'{u}'" for u in urls), on="SUCCEEDED")
        r = server.ctl("-o", "json", "submit", write_spec(d, name + ".yaml", text))
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout)["id"]


if __name__ == "__main__":
    e2e_test.BIN = sys.argv.pop(1)
    test_clock.main()
