#!/usr/bin/env bash
# progress.sh LABEL COMMAND [ARGS...]: runs COMMAND, and every
# PLEXUS_PROGRESS_EVERY seconds (20) that it keeps running says so on
# stderr ("LABEL: still running, 1m20s"), so that a long step that prints
# nothing (resolving modules, for one) does not look like a hang. The
# command's output is kept and shown only if it fails; its exit status is
# the script's. hack/gobuild.sh does the same for go build, with a count of
# the packages compiled.
set -euo pipefail

label="$1"
shift
every="${PLEXUS_PROGRESS_EVERY:-20}"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT

start=$SECONDS
"$@" >"$log" 2>&1 &
pid=$!
while kill -0 "$pid" 2>/dev/null; do
  for _ in $(seq 1 "$every"); do
    sleep 1
    kill -0 "$pid" 2>/dev/null || break
  done
  kill -0 "$pid" 2>/dev/null || break
  elapsed=$((SECONDS - start))
  printf '%s: still running, %dm%02ds\n' "$label" $((elapsed / 60)) $((elapsed % 60)) >&2
done
if ! wait "$pid"; then
  cat "$log" >&2
  printf '%s: failed\n' "$label" >&2
  exit 1
fi
