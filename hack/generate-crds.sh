#!/usr/bin/env bash
# Generates the deepcopy functions of the Kubernetes API types under
# api/workload, api/about, api/inventory and api/policy and their CustomResourceDefinitions in deploy/crds.
# Run from anywhere; uses the pinned controller-gen in .bin (built from
# tools/go.mod: cd tools && GOBIN=$PWD/../.bin go install tool).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

CONTROLLER_GEN="${CONTROLLER_GEN:-.bin/controller-gen}"
if [[ ! -x "$CONTROLLER_GEN" ]]; then
  echo "generate-crds: $CONTROLLER_GEN missing; run: (cd tools && GOBIN=\$PWD/../.bin go install tool)" >&2
  exit 1
fi

for pkg in workload about inventory policy; do
  "$CONTROLLER_GEN" object paths=./api/$pkg/...
done
# crd:maxDescLen is left at its default so kubectl explain shows the docs.
"$CONTROLLER_GEN" crd paths=./api/workload/... paths=./api/about/... paths=./api/inventory/... paths=./api/policy/... output:crd:artifacts:config=deploy/crds
