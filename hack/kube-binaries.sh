#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager, kube-proxy and etcd at pinned versions
# from the Go module proxy and caches them. Tests and the demo find them in $PLEXUS_KUBE_BIN (printed
# on the last line). A second run with the binaries present does nothing.
set -euo pipefail

KUBE_VERSION="${KUBE_VERSION:-v1.36.3}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.16}"
CACHE="${PLEXUS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/plexus}"
BIN="${PLEXUS_KUBE_BIN:-$CACHE/kube-$KUBE_VERSION-etcd-$ETCD_VERSION}"

log() { printf 'kube-binaries: %s\n' "$*" >&2; }
HACK="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
GOBUILD="$HACK/gobuild.sh" PROGRESS="$HACK/progress.sh"

# A binary counts as present only when it runs and reports the pinned
# version, so a broken or stale build in the cache is rebuilt.
etcd_ok() { "$BIN/etcd" --version 2>/dev/null | grep -q "etcd Version: ${ETCD_VERSION#v}"; }
kube_ok() { "$BIN/kube-apiserver" --version 2>/dev/null | grep -qx "Kubernetes $KUBE_VERSION"; }
kcm_ok() { "$BIN/kube-controller-manager" --version 2>/dev/null | grep -qx "Kubernetes $KUBE_VERSION"; }
proxy_ok() { "$BIN/kube-proxy" --version 2>/dev/null | grep -qx "Kubernetes $KUBE_VERSION"; }
all_ok() { etcd_ok && kube_ok && kcm_ok && proxy_ok; }

mkdir -p "$BIN"
# shellcheck source=hack/cache.sh
source "$(dirname "${BASH_SOURCE[0]}")/cache.sh"
use_cache kube-binaries "$BIN" "$BIN/.lock" all_ok

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

if ! etcd_ok; then
  log "building etcd $ETCD_VERSION from the Go module proxy (about a minute)"
  mkdir -p "$work/etcd" && cd "$work/etcd"
  go mod init plexus.local/etcdbuild >/dev/null 2>&1
  "$PROGRESS" "etcd modules" go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION"
  # The etcd server binary's main package lives in the root module at the same version.
  cat > main.go <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
  "$PROGRESS" "etcd modules" go mod tidy
  CGO_ENABLED=0 "$GOBUILD" etcd -trimpath -o "$BIN/etcd.tmp" .
  mv "$BIN/etcd.tmp" "$BIN/etcd"
  etcd_ok || { log "built etcd does not report version $ETCD_VERSION"; exit 1; }
fi

if ! kube_ok || ! kcm_ok || ! proxy_ok; then
  log "resolving k8s.io/kubernetes $KUBE_VERSION and its staging modules (about a minute)"
  mkdir -p "$work/kube" && cd "$work/kube"
  go mod init plexus.local/kubebuild >/dev/null 2>&1
  "$PROGRESS" "kube modules" go mod download "k8s.io/kubernetes@$KUBE_VERSION"
  modfile="$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')"
  staging_version="v0${KUBE_VERSION#v1}"
  go mod edit -require="k8s.io/kubernetes@$KUBE_VERSION"
  # Every staging module that k8s.io/kubernetes requires at v0.0.0 is
  # published on its own at the matching v0.Y.Z.
  for m in $(awk '$2 == "v0.0.0" && $1 ~ /^k8s.io\// {print $1}' "$modfile" | sort -u); do
    go mod edit -replace="$m=$m@$staging_version"
  done
  echo 'package main' > tools.go
  echo 'import _ "k8s.io/kubernetes/cmd/kube-apiserver"' >> tools.go
  echo 'import _ "k8s.io/kubernetes/cmd/kube-controller-manager"' >> tools.go
  echo 'import _ "k8s.io/kubernetes/cmd/kube-proxy"' >> tools.go
  "$PROGRESS" "kube modules" env GOFLAGS=-mod=mod go mod tidy ||
    log "go mod tidy reported the errors above; building anyway (go build resolves what it needs)"
  # Without the version stamp the server reports v0.0.0-master, which
  # clients that check the server version reject.
  minor="${KUBE_VERSION#v1.}"
  minor="${minor%%.*}"
  pkg=k8s.io/component-base/version
  ldflags="-X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
  if ! kube_ok; then
    log "building kube-apiserver $KUBE_VERSION (5-30 minutes on 2 cores, with a progress line every 20 s)"
    CGO_ENABLED=0 GOFLAGS=-mod=mod "$GOBUILD" kube-apiserver -trimpath -ldflags "$ldflags" -o "$BIN/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver
    mv "$BIN/kube-apiserver.tmp" "$BIN/kube-apiserver"
    kube_ok || { log "built kube-apiserver does not report version $KUBE_VERSION"; exit 1; }
  fi
  if ! kcm_ok; then
    # Most of it is built already with kube-apiserver.
    log "building kube-controller-manager $KUBE_VERSION (about 1-3 minutes more)"
    CGO_ENABLED=0 GOFLAGS=-mod=mod "$GOBUILD" kube-controller-manager -trimpath -ldflags "$ldflags" -o "$BIN/kube-controller-manager.tmp" k8s.io/kubernetes/cmd/kube-controller-manager
    mv "$BIN/kube-controller-manager.tmp" "$BIN/kube-controller-manager"
    kcm_ok || { log "built kube-controller-manager does not report version $KUBE_VERSION"; exit 1; }
  fi
  if ! proxy_ok; then
    # The data plane of the local clusters (make demo, make conformance).
    log "building kube-proxy $KUBE_VERSION (about 1-3 minutes more)"
    CGO_ENABLED=0 GOFLAGS=-mod=mod "$GOBUILD" kube-proxy -trimpath -ldflags "$ldflags" -o "$BIN/kube-proxy.tmp" k8s.io/kubernetes/cmd/kube-proxy
    mv "$BIN/kube-proxy.tmp" "$BIN/kube-proxy"
    proxy_ok || { log "built kube-proxy does not report version $KUBE_VERSION"; exit 1; }
  fi
fi

log "binaries ready in $BIN"
echo "$BIN"
