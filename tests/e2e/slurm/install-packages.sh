#!/usr/bin/env bash
# install-packages.sh - installs Debian's slurmctld, slurmd, slurm-client and
# munge (apt) when one of their programs is missing, without letting the
# packages start system munge/slurm services. Shared by start-slurm.sh and
# ../slurm-multinode/start-cluster.sh. Root only; exits 1 when apt fails.
set -euo pipefail
if command -v slurmctld >/dev/null && command -v slurmd >/dev/null \
   && command -v sbatch >/dev/null && command -v munged >/dev/null; then
  exit 0
fi
echo "[install-packages] installing slurmctld slurmd slurm-client munge (apt)" >&2
made_policy=0
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; made_policy=1
fi
export DEBIAN_FRONTEND=noninteractive
pkgs="slurmctld slurmd slurm-client munge"
ok=1
apt-get install -y -q --no-install-recommends $pkgs >/dev/null 2>&1 \
  || { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends $pkgs >/dev/null; } \
  || ok=0
[ $made_policy = 1 ] && rm -f /usr/sbin/policy-rc.d
[ $ok = 1 ] || { echo "[install-packages] ERROR: apt-get install $pkgs failed" >&2; exit 1; }
echo "[install-packages] installed" >&2
