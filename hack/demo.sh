#!/usr/bin/env bash
# The Plexus demo: starts two local Kubernetes API servers on one etcd, the
# four services, and walks through what they do. `make demo` runs it and
# stops everything at the end; `make demo-up` (--keep) leaves it running.
# With SECURE=1 (`make demo SECURE=1`) every gRPC call is mutual TLS with
# certificates from `plexusctl certs`, every service enforces its policy
# from deploy/policy, and plexusctl and grpcurl use the operator's
# certificate. With ALLOCATOR_STORE=etcd (`make demo ALLOCATOR_STORE=etcd`)
# two allocator replicas share the local clusters' etcd, and every client
# is given both.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

KEEP=0
[[ "${1:-}" == "--keep" ]] && KEEP=1
SECURE="${SECURE:-}"
[[ "$SECURE" == 0 ]] && SECURE=""
ALLOCATOR_STORE="${ALLOCATOR_STORE:-bolt}"
[[ "$ALLOCATOR_STORE" == bolt || "$ALLOCATOR_STORE" == etcd ]] ||
  { echo "ALLOCATOR_STORE must be bolt or etcd, not $ALLOCATOR_STORE" >&2; exit 2; }

ROOT="$PWD"
BIN="$ROOT/bin"
DEMO="$ROOT/.demo"
LOGS="$DEMO/logs"
export PATH="$BIN:$ROOT/.bin:$PATH"
COREDNS="$("$ROOT/hack/coredns.sh")"

rm -rf "$DEMO"
mkdir -p "$LOGS"

pids=()
stopping=0
cleanup() {
  local code=$?
  # Newest first: the services stop (and flush their spans to the trace
  # receiver, release their leases on the API servers) before the receiver
  # and the clusters they talk to go.
  local i
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    kill -TERM "${pids[i]}" 2>/dev/null || true
    wait "${pids[i]}" 2>/dev/null || true
  done
  rm -f "$DEMO/demo.pid"
  # The files the seeded Pods' readiness probes test (demokube set-ready).
  rm -f /tmp/unready-cart-* 2>/dev/null || true
  if ((stopping)); then
    echo
    echo "demo stopped: every process it started is gone (logs stay in $LOGS)"
  elif ((code != 0)); then
    echo
    echo "demo failed (exit $code); logs of every process are in $LOGS"
  fi
}
trap cleanup EXIT
# make demo-down (SIGTERM) and Ctrl-C stop the demo; neither is a failure.
trap 'stopping=1; exit 0' INT TERM
echo $$ >"$DEMO/demo.pid"

# Bold step titles on a terminal only: a log file gets plain text.
if [[ -t 1 ]]; then
  step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
else
  step() { printf '\n== %s\n' "$*"; }
fi
say() { printf '   %s\n' "$*"; }
run() { printf '   $ %s\n' "$*"; "$@" 2>&1 | sed 's/^/   /'; }

# How plexusctl, grpcurl and the services connect: plaintext on loopback, or
# in secure mode mutual TLS (OPERATOR_TLS for plexusctl, GRPCURL_TLS for
# grpcurl, service_env for each service).
CERTS="$DEMO/certs"
OPERATOR_TLS=()
GRPCURL_TLS=(-plaintext)
if [[ -n "$SECURE" ]]; then
  OPERATOR_TLS=(--tls-ca "$CERTS/ca.crt" --tls-cert "$CERTS/fleet/operator/tls.crt" --tls-key "$CERTS/fleet/operator/tls.key")
  GRPCURL_TLS=(-cacert "$CERTS/ca.crt" -cert "$CERTS/fleet/operator/tls.crt" -key "$CERTS/fleet/operator/tls.key")
fi
plexusctl() { command plexusctl "${OPERATOR_TLS[@]}" "$@"; }
grpcurl() { command grpcurl "${GRPCURL_TLS[@]}" "$@"; }
# Secure mode: the allocator is the fleet's, and every other service acts
# for its own cluster, with that cluster's certificate; the allocator and
# the importers refuse the shared identities.
CLUSTERSET=demo
ALLOCATOR_TRUST=()
IMPORTER_TRUST=()
if [[ -n "$SECURE" ]]; then
  ALLOCATOR_TRUST=(--clusterset "$CLUSTERSET" --require-cluster-identities)
  IMPORTER_TRUST=(--require-cluster-identities)
fi
service_env() { # name [cluster]: sets SERVICE_ENV to the environment of that service
  SERVICE_ENV=()
  [[ -n "$SECURE" ]] || return 0
  local dir="$CERTS/$1"
  [[ -n "${2:-}" ]] && dir="$CERTS/$2/$1"
  SERVICE_ENV=(PLEXUS_TLS_CERT="$dir/tls.crt" PLEXUS_TLS_KEY="$dir/tls.key"
    PLEXUS_TLS_CLIENT_CA="$CERTS/ca.crt" PLEXUS_AUTHZ_POLICY="$ROOT/deploy/policy/$1.json")
  if [[ "$1" != allocator ]]; then
    SERVICE_ENV+=(PLEXUS_PEER_CA="$CERTS/ca.crt")
  fi
}

wait_healthy() { # name addr: waits until the service's own API is SERVING (caches synced)
  local api
  api="plexus.$1.v1.$(tr '[:lower:]' '[:upper:]' <<<"${1:0:1}")${1:1}Service"
  for _ in $(seq 1 100); do
    if grpcurl -max-time 1 -d "{\"service\":\"$api\"}" "$2" grpc.health.v1.Health/Check 2>/dev/null | grep -q '"SERVING"'; then
      say "$1 at $2: SERVING"
      return 0
    fi
    sleep 0.2
  done
  echo "$1 did not become healthy; see $LOGS/$1.log" >&2
  return 1
}

if [[ -n "$SECURE" ]]; then
  step "Secure mode: a local CA, the allocator's certificate, and each cluster's and the fleet's"
  say "each certificate names its holder by a SPIFFE ID, which the policies in deploy/policy allow"
  say "method by method; a member cluster's services are named by their cluster"
  say "(spiffe://plexus.local/clusterset/$CLUSTERSET/cluster/<id>/<service>), and may act only for it:"
  run plexusctl certs --dir "$CERTS"
  for c in a b; do
    run plexusctl certs --dir "$CERTS" --clusterset "$CLUSTERSET" --cluster "$c"
  done
  run plexusctl certs --dir "$CERTS" --clusterset "$CLUSTERSET" --fleet
fi

step "Starting two local Kubernetes clusters (a and b) on one etcd, with kube-controller-manager and a data plane"
localkube --clusters a,b --data-plane --dir "$DEMO/kube" >"$LOGS/localkube.out" 2>"$LOGS/localkube.log" &
pids+=($!)
for _ in $(seq 1 300); do [[ -s "$DEMO/kube/env" ]] && break; sleep 0.2; done
[[ -s "$DEMO/kube/env" ]] || { echo "local clusters did not start; see $LOGS/localkube.log" >&2; exit 1; }
# shellcheck disable=SC1091
source "$DEMO/kube/env"
export LOCALKUBE_DATA_PLANE="${LOCALKUBE_DATA_PLANE:-}"
say "cluster a: $KUBECONFIG_A"
say "cluster b: $KUBECONFIG_B"
if [[ -n "$LOCALKUBE_DATA_PLANE" ]]; then
  say "each cluster has a node (a network namespace) running kube-proxy in nftables mode and CoreDNS;"
  say "every Pod's command runs as a process in a network namespace of its own (CNI ptp), Pod ranges"
  say "10.128.0.0/16 (a) and 10.129.0.0/16 (b) on one flat network"
else
  say "NO DATA PLANE: $(sed -n 's/^# localkube: //p' "$LOGS/localkube.out" | head -1); Pods are only reported Running, and the traffic steps are left out"
fi

# Every process logs here; the services use these addresses.
ALLOC=127.0.0.1:7401 MEMBERS=127.0.0.1:7402 IMPORTER=127.0.0.1:7403 REPAIR=127.0.0.1:7404
export PLEXUS_LOG_FORMAT=json

# Traces: every service exports OTLP to a small receiver (tracedump), or to
# the collector OTEL_EXPORTER_OTLP_ENDPOINT names when it is set.
TRACES_HTTP=127.0.0.1:9499
if [[ -z "${OTEL_EXPORTER_OTLP_ENDPOINT:-}" ]]; then
  tracedump serve --otlp 127.0.0.1:4317 --http "$TRACES_HTTP" >"$LOGS/tracedump.log" 2>&1 &
  pids+=($!)
  export OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4317 OWN_TRACEDUMP=1
  # tracedump receives traces only: the endpoint above would otherwise
  # have every service push its metrics there too, and warn each minute
  # that nothing takes them (Prometheus /metrics stays on regardless).
  export OTEL_METRICS_EXPORTER="${OTEL_METRICS_EXPORTER:-none}" OTEL_LOGS_EXPORTER="${OTEL_LOGS_EXPORTER:-none}"
fi
export OTEL_EXPORTER_OTLP_PROTOCOL="${OTEL_EXPORTER_OTLP_PROTOCOL:-grpc}" OTEL_BSP_SCHEDULE_DELAY="${OTEL_BSP_SCHEDULE_DELAY:-500}"

if [[ "$ALLOCATOR_STORE" == etcd ]]; then
  step "Starting two allocator replicas on the local clusters' etcd and creating their pools"
  say "both serve; each follows the other's commits through an etcd watch. The other services,"
  say "plexusctl and this script are given both addresses (PLEXUS_ALLOCATOR_ADDR) and use either."
  ALLOC2=127.0.0.1:7411
  service_env allocator
  env "${SERVICE_ENV[@]}" plexus-allocator --store "etcd:$ETCD_ENDPOINT" --etcd-prefix /plexus-demo/ "${ALLOCATOR_TRUST[@]}" \
    >"$LOGS/allocator.log" 2>&1 &
  pids+=($!)
  env "${SERVICE_ENV[@]}" plexus-allocator --store "etcd:$ETCD_ENDPOINT" --etcd-prefix /plexus-demo/ "${ALLOCATOR_TRUST[@]}" \
    --grpc-addr "$ALLOC2" --http-addr 127.0.0.1:9411 >"$LOGS/allocator-2.log" 2>&1 &
  pids+=($!)
  wait_healthy allocator "$ALLOC"
  wait_healthy allocator "$ALLOC2"
  export PLEXUS_ALLOCATOR_ADDR="$ALLOC,$ALLOC2"
else
  step "Starting the allocator (embedded bolt store) and creating its pools"
  service_env allocator
  env "${SERVICE_ENV[@]}" plexus-allocator --store "bolt:$DEMO/allocator.db" "${ALLOCATOR_TRUST[@]}" >"$LOGS/allocator.log" 2>&1 &
  pids+=($!)
  wait_healthy allocator "$ALLOC"
fi
say "a pool of clusterset VIPs and a pool for external workloads. The VIPs are carved from the"
say "statically assigned low band of cluster b's Service range (10.97.0.0/16), so the derived"
say "Service can carry the VIP as its cluster IP; the first 16 addresses stay reserved:"
run plexusctl pool create vips --cidr 10.97.0.0/24 --reserved 10.97.0.0/28
run plexusctl pool create workloads --cidr 10.200.0.0/24
if [[ "$ALLOCATOR_STORE" == etcd ]]; then
  say "each replica serves the pools, whichever replica created them:"
  for a in "$ALLOC" "$ALLOC2"; do
    run plexusctl --allocator-addr "$a" pool get vips
  done
fi

step "Starting a membership and an importer in each cluster, and repair"
say "every cluster imports, the exporting one too, as the MCS API wants the ServiceImport everywhere"
service_env membership a
env "${SERVICE_ENV[@]}" plexus-membership --cluster-name a --kubeconfig "$KUBECONFIG_A" >"$LOGS/membership.log" 2>&1 &
pids+=($!)
# Cluster b's membership sends no spans, so the trace below is a's.
MEMBERS_B=127.0.0.1:7412
service_env membership b
env "${SERVICE_ENV[@]}" OTEL_TRACES_EXPORTER=none plexus-membership --cluster-name b --kubeconfig "$KUBECONFIG_B" \
  --grpc-addr "$MEMBERS_B" --http-addr 127.0.0.1:9412 >"$LOGS/membership-b.log" 2>&1 &
pids+=($!)
service_env importer b
env "${SERVICE_ENV[@]}" plexus-importer --cluster-name b --kubeconfig "$KUBECONFIG_B" --source "a=$MEMBERS" --source "b=$MEMBERS_B" \
  --vip-pool vips "${IMPORTER_TRUST[@]}" >"$LOGS/importer.log" 2>&1 &
pids+=($!)
# Cluster a's importer sends no spans, so the trace below is cluster b's.
IMPORTER_A=127.0.0.1:7413
service_env importer a
env "${SERVICE_ENV[@]}" OTEL_TRACES_EXPORTER=none plexus-importer --cluster-name a --kubeconfig "$KUBECONFIG_A" --source "a=$MEMBERS" \
  --source "b=$MEMBERS_B" --vip-pool vips "${IMPORTER_TRUST[@]}" --grpc-addr "$IMPORTER_A" --http-addr 127.0.0.1:9413 >"$LOGS/importer-a.log" 2>&1 &
pids+=($!)
# CoreDNS for cluster b: its kubernetes plugin serves clusterset.local from
# the ServiceImports and EndpointSlices the importer writes.
cat >"$DEMO/Corefile" <<COREFILE
.:1053 {
    errors
    kubernetes cluster.local clusterset.local {
        kubeconfig $KUBECONFIG_B b
        multicluster clusterset.local
    }
}
COREFILE
"$COREDNS" -conf "$DEMO/Corefile" >"$LOGS/coredns.log" 2>&1 &
pids+=($!)
# Short intervals so the demo sees a leak released within a minute; the
# defaults are a pass a minute and a minute of grace.
service_env repair a
env "${SERVICE_ENV[@]}" plexus-repair --cluster-name a --kubeconfig "$KUBECONFIG_A" --source "a=$MEMBERS" \
  --interval 2s --leak-grace 4s >"$LOGS/repair.log" 2>&1 &
pids+=($!)
wait_healthy membership "$MEMBERS"
wait_healthy membership "$MEMBERS_B"
wait_healthy importer "$IMPORTER"
wait_healthy importer "$IMPORTER_A"
wait_healthy repair "$REPAIR"
say "plexusctl status asks each one's health service (version, and who leads importer and repair):"
run plexusctl status
say "every service describes itself over reflection, no proto files needed:"
run grpcurl "$MEMBERS" list
if [[ -n "$SECURE" ]]; then
  step "Secure mode: every service is mutual TLS, and its policy says who may call what"
  say "the importer's certificate is good for BatchAllocate on the allocator, not for creating pools:"
  importer_tls=(--tls-ca "$CERTS/ca.crt" --tls-cert "$CERTS/b/importer/tls.crt" --tls-key "$CERTS/b/importer/tls.key")
  if out=$(command plexusctl "${importer_tls[@]}" pool create rogue --cidr 10.99.0.0/24 2>&1); then
    echo "the importer's certificate created a pool: the allocator's policy is not in force" >&2
    exit 1
  fi
  say "\$ plexusctl --tls-cert $CERTS/b/importer/tls.crt ... pool create rogue --cidr 10.99.0.0/24"
  say "$out"
  grep -q ACCESS_DENIED <<<"$out" || { echo "expected ACCESS_DENIED" >&2; exit 1; }
  say "a client without a certificate does not get past the TLS handshake:"
  if out=$(command plexusctl --tls-ca "$CERTS/ca.crt" --timeout 3s pool list 2>&1); then
    echo "a client without a certificate listed the pools" >&2
    exit 1
  fi
  say "\$ plexusctl --tls-ca $CERTS/ca.crt pool list"
  say "$out"
fi

step "Cluster a exports shop/cart: a Deployment of 3 Pods, its Service and its ServiceExport"
if [[ -n "$LOCALKUBE_DATA_PLANE" ]]; then
  say "(kube-controller-manager makes the Pods; localkube binds them, as the scheduler would, and runs"
  say "each one's command, as a kubelet would: socat answering on 8080 with the Pod's name and cluster)"
else
  say "(kube-controller-manager makes the Pods; there is no container runtime: localkube stands in for"
  say "the scheduler and the kubelets, binding each Pod and reporting it Running with an address)"
fi
run demokube seed --kubeconfig "$KUBECONFIG_A" --namespace shop --service cart --replicas 3 --cluster a
say "the importer never creates namespaces: the member cluster b has its own shop namespace"
run demokube namespace --kubeconfig "$KUBECONFIG_B" --namespace shop

step "An external workload (a VM) joins the Service, with an address from the allocator"
run plexusctl workload register vm-1 -n shop --label app=cart --pool workloads --port http:8080 --ttl 10m
if [[ -n "$SECURE" ]]; then
  VM_ADDR=$(plexusctl alloc list workloads -o json | sed -n 's/.*"address": *"\([^"]*\)".*/\1/p' | head -1)
  say "the VM's address belongs to cluster a: cluster b's membership, whose certificate names b, may"
  say "not release it, whatever it knows of the allocation:"
  b_tls=(--tls-ca "$CERTS/ca.crt" --tls-cert "$CERTS/b/membership/tls.crt" --tls-key "$CERTS/b/membership/tls.key")
  if out=$(command plexusctl "${b_tls[@]}" alloc release workloads "$VM_ADDR" 2>&1); then
    echo "cluster b's membership released cluster a's address: the allocator's per-cluster rule is not in force" >&2
    exit 1
  fi
  say "\$ plexusctl --tls-cert $CERTS/b/membership/tls.crt ... alloc release workloads $VM_ADDR"
  say "$out"
  grep -q OWNER_OUTSIDE_CLUSTER <<<"$out" || { echo "expected OWNER_OUTSIDE_CLUSTER" >&2; exit 1; }
fi

step "Cluster b: the ServiceImport with its clusterset VIP, the derived Service, the EndpointSlices"
run demokube wait --kubeconfig "$KUBECONFIG_B" --namespace shop --service cart --endpoints 4 --ready-endpoints 4
say "membership in cluster a serves the endpoint set it streamed (3 Pods and the VM):"
run plexusctl members get shop/cart
run demokube show --kubeconfig "$KUBECONFIG_B" --namespace shop --service cart
say "the same import as the importer reports it (per-cluster status, conditions):"
run plexusctl imports get shop/cart
VIP=$(plexusctl imports get shop/cart -o json | sed -n 's/.*"ips": *\[ *"\([^"]*\)".*/\1/p' | head -1)
if [[ -z "$VIP" ]]; then
  VIP=$(plexusctl imports get shop/cart -o json | tr -d ' \n' | sed -n 's/.*"ips":\["\([^"]*\)".*/\1/p')
fi
say "the VIP $VIP is one allocation, owned by the clusterset service (not by a cluster):"
run plexusctl alloc list vips

step "Cluster a imports its own export too: the same VIP is both derived Services' cluster IP"
say "cluster a's Service range is 10.96.0.0/16, the VIPs are 10.97.0.0/24: its importer made that range"
say "known to cluster a's API server as a ServiceCIDR, so kube-proxy routes the same VIP in both clusters"
run demokube wait --kubeconfig "$KUBECONFIG_A" --namespace shop --service cart --endpoints 4 --ready-endpoints 4
run demokube show --kubeconfig "$KUBECONFIG_A" --namespace shop --service cart
say "the ServiceExport in cluster a: Valid and Ready from membership, Conflict from cluster a's importer:"
run demokube export --kubeconfig "$KUBECONFIG_A" --namespace shop --service cart

step "DNS: CoreDNS of cluster b answers the clusterset name with the VIP, and SRV with the port"
run demokube dns --server 127.0.0.1:1053 cart.shop.svc.clusterset.local _http._tcp.cart.shop.svc.clusterset.local

step "A Pod in cluster a stops being ready; the slice in cluster b follows"
if [[ -n "$LOCALKUBE_DATA_PLANE" ]]; then
  say "(its readiness probe starts failing: an exec in the Pod, through kube-apiserver, makes the file it tests)"
else
  say "(as a failing readiness probe would: its Ready condition is set through the status subresource)"
fi
FLIP_AT=$(date -u +%Y-%m-%dT%H:%M:%S.%NZ)
run demokube set-ready --kubeconfig "$KUBECONFIG_A" --namespace shop --service cart --ready=false
run demokube wait --kubeconfig "$KUBECONFIG_B" --namespace shop --service cart --endpoints 4 --ready-endpoints 3
run demokube show --kubeconfig "$KUBECONFIG_B" --namespace shop --service cart

step "One trace from the Pod change in cluster a to the EndpointSlice write in cluster b"
if [[ -n "${OWN_TRACEDUMP:-}" ]]; then
  say "membership observed the Pod, reconciled shop/cart and streamed the event with its trace context;"
  say "the importer's reconcile links to it, and its Kubernetes API writes are child spans:"
  # The update of the slice that the readiness change caused (the first
  # import wrote it with a POST); spans reach the receiver in batches.
  TRACE_ID=$(tracedump flow --http "$TRACES_HTTP" --wait 20s --since "$FLIP_AT" --service plexus-importer --name 'kube PUT endpointslices' | sed -n 's/.*trace(s): \([0-9a-f]*\).*/\1/p')
  [[ -n "$TRACE_ID" ]] || { echo "no trace of the flow reached the demo's receiver; see $LOGS/tracedump.log" >&2; exit 1; }
  run plexusctl trace --from "http://$TRACES_HTTP" "$TRACE_ID"
else
  say "spans went to $OTEL_EXPORTER_OTLP_ENDPOINT: look for the importer's span \"kube PUT endpointslices\""
  TRACE_ID="(see your trace viewer)"
fi

step "The Deployment in cluster a scales to 4; the slices in cluster b follow"
run demokube scale --kubeconfig "$KUBECONFIG_A" --namespace shop --service cart --replicas 4
run demokube wait --kubeconfig "$KUBECONFIG_B" --namespace shop --service cart --endpoints 5 --ready-endpoints 4
run demokube show --kubeconfig "$KUBECONFIG_B" --namespace shop --service cart

step "A leak: an external workload's object is deleted behind membership's back"
run plexusctl workload register vm-2 -n shop --label app=batch --pool workloads --port http:8080 --ttl 10m
run demokube delete-workload --kubeconfig "$KUBECONFIG_A" --namespace shop --name vm-2
say "repair sees the owner gone; it releases the address only after 3 passes in a row AND the grace,"
say "and only through a release guarded by the etag and owner uid it saw:"
released=""
for _ in $(seq 1 150); do
  if plexusctl repair findings --kind leak -o json 2>/dev/null | grep -q '"ACTION_RELEASED"'; then
    released=yes
    break
  fi
  sleep 0.4
done
[[ -n "$released" ]] || { echo "repair did not release the leak; see $LOGS/repair.log" >&2; exit 1; }
run plexusctl repair findings --kind leak
run plexusctl repair report
say "vm-1 keeps its address; vm-2's is free again:"
run plexusctl alloc list workloads

TRAFFIC=""
if [[ -n "$LOCALKUBE_DATA_PLANE" ]]; then
  step "Traffic: a Pod in cluster b connects to cart.shop.svc.clusterset.local; Pods in cluster a answer"
  say "CoreDNS in b resolves the name to the VIP; kube-proxy in b (nftables) forwards each connection to"
  say "an endpoint of the importer's EndpointSlices, across the flat network to cluster a. vm-1 has no"
  say "host behind it here, so it leaves first:"
  run plexusctl workload deregister vm-1 -n shop
  run demokube wait --kubeconfig "$KUBECONFIG_B" --namespace shop --service cart --endpoints 4 --ready-endpoints 3
  run demokube request --kubeconfig "$KUBECONFIG_B" --namespace shop --target cart.shop.svc.clusterset.local:80 --count 8 --expect-from a

  step "Cluster a's Deployment scales to 0: the request fails cleanly"
  run demokube scale --kubeconfig "$KUBECONFIG_A" --namespace shop --service cart --replicas 0
  run demokube wait --kubeconfig "$KUBECONFIG_B" --namespace shop --service cart --endpoints 0 --ready-endpoints 0
  say "no endpoint is left: kube-proxy refuses the connection at once instead of letting it hang"
  run demokube request --kubeconfig "$KUBECONFIG_B" --namespace shop --target cart.shop.svc.clusterset.local:80 --count 3 --expect-fail

  step "Both clusters export shop/cart: answers come from both"
  run demokube seed --kubeconfig "$KUBECONFIG_B" --namespace shop --service cart --replicas 2 --cluster b
  run demokube scale --kubeconfig "$KUBECONFIG_A" --namespace shop --service cart --replicas 2
  run demokube wait --kubeconfig "$KUBECONFIG_B" --namespace shop --service cart --endpoints 4 --ready-endpoints 4
  run demokube request --kubeconfig "$KUBECONFIG_B" --namespace shop --target cart.shop.svc.clusterset.local:80 --count 12 --expect-from a,b
  TRAFFIC=1
fi

step "Summary"
say "verified:"
say "  - 4 services healthy; grpcurl works through reflection"
if [[ "$ALLOCATOR_STORE" == etcd ]]; then
  say "  - two allocator replicas on etcd ($ALLOC, $ALLOC2) served the same pools to every client"
fi
if [[ -n "$SECURE" ]]; then
  say "  - mutual TLS on every call, with the certificates in $CERTS and the policies in deploy/policy;"
  say "    a service's certificate was refused a method its policy does not give it"
fi
say "  - shop/cart exported from cluster a became a ServiceImport in cluster b with VIP $VIP,"
say "    a derived Service and EndpointSlices labelled for the importer (3 Pods of a Deployment,"
say "    made by kube-controller-manager, + 1 external workload)"
say "  - a Pod going not-ready was followed by the slice (4 endpoints, 3 ready), and the Deployment"
say "    scaling to 4 by the slices (5 endpoints, 4 ready)"
say "  - a leaked external-workload address was found and released by repair after its strikes"
if [[ -n "$TRAFFIC" ]]; then
  say "  - packets: a Pod in cluster b reached Pods in cluster a through the clusterset name and VIP"
  say "    (CoreDNS, kube-proxy in nftables mode, the importer's slices); with a at 0 replicas the"
  say "    connection was refused; with both clusters exporting, both answered"
else
  say "  - (no packets: without root the local clusters have no data plane; see the note at the start)"
fi
say "  - the flow from the Pod change to the EndpointSlice write, traced across processes:"
say "    membership's trace $TRACE_ID, linked from the importer's reconcile"
if [[ -n "${OWN_TRACEDUMP:-}" ]]; then
  say "    (plexusctl trace $TRACE_ID prints it again with the traces linked to it; set"
  say "    OTEL_EXPORTER_OTLP_ENDPOINT to send the spans to your own collector, for example Jaeger"
  say "    from docker-compose.yaml)"
fi
say "logs of every process: $LOGS"
if ((KEEP)); then
  cat <<MSG

Everything keeps running. Try:
  export PATH=$BIN:$ROOT/.bin:\$PATH
MSG
  GRPCURL_SHOWN="grpcurl -plaintext"
  if [[ -n "$SECURE" ]]; then
    GRPCURL_SHOWN=grpcurl
    cat <<MSG
  alias plexusctl='plexusctl ${OPERATOR_TLS[*]}'
  alias grpcurl='grpcurl ${GRPCURL_TLS[*]}'
MSG
  fi
  cat <<MSG
  plexusctl imports list
MSG
  [[ -z "${OWN_TRACEDUMP:-}" ]] || echo "  plexusctl trace $TRACE_ID"
  cat <<MSG
  plexusctl members watch
  plexusctl alloc watch vips
  plexusctl repair run --dry-run
  demokube set-ready --kubeconfig $KUBECONFIG_A --namespace shop --service cart --ready=true
  demokube scale --kubeconfig $KUBECONFIG_A --namespace shop --service cart --replicas 6
  demokube show --kubeconfig $KUBECONFIG_B --namespace shop --service cart
  $GRPCURL_SHOWN $IMPORTER describe plexus.importer.v1.ImporterService
Stop it with \`make demo-down\` (from another terminal) or Ctrl-C.
MSG
  wait "${pids[0]}"
fi
