"""The web UI in a real browser: Debian's Chromium driven by Selenium,
against a real trainyard-server (with two users) running a real job.

- alice signs in with her token: the jobs table lists her job; its page's
  loss chart gains points while it runs; after one of its ranks is killed
  the page's events show the restart; its Cancel button cancels it.
- bob signs in: the table does not list alice's job, and her job's page is
  HTTP 404 for him (the page shows "not found").
- A cancel forged without the session's CSRF token (or with a wrong one,
  or as a form post) is refused and the job keeps running.
- The job's history survives a coordinator restart (the API's, read again).
- alice's sweep: its page lists the trials (sortable), draws one line per
  trial by step and the trials on the hyperparameter plot; two trials
  selected open the comparison (two curves by step, the spec differences,
  the final metrics); bob cannot see it; Cancel sweep ends every trial.
- Screenshots of the job page are left in the build's test-artifacts/.

    python tests/e2e/web_ui_e2e.py BUILD/bin ARTIFACT_DIR
(with Selenium: the project venv's Python; exit 77 without Chromium.)
"""
import http.cookiejar
import json
import math
import os
import shutil
import signal
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

import e2e_test
from e2e_test import Server, wait_for, write_spec, worker_pids
from users_e2e import policy
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_clock  # noqa: E402

ARTIFACTS = None
CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")

JOB = """
name: web-ui
model: {kind: mlp, hidden: [256, 256]}
data: {kind: synthetic, batch_size: 64, num_samples: 65536}
max_steps: 1000000
num_processes: 2
max_restarts: 2
checkpoint: {every_steps: 200, total_limit: 2}
"""

SWEEP = """
name: web-sweep
model: {kind: mlp, hidden: [64]}
data: {kind: synthetic, batch_size: 16, num_samples: 4096}
max_steps: 1000000
sweep:
  parameters:
    optimizer.lr: {log_uniform: [1.0e-5, 1.0e-2]}
  metric: {name: loss}
  searcher: {kind: random}
  max_trials: 4
  concurrency: 2
"""


class Http:
    """The JSON API as a script (not a browser) uses it: its own cookies."""

    def __init__(self, port):
        self.base = f"http://127.0.0.1:{port}"
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))
        self.csrf = None

    def request(self, path, body=None, headers=None, method=None):
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        req = urllib.request.Request(self.base + path, data=data, method=method or ("POST" if data else "GET"),
                                     headers=headers or {})
        try:
            with self.opener.open(req, timeout=30) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def login(self, token):
        status, body = self.request("/ui/api/login", {"token": token}, {"Content-Type": "application/json"})
        assert status == 200, (status, body)
        self.csrf = json.loads(body)["csrf"]

    def api(self, method, body, csrf=True):
        headers = {"Content-Type": "application/json"}
        if csrf:
            headers["X-CSRF-Token"] = self.csrf
        status, out = self.request("/ui/api/v1/" + method, body, headers)
        return status, json.loads(out or b"{}")


class WebUi(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        from selenium import webdriver
        from selenium.webdriver.chrome.options import Options
        from selenium.webdriver.chrome.service import Service
        cls.tmp = tempfile.TemporaryDirectory(prefix="trainyard-web-")
        d = cls.tmp.name
        cls.token = {u: f"token-of-{u}-{os.getpid()}" for u in ("alice", "bob")}
        users = {u: (t, [], "user", [d] if u == "alice" else []) for u, t in cls.token.items()}
        cls.policy = write_spec(d, "policy.yaml", policy(users, {"alice": 4}, extra="shared_account: true\n"))
        cls.state_dir = os.path.join(d, "state")
        os.makedirs(cls.state_dir)
        cls.extra = ("--policy-file", cls.policy, "--http-listen", f"127.0.0.1:{e2e_test.free_port()}")
        cls.server = Server(cls.state_dir, slots=2, extra=cls.extra)
        cls.alice_token = write_spec(d, "alice.token", cls.token["alice"] + "\n")
        r = cls.server.ctl("--token-file", cls.alice_token, "-o", "json", "submit", write_spec(d, "job.yaml", JOB))
        assert r.returncode == 0, r.stderr
        cls.job = json.loads(r.stdout)["id"]

        def browser():
            o = Options()
            for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                      "--window-size=1400,1900"):
                o.add_argument(a)
            o.binary_location = CHROMIUM
            return webdriver.Chrome(options=o, service=Service(CHROMEDRIVER))
        cls.browser = staticmethod(browser)
        cls.alice = browser()

    @classmethod
    def tearDownClass(cls):
        cls.alice.quit()
        cls.server.stop()
        cls.tmp.cleanup()

    def url(self, path=""):
        return f"http://127.0.0.1:{self.server.http_port}/ui/{path}"

    def sign_in(self, driver, user):
        from selenium.webdriver.common.by import By
        driver.get(self.url())
        box = wait_for(lambda: driver.find_elements(By.ID, "token"), 30, "the sign-in form")[0]
        box.send_keys(self.token[user])
        driver.find_element(By.CSS_SELECTOR, "#login button[type=submit]").click()
        wait_for(lambda: driver.find_elements(By.ID, "signed-in-as") and
                 driver.find_element(By.ID, "signed-in-as").text == user, 30, f"signed in as {user}")

    def points(self, driver):
        # The page draws the chart after its first fetch: until then there is no element, and no points.
        charts = driver.find_elements("id", "chart-loss")
        return int(charts[0].get_attribute("data-points") or 0) if charts else 0

    def state(self):
        r = self.server.ctl("--token-file", self.alice_token, "-o", "json", "get", self.job)
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout)["state"]

    def test_1_alice_sees_her_job_and_its_chart_grows(self):
        from selenium.webdriver.common.by import By
        d = self.alice
        self.sign_in(d, "alice")
        wait_for(lambda: d.find_elements(By.ID, "job-" + self.job), 30, "the job's row in the jobs table")
        d.get(self.url("jobs/" + self.job))
        wait_for(lambda: self.points(d) > 0, 60, "points on the loss chart")
        first = self.points(d)
        wait_for(lambda: self.points(d) > first, 60, f"the loss chart gaining points (had {first})")
        self.assertIn("RUNNING", d.find_element(By.ID, "job-status").text)
        spec = json.loads(d.find_element(By.ID, "job-spec").get_attribute("textContent"))
        self.assertEqual((spec["max_restarts"], spec["num_processes"]), (2, 2))
        # A second job waits for the slots: its page says where it is in the queue and why.
        r = self.server.ctl("--token-file", self.alice_token, "-o", "json", "submit",
                            write_spec(self.tmp.name, "second.yaml", JOB.replace("name: web-ui", "name: second")))
        self.assertEqual(r.returncode, 0, r.stderr)
        second = json.loads(r.stdout)["id"]
        d.get(self.url("jobs/" + second))
        where = wait_for(lambda: d.find_elements(By.ID, "queue-position"), 30, "the queue position")[0]
        self.assertRegex(where.text, r"^#1: waiting")
        # Her quota, on the queue page: 2 of her 4 slots in use, the second job listed.
        d.get(self.url("queue"))
        usage = wait_for(lambda: d.find_elements(By.ID, "usage-table"), 30, "the usage table")[0]
        self.assertIn("2 / 4", usage.text)
        self.assertIn(second, d.find_element(By.ID, "queue-table").text)
        r = self.server.ctl("--token-file", self.alice_token, "cancel", second)
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_2_a_killed_rank_shows_as_a_restart(self):
        from selenium.webdriver.common.by import By
        d = self.alice
        d.get(self.url("jobs/" + self.job))
        wait_for(lambda: self.points(d) > 0, 60, "the chart")
        # A checkpoint first, so that the restart resumes from it.
        wait_for(lambda: "checkpoint" in d.find_element(By.ID, "events").text, 60, "a checkpoint event")
        pids = wait_for(lambda: worker_pids(self.job), 30, "the job's workers")
        os.kill(pids[-1], signal.SIGKILL)
        wait_for(lambda: "restart 1 of 2" in d.find_element(By.ID, "events").text, 90,
                 "the restart in the page's events", lambda: d.find_element(By.ID, "events").text)
        wait_for(lambda: "RUNNING" in d.find_element(By.ID, "job-status").text, 90, "running again")
        n = self.points(d)
        wait_for(lambda: self.points(d) > n, 60, "points after the restart")
        d.save_screenshot(os.path.join(ARTIFACTS, "web_ui_job_page.png"))

    def test_3_bob_sees_neither_the_job_nor_its_page(self):
        from selenium.webdriver.common.by import By
        bob = self.browser()
        try:
            self.sign_in(bob, "bob")
            wait_for(lambda: bob.find_elements(By.ID, "no-jobs") or bob.find_elements(By.ID, "jobs-table"), 30,
                     "bob's jobs table")
            self.assertFalse(bob.find_elements(By.ID, "job-" + self.job))
            bob.get(self.url("jobs/" + self.job))
            wait_for(lambda: bob.find_elements(By.ID, "not-found"), 30, "the page saying not found")
            main = bob.find_element(By.TAG_NAME, "main").text
            self.assertNotIn("web-ui", main)  # not even its name
            self.assertFalse(bob.find_elements(By.ID, "chart-loss") + bob.find_elements(By.ID, "events-table"))
        finally:
            bob.quit()
        # The page's HTTP status, and the API, for bob's session.
        api = Http(self.server.http_port)
        api.login(self.token["bob"])
        status, _ = api.request("/ui/jobs/" + self.job)
        self.assertEqual(status, 404)
        status, out = api.api("GetJob", {"id": self.job})
        self.assertEqual(status, 404, out)
        status, out = api.api("GetJobHistory", {"id": self.job})
        self.assertEqual(status, 404, out)
        status, out = api.api("CancelJob", {"id": self.job})
        self.assertEqual(status, 404, out)
        # A wrong token signs nobody in.
        status, _ = api.request("/ui/api/login", {"token": "not-a-token"}, {"Content-Type": "application/json"})
        self.assertEqual(status, 401)

    def test_4_forged_cancels_are_refused(self):
        api = Http(self.server.http_port)
        api.login(self.token["alice"])
        status, out = api.api("CancelJob", {"id": self.job}, csrf=False)
        self.assertEqual((status, out.get("code")), (403, "PERMISSION_DENIED"), out)
        status, out = api.request("/ui/api/v1/CancelJob", {"id": self.job},
                                  {"Content-Type": "application/json", "X-CSRF-Token": "0" * 64})
        self.assertEqual(status, 403, out)
        # What a cross-site HTML form can send: no JSON, no header.
        status, out = api.request("/ui/api/v1/CancelJob", b"id=" + self.job.encode(),
                                  {"Content-Type": "application/x-www-form-urlencoded"})
        self.assertEqual(status, 415, out)
        # Without the session cookie at all.
        status, out = Http(self.server.http_port).request(
            "/ui/api/v1/CancelJob", {"id": self.job}, {"Content-Type": "application/json", "X-CSRF-Token": api.csrf})
        self.assertEqual(status, 401, out)
        # A DNS-rebinding page: the browser sends the session cookie of the
        # name it thinks it visits, and that name as Host. Refused by name.
        port = self.server.http_port
        status, out = api.request("/ui/api/v1/CancelJob", {"id": self.job},
                                  {"Content-Type": "application/json", "X-CSRF-Token": api.csrf,
                                   "Host": f"rebind.example:{port}"})
        self.assertEqual(status, 403, out)
        self.assertIn(b"is not a name of this server", out)
        for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}"):
            status, out = api.request("/ui/api/session", headers={"Host": host})
            self.assertEqual(status, 200, (host, out))
        self.assertIn(self.state(), ("RUNNING", "RECOVERING", "STARTING"))
        # The same session with its token reads the job (the check is the token, not the session).
        status, out = api.api("GetJob", {"id": self.job})
        self.assertEqual(status, 200, out)

    def test_5_cancel_from_the_page_and_history_survives_a_restart(self):
        from selenium.webdriver.common.by import By
        d = self.alice
        d.get(self.url("jobs/" + self.job))
        button = wait_for(lambda: [b for b in d.find_elements(By.ID, "btn-cancel") if b.is_enabled()], 60,
                          "an enabled Cancel button")[0]
        button.click()
        d.switch_to.alert.accept()
        wait_for(lambda: self.state() == "CANCELLED", 60, "the job cancelled from the page")
        wait_for(lambda: "CANCELLED" in d.find_element(By.ID, "job-status").text, 30, "the page saying so")
        api = Http(self.server.http_port)
        api.login(self.token["alice"])
        status, before = api.api("GetJobHistory", {"id": self.job})
        self.assertEqual(status, 200, before)
        loss = [s for s in before["series"] if s["name"] == "loss"][0]
        self.assertGreater(len(loss["points"]), 10)
        self.assertLessEqual(len(loss["points"]), 2000)
        self.assertTrue(any("restart 1 of 2" in e["reason"] for e in before["events"]))
        # A new coordinator on the same state: the same history.
        self.server.stop()
        type(self).server = Server(self.state_dir, slots=2, extra=self.extra)
        api = Http(self.server.http_port)
        api.login(self.token["alice"])
        status, after = api.api("GetJobHistory", {"id": self.job})
        self.assertEqual(status, 200, after)
        self.assertEqual([s for s in after["series"] if s["name"] == "loss"][0], loss)
        self.sign_in(d, "alice")  # sessions end with the coordinator that opened them
        d.get(self.url("jobs/" + self.job))
        wait_for(lambda: d.find_elements(By.ID, "chart-loss") and self.points(d) == len(loss["points"]), 30,
                 "the chart drawn from the kept history")
        d.save_screenshot(os.path.join(ARTIFACTS, "web_ui_job_page_after_restart.png"))

    def test_5b_a_sweep_page_compares_its_trials_and_cancels_them_all(self):
        from selenium.webdriver.common.by import By
        d = self.alice
        spec = write_spec(self.tmp.name, "sweep.yaml", SWEEP)
        r = self.server.ctl("--token-file", self.alice_token, "sweep", "submit", "-q", spec)
        self.assertEqual(r.returncode, 0, r.stderr)
        sweep_id = r.stdout.strip()
        d.get(self.url("sweeps"))
        wait_for(lambda: d.find_elements(By.CSS_SELECTOR, "#sweeps-table a"), 30, "the sweep in the sweeps table")
        self.assertEqual(d.find_element(By.CSS_SELECTOR, "#sweeps-table a").text, sweep_id)
        d.get(self.url("sweeps/" + sweep_id))

        def lines():
            c = d.find_elements(By.ID, "sweep-chart")
            return int(c[0].get_attribute("data-lines") or 0) if c else 0
        wait_for(lambda: lines() == 2, 60, "one line per live trial on the sweep's chart",
                 lambda: d.find_element(By.ID, "main").text[-2000:])
        rows = d.find_elements(By.CSS_SELECTOR, "#trials-table tbody tr")
        self.assertEqual(len(rows), 2)
        self.assertIn("optimizer.lr", d.find_element(By.ID, "trials-table").text)
        self.assertIn("submitted by user alice", d.find_element(By.ID, "sweep-events-table").text)
        wait_for(lambda: int(d.find_element(By.ID, "sweep-scatter").get_attribute("data-points") or 0) == 2, 30,
                 "both trials on the hyperparameter plot")
        d.find_element(By.CSS_SELECTOR, "#trials-table th[data-key=best]").click()
        best = [c.text for c in d.find_elements(By.CSS_SELECTOR, "#trials-table tbody tr td:nth-child(7)")]
        self.assertEqual(best, sorted(best, key=float), "sorted by the best metric")
        # Log axes where the search is logarithmic (optimizer.lr's log_uniform)
        # and for the loss; a log axis labels only 1, 2 and 5 times a power
        # of ten, so that its labels do not overlap.
        self.assertEqual(d.find_element(By.ID, "sweep-scatter").get_attribute("data-log-x"), "true")
        self.assertEqual(d.find_element(By.ID, "sweep-scatter").get_attribute("data-log-y"), "true")
        wait_for(lambda: d.find_element(By.ID, "sweep-chart").get_attribute("data-log-y") == "true", 30,
                 "the loss on a log axis")
        for canvas, axis in (("sweep-scatter", "x"), ("sweep-scatter", "y"), ("sweep-chart", "y")):
            ticks = d.execute_script(
                "const s = Chart.getChart(document.getElementById(arguments[0])).scales[arguments[1]];"
                "return [s.type, s.ticks.filter((t) => t.label !== '' && t.label != null).map((t) => t.value)];",
                canvas, axis)
            self.assertEqual(ticks[0], "logarithmic", (canvas, axis))
            for v in ticks[1]:
                mantissa = round(v / 10 ** math.floor(math.log10(v) + 1e-9))
                self.assertIn(mantissa, (1, 2, 5), (canvas, axis, ticks[1]))
        # Every trial shown has its own colour, past the palette's ten too.
        colours = d.execute_script("return Array.from({length: 60}, (_, i) => colorOf(i));")
        self.assertEqual(len(set(colours)), 60, colours)
        d.save_screenshot(os.path.join(ARTIFACTS, "web_ui_sweep_page.png"))
        # A trial's job page names its sweep and number, and links to the sweep.
        row = d.find_element(By.CSS_SELECTOR, "#trials-table tbody tr")
        number = int(row.get_attribute("id").split("-")[1])
        job_id = row.find_element(By.CSS_SELECTOR, "a").text
        d.get(self.url("jobs/" + job_id))
        wait_for(lambda: d.find_elements(By.ID, "job-sweep"), 30, "the sweep on the trial's job page")
        self.assertEqual(d.find_element(By.ID, "job-sweep").text, f"{sweep_id}, trial {number}")
        d.get(self.url("sweeps/" + sweep_id))
        wait_for(lambda: lines() == 2, 60, "the sweep page again")

        # Both trials side by side.
        jobs = [b.get_attribute("data-job") for b in d.find_elements(By.CSS_SELECTOR, ".trial-select")]
        for b in d.find_elements(By.CSS_SELECTOR, ".trial-select"):
            b.click()
        d.find_element(By.ID, "compare-trials").click()
        wait_for(lambda: "/ui/compare" in d.current_url and d.find_elements(By.ID, "compare-chart") and
                 d.find_element(By.ID, "compare-chart").get_attribute("data-lines") == "2", 30, "two curves by step")
        self.assertEqual(sorted(d.current_url.split("jobs=")[1].split(",")), sorted(jobs))
        diffs = d.find_element(By.ID, "diff-table").text
        self.assertIn("optimizer.lr", diffs)
        self.assertIn("name", diffs)
        self.assertNotIn("max_steps", diffs, "a field the trials share is not a difference")
        self.assertEqual(len(d.find_elements(By.CSS_SELECTOR, "#finals-table tbody tr")), 2)
        d.save_screenshot(os.path.join(ARTIFACTS, "web_ui_compare.png"))

        # Bob cannot see it.
        bob = Http(self.server.http_port)
        bob.login(self.token["bob"])
        status, body = bob.api("GetSweep", {"id": sweep_id})
        self.assertEqual(status, 404, body)

        # Bulk cancel from the page: every trial ends.
        d.get(self.url("sweeps/" + sweep_id))
        wait_for(lambda: lines() == 2, 60, "the sweep page again")
        d.find_element(By.ID, "cancel-sweep").click()
        clicked = time.monotonic()

        def all_ended():
            r = self.server.ctl("--token-file", self.alice_token, "-o", "json", "sweep", "get", sweep_id)
            w = json.loads(r.stdout)
            return w if w["state"] == "CANCELLED" and all(t["state"] == "CANCELLED" for t in w["trials"]) else None
        w = wait_for(all_ended, 30, "every trial cancelled")
        print(f"\nbulk cancel: {len(w['trials'])} trials ended {time.monotonic() - clicked:.1f} s after the click",
              flush=True)
        wait_for(lambda: "CANCELLED" in d.find_element(By.ID, "sweep-status").text, 30, "the page saying so")

    def test_5c_a_scripts_own_numbers_are_charted_and_compared(self):
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import Select
        d = self.alice
        script = write_spec(self.tmp.name, "scored.py",
                            "import trainyard\nfor step in range(1, 31):\n"
                            "    trainyard.report(step, samples=4, loss=1.0 / step, accuracy=step / 30)\n")
        spec = write_spec(self.tmp.name, "scored.yaml",
                          f"name: scored\nscript: {{path: {script}, python: {sys.executable}}}\n"
                          "num_processes: 1\nmetrics_every_steps: 1\n")
        r = self.server.ctl("--token-file", self.alice_token, "-o", "json", "submit", spec)
        self.assertEqual(r.returncode, 0, r.stderr)
        job = json.loads(r.stdout)["id"]

        def ended():
            g = self.server.ctl("--token-file", self.alice_token, "-o", "json", "get", job)
            state = json.loads(g.stdout)["state"]
            return state if state in ("SUCCEEDED", "FAILED", "CANCELLED") else None
        self.assertEqual(wait_for(ended, 60, "the script job to end"), "SUCCEEDED")
        d.get(self.url("jobs/" + job))

        def chart_points():
            c = d.find_elements(By.ID, "chart-accuracy")
            return int(c[0].get_attribute("data-points") or 0) if c else 0
        wait_for(lambda: chart_points() == 30, 30, "a chart of the script's accuracy, 30 points",
                 lambda: d.find_element(By.ID, "main").text[-2000:])
        self.assertIn("accuracy (reported by the script)", d.find_element(By.ID, "charts").text)
        d.get(self.url(f"compare?jobs={job},{self.job}"))
        wait_for(lambda: [o for o in d.find_elements(By.CSS_SELECTOR, "#compare-series option")
                          if o.get_attribute("value") == "accuracy"], 30, "accuracy among the series to compare")
        Select(d.find_element(By.ID, "compare-series")).select_by_value("accuracy")
        wait_for(lambda: d.find_element(By.ID, "compare-chart").get_attribute("data-lines") == "1", 30,
                 "one job's accuracy by step (the other reports none)")

    def test_6_guessing_tokens_is_slowed_down(self):
        # Last: it holds back this address's wrong tokens for a minute.
        api = Http(self.server.http_port)
        codes = [api.request("/ui/api/login", {"token": f"guess-{i}"}, {"Content-Type": "application/json"})[0]
                 for i in range(12)]
        self.assertEqual(codes.count(401) + codes.count(429), 12, codes)
        self.assertEqual(codes[-1], 429, codes)
        self.assertLessEqual(codes.count(401), 10, codes)
        req = urllib.request.Request(api.base + "/ui/api/login", method="POST",
                                     data=json.dumps({"token": "guess-12"}).encode(),
                                     headers={"Content-Type": "application/json"})
        with self.assertRaises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, timeout=30)
        self.assertEqual(e.exception.code, 429)
        self.assertTrue(0 < int(e.exception.headers["Retry-After"]) <= 60, e.exception.headers)
        self.assertIn(b"too many failed sign-ins from 127.0.0.1", e.exception.read())
        self.assertIn("failed sign-in from 127.0.0.1", open(os.path.join(self.server.state_dir, "server.log")).read())
        # The right token signs in all the same: others' guesses from this
        # address (or the proxy's) lock nobody out.
        status, _ = api.request("/ui/api/login", {"token": self.token["alice"]}, {"Content-Type": "application/json"})
        self.assertEqual(status, 200)


if __name__ == "__main__":
    e2e_test.BIN = os.path.abspath(sys.argv.pop(1))
    ARTIFACTS = os.path.abspath(sys.argv.pop(1))
    os.makedirs(ARTIFACTS, exist_ok=True)
    if not (CHROMIUM and CHROMEDRIVER):
        print("web_ui_e2e: SKIP: chromium and chromium-driver are not installed (scripts/install-deps.sh)")
        sys.exit(77)
    test_clock.main()
