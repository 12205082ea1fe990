#!/usr/bin/env bash
# stop-cluster.sh - undo start-cluster.sh using only its $D/state list:
# cancel jobs, kill every process inside OUR namespaces (by pid), stop daemons by pid file,
# delete our namespaces, links and /etc/netns/<ns> dirs.  MN_PURGE=1 also removes $D.
set -uo pipefail
T0=$(date +%s%N)
D=${MN_DIR:-/tmp/slurm-multinode/run-netns}; S=$D/state
log() { echo "[stop-cluster] $*" >&2; }
[ -f "$S" ] || { log "nothing to stop ($S missing)"; exit 0; }
export SLURM_CONF=$D/etc/slurm.conf
alive() { kill -0 "$1" 2>/dev/null && [ "$(awk '{print $3}' /proc/$1/stat 2>/dev/null)" != Z ]; }
pidf() { local p; p=$(cat "$1" 2>/dev/null) || return 1; [ -n "$p" ] && alive "$p" && echo "$p"; }
# 1. cancel jobs (best effort, 10 s)
if p=$(pidf "$D/run/slurmctld.pid"); then
  j=$(squeue -h -o %A 2>/dev/null | tr '\n' ' ')
  if [ -n "${j// }" ]; then
    log "scancel $j"; scancel $j 2>/dev/null
    for _ in $(seq 100); do [ -z "$(squeue -h -t R,CG -o %A 2>/dev/null)" ] && break; sleep 0.1; done
  fi
fi
# 2. every process still inside one of our netns (slurmd, slurmstepd, tasks) - by pid
for ns in $(awk '$1=="netns"{print $2}' "$S"); do
  pids=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')
  [ -n "${pids// }" ] && { log "TERM in $ns: $pids"; kill -TERM $pids 2>/dev/null; }
done
sleep 0.5
for ns in $(awk '$1=="netns"{print $2}' "$S"); do
  pids=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')
  [ -n "${pids// }" ] && { log "KILL in $ns: $pids"; kill -KILL $pids 2>/dev/null; }
done
# 3. host daemons by pid file (slurmctld, munged, and any slurmd pid file left)
for f in $(awk '$1=="pidfile"{print $2}' "$S" | tac); do
  if p=$(pidf "$f"); then
    log "stop $(basename "$f" .pid) ($p)"; kill -TERM "$p"
    for _ in $(seq 50); do alive "$p" || break; sleep 0.1; done
    alive "$p" && kill -KILL "$p"
  fi
  rm -f "$f"
done
# 4. namespaces, links, /etc/netns dirs (reverse order)
tac "$S" | while read -r kind name; do
  case $kind in
    netns)    ip netns del "$name" 2>/dev/null ;;
    link)     ip link del "$name" 2>/dev/null ;;
    etcnetns) rm -rf "$name"; rmdir /etc/netns 2>/dev/null ;;
  esac
done
rm -f "$S"
[ "${MN_PURGE:-0}" = 1 ] && rm -rf "$D"
log "left: netns=[$(ip netns list | grep -c "^${MN_PFX:-mn}n" || true)]" \
  "links=[$(ip -br link | grep -c "^${MN_PFX:-mn}" || true)]"
echo "CLUSTER STOPPED in $(( ($(date +%s%N)-T0)/1000000 ))ms"
