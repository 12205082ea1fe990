"""The channel between a script and its rank's trainyard-worker.

The worker starts the script with one end of a Unix socket pair inherited as
file descriptor TRAINYARD_CHANNEL_FD. Messages are JSON objects, one per
line, both ways:

  script -> worker   {"op": "hello"}   (once, when the package opens the channel: at import)
                     {"op": "report", "step": N, "samples": N|null, "loss": X|null, "values": {...}}
                     {"op": "saved", "path": DIR, "step": N}
  worker -> script   {"checkpoint": "full"|"sharded"|null, "request_id": N, "stop": true|false}

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
            _sock.send(b'{"op":"hello"}\n')
        except (OSError, ValueError):
            _sock = None
    return _sock


def send(message):
    """Sends one message; silently nothing when there is no worker."""
    with _lock:
        s = _open()
        if s is None:
            return
        data = (json.dumps(message, separators=(",", ":")) + "\n").encode()
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
            try:
                _state.update(json.loads(line))
            except ValueError:
                pass
        return dict(_state)


def connected():
    with _lock:
        return _open() is not None
