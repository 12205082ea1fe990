#!/usr/bin/env bash
# Makes the project venv: Debian's python3 with PyPI's torch — whose LibTorch
# (headers, libraries, CMake package, CUDA and NCCL runtime from its nvidia-*
# dependencies) the worker is built against — plus safetensors, accelerate
# and transformers for the Python peers and interop checks (transformers: the
# reference for the llama model), Pillow for the image reference
# (torchvision's ImageFolder reads with PIL), Selenium for the web UI's
# browser tests (with Debian's chromium-driver). System site packages stay
# visible (Debian's grpcio and yaml for the tests).
#
# The venv (~5.7 GB) is shared by every clone on the machine: it lives in
# $TRAINYARD_CACHE/venv-<hash of the requirements and the Python> and .venv in
# the clone is a link to it. TRAINYARD_CACHE defaults to /var/cache/trainyard
# for root (readable by the Unix accounts jobs run as) and ~/.cache/trainyard
# for anyone else. $TRAINYARD_VENV names a venv of your own instead (made
# there, no link). Idempotent; a second run checks the versions and changes
# nothing. Prints the venv's path on stdout (all else goes to stderr).
set -euo pipefail
umask 022  # the venv is read by the Unix accounts jobs run as
root=$(cd "$(dirname "$0")/.." && pwd)
# One torch for C++ and Python. Pinned: a new release is a deliberate change.
# nvidia-cuda-crt: the CUDA headers (crt/) the wheel's runtime headers include, so the NCCL
# process group compiles without a CUDA toolkit installed. py-spy: script jobs' Python stacks for
# `trainctl diagnose`.
requirements=(torch==2.15.0 nvidia-cuda-crt==13.2.86 safetensors==0.8.0 accelerate==1.15.0 numpy==2.4.6
  pillow==13.0.0 py-spy==0.4.3 transformers==5.24.0 selenium==4.51.0)
# Added to a venv made from the list above, and out of its key, so that the ~5.7 GB venv every clone
# shares is not made anew for a small package. torchvision: the reference of the resnet50 model and
# bench/python_ddp.py's ResNet-50 (built for torch 2.15; pip keeps the torch above).
extras=(torchvision==0.29.2)
if [ -n "${TRAINYARD_VENV:-}" ]; then
  venv=$TRAINYARD_VENV
else
  default_cache=${XDG_CACHE_HOME:-$HOME/.cache}/trainyard
  if [ "$(id -u)" -eq 0 ]; then default_cache=/var/cache/trainyard; fi
  cache=${TRAINYARD_CACHE:-$default_cache}
  key=$( (/usr/bin/python3 --version; printf '%s\n' "${requirements[@]}") | sha256sum | cut -c1-12)
  venv=$cache/venv-$key
  mkdir -p "$cache"
  chmod a+rx "$cache" 2>/dev/null || true
  # A real .venv left by an older checkout stays in use; otherwise the link.
  if [ -L "$root/.venv" ] || [ ! -e "$root/.venv" ]; then
    ln -sfn "$venv" "$root/.venv"
  else
    venv=$root/.venv
  fi
fi
# One set-up at a time per venv (two clones building at once share it).
exec 9>"$venv.lock"
flock 9
if [ ! -x "$venv/bin/python" ]; then
  echo "pyenv: creating $venv" >&2
  /usr/bin/python3 -m venv --system-site-packages "$venv"
fi
if ! "$venv/bin/python" - "${requirements[@]}" "${extras[@]}" <<'PY' 2>/dev/null; then
import sys
from importlib.metadata import version
for req in sys.argv[1:]:
    name, want = req.split("==")
    if version(name).split("+")[0] != want:
        sys.exit(1)
PY
  echo "pyenv: installing ${requirements[*]} ${extras[*]} into $venv" \
    "(torch with its CUDA libraries: ~5.4 GB, a few minutes)" >&2
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${requirements[@]}" "${extras[@]}" >&2
fi
"$venv/bin/python" -c "import torch, safetensors, accelerate
print('pyenv: torch', torch.__version__, '(CUDA', torch.version.cuda, ') safetensors', safetensors.__version__,
      'accelerate', accelerate.__version__)" >&2
echo "$venv"
