# Sourced by the scripts that build a pinned tool once and cache it
# (kube-binaries.sh, coredns.sh, helm.sh).

# use_cache NAME PRINTED LOCK CHECK: when the command CHECK passes, the
# cached build is good: print PRINTED (where the callers find it) and exit.
# Otherwise take the build lock LOCK, so that one build runs at a time (a
# second caller, the demo and a test run started together, waits for the
# first, saying so), and check again before the caller builds.
use_cache() {
  local name="$1" printed="$2" lock="$3" check="$4"
  if "$check"; then
    echo "$printed"
    exit 0
  fi
  mkdir -p "$(dirname "$lock")"
  command -v flock >/dev/null || return 0
  exec 9>"$lock"
  if ! flock -n 9; then
    printf '%s: another build is running; waiting for it\n' "$name" >&2
    flock 9
  fi
  if "$check"; then
    echo "$printed"
    exit 0
  fi
}

# scratch_module NAME MODULE@VERSION: leaves the caller in a new module,
# plexus.local/NAMEbuild, in a temporary folder removed when the script
# exits, that requires MODULE@VERSION; GOBUILD and PROGRESS name the
# scripts that build and report how far a long step got.
scratch_module() {
  local hack
  hack="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
  GOBUILD="$hack/gobuild.sh" PROGRESS="$hack/progress.sh"
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  cd "$work"
  go mod init "plexus.local/${1}build" >/dev/null 2>&1
  "$PROGRESS" "$1 modules" go get "$2"
}
