#!/usr/bin/env bash
# Creates the project venv (.venv, or $TRAINYARD_VENV): Debian's python3 with
# PyPI's torch — whose LibTorch (headers, libraries, CMake package, CUDA and
# NCCL runtime from its nvidia-* dependencies) the worker is built against —
# plus safetensors, accelerate and transformers for the Python peers and interop checks
# (transformers: the reference for the llama model), and
# Pillow for the image reference (torchvision's ImageFolder reads with PIL),
# Selenium for the web UI's browser tests (with Debian's chromium-driver).
# System site packages stay visible (Debian's grpcio and yaml for the tests).
# Idempotent; a second run checks the versions and changes nothing.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${TRAINYARD_VENV:-$root/.venv}
# One torch for C++ and Python. Pinned: a new release is a deliberate change.
# nvidia-cuda-crt: the CUDA headers (crt/) the wheel's runtime headers include, so the NCCL
# process group compiles without a CUDA toolkit installed. py-spy: script jobs' Python stacks for
# `trainctl diagnose`.
requirements=(torch==2.15.0 nvidia-cuda-crt==13.2.86 safetensors==0.8.0 accelerate==1.15.0 numpy==2.4.6
  pillow==13.0.0 py-spy==0.4.3 transformers==5.24.0 selenium==4.51.0)
if [ ! -x "$venv/bin/python" ]; then
  echo "pyenv: creating $venv"
  /usr/bin/python3 -m venv --system-site-packages "$venv"
fi
if ! "$venv/bin/python" - "${requirements[@]}" <<'PY' 2>/dev/null; then
import sys
from importlib.metadata import version
for req in sys.argv[1:]:
    name, want = req.split("==")
    if version(name).split("+")[0] != want:
        sys.exit(1)
PY
  echo "pyenv: installing ${requirements[*]} into $venv (torch with its CUDA libraries: ~5.4 GB, a few minutes)"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "${requirements[@]}"
fi
"$venv/bin/python" -c "import torch, safetensors, accelerate
print('pyenv: torch', torch.__version__, '(CUDA', torch.version.cuda, ') safetensors', safetensors.__version__,
      'accelerate', accelerate.__version__)"
