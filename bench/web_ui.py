"""bench/web_ui: what the web UI and the jobs' history cost.

1. A job of 100,000 steps (one rank, a tiny MLP: the coordinator ingests
   every step) runs on a real trainyard-server; meanwhile the server's CPU
   time is read from /proc: the whole server's CPU per ingested step.
2. Its page, /ui/jobs/<id>, is loaded in headless Chromium (Selenium) N
   times: navigation start -> the charts drawn from the job's history
   (window.trainyardFirstDraw), p50 and max; and GetJobHistory over the
   JSON API alone (its response size).
3. The bytes the history keeps in the state store for it.
bench/history (C++) gives JobHistory::Add's CPU per step: its share of the
server's per-step CPU is the history's cost at any step rate.

    .venv/bin/python bench/web_ui.py BUILD_BIN [--steps 100000] [--loads 7]
"""
import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "e2e"))
import e2e_test  # noqa: E402
from e2e_test import Server, wait_for, write_spec  # noqa: E402
from web_ui_e2e import CHROMEDRIVER, CHROMIUM, Http  # noqa: E402

JOB = """
name: long-history
model: {kind: mlp, hidden: [4]}
data: {kind: synthetic, batch_size: 1, num_samples: 1000000}
max_steps: %d
num_processes: 1
"""


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin")
    ap.add_argument("--steps", type=int, default=100000)
    ap.add_argument("--loads", type=int, default=7)
    a = ap.parse_args()
    e2e_test.BIN = os.path.abspath(a.bin)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(f"command: .venv/bin/python bench/web_ui.py {a.bin} --steps {a.steps} --loads {a.loads}")
    print(f"commit: {commit}\n")
    with tempfile.TemporaryDirectory(prefix="trainyard-bench-web-") as d:
        server = Server(d, slots=1)
        try:
            r = server.ctl("-o", "json", "submit", write_spec(d, "job.yaml", JOB % a.steps))
            assert r.returncode == 0, r.stderr
            job = json.loads(r.stdout)["id"]
            wait_for(lambda: server.job(job)["step"] > 0, 120, "the first step")
            cpu0, t0, s0 = cpu_seconds(server.proc.pid), time.monotonic(), server.job(job)["step"]
            wait_for(lambda: server.job(job)["state"] in ("SUCCEEDED", "FAILED"), 3600, "the job's end")
            cpu1, t1 = cpu_seconds(server.proc.pid), time.monotonic()
            done = server.job(job)
            assert done["state"] == "SUCCEEDED", done["reason"]
            steps = int(done["step"]) - int(s0)
            rate = steps / (t1 - t0)
            per_step_us = (cpu1 - cpu0) / steps * 1e6

            api = Http(server.http_port)
            api.login("anyone")
            api_ms, size, points = [], 0, 0
            for _ in range(a.loads):
                start = time.perf_counter()
                status, body = api.request("/ui/api/v1/GetJobHistory", {"id": job},
                                           {"Content-Type": "application/json", "X-CSRF-Token": api.csrf})
                api_ms.append((time.perf_counter() - start) * 1e3)
                assert status == 200, body
                size = len(body)
                points = sum(len(s["points"]) for s in json.loads(body)["series"])

            from selenium import webdriver
            from selenium.webdriver.chrome.options import Options
            from selenium.webdriver.chrome.service import Service
            o = Options()
            for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                        "--window-size=1400,1900"):
                o.add_argument(arg)
            o.binary_location = CHROMIUM
            driver = webdriver.Chrome(options=o, service=Service(CHROMEDRIVER))
            url = f"http://127.0.0.1:{server.http_port}/ui/jobs/{job}"
            driver.get(url)  # the first load fills the browser's cache of the scripts, as a user's second visit
            wait_for(lambda: driver.execute_script("return window.trainyardFirstDraw"), 60, "the charts")
            page_ms = []
            for _ in range(a.loads):
                driver.get("about:blank")
                driver.get(url)
                page_ms.append(wait_for(lambda: driver.execute_script("return window.trainyardFirstDraw"), 60,
                                        "the charts"))
            drawn = int(driver.find_element("id", "chart-loss").get_attribute("data-points"))
            driver.quit()
        finally:
            server.stop()
        db = sqlite3.connect(os.path.join(d, "trainyard.db"))
        stored = db.execute("SELECT length(data) FROM job_history WHERE job_id=?", (job,)).fetchone()[0]

    print(f"| job steps | steps/s ingested | server CPU per step, us | history kept, bytes | bytes per step "
          f"| GetJobHistory: points, JSON bytes, ms p50 | page load to charts drawn, ms p50 / max (loss points) |")
    print("|---|---|---|---|---|---|---|")
    print(f"| {a.steps} | {rate:.0f} | {per_step_us:.1f} | {stored} | {stored / a.steps:.2f} "
          f"| {points}, {size}, {statistics.median(api_ms):.1f} "
          f"| {statistics.median(page_ms):.0f} / {max(page_ms):.0f} ({drawn}) |")


if __name__ == "__main__":
    main()
