#!/usr/bin/env bash
# The GPU kit: everything a machine with an NVIDIA GPU needs to run
# Trainyard's GPU tests and benchmarks in one command, prepared here.
#
#   scripts/gpu-kit.sh pack [--torch VERSION]
#       Builds trainyard-server, trainyard-worker, trainctl, gpu_test and
#       gpu_bench against PyPI's torch VERSION (default 2.11.0, the GPU
#       machine's; its CUDA 13.0 wheel) in a venv of its own (.venv-gpukit)
#       and build folder (build-gpukit), and lays them out in .gpukit/: bin/
#       (stripped, RPATH $ORIGIN/lib), bin/lib/ (every shared library they
#       need but glibc, libstdc++, CUDA, NCCL and torch's own, which come
#       from the GPU machine's torch), the test and benchmark scripts, the
#       `trainyard` Python package, run.sh (scripts/gpu-kit-run.sh) and
#       MANIFEST. Prints the kit's size (at most 60 MiB).
#   scripts/gpu-kit.sh check
#       Runs .gpukit/run.sh in a clean Debian 12 root (debootstrap minbase
#       with python3, plus the kit's torch venv mounted read-only; nothing
#       from the build tree) with TRAINYARD_REQUIRE_GPU=1, and checks that
#       every part starts and fails only for want of a GPU. Needs root.
#
# On the GPU machine (see docs/gpu-status.md): `bash .gpukit/run.sh`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
kit=${TRAINYARD_GPUKIT_DIR:-$root/.gpukit}
venv=${TRAINYARD_GPUKIT_VENV:-$root/.venv-gpukit}
build=${TRAINYARD_GPUKIT_BUILD:-$root/build-gpukit}
max_mib=60

usage() {
  sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
}

# The kit's venv: Debian's python3 with torch==$1 from PyPI (its CUDA
# wheel) and the CUDA headers (crt/) of the same CUDA minor version, which
# the NCCL process group's headers include.
make_venv() {
  local torch=$1
  [ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv "$venv"
  if [ "$("$venv/bin/python" -c 'from importlib.metadata import version; print(version("torch").split("+")[0])' \
    2>/dev/null)" != "$torch" ]; then
    echo "gpu-kit: installing torch==$torch into $venv (its CUDA libraries: a few GB, a few minutes)"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "torch==$torch"
  fi
  local cuda minor
  minor='from importlib.metadata import version; import sys; print(".".join(version(sys.argv[1]).split(".")[:2]))'
  cuda=$("$venv/bin/python" -c "$minor" nvidia-cuda-runtime)
  if [ "$("$venv/bin/python" -c "$minor" nvidia-cuda-crt 2> /dev/null)" != "$cuda" ]; then
    "$venv/bin/pip" install --quiet --disable-pip-version-check "nvidia-cuda-crt==$cuda.*"
  fi
  "$venv/bin/python" -c "import torch; print('gpu-kit: torch', torch.__version__, '(CUDA', torch.version.cuda, ')')" \
    2>/dev/null
}

# Resolved paths of the shared libraries the kit must carry for the given
# programs: their whole closure but the C library, the C++ runtime, the
# driver's and every library of the torch installation (torch/lib and the
# nvidia-* packages: CUDA, cuDNN, NCCL...), which the GPU machine's torch
# supplies at run time.
closure() {
  local site=$1
  shift
  local torch_libs="$site/torch/lib"
  for d in "$site"/nvidia/*/lib; do torch_libs="$torch_libs:$d"; done
  LD_LIBRARY_PATH="$torch_libs" ldd "$@" | awk '$2 == "=>" {print $1, $3}' | sort -u | while read -r name path; do
    case "$name" in
      linux-vdso.so.* | ld-linux-*.so.* | libc.so.* | libm.so.* | libdl.so.* | libpthread.so.* | librt.so.* | \
        libresolv.so.* | libutil.so.* | libanl.so.* | libstdc++.so.* | libgcc_s.so.* | libcuda.so.* | \
        libnvidia-ml.so.*) continue ;;
    esac
    if [ "$path" = "not" ]; then
      echo "gpu-kit: $name is not found for $*" >&2
      return 1
    fi
    case "$(readlink -f "$path")" in "$site"/*) continue ;; esac
    echo "$path"
  done
}

pack() {
  local torch=2.11.0
  while [ $# -gt 0 ]; do
    case "$1" in
      --torch) torch=${2:?--torch needs a version}; shift 2 ;;
      *) echo "gpu-kit: unknown option $1" >&2; usage ;;
    esac
  done
  local started=$SECONDS
  bash "$root/scripts/install-deps.sh"
  make_venv "$torch"
  local python=$venv/bin/python site
  site=$("$python" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))' 2>/dev/null)
  mkdir -p "$build"
  echo "gpu-kit: configuring $build against torch $torch"
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O2 -DNDEBUG" \
    -DTRAINYARD_PYTHON="$python" > "$build/configure.log" 2>&1 || { cat "$build/configure.log"; exit 1; }
  local programs=(trainyard-server trainyard-worker trainctl gpu_test gpu_bench)
  local targets=()
  for t in "${programs[@]}"; do targets+=(--target "$t"); done
  echo "gpu-kit: compiling ${programs[*]} with ${JOBS:-2} jobs"
  cmake --build "$build" -j "${JOBS:-2}" "${targets[@]}"

  echo "gpu-kit: laying out $kit"
  rm -rf "$kit"
  mkdir -p "$kit/bin/lib" "$kit/tests/e2e" "$kit/bench" "$kit/examples" "$kit/python"
  local bins=()
  for p in "${programs[@]}"; do
    install -m 755 "$build/bin/$p" "$kit/bin/$p"
    bins+=("$build/bin/$p")
  done
  local libs
  libs=$(closure "$site" "${bins[@]}")
  for lib in $libs; do
    cp -L "$lib" "$kit/bin/lib/$(basename "$lib")"
    chmod 644 "$kit/bin/lib/$(basename "$lib")"
  done
  # A program must take libstdc++'s functions from libstdc++, not from a
  # torch library that exports copies (cmake/TrainyardTorch.cmake says why).
  for b in "${bins[@]}"; do
    local shadowed
    shadowed=$(LD_BIND_NOW=1 LD_DEBUG=bindings "$b" --help 2>&1 > /dev/null |
      grep "binding file $b .* to $site/torch/lib/.*normal symbol .\(_ZNSt\|_ZSt\)" | head -3 || true)
    if [ -n "$shadowed" ]; then
      echo "gpu-kit: $(basename "$b") binds libstdc++ functions to torch's copies:" >&2
      echo "$shadowed" >&2
      exit 1
    fi
  done
  for f in "$kit"/bin/*; do
    [ -f "$f" ] || continue
    strip --strip-unneeded "$f"
    patchelf --set-rpath '$ORIGIN/lib' "$f"
  done
  for f in "$kit"/bin/lib/*; do
    strip --strip-unneeded "$f" 2>/dev/null || true
    patchelf --set-rpath '$ORIGIN' "$f"
  done
  cp "$root/tests/e2e/gpu_e2e.py" "$root/tests/e2e/e2e_test.py" "$root/tests/e2e/test_clock.py" "$kit/tests/e2e/"
  cp "$root/bench/python_llama.py" "$root/bench/python_ddp.py" "$kit/bench/"
  cp "$root/examples/export_attention.py" "$kit/examples/"
  cp -r "$root/python/trainyard" "$kit/python/"
  find "$kit/python" -name __pycache__ -prune -exec rm -rf {} +
  install -m 755 "$root/scripts/gpu-kit-run.sh" "$kit/run.sh"
  {
    local changed=""
    git -C "$root" diff --quiet HEAD 2> /dev/null || changed=" (with changes)"
    echo "commit $(git -C "$root" rev-parse --short HEAD 2> /dev/null || echo unknown)$changed"
    echo "torch $("$python" -c 'import torch; print(torch.__version__)' 2>/dev/null)"
    echo "packed $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release && echo "$PRETTY_NAME")"
    echo "programs ${programs[*]}"
    echo "libraries $(cd "$kit/bin/lib" && ls | tr '\n' ' ')"
  } > "$kit/MANIFEST"
  local bytes mib
  bytes=$(du -sb "$kit" | cut -f1)
  mib=$(((bytes + 1048575) / 1048576))
  echo "gpu-kit: $kit is $mib MiB ($bytes bytes; at most $max_mib MiB): $(find "$kit" -type f | wc -l) files," \
    "$(ls "$kit/bin/lib" | wc -l) libraries; packed in $((SECONDS - started)) s"
  if [ "$mib" -gt "$max_mib" ]; then
    du -b "$kit"/bin/* "$kit"/bin/lib/* | sort -n | tail -8
    echo "gpu-kit: the kit is over $max_mib MiB" >&2
    exit 1
  fi
}

# run.sh in a clean Debian 12 root: every part must start (no library or
# module missing) and fail only for want of a GPU.
check() {
  [ "$(id -u)" -eq 0 ] || { echo "gpu-kit check: needs root (debootstrap, chroot, mount)" >&2; exit 1; }
  [ -x "$kit/run.sh" ] || { echo "gpu-kit check: no kit at $kit: run scripts/gpu-kit.sh pack" >&2; exit 1; }
  [ -x "$venv/bin/python" ] || { echo "gpu-kit check: no kit venv at $venv" >&2; exit 1; }
  command -v debootstrap > /dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap > /dev/null
  local mirror
  mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  mirror=${mirror:-http://deb.debian.org/debian}
  croot=$(mktemp -d /var/tmp/trainyard-gpukit-root.XXXXXX)  # global: the EXIT trap reads it
  cleanup() {
    umount "$croot/proc" "$croot/opt/torch-venv" 2> /dev/null || true
    rm -rf --one-file-system "$croot"
  }
  trap cleanup EXIT
  echo "gpu-kit check: debootstrap minbase bookworm with python3 into $croot ($mirror)"
  debootstrap --variant=minbase --include=python3 bookworm "$croot" "$mirror" > "$croot.log" 2>&1 ||
    { tail -20 "$croot.log"; exit 1; }
  rm -f "$croot.log"
  cp -a "$kit" "$croot/kit"
  mkdir -p "$croot/opt/torch-venv" "$croot/out"
  mount --bind "$venv" "$croot/opt/torch-venv"
  mount -o remount,bind,ro "$croot/opt/torch-venv"
  mount -t proc proc "$croot/proc"
  echo "gpu-kit check: run.sh in the clean root (torch from the kit's venv, no GPU)"
  local rc=0
  chroot "$croot" /usr/bin/env -i PATH=/opt/torch-venv/bin:/usr/bin:/bin HOME=/root OUT=/out \
    TRAINYARD_REQUIRE_GPU=1 /bin/bash /kit/run.sh || rc=$?
  echo "gpu-kit check: run.sh exited $rc"
  local failed=0
  for part in programs gpu_test gpu_e2e bench_llama bench_resnet bench_checkpoint; do
    local log=$croot/out/$part.log
    if [ ! -f "$log" ]; then
      echo "gpu-kit check: $part: no log"; failed=1; continue
    fi
    local missing="error while loading shared libraries|cannot open shared object|ModuleNotFoundError|ImportError"
    missing+="|command not found|No such file or directory|undefined symbol|cannot start"
    if grep -E -q "$missing" "$log"; then
      echo "gpu-kit check: $part: something is missing:"
      grep -E -m3 "$missing" "$log"
      failed=1
    elif [ "$part" = programs ]; then
      if grep -q "^programs: all started" "$log"; then
        echo "gpu-kit check: programs: $(grep '^programs:' "$log")"
      else
        echo "gpu-kit check: programs: not all started:"; cat "$log"; failed=1
      fi
    elif grep -E -q "no GPU|CUDA sees 0|0 NVIDIA GPU" "$log"; then
      echo "gpu-kit check: $part: reached, failed for want of a GPU:" \
        "$(grep -E -m1 'no GPU|CUDA sees 0|0 NVIDIA GPU' "$log")"
    else
      echo "gpu-kit check: $part: did not say it lacks a GPU:"; tail -5 "$log"; failed=1
    fi
  done
  [ "$rc" -ne 0 ] || { echo "gpu-kit check: run.sh passed without a GPU" >&2; failed=1; }
  cat "$croot/out/summary.md"
  if [ "$failed" -ne 0 ]; then
    echo "gpu-kit check: FAILED"
    exit 1
  fi
  echo "gpu-kit check: every part reached; each failed only for want of a GPU"
}

case "${1:-}" in
  pack) shift; pack "$@" ;;
  check) shift; check "$@" ;;
  *) usage ;;
esac
