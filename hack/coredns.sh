#!/usr/bin/env bash
# Builds CoreDNS at a pinned version from the Go module proxy, with only
# the plugins the clusterset DNS tests need (kubernetes, with its
# multicluster option, errors and log), and caches it. Tests find it in
# $PLEXUS_COREDNS (printed on the last line). A second run with the binary
# present does nothing.
set -euo pipefail

# Keep in step with kubetest.CoreDNSVersion, where the tests look for it.
COREDNS_VERSION="${COREDNS_VERSION:-v1.15.0}"
CACHE="${PLEXUS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/plexus}"
OUT="${PLEXUS_COREDNS:-$CACHE/coredns-$COREDNS_VERSION/coredns}"

ok() { "$OUT" -version 2>/dev/null | grep -q "CoreDNS-${COREDNS_VERSION#v}"; }
# shellcheck source=hack/cache.sh
source "$(dirname "${BASH_SOURCE[0]}")/cache.sh"
use_cache coredns "$OUT" "$OUT.lock" ok
printf 'coredns: building CoreDNS %s from the Go module proxy (3-10 minutes on 2 cores, with a progress line every 20 s)\n' "$COREDNS_VERSION" >&2
scratch_module coredns "github.com/coredns/coredns@$COREDNS_VERSION"
cat > main.go <<'GO'
// A CoreDNS with the plugins the clusterset DNS needs only.
package main

import (
	"github.com/coredns/coredns/coremain"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
)

func main() { coremain.Run() }
GO
"$PROGRESS" "coredns modules" go mod tidy
CGO_ENABLED=0 "$GOBUILD" coredns -trimpath -o "$OUT.tmp" .
mv "$OUT.tmp" "$OUT"
ok || { echo "coredns: the built binary does not report $COREDNS_VERSION" >&2; exit 1; }
echo "$OUT"
