"""The environment `accelerate launch` gives each process, computed by
Accelerate's own launcher code: a script job's ranks get exactly it.

    python -m trainyard._launch_env [--cache-dir DIR] --config_file FILE \\
        --num_processes N [--num_machines M --machine_rank R \\
        --main_process_ip IP --main_process_port P]

Prints one JSON object: every variable the launcher sets or changes (the
rank's own — RANK, LOCAL_RANK, ... — come from torchrun's agent, which
Trainyard's worker plays). Exits 2 with Accelerate's message when it
refuses the arguments.

Importing Accelerate imports torch (about a second). With --cache-dir the
answer is computed once for the ranks that ask together (a lock in the
directory: the others wait and read it) and kept there, keyed by everything it depends on: this Python, the
installed accelerate and torch (version, place, modification time), the
config's text and the other arguments, the environment, and the GPUs the
driver lists. Only the rendezvous address and port are left out of the key:
Accelerate puts them in its launcher's arguments, not in the environment.

Only variables `accelerate launch` sets are given (launch_variable): a
cached answer holding any other (LD_PRELOAD, PYTHONPATH...), or a cache
file another account owns or may write, is not used.
"""
import hashlib
import json
import os
import sys

CACHE_ENTRIES = 64

# What accelerate launch sets (accelerate/utils/launch.py), and nothing else.
LAUNCH_PREFIXES = ("ACCELERATE_", "FSDP_", "MEGATRON_LM_", "PARALLELISM_CONFIG_", "KMP_")
LAUNCH_NAMES = frozenset({
    "MASTER_ADDR", "MASTER_PORT", "OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "ASCEND_RT_VISIBLE_DEVICES",
    "HABANA_VISIBLE_MODULES", "MLU_VISIBLE_DEVICES", "MUSA_VISIBLE_DEVICES", "NEURON_RT_VISIBLE_CORES",
    "SDAA_VISIBLE_DEVICES", "ZE_AFFINITY_MASK"})


def launch_variable(name):
    """Whether `name` is a variable accelerate launch sets."""
    return name in LAUNCH_NAMES or name.startswith(LAUNCH_PREFIXES)


def launch_environment(argv):
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import prepare_multi_gpu_env, prepare_simple_launcher_cmd_env

    args = launch_command_parser().parse_args(list(argv) + ["trainyard-script.py"])
    args, _defaults, _mp = _validate_launch_command(args)
    before = dict(os.environ)
    # As accelerate's launch_command picks its launcher.
    if (args.use_fsdp or args.multi_gpu or args.use_megatron_lm) and not args.cpu:
        env = prepare_multi_gpu_env(args)
    else:
        _cmd, env = prepare_simple_launcher_cmd_env(args)
    return {k: str(v) for k, v in env.items() if before.get(k) != v and launch_variable(k)}


def _package_identity(name):
    """Version, place and modification time of an installed package, found
    without importing it."""
    import importlib.metadata
    import importlib.util
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        return [name, None]
    try:
        version = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        version = None
    return [name, version, spec.origin, os.stat(spec.origin).st_mtime_ns]


def cache_key(argv):
    """What the answer depends on (see the module's text)."""
    args, skip = [], False
    for i, a in enumerate(argv):
        if skip:
            skip = False
            continue
        if a in ("--main_process_ip", "--main_process_port"):
            skip = True
            continue
        if i > 0 and argv[i - 1] == "--config_file":
            with open(a, "rb") as f:
                a = hashlib.sha256(f.read()).hexdigest()
        args.append(a)
    env = sorted((k, v) for k, v in os.environ.items() if not k.startswith("TRAINYARD_"))
    try:
        gpus = sorted(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        gpus = []
    key = [sys.executable, sys.version, _package_identity("accelerate"), _package_identity("torch"), args, env, gpus]
    return hashlib.sha256(json.dumps(key).encode()).hexdigest()


def _cached(cache_dir, argv):
    """The cached answer, when this account alone could have written it and
    it holds only launch variables; else None."""
    path = os.path.join(cache_dir, f"accelerate-env-{cache_key(argv)}.json")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return path, None
    try:
        with os.fdopen(fd) as f:
            st = os.fstat(f.fileno())
            d = os.stat(cache_dir)
            for s in (st, d):
                if s.st_uid != os.getuid() or s.st_mode & 0o022:
                    return path, None
            env = json.load(f)
    except (OSError, ValueError):
        return path, None
    if not isinstance(env, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and launch_variable(k) for k, v in env.items()):
        return path, None
    return path, env


def _store(cache_dir, path, env):
    try:
        os.makedirs(cache_dir, mode=0o700, exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600), "w") as f:
            json.dump(env, f, sort_keys=True)
        os.replace(tmp, path)
        entries = sorted((e for e in os.scandir(cache_dir) if e.name.startswith("accelerate-env-")),
                         key=lambda e: e.stat().st_mtime, reverse=True)
        for old in entries[CACHE_ENTRIES:]:
            os.unlink(old.path)
    except OSError:
        pass  # a cache that cannot be written only costs the next launch its second


def _lock(cache_dir):
    """An exclusive lock on the cache directory (a descriptor to close), so
    that the ranks of a node, which start together and ask the same
    question, compute the answer once: the first computes and stores it,
    the others wait and read it. None when it cannot be taken (then each
    computes its own, as without a cache)."""
    import fcntl
    try:
        os.makedirs(cache_dir, mode=0o700, exist_ok=True)
        fd = os.open(os.path.join(cache_dir, "accelerate-env.lock"), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError:
        os.close(fd)
        return None
    return fd


def main(argv):
    cache_dir = None
    if len(argv) >= 2 and argv[0] == "--cache-dir":
        cache_dir, argv = argv[1], argv[2:]
    path = env = lock = None
    if cache_dir:
        path, env = _cached(cache_dir, argv)
        if env is None:
            lock = _lock(cache_dir)
            path, env = _cached(cache_dir, argv)  # another rank's, stored while this one waited
    try:
        if env is None:
            try:
                env = launch_environment(argv)
            except (ValueError, SystemExit) as e:
                print(f"accelerate launch refuses this configuration: {e}", file=sys.stderr)
                return 2
            if cache_dir:
                _store(cache_dir, path, env)
    finally:
        if lock is not None:
            os.close(lock)
    print(json.dumps(env, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
