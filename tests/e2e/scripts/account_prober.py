"""Bob's side of accounts_e2e: a script job that tries to reach what is not
his — each attempt's outcome is one line of OUT (JSON): "denied" with the
error, or "READ"/"WROTE"/"TRACED" when it got through.

    account_prober.py OUT ALICE_WORKER_PID ALICE_SCRIPT_PID PATH..."""
import ctypes
import json
import os
import sys

out = sys.argv[1]
worker_pid, script_pid = int(sys.argv[2]), int(sys.argv[3])
results = {}


def attempt(name, fn):
    try:
        results[name] = fn()
    except OSError as e:
        results[name] = f"denied: {e.strerror}"


def read(path):
    with open(path, "rb") as f:
        f.read(16)
    return "READ"


def listing(path):
    os.listdir(path)
    return "READ"


def write(path):
    with open(path, "w") as f:
        f.write("bob was here")
    return "WROTE"


def trace(pid):
    libc = ctypes.CDLL(None, use_errno=True)
    PTRACE_ATTACH, PTRACE_DETACH = 16, 17
    if libc.ptrace(PTRACE_ATTACH, pid, None, None) == 0:
        libc.ptrace(PTRACE_DETACH, pid, None, None)
        return "TRACED"
    err = ctypes.get_errno()
    raise OSError(err, os.strerror(err))


def planted(target, link):
    os.symlink(target, link)
    return read(link)


# Named on the command line: [alice's data, alice's project dir, alice's
# rank log, the server's key, the admin token, alice's job dir listing,
# a link path in bob's own root].
data, project, alice_log, key, token, job_dir, link = sys.argv[4:11]
attempt("alice_data", lambda: read(data))
attempt("alice_project_write", lambda: write(os.path.join(project, "planted.txt")))
attempt("alice_log", lambda: read(alice_log))
attempt("alice_job_dir_listing", lambda: listing(job_dir))
attempt("server_key", lambda: read(key))
attempt("admin_token", lambda: read(token))
attempt("alice_worker_environ", lambda: read(f"/proc/{worker_pid}/environ"))
attempt("alice_script_environ", lambda: read(f"/proc/{script_pid}/environ"))
attempt("ptrace_alice_script", lambda: trace(script_pid))
attempt("ptrace_alice_worker", lambda: trace(worker_pid))
attempt("symlink_into_alice", lambda: planted(data, link))
results["uid"] = os.getuid()
results["groups"] = os.getgroups()
results["own_environ_has_token"] = "TRAINYARD_WORKER_TOKEN=" in open(f"/proc/{os.getppid()}/environ").read()
with open(out, "w") as f:
    json.dump(results, f)
print(json.dumps(results), flush=True)
