#!/usr/bin/env bash
# gobuild.sh LABEL [go build arguments...]: go build, saying how far it got.
#
# A first build of kube-apiserver or CoreDNS compiles a few thousand
# packages and takes minutes; silence for that long looks like a hang. This
# runs `go build -v` (which names each package as it compiles it) and every
# PLEXUS_PROGRESS_EVERY seconds (20) prints one line to stderr:
#
#   kube-apiserver: 812 packages compiled (of at most 2310), 3m20s
#
# Packages already in the build cache are not compiled again, so a rebuild
# ends well short of the total. The build's own errors are printed when it
# fails; its exit status is the script's.
set -euo pipefail

label="$1"
shift
every="${PLEXUS_PROGRESS_EVERY:-20}"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT

# The packages: the arguments that are neither flags nor their values.
pkgs=()
skip=0
for a in "$@"; do
  if ((skip)); then
    skip=0
  elif [[ "$a" == -o || "$a" == -ldflags || "$a" == -gcflags || "$a" == -tags || "$a" == -mod || "$a" == -p ]]; then
    skip=1
  elif [[ "$a" != -* ]]; then
    pkgs+=("$a")
  fi
done
total=""
if ((${#pkgs[@]})); then
  total="$(go list -deps "${pkgs[@]}" 2>/dev/null | wc -l || true)"
  [[ "$total" == 0 ]] && total=""
fi

start=$SECONDS
go build -v "$@" 2>"$log" &
pid=$!
while kill -0 "$pid" 2>/dev/null; do
  for _ in $(seq 1 "$every"); do
    sleep 1
    kill -0 "$pid" 2>/dev/null || break
  done
  kill -0 "$pid" 2>/dev/null || break
  n="$(grep -cv '^#' "$log" || true)"
  elapsed=$((SECONDS - start))
  printf '%s: %d packages compiled%s, %dm%02ds\n' "$label" "$n" "${total:+ (of at most $total)}" \
    $((elapsed / 60)) $((elapsed % 60)) >&2
done
if ! wait "$pid"; then
  # -v lists package paths; the errors are the other lines.
  grep -v '^[a-zA-Z0-9_./~-]*$' "$log" >&2 || cat "$log" >&2
  printf '%s: build failed\n' "$label" >&2
  exit 1
fi
