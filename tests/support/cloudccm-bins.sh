#!/usr/bin/env bash
# Builds the clouds' own CCMs that the "beside your cloud's CCM" tests run next to this one, from the
# release archives in the shared fixtures folder (../shared/fixtures beside the repository, or
# SHARED_FIXTURES), and caches them outside the repository keyed by version, as testbed-bins.sh does
# for kube-apiserver. Prints EXOSCALE_CCM= and OXIDE_CCM= lines. Honours EXOSCALE_CCM and OXIDE_CCM
# when they are already set. Their code never enters this repository: only the archives are read.
set -euo pipefail

EXOSCALE_CCM_VERSION="${EXOSCALE_CCM_VERSION:-0.34.0}"
OXIDE_CCM_VERSION="${OXIDE_CCM_VERSION:-0.7.1}"
CACHE="${TESTBED_CACHE:-$HOME/.cache/talos-ccm-testbed}"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"

fixtures_dir() {
  local d
  for d in "${SHARED_FIXTURES:-}" "$REPO/../shared/fixtures" /work/shared/fixtures; do
    [[ -n "$d" && -d "$d" ]] && { echo "$d"; return; }
  done
  echo "cloudccm-bins.sh: the shared fixtures folder (../shared/fixtures beside the repository, or SHARED_FIXTURES) is missing: it holds the Exoscale and Oxide CCM release archives" >&2
  exit 1
}

exoscale="${EXOSCALE_CCM:-$CACHE/exoscale-ccm-$EXOSCALE_CCM_VERSION/exoscale-cloud-controller-manager}"
oxide="${OXIDE_CCM:-$CACHE/oxide-ccm-$OXIDE_CCM_VERSION/oxide-cloud-controller-manager}"

# build_archive OUT ARCHIVE TOPDIR [FLAGS...] PACKAGE: unpacks a release archive in a temp dir, builds its
# main package there statically, and moves the binary into place only when the build succeeded.
build_archive() {
  local out="$1" archive="$2" top="$3" work
  shift 3
  [[ -f "$archive" ]] || { echo "cloudccm-bins.sh: $archive is missing" >&2; exit 1; }
  work="$(mktemp -d)"
  trap "rm -rf '$work'; trap - RETURN" RETURN
  tar -xzf "$archive" -C "$work"
  cd "$work/$top"
  mkdir -p "$(dirname "$out")"
  CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS="-buildvcs=false" go build -trimpath -ldflags "-s -w" -o "$out.tmp.$$" "$@"
  mv "$out.tmp.$$" "$out"
}

build_exoscale() {
  local fx
  fx="$(fixtures_dir)"
  build_archive "$exoscale" "$fx/exoscale-ccm/exoscale-cloud-controller-manager-$EXOSCALE_CCM_VERSION.tar.gz" \
    "exoscale-cloud-controller-manager-$EXOSCALE_CCM_VERSION" -mod=vendor ./cmd/exoscale-cloud-controller-manager
}

build_oxide() {
  local fx
  fx="$(fixtures_dir)"
  build_archive "$oxide" "$fx/oxide-ccm/oxide-cloud-controller-manager-$OXIDE_CCM_VERSION.tar.gz" \
    "oxide-cloud-controller-manager-$OXIDE_CCM_VERSION" .
}

if [[ ! -x "$exoscale" || ! -x "$oxide" ]]; then
  command -v go >/dev/null || { echo "cloudccm-bins.sh: Go is required to build the Exoscale and Oxide CCMs" >&2; exit 1; }
fi
[[ -x "$exoscale" ]] || (build_exoscale) >&2
[[ -x "$oxide" ]] || (build_oxide) >&2
echo "EXOSCALE_CCM=$exoscale"
echo "OXIDE_CCM=$oxide"
