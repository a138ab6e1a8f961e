#!/usr/bin/env bash
# Measures a forced DeletePool of a large pool on etcd as a fleet meets it:
# etcd (with the flags docs/deploy.md gives), COUNT allocations written
# into one pool with allocload prefill, two allocator replicas of BINARY,
# a health probe of the second replica from a process of its own, and
# `plexusctl pool delete --force` through the first. It prints how long
# the call took, when the second replica stopped serving the pool, both
# replicas' resident memory (before, at the most during, after), the CPU
# that etcd and each replica spent, readiness and warnings.
#
#   hack/bench-pool-delete.sh BINARY COUNT [LABEL]
#
# Uses loopback ports 23790-23791 (etcd), 7411-7412 and 7421-7422
# (replicas), and a scratch directory it removes.
set -euo pipefail

BINARY=$(realpath "$1") COUNT=$2 LABEL=${3:-run}
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KUBE_BIN=$("$ROOT/hack/kube-binaries.sh" | tail -1)
WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

(cd "$ROOT" && go build -o "$WORK/allocload" ./services/allocator/cmd/allocload && go build -o "$WORK/plexusctl" ./clients/plexusctl)

"$KUBE_BIN/etcd" --data-dir "$WORK/etcd" \
  --listen-client-urls http://127.0.0.1:23790 --advertise-client-urls http://127.0.0.1:23790 \
  --listen-peer-urls http://127.0.0.1:23791 --initial-advertise-peer-urls http://127.0.0.1:23791 \
  --initial-cluster default=http://127.0.0.1:23791 \
  --max-txn-ops=32768 --max-request-bytes=10485760 --quota-backend-bytes=8589934592 >"$WORK/etcd.log" 2>&1 &
ETCD=$!
PIDS+=("$ETCD")
STORE=etcd:http://127.0.0.1:23790
for t in $(seq 1 100); do curl -sf http://127.0.0.1:23790/health >/dev/null && break; sleep 0.1; done
"$WORK/allocload" prefill --store "$STORE" --count "$COUNT" --txn-size 1000 --pool big --cidr 10.0.0.0/8 >"$WORK/prefill.log"

REPLICAS=()
for i in 1 2; do
  "$BINARY" --store "$STORE" --grpc-addr "127.0.0.1:741$i" --http-addr "127.0.0.1:742$i" >"$WORK/r$i.log" 2>&1 &
  REPLICAS+=("$!")
  PIDS+=("$!")
done
for i in 1 2; do
  for t in $(seq 1 600); do curl -sf "http://127.0.0.1:742$i/readyz" >/dev/null && break; sleep 0.2; done
done
sleep 2

rss() { awk '/^VmRSS/ {printf "%d", $2/1024}' "/proc/$1/status"; }
hwm() { awk '/^VmHWM/ {printf "%d", $2/1024}' "/proc/$1/status"; }
cpu() { awk -v hz="$(getconf CLK_TCK)" '{printf "%.1f", ($14+$15)/hz}' "/proc/$1/stat"; }
P1=${REPLICAS[0]} P2=${REPLICAS[1]}
for p in "$P1" "$P2"; do echo 5 >"/proc/$p/clear_refs"; done # the peak from here on
before="$(rss "$P1") $(rss "$P2")"
cpu0=("$(cpu "$ETCD")" "$(cpu "$P1")" "$(cpu "$P2")")

"$WORK/allocload" probe --addr 127.0.0.1:7412 --interval 20ms --duration 30s --timeout 2s >"$WORK/probe.log" 2>&1 &
PROBE=$!
(
  end=$((SECONDS + 30))
  while [ $SECONDS -lt $end ]; do
    for i in 1 2; do curl -s -o /dev/null -m 1 -w "%{http_code}\n" "http://127.0.0.1:742$i/readyz" >>"$WORK/ready$i.log" || true; done
    sleep 0.1
  done
) &
READY=$!
sleep 1

t0=$(date +%s.%N)
rc=0
"$WORK/plexusctl" --allocator-addr 127.0.0.1:7411 --timeout 600s pool delete big --force >"$WORK/delete.log" 2>&1 || rc=$?
t1=$(date +%s.%N)
for t in $(seq 1 6000); do "$WORK/plexusctl" --allocator-addr 127.0.0.1:7412 pool get big >/dev/null 2>&1 || break; sleep 0.1; done
t2=$(date +%s.%N)
cpu1=("$(cpu "$ETCD")" "$(cpu "$P1")" "$(cpu "$P2")")
sleep 3
wait "$PROBE" "$READY" || true

echo "$LABEL: $COUNT allocations, delete exit $rc in $(echo "$t1 - $t0" | bc) s; gone from replica 2 after $(echo "$t2 - $t0" | bc) s"
echo "  resident MB, replicas 1 and 2: before $before; most during $(hwm "$P1") $(hwm "$P2"); after $(rss "$P1") $(rss "$P2")"
echo "  CPU s during, etcd / replica 1 / replica 2: $(echo "${cpu1[0]} - ${cpu0[0]}" | bc) / $(echo "${cpu1[1]} - ${cpu0[1]}" | bc) / $(echo "${cpu1[2]} - ${cpu0[2]}" | bc)"
echo "  answer: $(tr '\n' ' ' <"$WORK/delete.log" | cut -c1-200)"
echo "  readiness samples not 200: replica 1 $(grep -vc '^200$' "$WORK/ready1.log" || true), replica 2 $(grep -vc '^200$' "$WORK/ready2.log" || true) of $(wc -l <"$WORK/ready1.log") each"
echo "  probe of replica 2: $(head -1 "$WORK/probe.log")"
echo "  warnings: $(grep -h 'level=WARN' "$WORK/r1.log" "$WORK/r2.log" | grep -v authz-policy | sed 's/.*msg=//' | cut -c1-100 | sort | uniq -c | tr '\n' ';')"
