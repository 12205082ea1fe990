"""Every example, run as its own comments say, learns.

For each examples/*.yaml job, the test types the commands its header gives
(`.venv/bin/python examples/make_….py DIR`, `trainctl submit … --watch`), in
a directory laid out as the checkout (examples/ and .venv), where the server
runs: relative paths in the specs resolve there, as after `scripts/demo.sh`.
A spec with no command in its header is submitted with `trainctl submit
FILE --watch`. The one change: `--set max_steps=N` where the example's own
steps would take minutes on this machine. Each job must SUCCEED and its loss
must fall: the last training loss below 0.8 of the first, and for a
classifier of 10 classes below ln(10) (chance) by a margin. ResNet-50 is the
exception: on 2 CPU cores 30 of its steps take ~45 s and its loss does not
yet fall, so it runs 6 steps and is checked for what its header promises
instead: its final checkpoint loads into torchvision's resnet50, strictly.

The two script examples' "run it without Trainyard" commands run as their
docstrings give them (torchrun, accelerate launch) and print a falling loss.

Each sweep of examples/sweeps/ runs as its header says (`trainctl sweep
submit … --watch`, then `trainctl sweep get` and `trainctl logs` with the
ids it printed): it must SUCCEED with its best trial's loss falling; the
ASHA sweeps must stop a trial early, the PBT sweep must copy one.
"""
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_test  # noqa: E402
from e2e_test import REPO, Server  # noqa: E402
import test_clock  # noqa: E402

EXAMPLES = os.path.join(REPO, "examples")
SWEEPS = os.path.join(EXAMPLES, "sweeps")
# Steps where an example's own would take minutes on 2 CPU cores (its loss
# must still fall within them). accelerate-fsdp's config trains in bf16,
# whose matmuls have no fast kernel on a CPU without AVX512-BF16: 0.9 s a
# step here (its loss 5.5 -> 2.9 in 40 steps).
STEPS = {"llama-finetune": 60, "resnet50-ddp": 6, "accelerate-fsdp": 40}
CLASSIFIERS = {"mnist-ddp", "resnet-ddp-powersgd", "attention", "torchscript", "image-folder"}
# Examples checked by their checkpoint, not by a falling loss (see above): the check's Python.
LOADS_INTO_TORCHVISION = {
    "resnet50-ddp": "import sys, torchvision; from safetensors.torch import load_file; "
                    "torchvision.models.resnet50(num_classes=10).load_state_dict("
                    "load_file(sys.argv[1] + '/model.safetensors'), strict=True); print('loaded')"}


def documented_commands(path):
    """The commands of a spec's header comment, continuation lines joined."""
    lines, commands = [], []
    for line in open(path):
        if not line.startswith("#"):
            break
        lines.append(line[1:].strip())
    text = "\n".join(lines).replace("\\\n", " ")
    for line in text.splitlines():
        line = re.sub(r"^Submit with:\s*", "", line)
        line = re.sub(r"\s+# .*$", "", line)
        if line.startswith((".venv/bin/python ", "trainctl ")):
            commands.append(re.sub(r"\s+", " ", line))
    return commands


def docstring_command(script, program):
    """The lines of a script's docstring that run it with `program` (with a
    `cd` line just before it), joined with &&."""
    doc = open(script).read().split('"""')[1].splitlines()
    for i, line in enumerate(doc):
        if re.match(r"\s*(PYTHONPATH=\S+ )?\S*" + re.escape(program) + " ", line):
            lines = [line.strip()]
            if i > 0 and doc[i - 1].strip().startswith("cd "):
                lines.insert(0, doc[i - 1].strip())
            return " && ".join(lines)
    raise AssertionError(f"{script}'s docstring gives no `{program}` command")


class Examples(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.cwd = os.path.join(cls.tmp.name, "checkout")
        os.makedirs(cls.cwd)
        for name in ("examples", ".venv", "python"):
            os.symlink(os.path.join(REPO, name), os.path.join(cls.cwd, name))
        state = os.path.join(cls.tmp.name, "state")
        os.makedirs(state)
        # examples/ is a link to the checkout's: the scripts the sweeps run
        # resolve there, a root of the server's as the checkout is in the
        # demo's (beside the default ones, the state and working directories).
        roots = ("--allowed-root", state, "--allowed-root", cls.cwd, "--allowed-root", EXAMPLES)
        cls.server = Server(state, slots=2, cwd=cls.cwd, extra=roots)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        cls.tmp.cleanup()

    def type(self, line):
        env = dict(os.environ, TRAINYARD_SERVER=self.server.addr,
                   PATH=e2e_test.BIN + os.pathsep + os.environ["PATH"])
        r = subprocess.run(["bash", "-c", line], cwd=self.cwd, env=env, capture_output=True, text=True,
                           timeout=600)
        self.assertEqual(r.returncode, 0, f"`{line}` exited {r.returncode}:\n{r.stdout}{r.stderr}")
        return r.stdout

    def check_learns(self, name, job):
        j = self.server.job(job)
        self.assertEqual(j["state"], "SUCCEEDED", f"{name}: {j['reason']}")
        r = self.server.ctl("-o", "json", "history", job, "--series", "loss")
        self.assertEqual(r.returncode, 0, r.stderr)
        points = [p["value"] for p in json.loads(r.stdout)["series"]["loss"]["points"]]
        self.assertGreater(len(points), 5, name)
        first, last = points[0], sum(points[-5:]) / 5
        print(f"  {name}: loss {first:.3f} -> {last:.3f} in {j['step']} steps", flush=True)
        self.assertLess(last, 0.8 * first, f"{name}: the loss did not fall ({first} -> {last})")
        if name in CLASSIFIERS:
            self.assertLess(last, 0.8 * math.log(10), f"{name}: at chance level ({last})")

    def run_example(self, name):
        path = os.path.join(EXAMPLES, name + ".yaml")
        commands = documented_commands(path) or [f"trainctl submit examples/{name}.yaml --watch"]
        job = None
        for line in commands:
            if line.startswith("trainctl submit") and name in STEPS:
                line = line.replace(" --watch", f" --set max_steps={STEPS[name]} --watch")
            out = self.type(line)
            m = re.search(r"^submitted (job-[0-9a-f]+) ", out, re.M)
            if m:
                job = m.group(1)
                self.assertIn("SUCCEEDED", out, f"{name}: `{line}` did not end SUCCEEDED:\n{out}")
        self.assertIsNotNone(job, f"{name}: no `trainctl submit` among {commands}")
        if name in LOADS_INTO_TORCHVISION:
            self.check_loads_into_torchvision(name, job)
        else:
            self.check_learns(name, job)

    def check_loads_into_torchvision(self, name, job):
        j = self.server.job(job)
        self.assertEqual(j["state"], "SUCCEEDED", f"{name}: {j['reason']}")
        r = self.server.ctl("-o", "json", "checkpoints", job)
        self.assertEqual(r.returncode, 0, r.stderr)
        listed = json.loads(r.stdout)
        self.assertTrue(listed, f"{name}: no checkpoint")
        python = os.path.join(REPO, ".venv", "bin", "python")
        r = subprocess.run([python, "-c", LOADS_INTO_TORCHVISION[name], listed[-1]["path"]], capture_output=True,
                           text=True, timeout=120)
        self.assertEqual(r.returncode, 0, f"{name}: the checkpoint does not load into torchvision:\n{r.stderr}")
        print(f"  {name}: {j['step']} steps; its checkpoint loads into torchvision", flush=True)

    def test_every_example_is_covered(self):
        specs = sorted(f[:-5] for f in os.listdir(EXAMPLES) if f.endswith(".yaml") and "config" not in f)
        tested = sorted(n[len("test_"):].replace("_", "-") for n in dir(self) if n.startswith("test_")
                        and n not in ("test_every_example_is_covered",)
                        and not n.startswith(("test_script_", "test_sweep_")))
        self.assertEqual(specs, tested)
        sweeps = sorted(f[:-5] for f in os.listdir(SWEEPS) if f.endswith(".yaml"))
        self.assertEqual(sweeps, sorted(n[len("test_sweep_"):].replace("_", "-") for n in dir(self)
                                        if n.startswith("test_sweep_")))

    def test_mnist_ddp(self):
        self.run_example("mnist-ddp")

    def test_resnet_ddp_powersgd(self):
        self.run_example("resnet-ddp-powersgd")

    def test_resnet50_ddp(self):
        self.run_example("resnet50-ddp")

    def test_attention(self):
        self.run_example("attention")

    def test_torchscript(self):
        self.run_example("torchscript")

    def test_finetune(self):
        self.run_example("finetune")

    def test_image_folder(self):
        self.run_example("image-folder")

    def test_gpt_fsdp(self):
        self.run_example("gpt-fsdp")

    def test_llama_finetune(self):
        self.run_example("llama-finetune")

    def test_accelerate_fsdp(self):
        self.run_example("accelerate-fsdp")

    def run_sweep(self, name):
        """examples/sweeps/NAME.yaml's header commands, typed: the sweep's
        submission first; the ids the later ones name are the sweep's and
        the job of its best trial that trained to the end (PBT may have
        replaced the best). The sweep as `sweep get -o json` gives it."""
        path = os.path.join(SWEEPS, name + ".yaml")
        commands = documented_commands(path)
        self.assertTrue(commands and commands[0].startswith(f"trainctl sweep submit examples/sweeps/{name}.yaml "),
                        commands)
        out = self.type(commands[0])
        sweep_id = re.search(r"\bsweep-[0-9a-f]{8}\b", out).group(0)
        self.assertIn("SUCCEEDED", out, f"{name}: `{commands[0]}` did not end SUCCEEDED:\n{out}")
        r = self.server.ctl("-o", "json", "sweep", "get", sweep_id)
        self.assertEqual(r.returncode, 0, r.stderr)
        w = json.loads(r.stdout)
        self.assertEqual(w["state"], "SUCCEEDED", w["reason"])
        best = w["trials"][w["best_trial"]]
        ended = min((t for t in w["trials"] if t["state"] == "SUCCEEDED"), key=lambda t: t["best_metric"])
        for line in commands[1:]:
            line = re.sub(r"\bsweep-[0-9a-f]{8}\b", sweep_id, re.sub(r"\bjob-[0-9a-f]{8}\b", ended["job_id"], line))
            out = self.type(line)
            if line.startswith("trainctl sweep get"):
                self.assertIn(f"best:         trial {best['number']} ({best['job_id']})", out)
        self.check_learns(f"{name}: trial {ended['number']}", ended["job_id"])
        return w

    def test_sweep_asha(self):
        w = self.run_sweep("asha")
        self.assertEqual(w["rungs"], [30, 90])
        self.assertTrue(any(t["early_stopped"] for t in w["trials"]), "ASHA stopped no trial")

    def test_sweep_script_asha(self):
        w = self.run_sweep("script-asha")
        self.assertEqual(w["rungs"], [20, 60])
        self.assertTrue(any(t["early_stopped"] for t in w["trials"]), "ASHA stopped no trial")
        # `trainctl logs` of the best trial: what the script itself printed.
        best = w["trials"][w["best_trial"]]
        self.assertIn("step 120 loss ", self.server.ctl("logs", best["job_id"]).stdout)

    def test_sweep_script_pbt(self):
        w = self.run_sweep("script-pbt")
        copies = [t for t in w["trials"] if t["parent"] >= 0]
        self.assertTrue(copies, "PBT copied no trial: " + json.dumps(w["trials"], indent=1))
        r = self.server.ctl("logs", copies[0]["job_id"])
        self.assertIn(f"resumed at step {copies[0]['resumed_from_step']} from ", r.stdout,
                      r.stderr + json.dumps(w["trials"], indent=1))

    def standalone(self, script, program, steps):
        line = docstring_command(os.path.join(EXAMPLES, script), program)
        line = re.sub(r"--steps \d+", f"--steps {steps}", line)
        out = self.type(line)
        losses = [float(x) for x in re.findall(r"^step \d+ loss ([0-9.]+)", out, re.M)]
        self.assertGreaterEqual(len(losses), 2, f"`{line}` printed no losses:\n{out}")
        self.assertLess(losses[-1], 0.8 * losses[0], f"`{line}`: the loss did not fall: {losses}")

    def test_script_torchrun_without_trainyard(self):
        self.standalone("torchrun_script/train.py", "torchrun", 100)

    def test_script_accelerate_without_trainyard(self):
        self.standalone("accelerate_script/train.py", "accelerate launch", 100)


if __name__ == "__main__":
    e2e_test.BIN = os.path.abspath(sys.argv.pop(1))
    test_clock.main()
