#!/usr/bin/env bash
# Measures a forced DeletePool of a large pool as an operator meets it:
# COUNT allocations written into one pool with allocload prefill, then
# `plexusctl pool delete --force` through the first replica, while a health
# probe of the last replica runs in a process of its own.
#
#   hack/bench-pool-delete.sh BINARY COUNT [LABEL] [etcd|bolt]
#
# etcd (the default): an etcd with the flags docs/deploy.md gives and two
# replicas of BINARY on it. bolt: one replica on a bolt file.
#
# It prints how long the call took, when the last replica answered that
# the pool is gone, the replicas' resident memory (before, at the most
# until all are ready again, after), the CPU that etcd and each replica
# spent until then, readiness and health over the first 30 s, and the
# warnings logged.
#
# Uses loopback ports 23790-23791 (etcd), 7411-7412 and 7421-7422
# (replicas), and a scratch directory it removes.
set -euo pipefail

BINARY=$(realpath "$1") COUNT=$2 LABEL=${3:-run} KIND=${4:-etcd}
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

(cd "$ROOT" && go build -o "$WORK/allocload" ./services/allocator/cmd/allocload && go build -o "$WORK/plexusctl" ./clients/plexusctl)

MEASURED=()  # processes whose CPU is reported: etcd (if any), then the replicas
case "$KIND" in
etcd)
  KUBE_BIN=$("$ROOT/hack/kube-binaries.sh" | tail -1)
  "$KUBE_BIN/etcd" --data-dir "$WORK/etcd" \
    --listen-client-urls http://127.0.0.1:23790 --advertise-client-urls http://127.0.0.1:23790 \
    --listen-peer-urls http://127.0.0.1:23791 --initial-advertise-peer-urls http://127.0.0.1:23791 \
    --initial-cluster default=http://127.0.0.1:23791 \
    --max-txn-ops=32768 --max-request-bytes=10485760 --quota-backend-bytes=8589934592 >"$WORK/etcd.log" 2>&1 &
  PIDS+=("$!")
  MEASURED+=("$!")
  STORE=etcd:http://127.0.0.1:23790 REPLICAS=2
  for t in $(seq 1 100); do curl -sf http://127.0.0.1:23790/health >/dev/null && break; sleep 0.1; done
  "$WORK/allocload" prefill --store "$STORE" --count "$COUNT" --txn-size 1000 --pool big --cidr 10.0.0.0/8 >"$WORK/prefill.log"
  ;;
bolt)
  STORE=bolt:$WORK/allocator.db REPLICAS=1
  "$WORK/allocload" prefill --file "$WORK/allocator.db" --count "$COUNT" --pool big --cidr 10.0.0.0/8 >"$WORK/prefill.log"
  ;;
*)
  echo "store must be etcd or bolt, not $KIND" >&2
  exit 2
  ;;
esac

for i in $(seq 1 "$REPLICAS"); do
  "$BINARY" --store "$STORE" --grpc-addr "127.0.0.1:741$i" --http-addr "127.0.0.1:742$i" >"$WORK/r$i.log" 2>&1 &
  PIDS+=("$!")
  MEASURED+=("$!")
done
ready() { for t in $(seq 1 3000); do curl -sf "http://127.0.0.1:742$1/readyz" >/dev/null && return; sleep 0.1; done; }
for i in $(seq 1 "$REPLICAS"); do ready "$i"; done
sleep 2

rss() { awk '/^VmRSS/ {printf "%d ", $2/1024}' "/proc/$1/status"; }
hwm() { awk '/^VmHWM/ {printf "%d ", $2/1024}' "/proc/$1/status"; }
cpu() { awk -v hz="$(getconf CLK_TCK)" '{printf "%.1f", ($14+$15)/hz}' "/proc/$1/stat"; }
each() { for p in "${MEASURED[@]: -$REPLICAS}"; do "$1" "$p"; done; }
for p in "${MEASURED[@]: -$REPLICAS}"; do echo 5 >"/proc/$p/clear_refs"; done # the peak from here on
before=$(each rss)
cpu0=()
for p in "${MEASURED[@]}"; do cpu0+=("$(cpu "$p")"); done

"$WORK/allocload" probe --addr "127.0.0.1:741$REPLICAS" --interval 20ms --duration 30s --timeout 2s >"$WORK/probe.log" 2>&1 &
PROBE=$!
(
  end=$((SECONDS + 30))
  while [ $SECONDS -lt $end ]; do
    for i in $(seq 1 "$REPLICAS"); do curl -s -o /dev/null -m 1 -w "%{http_code}\n" "http://127.0.0.1:742$i/readyz" >>"$WORK/ready$i.log" || true; done
    sleep 0.1
  done
) &
READY=$!
sleep 1

t0=$(date +%s.%N)
rc=0
"$WORK/plexusctl" --allocator-addr 127.0.0.1:7411 --timeout 600s pool delete big --force >"$WORK/delete.log" 2>&1 || rc=$?
t1=$(date +%s.%N)
# Until the last replica answers that the pool is gone (not merely
# fails), then until every replica is ready again.
for t in $(seq 1 6000); do
  out=$("$WORK/plexusctl" --allocator-addr "127.0.0.1:741$REPLICAS" pool get big 2>&1 || true)
  [[ $out == *POOL_NOT_FOUND* ]] && break
  sleep 0.1
done
t2=$(date +%s.%N)
for i in $(seq 1 "$REPLICAS"); do ready "$i"; done
cpus=""
for k in "${!MEASURED[@]}"; do cpus+="$(echo "$(cpu "${MEASURED[$k]}") - ${cpu0[$k]}" | bc) "; done
sleep 3
wait "$PROBE" "$READY" || true

notready=""
for i in $(seq 1 "$REPLICAS"); do notready+="$(grep -vc '^200$' "$WORK/ready$i.log" || true)/$(wc -l <"$WORK/ready$i.log") "; done
echo "$LABEL ($KIND): $COUNT allocations, delete exit $rc in $(echo "$t1 - $t0" | bc) s; gone from replica $REPLICAS after $(echo "$t2 - $t0" | bc) s"
echo "  resident MB of each replica: before $before; most during $(each hwm); after $(each rss)"
echo "  CPU s during ($([ "$KIND" = etcd ] && echo "etcd, ")replicas): $cpus"
echo "  answer: $(tr '\n' ' ' <"$WORK/delete.log" | cut -c1-200)"
echo "  readiness samples not 200, per replica: $notready"
echo "  probe of replica $REPLICAS: $(head -1 "$WORK/probe.log")"
echo "  warnings: $(cat "$WORK"/r*.log | grep 'level=WARN' | grep -v authz-policy | sed 's/.*msg=//' | cut -c1-100 | sort | uniq -c | tr '\n' ';')"
