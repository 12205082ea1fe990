"""A loop that never imports trainyard and runs until stopped (at most
argv[1] seconds), printing a line a tenth of a second."""
import sys
import time

end = time.monotonic() + float(sys.argv[1])
step = 0
while time.monotonic() < end:
    step += 1
    print(f"step {step}", flush=True)
    time.sleep(0.1)
