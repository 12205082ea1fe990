#!/usr/bin/env bash
# Two network namespaces ("hosts") joined by a veth pair, optionally shaped
# with tc tbf, for benchmarks and tests that must cross a real link. Traffic
# stays between the two namespaces.
#
#   bench/netns.sh up [RATE]   # e.g. RATE=100mbit; no shaping when omitted
#   bench/netns.sh down
#   bench/netns.sh check       # exit 0 when namespaces can be made here
#
# Names: namespaces ty-hosta / ty-hostb, addresses 10.231.0.1 / 10.231.0.2.
set -euo pipefail
A=ty-hosta
B=ty-hostb
cmd=${1:-}
case "$cmd" in
  up)
    rate=${2:-}
    "$0" down >/dev/null 2>&1 || true
    ip netns add $A
    ip netns add $B
    ip link add ty-veth-a type veth peer name ty-veth-b
    ip link set ty-veth-a netns $A
    ip link set ty-veth-b netns $B
    ip -n $A addr add 10.231.0.1/24 dev ty-veth-a
    ip -n $B addr add 10.231.0.2/24 dev ty-veth-b
    for ns in $A $B; do ip -n $ns link set lo up; done
    ip -n $A link set ty-veth-a up
    ip -n $B link set ty-veth-b up
    if [ -n "$rate" ]; then
      ip netns exec $A tc qdisc add dev ty-veth-a root tbf rate "$rate" burst 256kbit latency 200ms
      ip netns exec $B tc qdisc add dev ty-veth-b root tbf rate "$rate" burst 256kbit latency 200ms
    fi
    echo "netns: $A (10.231.0.1) <-> $B (10.231.0.2)${rate:+, shaped to $rate each way}"
    ;;
  down)
    ip netns del $A 2>/dev/null || true
    ip netns del $B 2>/dev/null || true
    ;;
  check)
    [ "$(id -u)" -eq 0 ] || { echo "netns: needs root"; exit 1; }
    command -v ip >/dev/null || { echo "netns: iproute2 missing"; exit 1; }
    command -v tc >/dev/null || { echo "netns: tc missing"; exit 1; }
    ip netns add ty-probe 2>/dev/null || { echo "netns: cannot create network namespaces here"; exit 1; }
    ip netns del ty-probe
    ;;
  *)
    echo "usage: $0 up [RATE] | down | check" >&2
    exit 2
    ;;
esac
