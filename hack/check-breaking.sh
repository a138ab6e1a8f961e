#!/usr/bin/env bash
# Compares proto/ with the protos of the last release (the last line of
# RELEASES: "vX.Y.Z COMMIT DATE"), by buf's FILE rules, or with main before
# the first release. A change buf calls breaking passes only when the
# changelog's Unreleased section has a "### Breaking" entry that names what
# broke (one of the quoted names in buf's line: the field, message, method
# or file), so a deliberate break is written down for the people who
# upgrade.
#
#   hack/check-breaking.sh [RELEASES [CHANGELOG]]
set -euo pipefail
cd "${CHECK_BREAKING_DIR:-$(dirname "$0")/..}"
releases=${1:-RELEASES}
changelog=${2:-CHANGELOG.md}
buf=${BUF:-buf}

name=main
against=".git#branch=main"
if [[ -s "$releases" ]]; then
  last=$(grep -v '^#' "$releases" | awk 'NF' | tail -1)
  if [[ -n "$last" ]]; then
    read -r name commit _ <<<"$last"
    against=".git#ref=$commit"
    name="$name ($commit)"
  fi
fi
if [[ "$name" == main ]] && ! git rev-parse --verify -q main >/dev/null; then
  echo "check-breaking: no release in $releases and no main branch: nothing to compare with"
  exit 0
fi
echo "check-breaking: proto/ against $name"
if out=$("$buf" breaking --against "$against" 2>&1); then
  echo "check-breaking: nothing breaks"
  exit 0
fi
if ! grep -q ':[0-9]*:[0-9]*:' <<<"$out"; then
  echo "$out" >&2
  echo "check-breaking: buf could not compare (above)" >&2
  exit 1
fi
# The Breaking entries of the Unreleased section.
named=$(awk '/^## \[Unreleased\]/ {u=1; next} /^## \[/ {u=0} u && /^### / {b=($0 ~ /^### Breaking/); next} u && b' "$changelog" 2>/dev/null || true)
missing=0
while IFS= read -r line; do
  [[ -n "$line" ]] || continue
  found=0
  while IFS= read -r n; do
    [[ -n "$n" ]] && grep -qF -- "$n" <<<"$named" && found=1
  done < <(grep -o '"[^"]*"' <<<"$line" | tr -d '"')
  if ((found)); then
    echo "check-breaking: named in $changelog: $line"
  else
    echo "check-breaking: BREAKING, not named under \"### Breaking\" in $changelog's Unreleased section: $line" >&2
    missing=1
  fi
done <<<"$out"
exit "$missing"
