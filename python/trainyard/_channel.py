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
after preemption or `cancel --checkpoint`, a request answered); the script
reads what is there without waiting.

A request is answered once: after the script saved for request N
(answered(N)), a state that still asks for N reads as no request until the
worker's state moves on (it sends one without N once it has the script's
"saved"); then a request numbered N again (a new coordinator numbers from
1) is a new one. Without the variable (the script runs outside Trainyard)
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
_answered = 0  # the request the script saved for, while the worker's state still names it


def hello():
    return {"op": "hello"}


def report_message(step, samples=None, loss=None, seconds=None, values=None, total=None):
    """A step: `seconds` per step since the previous report (None for the
    first); `values` the script's other numbers (those that are no number
    are left out); `total` the steps the script will run (left out when
    None)."""
    numbers = {}
    for k, v in (values or {}).items():
        try:
            numbers[str(k)] = float(v)
        except (TypeError, ValueError):
            continue
    message = {
        "op": "report",
        "step": int(step),
        "samples": None if samples is None else int(samples),
        "loss": None if loss is None else float(loss),
        "seconds": seconds,
        "values": numbers,
    }
    if total is not None:
        message["total"] = int(total)
    return message


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


def answered(request_id):
    """The script saved the checkpoint `request_id` asked for: from now on
    the state asks for it no more."""
    global _answered
    with _lock:
        if request_id:
            _answered = int(request_id)


def _seen():
    # REQUIRES: _lock held.
    st = dict(_state)
    if _answered and st["request_id"] == _answered:
        st["checkpoint"], st["request_id"] = None, 0
    return st


def state():
    """The worker's latest state (what it sent last), without waiting; a
    request the script answered reads as none."""
    global _buffer, _answered
    with _lock:
        s = _open()
        if s is None:
            return _seen()
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
                if st["request_id"] != _answered:
                    _answered = 0  # the worker moved on: the next request is new, whatever its number
        return _seen()


def connected():
    with _lock:
        return _open() is not None
