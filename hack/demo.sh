#!/usr/bin/env bash
# The Plexus demo: starts two local Kubernetes API servers on one etcd, the
# four services, and walks through what they do. `make demo` runs it and
# stops everything at the end; `make demo-up` (--keep) leaves it running.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

KEEP=0
[[ "${1:-}" == "--keep" ]] && KEEP=1

ROOT="$PWD"
BIN="$ROOT/bin"
DEMO="$ROOT/.demo"
LOGS="$DEMO/logs"
export PATH="$BIN:$ROOT/.bin:$PATH"

rm -rf "$DEMO"
mkdir -p "$LOGS"

pids=()
cleanup() {
  local code=$?
  if ((${#pids[@]})); then
    kill -TERM "${pids[@]}" 2>/dev/null || true
    wait "${pids[@]}" 2>/dev/null || true
  fi
  if ((code != 0)); then
    echo
    echo "demo failed (exit $code); logs of every process are in $LOGS"
  fi
}
trap cleanup EXIT

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
say() { printf '   %s\n' "$*"; }
run() { printf '   $ %s\n' "$*"; "$@" 2>&1 | sed 's/^/   /'; }

wait_healthy() { # name addr
  for _ in $(seq 1 100); do
    if grpcurl -plaintext -max-time 1 "$2" grpc.health.v1.Health/Check 2>/dev/null | grep -q SERVING; then
      say "$1 at $2: SERVING"
      return 0
    fi
    sleep 0.2
  done
  echo "$1 did not become healthy; see $LOGS/$1.log" >&2
  return 1
}

step "Starting two local Kubernetes clusters (a and b) on one etcd"
localkube --clusters a,b --dir "$DEMO/kube" >"$LOGS/localkube.out" 2>"$LOGS/localkube.log" &
pids+=($!)
for _ in $(seq 1 300); do [[ -s "$DEMO/kube/env" ]] && break; sleep 0.2; done
[[ -s "$DEMO/kube/env" ]] || { echo "local clusters did not start; see $LOGS/localkube.log" >&2; exit 1; }
# shellcheck disable=SC1091
source "$DEMO/kube/env"
say "cluster a: $KUBECONFIG_A"
say "cluster b: $KUBECONFIG_B"

step "Starting the four services"
plexus-allocator --store "bolt:$DEMO/allocator.db" >"$LOGS/allocator.log" 2>&1 &
pids+=($!)
plexus-membership --cluster-name a --kubeconfig "$KUBECONFIG_A" >"$LOGS/membership.log" 2>&1 &
pids+=($!)
plexus-importer --cluster-name b --kubeconfig "$KUBECONFIG_B" >"$LOGS/importer.log" 2>&1 &
pids+=($!)
plexus-repair --cluster-name b --kubeconfig "$KUBECONFIG_B" >"$LOGS/repair.log" 2>&1 &
pids+=($!)
wait_healthy allocator 127.0.0.1:7401
wait_healthy membership 127.0.0.1:7402
wait_healthy importer 127.0.0.1:7403
wait_healthy repair 127.0.0.1:7404

step "The services describe themselves over reflection (no proto files needed)"
run grpcurl -plaintext 127.0.0.1:7401 list

step "Creating a clusterset VIP pool and a workload pool"
run plexusctl pool create vips --cidr 10.112.0.0/16 --reserved 10.112.0.0/28
run plexusctl pool create workloads --cidr 10.200.0.0/24 --reuse-delay 30s

step "Allocating: idempotent per owner, guarded release"
run plexusctl alloc create workloads --owner-cluster a --owner-kind ExternalWorkload --owner-namespace shop --owner-name vm-1 --owner-uid u1
say "asking again for the same owner returns the same address:"
run plexusctl alloc create workloads --owner-cluster a --owner-kind ExternalWorkload --owner-namespace shop --owner-name vm-1 --owner-uid u1 -o json
run plexusctl alloc create vips --owner-kind ClusterSetService --owner-namespace shop --owner-name cart --address 10.112.0.100
run plexusctl alloc list
say "a release guarded by the wrong owner uid is refused:"
if plexusctl alloc release workloads --owner-cluster a --owner-kind ExternalWorkload --owner-namespace shop --owner-name vm-1 --owner-uid someone-else >"$DEMO/out" 2>&1; then
  echo "guarded release should have failed" >&2; exit 1
fi
sed 's/^/   /' "$DEMO/out"
run plexusctl pool get workloads

step "Summary"
say "verified: 4 services healthy, pools created, allocation idempotent, guarded release refused"
say "logs of every process: $LOGS"
if ((KEEP)); then
  cat <<MSG

Everything keeps running. Try:
  export PATH=$BIN:$ROOT/.bin:\$PATH
  plexusctl pool list
  plexusctl alloc watch
  grpcurl -plaintext 127.0.0.1:7401 describe plexus.allocator.v1.AllocatorService
  KUBECONFIG=$KUBECONFIG_B kubectl get serviceimports -A   # if kubectl is installed
Press Ctrl-C to stop.
MSG
  wait "${pids[0]}"
fi
