#!/usr/bin/env bash
# Builds the clouds' own CCMs that the "beside your cloud's CCM" tests run next to this one, from
# their release archives pinned in tests/support/pins.ts, and caches them outside the repository
# keyed by version, as testbed-bins.sh does for kube-apiserver. tests/support/archives.ts finds each
# archive (the cache's archives/ folder, then SHARED_FIXTURES or ../shared/fixtures beside the
# repository, then its upstream URL) and verifies its tree before it is built. Prints EXOSCALE_CCM=
# and OXIDE_CCM= lines, or EXOSCALE_CCM_ERROR= / OXIDE_CCM_ERROR= with the reason (and exits 1) for
# one that cannot be built. Honours EXOSCALE_CCM and OXIDE_CCM when they are already set. Their code
# never enters this repository: only the archives are read.
set -euo pipefail

CACHE="${TESTBED_CACHE:-$HOME/.cache/talos-ccm-testbed}"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUN="${BUN:-$REPO/node_modules/.bin/bun}"
# The versions are the pins' (tests/support/pins.ts, "v" dropped); the binaries' cache folders are
# keyed by them.
EXOSCALE_CCM_VERSION="$("$BUN" "$REPO/tests/support/archives.ts" version exoscale-ccm)"
OXIDE_CCM_VERSION="$("$BUN" "$REPO/tests/support/archives.ts" version oxide-ccm)"
EXOSCALE_CCM_VERSION="${EXOSCALE_CCM_VERSION#v}"
OXIDE_CCM_VERSION="${OXIDE_CCM_VERSION#v}"

exoscale="${EXOSCALE_CCM:-$CACHE/exoscale-ccm-$EXOSCALE_CCM_VERSION/exoscale-cloud-controller-manager}"
oxide="${OXIDE_CCM:-$CACHE/oxide-ccm-$OXIDE_CCM_VERSION/oxide-cloud-controller-manager}"

# build_archive OUT NAME [FLAGS...] PACKAGE: unpacks the pinned archive NAME, verified, in a temp dir,
# builds its main package there statically, and moves the binary into place only when the build
# succeeded.
build_archive() {
  local out="$1" name="$2" work src
  shift 2
  work="$(mktemp -d)"
  trap "rm -rf '$work'; trap - RETURN" RETURN
  # Each step checked by hand: provide() calls this in a condition, where `set -e` does not apply.
  src="$("$BUN" "$REPO/tests/support/archives.ts" extract "$name" "$work/src")" || return 1
  cd "$src" || return 1
  mkdir -p "$(dirname "$out")" || return 1
  CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS="-buildvcs=false" \
    go build -trimpath -ldflags "-s -w" -o "$out.tmp.$$" "$@" || return 1
  mv "$out.tmp.$$" "$out"
}

if [[ ! -x "$exoscale" || ! -x "$oxide" ]]; then
  command -v go >/dev/null || { echo "cloudccm-bins.sh: Go is required to build the Exoscale and Oxide CCMs" >&2; exit 1; }
fi

# provide VAR OUT NAME [FLAGS...] PACKAGE: prints VAR=OUT once OUT exists (built when missing), else
# VAR_ERROR=<why> (archives.ts's message when the archive was the cause) and marks the run failed.
# Each CCM is tried even when the other failed, so one archive that cannot be had costs only its
# own tests.
status=0
provide() {
  local var="$1" out="$2" err
  shift 2
  err="$(mktemp)"
  if [[ -x "$out" ]] || (build_archive "$out" "$@") 2> >(tee "$err" >&2) >&2; then
    echo "$var=$out"
  else
    wait # for tee
    echo "${var}_ERROR=$(grep -m1 '^archives.ts: ' "$err" || echo "cloudccm-bins.sh: building it failed (see the output above)")"
    status=1
  fi
  rm -f "$err"
}
provide EXOSCALE_CCM "$exoscale" exoscale-ccm -mod=vendor ./cmd/exoscale-cloud-controller-manager
provide OXIDE_CCM "$oxide" oxide-ccm .
exit "$status"
