"""The channel between a script and its rank's trainyard-worker.

The worker starts the script with one end of a Unix socket pair inherited as
file descriptor TRAINYARD_CHANNEL_FD. Messages are JSON objects, one per
line, both ways (docs/design/scripts.md; the worker's end is
worker/script/script_channel.h, and both ends are tested against the same lines in
tests/fixtures/script_channel/):

  script -> worker   hello()            once, when the package opens the channel: at import
                     report_message()   a step
                     saved_message()    a checkpoint the script saved
  worker -> script   parse_state()      {"checkpoint": "full"|"sharded"|null, "request_id": N, "stop": true|false}

The worker sends its state whenever it changes (a checkpoint request, a stop
after preemption or `cancel --checkpoint`); the script reads what is there
without waiting. Without the variable (the script runs outside Trainyard)
every call is a no-op.
"""
import json
import os
import socket
import threading

_lock = threading.Lock()
_sock = None
_opened = False
_buffer = b""
_state = {"checkpoint": None, "request_id": 0, "stop": False}


def hello():
    return {"op": "hello"}


def report_message(step, samples=None, loss=None, seconds=None, values=None):
    """A step: `seconds` per step since the previous report (None for the
    first); `values` the script's other numbers (those that are no number
    are left out)."""
    numbers = {}
    for k, v in (values or {}).items():
        try:
            numbers[str(k)] = float(v)
        except (TypeError, ValueError):
            continue
    return {
        "op": "report",
        "step": int(step),
        "samples": None if samples is None else int(samples),
        "loss": None if loss is None else float(loss),
        "seconds": seconds,
        "values": numbers,
    }


def saved_message(path, step, request_id):
    """A checkpoint saved at `path` (absolute), for `request_id` (0: on the
    script's own); step None: the last reported step."""
    return {"op": "saved", "path": path, "step": None if step is None else int(step), "request_id": int(request_id)}


def encode(message):
    """The line that carries `message`."""
    return (json.dumps(message, separators=(",", ":")) + "\n").encode()


def parse_state(line):
    """The worker's state in one line, as a dict (checkpoint, request_id,
    stop); None when the line is no JSON object."""
    try:
        st = json.loads(line)
    except ValueError:
        return None
    if not isinstance(st, dict):
        return None
    checkpoint = st.get("checkpoint")
    return {"checkpoint": checkpoint if checkpoint in ("full", "sharded") else None,
            "request_id": int(st.get("request_id") or 0), "stop": st.get("stop") is True}


def _open():
    global _sock, _opened
    if _opened:
        return _sock
    _opened = True
    fd = os.environ.get("TRAINYARD_CHANNEL_FD")
    if fd:
        try:
            _sock = socket.socket(fileno=int(fd))
            _sock.setblocking(False)
            # The worker now knows the script can hear checkpoint requests.
            _sock.send(encode(hello()))
        except (OSError, ValueError):
            _sock = None
    return _sock


def send(message):
    """Sends one message; silently nothing when there is no worker."""
    with _lock:
        s = _open()
        if s is None:
            return
        data = encode(message)
        s.setblocking(True)
        try:
            s.sendall(data)
        except OSError:
            pass
        finally:
            s.setblocking(False)


def state():
    """The worker's latest state (what it sent last), without waiting."""
    global _buffer
    with _lock:
        s = _open()
        if s is None:
            return dict(_state)
        while True:
            try:
                chunk = s.recv(65536)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                break
            if not chunk:
                break
            _buffer += chunk
        while b"\n" in _buffer:
            line, _buffer = _buffer.split(b"\n", 1)
            st = parse_state(line)
            if st is not None:
                _state.update(st)
        return dict(_state)


def connected():
    with _lock:
        return _open() is not None
