#!/usr/bin/env bash
# Builds helm at a pinned version from the Go module proxy and caches it.
# The chart's tests (deploy/helm) find it in $PLEXUS_HELM (printed on the
# last line). A second run with the binary present does nothing.
set -euo pipefail

# Keep in step with kubetest.HelmVersion, where the tests look for it.
HELM_VERSION="${HELM_VERSION:-v3.22.0}"
CACHE="${PLEXUS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/plexus}"
OUT="${PLEXUS_HELM:-$CACHE/helm-$HELM_VERSION/helm}"
# Written next to the binary once it is built as below (a build without the
# Kubernetes version stamp, which an older script made, is rebuilt).
STAMP="$HELM_VERSION with the Kubernetes version of its client-go"

# Present only when it runs and reports the pinned version, so a broken or
# stale build in the cache is rebuilt.
ok() { "$OUT" version --template '{{.Version}}' 2>/dev/null | grep -qx "$HELM_VERSION" && grep -qx "$STAMP" "$OUT.stamp" 2>/dev/null; }
# shellcheck source=hack/cache.sh
source "$(dirname "${BASH_SOURCE[0]}")/cache.sh"
use_cache helm "$OUT" "$OUT.lock" ok
printf 'helm: building helm %s from the Go module proxy (2-6 minutes on 2 cores, with a progress line every 20 s)\n' "$HELM_VERSION" >&2
scratch_module helm "helm.sh/helm/v3@$HELM_VERSION"
echo 'package main' > tools.go
echo 'import _ "helm.sh/helm/v3/cmd/helm"' >> tools.go
"$PROGRESS" "helm modules" go mod tidy
# Stamped as helm's own Makefile does: its version (else it reports its
# main branch's), and the Kubernetes version of its client-go modules, which
# `helm template` and `helm lint` assume without a cluster (else v1.20).
kube_minor="$(go list -m -f '{{.Version}}' k8s.io/client-go | cut -d. -f2)"
ldflags="-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
for pkg in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
  ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$kube_minor"
done
CGO_ENABLED=0 "$GOBUILD" helm -trimpath -ldflags "$ldflags" -o "$OUT.tmp" helm.sh/helm/v3/cmd/helm
mv "$OUT.tmp" "$OUT"
echo "$STAMP" > "$OUT.stamp"
ok || { echo "helm: the built binary does not report $HELM_VERSION" >&2; exit 1; }
echo "$OUT"
