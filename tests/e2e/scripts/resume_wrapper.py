"""The resume recipe of docs/scripts.md: after a restart
(TORCHELASTIC_RESTART_COUNT > 0) the script continues from its own
checkpoint. Runs own_checkpoints.py with the same arguments."""
import os
import runpy
import sys

here = os.path.dirname(os.path.abspath(__file__))
if int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")) > 0:
    sys.argv.append("--init_from=resume")
sys.argv[0] = os.path.join(here, "own_checkpoints.py")
runpy.run_path(sys.argv[0], run_name="__main__")
