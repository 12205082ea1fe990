"""The deployment files in deploy/: Kubernetes manifests, Prometheus config and
alerting rules, the Grafana dashboard, and docs/reference/metrics.md.

- The Kubernetes manifests are parsed and checked for consistency (there is
  no cluster here).
- promtool checks the Prometheus config and rules and runs the rules' unit
  tests.
- A real trainyard-server on loopback runs a DDP job (fp16 comm hook,
  evaluation, clipping, one requested checkpoint) and a short FSDP job, and a
  real Prometheus scrapes it with the shipped config and rules. Every metric
  the dashboard and the rules name must be in the live scrape, every dashboard
  query must return data from Prometheus, and docs/reference/metrics.md must list
  exactly the metric families the server exports.

Run as `python3 tests/e2e/deploy_test.py --bin DIR` (or `deploy_test.py DIR`, or
with TRAINYARD_BIN=DIR) where DIR holds trainyard-server, trainyard-worker and
trainctl; default: build/bin. Needs python3-yaml and prometheus (promtool).
"""
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request

try:
    import yaml
except ImportError:  # pragma: no cover
    sys.exit("deploy_test: python3-yaml is missing; run scripts/install-deps.sh")

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEPLOY = os.path.join(REPO, "deploy")
K8S = os.path.join(DEPLOY, "kubernetes")
PROM = os.path.join(DEPLOY, "prometheus")
DASHBOARD = os.path.join(DEPLOY, "grafana", "trainyard-dashboard.json")
METRICS_DOC = os.path.join(REPO, "docs", "reference", "metrics.md")
BIN = None  # set in __main__

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_test  # noqa: E402  (Server, wait_for)
from e2e_test import free_port, wait_for  # noqa: E402
import test_clock  # noqa: E402

REQUIRED_ALERTS = {"TrainyardJobFailed", "TrainyardJobNoProgress", "TrainyardGoodputLow",
                   "TrainyardRestartsRising", "TrainyardCheckpointOverdue"}
DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def promtool():
    path = shutil.which("promtool")
    if not path:
        raise AssertionError("promtool not found: install the Debian package `prometheus` (scripts/install-deps.sh)")
    return path


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, **kw)


def load_yaml(path):
    with open(path) as f:
        return yaml.safe_load(f)


# ---------------------------------------------------------------- PromQL and exposition helpers

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_METRIC = re.compile(r"(?<![\w:])(trainyard_[A-Za-z0-9_:]*)")
_SELECTOR = re.compile(r'(trainyard_\w+)\s*\{((?:[^{}"]|"(?:[^"\\]|\\.)*")*)\}')
_MATCHER = re.compile(r'(\w+)\s*(?:=~|!~|!=|=)\s*"')


def metric_names(expr):
    """Names of trainyard_ series an expression reads (x_bucket/_sum/_count as written)."""
    return set(_METRIC.findall(_STRING.sub('""', expr)))


def selector_labels(expr):
    """(metric, label name) for every label matcher in a trainyard_ selector."""
    out = set()
    for metric, body in _SELECTOR.findall(expr):
        for label in _MATCHER.findall(body):
            out.add((metric, label))
    return out


_SAMPLE = re.compile(r'^([A-Za-z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)')
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def gpu_only(name):
    """The NVML families (trainyard_job_gpu_*): series only from CUDA ranks
    where the driver's NVML is. Without a GPU they are checked as documented
    (here) and declared (metric_table_test); their series by gpu_e2e on a
    GPU machine."""
    return name.startswith("trainyard_job_gpu_")


# The families only a job above --metrics-per-rank-max-ranks exports (its
# aggregates): this stack's jobs are small. A live server's are checked by
# scale_smoke (bench/scale: a 64-rank job over a limit of 16), their values
# by server_metrics_test.
LARGE_JOB_ONLY = {"trainyard_job_reporting_ranks", "trainyard_job_slowest_rank",
                  "trainyard_job_slowest_rank_forward_seconds"}
# Exported by coordinators over a shared store only (--store postgresql://...:
# leader or standby); ha_e2e scrapes them.
SHARED_STORE_ONLY = {"trainyard_coordinator_leader", "trainyard_coordinator_term"}
# Exported for jobs of a model with scaled_dot_product_attention (llama) only;
# this stack's job is an MLP.
ATTENTION_MODEL_ONLY = {"trainyard_job_attention_backend"}


def parse_exposition(text):
    """Prometheus text format -> ({sample name: [(labels, value)]}, {family: type})."""
    samples, types = {}, {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(None, 3)
            types[name] = kind.strip()
            continue
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            continue
        labels = dict(_LABEL.findall(m.group(2) or ""))
        samples.setdefault(m.group(1), []).append((labels, float(m.group(3))))
    return samples, types


def dashboard_targets(dash):
    """(panel title, expr) of every panel target, rows' nested panels included."""
    out = []

    def visit(panels):
        for p in panels:
            if p.get("type") == "row":
                visit(p.get("panels", []))
                continue
            for t in p.get("targets", []):
                out.append((p.get("title", "?"), t.get("expr", "")))

    visit(dash.get("panels", []))
    return out


def alert_rules():
    rules = []
    for group in load_yaml(os.path.join(PROM, "trainyard-rules.yml"))["groups"]:
        rules.extend(r for r in group["rules"] if "alert" in r)
    return rules


# ---------------------------------------------------------------- Kubernetes

API_VERSIONS = {"ServiceAccount": "v1", "PersistentVolumeClaim": "v1", "Service": "v1", "Secret": "v1",
                "ConfigMap": "v1", "Deployment": "apps/v1", "Job": "batch/v1"}


def flag_values(args):
    """--flag value / --flag=value pairs of a container's args -> {flag: [values]}."""
    out = {}
    i = 0
    while i < len(args):
        a = str(args[i])
        if a.startswith("--"):
            if "=" in a:
                k, v = a.split("=", 1)
            elif i + 1 < len(args) and not str(args[i + 1]).startswith("--"):
                k, v = a, str(args[i + 1])
                i += 1
            else:
                k, v = a, ""
            out.setdefault(k, []).append(v)
        i += 1
    return out


class KubernetesManifests(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.docs = []
        files = sorted(f for f in os.listdir(K8S) if f.endswith((".yaml", ".yml")))
        assert files, f"no manifests in {K8S}"
        for name in files:
            with open(os.path.join(K8S, name)) as f:
                for doc in yaml.safe_load_all(f):
                    if doc is not None:
                        cls.docs.append((name, doc))

    def of_kind(self, kind):
        return [d for _, d in self.docs if d.get("kind") == kind]

    def one(self, kind):
        found = self.of_kind(kind)
        self.assertEqual(len(found), 1, f"expected exactly one {kind} in deploy/kubernetes, found {len(found)}")
        return found[0]

    def test_every_document_is_a_known_object_with_a_valid_name(self):
        self.assertGreater(len(self.docs), 0)
        for file, d in self.docs:
            where = f"{file}: {d.get('kind')}/{(d.get('metadata') or {}).get('name')}"
            self.assertIn(d.get("kind"), API_VERSIONS, f"{where}: unexpected kind")
            self.assertEqual(d.get("apiVersion"), API_VERSIONS[d["kind"]], f"{where}: apiVersion")
            name = (d.get("metadata") or {}).get("name")
            self.assertTrue(name, f"{where}: metadata.name missing")
            self.assertRegex(name, DNS1123, f"{where}: metadata.name is not a DNS-1123 label")
        self.assertEqual(len({(d["kind"], d["metadata"]["name"]) for _, d in self.docs}), len(self.docs),
                         "two objects with the same kind and name")

    def server_container(self):
        dep = self.one("Deployment")
        containers = dep["spec"]["template"]["spec"]["containers"]
        c = [c for c in containers
             if "trainyard-server" in " ".join(map(str, c.get("command", []) + c.get("args", [])))]
        self.assertEqual(len(c), 1, "the Deployment needs one container running trainyard-server")
        return dep, c[0]

    def test_server_deployment(self):
        dep, c = self.server_container()
        pod = dep["spec"]["template"]["spec"]
        flags = flag_values(c.get("args", []))
        expected = {"--listen": "0.0.0.0:50051", "--metrics-listen": "0.0.0.0:9464", "--http-listen": "0.0.0.0:9465",
                    "--state-dir": "/var/lib/trainyard", "--launcher": "external"}
        for flag, value in expected.items():
            self.assertEqual(flags.get(flag), [value], f"server args: want {flag} {value}, have {c.get('args')}")
        self.assertIn("--auth-token-file", flags, "server args: --auth-token-file missing")
        self.assertEqual(dep["spec"].get("replicas", 1), 1, "one server per state volume")
        self.assertEqual(dep["spec"].get("strategy", {}).get("type"), "Recreate",
                         "a rolling update would run two servers on one SQLite store")
        self.assertEqual(dep["spec"]["selector"]["matchLabels"],
                         {k: v for k, v in dep["spec"]["template"]["metadata"]["labels"].items()
                          if k in dep["spec"]["selector"]["matchLabels"]},
                         "selector does not match the pod template's labels")

        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
        pvcs = {p["metadata"]["name"] for p in self.of_kind("PersistentVolumeClaim")}
        state = mounts.get("/var/lib/trainyard")
        self.assertIsNotNone(state, f"nothing mounted at the state dir /var/lib/trainyard: {mounts}")
        claim = volumes[state].get("persistentVolumeClaim", {}).get("claimName")
        self.assertIn(claim, pvcs, f"the state dir's volume {state} is not one of the PVCs {sorted(pvcs)}")
        token = flags["--auth-token-file"][0]
        secret_mounts = [p for p, v in mounts.items() if "secret" in volumes[v]]
        self.assertTrue(any(token.startswith(p.rstrip("/") + "/") for p in secret_mounts),
                        f"--auth-token-file {token} is not inside a mounted Secret ({secret_mounts})")
        for v in volumes.values():
            if "persistentVolumeClaim" in v:
                self.assertIn(v["persistentVolumeClaim"]["claimName"], pvcs, f"volume {v['name']}: unknown PVC")

        ports = {p["containerPort"]: p.get("name") for p in c.get("ports", [])}
        for flag in ("--listen", "--metrics-listen", "--http-listen"):
            port = int(flags[flag][0].rsplit(":", 1)[1])
            self.assertIn(port, ports, f"{flag} port {port} is not a containerPort ({ports})")
        grpc_port = 50051
        for probe in ("readinessProbe", "livenessProbe"):
            p = c.get(probe)
            self.assertIsNotNone(p, f"server container: {probe} missing")
            target = (p.get("grpc") or p.get("tcpSocket") or {}).get("port")
            self.assertIn(target, (grpc_port, ports[grpc_port]), f"{probe} must probe the gRPC port: {p}")

        sc_pod, sc = pod.get("securityContext", {}), c.get("securityContext", {})
        self.assertTrue(sc.get("runAsNonRoot", sc_pod.get("runAsNonRoot")), "runAsNonRoot not set")
        self.assertNotEqual(sc.get("runAsUser", sc_pod.get("runAsUser")), 0, "runs as root")
        self.assertIs(sc.get("allowPrivilegeEscalation"), False, "allowPrivilegeEscalation must be false")
        self.assertIn("requests", c.get("resources", {}), "server container: resources.requests missing")
        self.assertIn(":", c["image"], "image needs a tag")

    def test_flags_exist_in_the_binaries(self):
        """Every flag the manifests pass is one the binaries in BIN accept."""
        helps = {}
        for b in ("trainyard-server", "trainyard-worker"):
            r = run([os.path.join(BIN, b), "--help"])
            # A binary that crashes or prints no usage is a broken build: fail, never skip.
            self.assertEqual(r.returncode, 0, f"{b} --help exited {r.returncode}: {r.stderr[-2000:]}")
            self.assertIn("--", r.stdout, f"{b} --help printed no flags: {r.stdout!r}")
            helps[b] = r.stdout
        self.assertIn("--join", helps["trainyard-worker"], "trainyard-worker has no --join (external launcher)")
        unknown = []
        for _, d in self.docs:
            if d.get("kind") not in ("Deployment", "Job"):
                continue
            for c in d["spec"]["template"]["spec"]["containers"]:
                binary = os.path.basename(str((c.get("command") or [""])[0]))
                for flag in flag_values(c.get("args", [])):
                    if binary in helps and not re.search(rf"(^|[\s,]){re.escape(flag)}\b", helps[binary], re.M):
                        unknown.append(f"{binary} {flag}")
        self.assertEqual(unknown, [], "flags the binaries do not know")

    def test_service_exposes_grpc_and_metrics_with_scrape_annotations(self):
        dep, c = self.server_container()
        svc = [s for s in self.of_kind("Service") if s["spec"].get("clusterIP") != "None"]
        self.assertEqual(len(svc), 1, "expected one (non-headless) Service for the server")
        svc = svc[0]
        labels = dep["spec"]["template"]["metadata"]["labels"]
        for k, v in svc["spec"]["selector"].items():
            self.assertEqual(labels.get(k), v, f"Service selector {k}={v} does not select the server pods")
        ann = svc["metadata"].get("annotations", {})
        self.assertEqual(ann.get("prometheus.io/scrape"), "true")
        self.assertEqual(ann.get("prometheus.io/path"), "/metrics")
        container_ports = {p["containerPort"]: p.get("name") for p in c["ports"]}
        by_name = {v: k for k, v in container_ports.items()}
        resolved = {}
        for p in svc["spec"]["ports"]:
            target = p.get("targetPort", p["port"])
            target = by_name.get(target, target)
            self.assertIn(target, container_ports, f"Service port {p} targets no container port")
            resolved[p.get("name")] = (p["port"], target)
        self.assertEqual(resolved.get("grpc"), (50051, 50051), f"Service ports: {resolved}")
        self.assertEqual(resolved.get("metrics"), (9464, 9464), f"Service ports: {resolved}")
        self.assertEqual(int(ann.get("prometheus.io/port", 0)), resolved["metrics"][1],
                         "prometheus.io/port is not the metrics port")

    def test_worker_indexed_job(self):
        job = self.one("Job")
        spec = job["spec"]
        self.assertEqual(spec.get("completionMode"), "Indexed", "the workers' Job must be Indexed (rank = index)")
        self.assertIsInstance(spec.get("completions"), int)
        self.assertEqual(spec.get("completions"), spec.get("parallelism"),
                         "completions must equal parallelism: every rank runs at once")
        pod = spec["template"]["spec"]
        self.assertIn(pod.get("restartPolicy"), ("Never", "OnFailure"))
        (c,) = pod["containers"]
        argv = [str(a) for a in c.get("command", []) + c.get("args", [])]
        self.assertIn("trainyard-worker", " ".join(argv))
        flags = flag_values(c.get("args", []))
        self.assertEqual(flags.get("--join"), ["$(TRAINYARD_JOB)"], f"worker args: {argv}")
        self.assertEqual(flags.get("--advertise-addr"), ["$(POD_IP)"], f"worker args: {argv}")
        for f in ("--rank", "--world-size"):
            self.assertNotIn(f, flags, f"{f}: the rank comes from JOB_COMPLETION_INDEX, the world size from the job")
        svc = [s for s in self.of_kind("Service") if s["spec"].get("clusterIP") != "None"][0]
        grpc = [p["port"] for p in svc["spec"]["ports"] if p.get("name") == "grpc"][0]
        self.assertEqual(flags.get("--server"), [f"{svc['metadata']['name']}:{grpc}"],
                         "--server must name the server's Service and gRPC port")

        env = {e["name"]: e for e in c.get("env", [])}
        for ref in re.findall(r"\$\((\w+)\)", " ".join(argv)):
            self.assertIn(ref, env, f"args use $({ref}) but the container has no such env var")
        self.assertIn("value", env["TRAINYARD_JOB"])
        self.assertIn("secretKeyRef", env.get("TRAINYARD_WORKER_TOKEN", {}).get("valueFrom", {}),
                      "TRAINYARD_WORKER_TOKEN must come from a Secret")
        self.assertEqual(env["POD_IP"].get("valueFrom", {}).get("fieldRef", {}).get("fieldPath"), "status.podIP")
        sc_pod, sc = pod.get("securityContext", {}), c.get("securityContext", {})
        self.assertTrue(sc.get("runAsNonRoot", sc_pod.get("runAsNonRoot")), "worker: runAsNonRoot not set")
        pvcs = {p["metadata"]["name"] for p in self.of_kind("PersistentVolumeClaim")}
        for v in pod.get("volumes", []):
            if "persistentVolumeClaim" in v:
                self.assertIn(v["persistentVolumeClaim"]["claimName"], pvcs, f"worker volume {v['name']}: unknown PVC")


# ---------------------------------------------------------------- Prometheus files

def relabel(rules, labels):
    """Prometheus relabeling (keep, drop, replace) of one target; None when dropped."""
    labels = dict(labels)
    for r in rules:
        action = r.get("action", "replace")
        value = r.get("separator", ";").join(labels.get(s, "") for s in r.get("source_labels", []))
        m = re.fullmatch(r.get("regex", "(.*)"), value)
        if action == "keep" and not m:
            return None
        if action == "drop" and m:
            return None
        if action == "replace" and m:
            repl = re.sub(r"\$\{?(\w+)\}?", r"\\g<\1>", r.get("replacement", "$1"))
            labels[r["target_label"]] = m.expand(repl)
    return labels


class PrometheusFiles(unittest.TestCase):
    def promtool(self, *args):
        r = run([promtool(), *args], cwd=PROM)
        self.assertEqual(r.returncode, 0, f"promtool {' '.join(args)} failed:\n{r.stdout}{r.stderr}")
        return r.stdout

    def test_check_config(self):
        self.promtool("check", "config", "prometheus.yml")
        cfg = load_yaml(os.path.join(PROM, "prometheus.yml"))
        (job,) = [j for j in cfg["scrape_configs"] if j["job_name"] == "trainyard"]
        self.assertEqual(job.get("metrics_path", "/metrics"), "/metrics")
        self.assertTrue(job["static_configs"][0]["targets"])
        self.assertIn("trainyard-rules.yml", cfg.get("rule_files", []))

    def test_check_kubernetes_config(self):
        path = os.path.join(PROM, "prometheus-kubernetes.yml")
        cfg = load_yaml(path)
        (job,) = [j for j in cfg["scrape_configs"] if j["job_name"] == "trainyard"]
        sd = job["kubernetes_sd_configs"]
        self.assertIn(sd[0]["role"], ("endpoints", "endpointslice", "service", "pod"))
        r = run([promtool(), "check", "config", path], cwd=PROM)
        if r.returncode != 0 and "kubernetes_sd_configs not found" in r.stdout + r.stderr:
            # Debian's Prometheus is built without Kubernetes discovery: check the
            # rest of the file (relabeling regexes, rule files) with a static target.
            for j in cfg["scrape_configs"]:
                if j.pop("kubernetes_sd_configs", None) is not None:
                    j["static_configs"] = [{"targets": ["127.0.0.1:9464"]}]
            cfg["rule_files"] = [os.path.join(PROM, f) for f in cfg.get("rule_files", [])]
            with tempfile.TemporaryDirectory(prefix="trainyard-deploy-") as tmp:
                copy = os.path.join(tmp, "prometheus-kubernetes.yml")
                with open(copy, "w") as f:
                    yaml.safe_dump(cfg, f)
                r = run([promtool(), "check", "config", copy], cwd=PROM)
        self.assertEqual(r.returncode, 0, f"promtool check config prometheus-kubernetes.yml:\n{r.stdout}{r.stderr}")

        # The relabeling keeps exactly the metrics endpoint of the Service in server.yaml.
        with open(os.path.join(K8S, "server.yaml")) as f:
            svc = [d for d in yaml.safe_load_all(f) if d and d["kind"] == "Service"][0]
        meta = {"__meta_kubernetes_namespace": "trainyard", "__meta_kubernetes_pod_name": "trainyard-server-abc",
                "__scheme__": "http", "__metrics_path__": "/metrics", "job": "trainyard"}
        for k, v in svc["metadata"].get("annotations", {}).items():
            meta["__meta_kubernetes_service_annotation_" + re.sub(r"[^a-zA-Z0-9_]", "_", k)] = v
        for k, v in svc["metadata"].get("labels", {}).items():
            meta["__meta_kubernetes_service_label_" + re.sub(r"[^a-zA-Z0-9_]", "_", k)] = v
        kept = []
        for p in svc["spec"]["ports"]:
            t = dict(meta, __address__=f"10.1.2.3:{p['port']}", __meta_kubernetes_endpoint_port_name=p["name"])
            t = relabel(job["relabel_configs"], t)
            if t:
                kept.append((t["__address__"], t["__metrics_path__"]))
        self.assertEqual(kept, [("10.1.2.3:9464", "/metrics")], "relabeling of the server's endpoints")

    def test_check_rules(self):
        out = self.promtool("check", "rules", "trainyard-rules.yml")
        self.assertIn("SUCCESS", out)

    def test_rules_unit_tests(self):
        self.promtool("test", "rules", "trainyard-rules.test.yml")

    def test_every_alert_is_complete_and_tested_both_ways(self):
        rules = alert_rules()
        names = {r["alert"] for r in rules}
        self.assertLessEqual(REQUIRED_ALERTS, names, f"missing alerts: {REQUIRED_ALERTS - names}")
        for r in rules:
            self.assertIn("for", r, f"{r['alert']}: no for:")
            self.assertIn(r.get("labels", {}).get("severity"), ("critical", "warning", "info"), r["alert"])
            for a in ("summary", "description"):
                self.assertTrue(r.get("annotations", {}).get(a), f"{r['alert']}: annotation {a} missing")
        fires, quiet = set(), set()
        for t in load_yaml(os.path.join(PROM, "trainyard-rules.test.yml"))["tests"]:
            for a in t.get("alert_rule_test", []):
                (fires if a.get("exp_alerts") else quiet).add(a["alertname"])
        self.assertEqual(names - fires, set(), "alerts with no unit test where they fire")
        self.assertEqual(names - quiet, set(), "alerts with no unit test where they stay quiet")


# ---------------------------------------------------------------- Grafana (static)

class GrafanaDashboard(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(DASHBOARD) as f:
            cls.dash = json.load(f)

    def test_structure(self):
        d = self.dash
        self.assertGreaterEqual(d.get("schemaVersion", 0), 36)
        self.assertTrue(d.get("uid") and d.get("title"))
        variables = {v["name"]: v for v in d["templating"]["list"]}
        ds = variables.get("DS_PROMETHEUS")
        self.assertIsNotNone(ds, "no DS_PROMETHEUS variable")
        self.assertEqual((ds["type"], ds["query"]), ("datasource", "prometheus"))
        job = variables.get("job_id")
        self.assertIsNotNone(job, "no job_id variable")
        query = job["query"]["query"] if isinstance(job["query"], dict) else job["query"]
        self.assertRegex(query, r"^label_values\(trainyard_job_step\b.*,\s*job_id\)$")

        ids, cells = set(), set()
        for p in d["panels"]:
            self.assertNotIn(p["id"], ids, f"duplicate panel id {p['id']}")
            ids.add(p["id"])
            g = p["gridPos"]
            self.assertLessEqual(g["x"] + g["w"], 24, f"panel {p['title']} is wider than the grid")
            for x in range(g["x"], g["x"] + g["w"]):
                for y in range(g["y"], g["y"] + g["h"]):
                    self.assertNotIn((x, y), cells, f"panel {p['title']} overlaps another")
                    cells.add((x, y))
            if p["type"] == "row":
                continue
            self.assertEqual(p.get("datasource", {}).get("uid"), "${DS_PROMETHEUS}", p["title"])
            self.assertTrue(p.get("targets"), f"panel {p['title']} has no queries")
            for t in p["targets"]:
                self.assertEqual(t.get("datasource", {}).get("uid"), "${DS_PROMETHEUS}", p["title"])
                self.assertTrue(t.get("expr"), f"panel {p['title']}: empty expr")
                self.assertNotRegex(t["expr"], r'\bjob\s*[=!]~?\s*"\$', f"{p['title']}: the label is job_id")

    def test_covers_the_required_topics(self):
        used = set()
        for _, expr in dashboard_targets(self.dash):
            used |= metric_names(expr)
        required = {
            "throughput": {"trainyard_job_samples_per_second"}, "loss": {"trainyard_job_loss"},
            "eval loss": {"trainyard_job_eval_loss"}, "learning rate": {"trainyard_job_learning_rate"},
            "step-time split": {"trainyard_job_step_duration_seconds_sum", "trainyard_job_step_duration_seconds_count"},
            "wire bytes": {"trainyard_job_comm_wire_bytes_total"},
            "compression ratio": {"trainyard_job_comm_compression_ratio"},
            "memory": {"trainyard_job_memory_bytes"}, "checkpoint count": {"trainyard_checkpoints_total"},
            "checkpoint duration": {"trainyard_checkpoint_duration_seconds_bucket"},
            "checkpoint bytes": {"trainyard_job_last_checkpoint_bytes"},
            "last checkpoint age": {"trainyard_job_last_checkpoint_timestamp_seconds"},
            "restarts": {"trainyard_job_restarts_total"}, "goodput": {"trainyard_job_goodput"},
            "jobs by state": {"trainyard_jobs"},
            "replicas": {"trainyard_job_replicas", "trainyard_job_membership_epoch", "trainyard_job_heals_total"},
        }
        missing = {topic: sorted(names - used) for topic, names in required.items() if names - used}
        self.assertEqual(missing, {}, "dashboard topics without their metrics")


# ---------------------------------------------------------------- live: server, jobs, Prometheus

DDP_JOB = """
name: deploy-ddp
model: {kind: mlp, hidden: [64]}
data: {kind: synthetic, batch_size: 32, num_samples: 4096}
optimizer: {kind: adamw, lr: 0.003}
scheduler: {kind: cosine, warmup_steps: 20}
# Far more steps than the test needs (minutes); the test cancels the job.
max_steps: 200000
num_processes: 2
eval_every_steps: 20
eval_batches: 2
max_grad_norm: 1.0
distributed_type: DDP
ddp: {comm_hook: fp16}
# Its replicas' series (membership, world size, heals) are exported once its ranks connect.
fault_tolerance: {mode: replica, min_replicas: 1}
"""

# A script job reporting a named number (trainyard_job_value); the system's
# python3, no torch.
SCRIPT = """import time, trainyard
step = 0
while True:
    step += 1
    trainyard.report(step, samples=4, loss=1.0 / step, accuracy=0.5)
    time.sleep(0.2)
"""

FSDP_JOB = """
name: deploy-fsdp
model: {kind: gpt, layers: 2, width: 32, heads: 4, context: 16, vocab: 64}
data: {kind: synthetic, batch_size: 4, num_samples: 2000}
optimizer: {kind: adamw, lr: 0.003}
max_steps: 200000
num_processes: 2
distributed_type: FSDP
fsdp_config: {fsdp_sharding_strategy: 1, fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP,
              fsdp_transformer_layer_cls_to_wrap: Block}
"""


def http_get(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return resp.read().decode()


def stop_process(proc, timeout=30):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Server(e2e_test.Server):
    """e2e_test's server (loopback, OS-chosen ports from --ready-file), plus submit."""

    def submit(self, spec_path):
        r = self.ctl("-o", "json", "submit", spec_path)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)["id"]


class Prometheus:
    """A real Prometheus with deploy/prometheus/prometheus.yml and the rules, scraping one target every second."""

    def __init__(self, work_dir, target):
        cfg = load_yaml(os.path.join(PROM, "prometheus.yml"))
        cfg["global"].update({"scrape_interval": "1s", "evaluation_interval": "1s"})
        cfg["rule_files"] = [os.path.join(PROM, f) for f in cfg["rule_files"]]
        (job,) = [j for j in cfg["scrape_configs"] if j["job_name"] == "trainyard"]
        job["static_configs"] = [{"targets": [target]}]
        self.config = os.path.join(work_dir, "prometheus.yml")
        with open(self.config, "w") as f:
            yaml.safe_dump(cfg, f)
        self.log = open(os.path.join(work_dir, "prometheus.log"), "ab")
        for _ in range(3):  # the free port may be taken before Prometheus binds it
            self.port = free_port()
            self.url = f"http://127.0.0.1:{self.port}"
            self.proc = subprocess.Popen(
                [shutil.which("prometheus") or "prometheus", f"--config.file={self.config}",
                 f"--storage.tsdb.path={os.path.join(work_dir, 'tsdb')}",
                 f"--web.listen-address=127.0.0.1:{self.port}"],
                stdout=self.log, stderr=subprocess.STDOUT)
            if wait_for(self._ready_or_exited, 60, "Prometheus to be ready") == "ready":
                return
        raise AssertionError(f"Prometheus did not start; see {work_dir}/prometheus.log")

    def _ready_or_exited(self):
        if self.proc.poll() is not None:
            return "exited"
        try:
            return "ready" if http_get(self.url + "/-/ready", timeout=2) else None
        except OSError:
            return None

    def api(self, path, **params):
        url = f"{self.url}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params, doseq=True)
        try:
            body = json.loads(http_get(url))
        except urllib.error.HTTPError as e:  # a bad query is a 400 with a JSON error
            body = json.loads(e.read().decode())
        return body

    def query(self, expr):
        return self.api("query", query=expr)

    def stop(self):
        stop_process(self.proc)
        self.log.close()


def substitute_grafana_variables(expr, job_id=".+"):
    return (expr.replace("$__rate_interval", "10s").replace("$__interval", "2s").replace("$__range", "5m")
            .replace("$job_id", job_id).replace("$instance", ".+"))


class LiveStack(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not shutil.which("prometheus"):
            raise AssertionError("prometheus not found: install the Debian package `prometheus`")
        cls.tmp = tempfile.TemporaryDirectory(prefix="trainyard-deploy-")
        cls.addClassCleanup(cls.tmp.cleanup)
        cls.jobs = []
        # A policy file: the per-user, group and class series are exported
        # (trainctl sends the admin user's token).
        token = "deploy-token-0123456789"
        policy = os.path.join(cls.tmp.name, "policy.yaml")
        with open(policy, "w") as f:
            f.write("users:\n  - {name: deploy, token_sha256: \"%s\", groups: [ml], role: admin}\n"
                    "priority_classes: {low: 0, normal: 100}\n"
                    "quotas: {users: {deploy: {slots: 64}}, groups: {ml: {slots: 64}}}\n"
                    % hashlib.sha256(token.encode()).hexdigest())
        saved = os.environ.get("TRAINYARD_TOKEN")
        os.environ["TRAINYARD_TOKEN"] = token
        cls.addClassCleanup(lambda: os.environ.pop("TRAINYARD_TOKEN") if saved is None
                            else os.environ.__setitem__("TRAINYARD_TOKEN", saved))
        # MFU is exported with --peak-flops.
        cls.server = Server(cls.tmp.name, slots=5, extra=("--peak-flops", "1e11", "--policy-file", policy))
        cls.addClassCleanup(cls.server.stop)
        cls.addClassCleanup(cls._cancel_jobs)
        spec = os.path.join(cls.tmp.name, "ddp.yaml")
        with open(spec, "w") as f:
            f.write(DDP_JOB)
        cls.ddp = cls.server.submit(spec)
        cls.jobs.append(cls.ddp)
        script = os.path.join(cls.tmp.name, "report.py")
        with open(script, "w") as f:
            f.write(SCRIPT)
        spec = os.path.join(cls.tmp.name, "script.yaml")
        with open(spec, "w") as f:
            f.write(f"name: deploy-script\nscript: {{path: {script}, python: /usr/bin/python3}}\nnum_processes: 1\n")
        cls.script = cls.server.submit(spec)
        cls.jobs.append(cls.script)
        cls.prom = Prometheus(cls.tmp.name, f"127.0.0.1:{cls.server.metrics_port}")
        cls.addClassCleanup(cls.prom.stop)

    @classmethod
    def _cancel_jobs(cls):
        for job_id in cls.jobs:
            cls.server.ctl("cancel", job_id)

    def samples_per_second(self):
        r = self.prom.query(f'trainyard_job_samples_per_second{{job_id="{self.ddp}"}}')
        result = r.get("data", {}).get("result", [])
        if len(result) == 2 and all(float(x["value"][1]) > 0 for x in result):
            return result
        return None

    def test_1_prometheus_scrapes_the_server(self):
        def target_up():
            targets = self.prom.api("targets")["data"]["activeTargets"]
            up = [t for t in targets if t["labels"].get("job") == "trainyard" and t["health"] == "up"]
            return up or None

        (target,) = wait_for(target_up, 60, "the trainyard target to be up in /api/v1/targets")
        self.assertEqual(target["scrapeUrl"], f"http://127.0.0.1:{self.server.metrics_port}/metrics")
        result = wait_for(self.samples_per_second, 90,
                          f"Prometheus to hold positive trainyard_job_samples_per_second for {self.ddp}")
        for series in result:
            labels = series["metric"]
            # job_id is the server's label; job stays the scrape job's name.
            self.assertEqual((labels["job"], labels["job_id"]), ("trainyard", self.ddp), labels)
            self.assertIn(labels["rank"], ("0", "1"))

    def test_2_rules_are_loaded_and_healthy(self):
        names = {r["alert"] for r in alert_rules()}

        def rules_ok():
            loaded = {}
            for g in self.prom.api("rules")["data"]["groups"]:
                for r in g["rules"]:
                    loaded[r["name"]] = r
            if set(loaded) >= names and all(loaded[n]["health"] == "ok" for n in names):
                return loaded
            return None

        try:
            wait_for(rules_ok, 30, "every alerting rule to be evaluated with health ok")
        except AssertionError:
            self.fail(f"rules not all healthy: {json.dumps(self.prom.api('rules')['data'], indent=1)[:4000]}")
        wait_for(self.samples_per_second, 90, "the job's metrics in Prometheus")
        firing = [a for a in self.prom.api("alerts")["data"]["alerts"] if a["state"] == "firing"]
        self.assertEqual(firing, [], "alerts fire on a healthy server")

    def test_3_dashboard_and_rules_read_only_exported_metrics(self):
        s = self.server
        wait_for(lambda: s.job(self.ddp)["step"] > 0, 90, "the DDP job to train")
        c = s.ctl("checkpoint", self.ddp, "--wait")
        self.assertEqual(c.returncode, 0, c.stdout + c.stderr)
        spec = os.path.join(self.tmp.name, "fsdp.yaml")
        with open(spec, "w") as f:
            f.write(FSDP_JOB)
        fsdp = s.submit(spec)
        self.jobs.append(fsdp)

        def fsdp_collectives():
            samples, _ = parse_exposition(s.scrape())
            return any(l.get("job_id") == fsdp and v > 0
                       for l, v in samples.get("trainyard_job_fsdp_collective_bytes_total", []))

        wait_for(fsdp_collectives, 90, "the FSDP job's collective bytes on /metrics")
        wait_for(lambda: f'trainyard_job_value{{job_id="{self.script}",name="accuracy"' in s.scrape(), 90,
                 "the script job's named number on /metrics")
        samples, types = parse_exposition(s.scrape())
        self.assertEqual(s.job(self.ddp)["state"], "RUNNING")

        # Every metric named by a panel or a rule is exported, with the labels it is selected by.
        target_labels = {"job", "instance"}
        panel_exprs = {}
        with open(DASHBOARD) as f:
            dash = json.load(f)
        for title, expr in dashboard_targets(dash):
            panel_exprs.setdefault(expr, f"panel '{title}'")
        used = dict(panel_exprs)
        for r in alert_rules():
            used.setdefault(r["expr"], f"alert {r['alert']}")
        missing, bad_labels = {}, []
        for expr, where in used.items():
            for name in metric_names(expr):
                if name not in samples and not gpu_only(name):
                    missing.setdefault(name, []).append(where)
            for name, label in selector_labels(expr):
                have = {k for l, _ in samples.get(name, []) for k in l} | target_labels
                if name in samples and label not in have:
                    bad_labels.append(f"{where}: {name} has no label {label} (has {sorted(have)})")
        self.assertEqual(missing, {}, "metrics used but not on the live /metrics:\n" +
                         "\n".join(f"  {n}: {', '.join(w)}" for n, w in sorted(missing.items())))
        self.assertEqual(bad_labels, [], "label matchers on labels the metric does not have")

        # docs/reference/metrics.md lists exactly the exported families, with their types and labels.
        documented = {}
        with open(METRICS_DOC) as f:
            for line in f:
                m = re.match(r"^\|\s*`(trainyard_\w+)`\s*\|\s*(\w+)\s*\|([^|]*)\|", line)
                if m:
                    documented[m.group(1)] = (m.group(2), set(re.findall(r"`(\w+)`", m.group(3))))
        exported = {n: t for n, t in types.items() if n.startswith("trainyard_")}
        self.assertEqual(sorted(set(exported) - set(documented)), [], "exported but not in docs/reference/metrics.md")
        elsewhere = LARGE_JOB_ONLY | SHARED_STORE_ONLY | ATTENTION_MODEL_ONLY
        self.assertEqual(sorted(n for n in set(documented) - set(exported)
                                if not gpu_only(n) and n not in elsewhere), [],
                         "in docs/reference/metrics.md but not exported")
        self.assertTrue(any(gpu_only(n) for n in documented), "the GPU families are not documented")
        for name, kind in exported.items():
            self.assertEqual(documented[name][0], kind, f"docs/reference/metrics.md: type of {name}")
            series = [l for n, ls in samples.items() if n == name or
                      (kind == "histogram" and n in (name + "_bucket", name + "_count")) for l, _ in ls]
            labels = {k for l in series for k in l} - {"le"}
            self.assertEqual(documented[name][1], labels, f"docs/reference/metrics.md: labels of {name}")

        # Every dashboard query is valid PromQL and returns data from Prometheus,
        # as do the job_id and instance variables.
        exprs = sorted({substitute_grafana_variables(e) for e in panel_exprs
                        if not all(gpu_only(n) for n in metric_names(e))})
        self.assertTrue(any(gpu_only(n) for e in panel_exprs for n in metric_names(e)), "no GPU panel")

        def failing_queries():
            bad = {}
            for e in exprs:
                r = self.prom.query(e)
                if r.get("status") != "success":
                    raise AssertionError(f"Prometheus rejects dashboard query {e}: {r.get('error')}")
                if not r["data"]["result"]:
                    bad[e] = "no data"
            return bad

        last = {}

        def all_return_data():
            last.clear()
            last.update(failing_queries())
            return not last

        try:
            wait_for(all_return_data, 60, "every dashboard query to return data")
        except AssertionError:
            self.fail("dashboard queries without data:\n" + "\n".join(f"  {e}" for e in last))
        job_ids = self.prom.api("label/job_id/values", **{"match[]": "trainyard_job_step"})["data"]
        self.assertLessEqual({self.ddp, fsdp}, set(job_ids))
        self.assertTrue(self.prom.api("label/instance/values", **{"match[]": "trainyard_jobs"})["data"])

        c = s.ctl("cancel", fsdp)
        self.assertEqual(c.returncode, 0, c.stdout + c.stderr)


def _take_bin_dir(argv):
    """--bin DIR, --bin=DIR or a leading DIR argument (as ctest passes it); else $TRAINYARD_BIN or build/bin."""
    for i, a in enumerate(argv[1:], 1):
        if a == "--bin" and i + 1 < len(argv):
            value = argv[i + 1]
            del argv[i:i + 2]
            return value
        if a.startswith("--bin="):
            del argv[i]
            return a.split("=", 1)[1]
    if len(argv) > 1 and os.path.isdir(argv[1]):
        return argv.pop(1)
    return os.environ.get("TRAINYARD_BIN") or os.path.join(REPO, "build", "bin")


if __name__ == "__main__":
    BIN = e2e_test.BIN = os.path.abspath(_take_bin_dir(sys.argv))
    for b in ("trainyard-server", "trainyard-worker", "trainctl"):
        if not os.access(os.path.join(BIN, b), os.X_OK):
            sys.exit(f"deploy_test: {b} not found in {BIN}; pass --bin DIR or set TRAINYARD_BIN")
    test_clock.main()
