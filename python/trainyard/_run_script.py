"""Runs a script job's script as `python SCRIPT ARGS...` would, then leaves
the way a finished rank should: atexit handlers run and the output is
flushed, then the process exits with the script's code *without* Python's
finalization (os._exit).

Why: a torch.distributed script that ends without destroy_process_group
(and DDP's Gloo threads, which outlive it) can abort during the
interpreter's teardown ("terminate called without an active exception",
signal 6) after all its work is done. Trainyard's worker starts every
script through this module, so scripts as people write them finish as they
finished their work.

An exception the script does not catch is printed as Python prints it and,
where torch's elastic error file is asked for (TORCHELASTIC_ERROR_FILE) and
the script's own `@record` did not write it, written there in torch's
format, so that the worker can give it as the reason of the failure.

    python .../trainyard/_run_script.py SCRIPT [ARGS...]

It is run by its path, not as `-m trainyard._run_script`: importing the
package would open the worker's channel, and the worker takes that for the
script's own `import trainyard`.
"""
import atexit
import json
import os
import runpy
import sys
import time
import traceback


def _write_error_file(exc):
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path or os.path.exists(path):
        return
    message = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    data = {"message": {"message": message,
                        "extraInfo": {"py_callstack": traceback.format_exc(), "timestamp": str(int(time.time()))}}}
    try:
        with open(path, "w") as f:
            json.dump(data, f)
    except OSError:
        pass


def _exit_code(e):
    if e.code is None:
        return 0
    if isinstance(e.code, int):
        return e.code
    print(e.code, file=sys.stderr)
    return 1


def main():
    if len(sys.argv) < 2:
        print("usage: python _run_script.py SCRIPT [ARGS...]", file=sys.stderr)
        return 2
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    # As `python SCRIPT` sets it: the script's directory first on the path.
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    try:
        runpy.run_path(script, run_name="__main__")
        return 0
    except SystemExit as e:
        return _exit_code(e)
    except BaseException as e:  # noqa: B902 - every failure is the script's outcome
        traceback.print_exc()
        _write_error_file(e)
        return 1


if __name__ == "__main__":
    code = main()
    try:
        atexit._run_exitfuncs()
    except BaseException:  # noqa: B902
        traceback.print_exc()
        code = code or 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code if 0 <= code <= 255 else 1)
