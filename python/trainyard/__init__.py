"""Trainyard from inside a training script.

A script job's ranks run the user's script under a trainyard-worker, which
puts this package on PYTHONPATH. `import trainyard` needs nothing but the
standard library (and torch.distributed, when the script uses it, for the
agreement below). Outside Trainyard every call is a harmless no-op, so the
same script runs under `accelerate launch` or `torchrun` as it is.

    import trainyard
    ...
    start = 0
    if trainyard.resume_dir():
        accelerator.load_state(trainyard.resume_dir())
        start = trainyard.resumed_step()
    for step in range(start, max_steps):
        loss = train_step()
        trainyard.report(step + 1, samples=batch_size, loss=loss.item())
        if trainyard.checkpoint_requested() or trainyard.should_stop():
            path = trainyard.checkpoint_dir(step + 1)
            accelerator.save_state(path)
            trainyard.checkpoint_saved(path, step + 1)
        if trainyard.should_stop():
            break

Every rank calls the same functions at the same points: `should_stop` and
`checkpoint_requested` give every rank the same answer, agreed once per
reported step (a small all-reduce on a Gloo group of their own when
torch.distributed is initialized).
"""
import json
import os
import signal
import sys
import threading
import time

from . import _channel

__all__ = [
    "report",
    "checkpoint_requested",
    "checkpoint_dir",
    "checkpoint_saved",
    "resume_dir",
    "resumed_step",
    "should_stop",
    "ddp_kwargs",
    "AccelerateTracker",
    "in_trainyard",
    "Client",
    "TrainyardError",
]

_sigterm = threading.Event()
_agreed = None  # (stop, checkpoint, request_id) agreed for the current step
_agree_group = None
_last_report = [None, None]  # (time, step) of the previous report


def in_trainyard():
    """Whether this process runs as a rank of a Trainyard script job."""
    return _channel.connected()


def _on_sigterm(signum, frame):
    # Preemption (a cluster's notice, or the worker passing its SIGTERM on):
    # the script saves and returns at its next step boundary.
    _sigterm.set()


if _channel.connected() and threading.current_thread() is threading.main_thread():
    signal.signal(signal.SIGTERM, _on_sigterm)


def report(step, samples=None, loss=None, total=None, **values):
    """Reports the end of optimizer step `step` (1, 2, ...): the samples this
    rank trained in it, its loss, and any other numbers (a gauge per name on
    /metrics). `total`, as tqdm's: the steps the script will run, the job's
    length from then on (`trainctl watch` draws its bar and ETA). Cheap: one
    local message, no waiting."""
    global _agreed
    _agreed = None  # the next question is about this step's boundary
    now = time.perf_counter()
    seconds = None
    if _last_report[0] is not None and _last_report[1] is not None and step > _last_report[1]:
        seconds = (now - _last_report[0]) / (step - _last_report[1])
    _last_report[0], _last_report[1] = now, step
    _channel.send(_channel.report_message(step, samples, loss, seconds, values, total))


def _world():
    # Only a script that imported torch.distributed can have initialized it:
    # never import torch here (a second or more for a script without it).
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return None
    if not dist.is_available() or not dist.is_initialized() or dist.get_world_size() < 2:
        return None
    return dist


def _agree():
    """(stop, checkpoint, request_id), the same on every rank, once per step."""
    global _agreed, _agree_group
    if _agreed is not None:
        return _agreed
    st = _channel.state()
    kinds = {None: 0, "full": 1, "sharded": 2}
    local = [1 if (st.get("stop") or _sigterm.is_set()) else 0, kinds.get(st.get("checkpoint"), 0),
             int(st.get("request_id") or 0)]
    dist = _world()
    if dist is not None:
        import torch
        if _agree_group is None:
            # Its own group: the question never queues with the training's
            # collectives.
            _agree_group = dist.new_group(backend="gloo")
        t = torch.tensor(local, dtype=torch.int64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=_agree_group)
        local = [int(x) for x in t.tolist()]
    names = {0: None, 1: "full", 2: "sharded"}
    _agreed = (bool(local[0]), names[local[1]], local[2])
    return _agreed


def should_stop():
    """True once the job is being preempted or cancelled with a checkpoint:
    save (checkpoint_dir, checkpoint_saved) and return; the job resumes
    from that checkpoint later, losing no step."""
    return _agree()[0]


def checkpoint_requested():
    """None, or "full" / "sharded" when someone asked for a checkpoint
    (`trainctl checkpoint`): save one at this step boundary. Once
    checkpoint_saved registered it, None again until the next request."""
    return _agree()[1]


_saved = [0]  # checkpoints this process registered


def checkpoint_dir(step=None):
    """Where to save the next checkpoint: Accelerate's automatic naming,
    <project_dir>/checkpoints/checkpoint_<n> (the job's
    checkpoint.project_dir), n after every checkpoint there when the rank
    started and the ones saved since — the same on every rank."""
    root = os.environ.get("TRAINYARD_CHECKPOINT_DIR") or os.path.join(os.getcwd(), "checkpoints")
    first = os.environ.get("TRAINYARD_CHECKPOINT_NEXT_INDEX")
    if first is None or not first.isdigit():
        # Outside Trainyard: after what is there now.
        first = 0
        try:
            for name in os.listdir(root):
                if name.startswith("checkpoint_") and name[len("checkpoint_"):].isdigit():
                    first = max(first, int(name[len("checkpoint_"):]) + 1)
        except FileNotFoundError:
            pass
        return os.path.join(root, "checkpoint_%d" % first)
    return os.path.join(root, "checkpoint_%d" % (int(first) + _saved[0]))


def checkpoint_saved(path, step=None):
    """Registers a checkpoint the script has saved (every rank calls it after
    its part): Trainyard lists it (`trainctl checkpoints`), restarts from the
    newest one, and keeps at most checkpoint.total_limit of them."""
    global _agreed
    stop, kind, request_id = _agree()
    _saved[0] += 1
    answers = request_id if (kind or stop) else 0
    _channel.send(_channel.saved_message(os.path.abspath(str(path)), step, answers))
    if kind:
        # Answered: checkpoint_requested() is None from now on, in this step
        # too, until the next request.
        _channel.answered(request_id)
        _agreed = (stop, None, request_id)


def resume_dir():
    """The checkpoint to resume from (after a restart or `trainctl resume`),
    or None when the job starts fresh."""
    return os.environ.get("TRAINYARD_RESUME_DIR") or None


def resumed_step():
    """The step of resume_dir()'s checkpoint (0 without one)."""
    d = resume_dir()
    if not d:
        return 0
    try:
        with open(os.path.join(d, "manifest.json")) as f:
            return int(json.load(f).get("metadata", {}).get("step", 0))
    except (OSError, ValueError, TypeError):
        return 0


def ddp_kwargs():
    """Accelerate's DistributedDataParallelKwargs for the job's `ddp` section
    (comm_hook, comm_wrapper, comm_state_option, bucket_cap_mb, ...), for
    `Accelerator(kwargs_handlers=[trainyard.ddp_kwargs()])`."""
    from accelerate.utils import DDPCommunicationHookType, DistributedDataParallelKwargs
    spec = json.loads(os.environ.get("TRAINYARD_DDP_KWARGS", "{}"))
    for key in ("comm_hook", "comm_wrapper"):
        if key in spec:
            spec[key] = DDPCommunicationHookType(spec[key])
    return DistributedDataParallelKwargs(**spec)


def __getattr__(name):
    # The client needs grpcio; the in-script part must not.
    if name in ("Client", "TrainyardError", "NotFound", "PermissionDenied", "InvalidArgument", "Unauthenticated",
                "FailedPrecondition", "ResourceExhausted", "Unavailable", "DeadlineExceeded", "AlreadyExists",
                "Cancelled", "Internal"):
        from . import client
        return getattr(client, name)
    raise AttributeError(f"module 'trainyard' has no attribute {name!r}")


def AccelerateTracker(*args, **kwargs):  # noqa: N802 (a class, made when first asked for)
    """An Accelerate tracker whose accelerator.log(values, step) reaches
    /metrics: Accelerator(log_with=trainyard.AccelerateTracker())."""
    from ._tracker import make_tracker
    return make_tracker(*args, **kwargs)
