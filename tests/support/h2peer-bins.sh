#!/usr/bin/env bash
# Builds the hostile HTTP/2 peer of tests/e2e/h2-hostile.test.ts (tests/support/h2peer, a local
# module on golang.org/x/net's http2 Framer and hpack encoder) from its committed go.mod and go.sum,
# and caches it outside the repository keyed by the x/net version and a hash of its sources, as
# testbed-bins.sh does for the Talos simulator. Prints an H2PEER= line; honours H2PEER when set.
set -euo pipefail

CACHE="${TESTBED_CACHE:-$HOME/.cache/talos-ccm-testbed}"
SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/h2peer"

key() {
  local xnet hash
  xnet="$(sed -n 's#^\s*\(require \)\{0,1\}golang.org/x/net \(v[^ ]*\)$#\2#p' "$SRC/go.mod")"
  hash="$(cd "$SRC" && cat go.mod go.sum $(ls ./*.go | sort) | sha256sum | cut -c1-12)"
  echo "xnet-$xnet-$hash"
}
h2peer="${H2PEER:-$CACHE/h2peer-$(key)/h2peer}"

build() {
  local want v
  command -v go >/dev/null || { echo "h2peer-bins.sh: Go is required to build the hostile HTTP/2 peer" >&2; exit 1; }
  want="$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$SRC/go.mod")"
  v="$(go env GOVERSION)"
  if [[ "$(printf '%s\n%s\n' "$want" "${v#go}" | sort -V | head -1)" != "$want" ]]; then
    echo "h2peer-bins.sh: Go >= $want is required to build the hostile HTTP/2 peer (found: $v)" >&2
    exit 1
  fi
  mkdir -p "$(dirname "$h2peer")"
  cd "$SRC"
  CGO_ENABLED=0 GOTOOLCHAIN=local go build -mod=readonly -buildvcs=false -trimpath -ldflags "-s -w" \
    -o "$h2peer.tmp.$$" .
  mv "$h2peer.tmp.$$" "$h2peer"
  # Builds of other sources are of no further use: keep one peer in the cache.
  if [[ -z "${H2PEER:-}" ]]; then
    local d
    for d in "$CACHE"/h2peer-*; do
      [[ "$d" == "$(dirname "$h2peer")" ]] || rm -rf "$d"
    done
  fi
}

[[ -x "$h2peer" ]] || (build) >&2
echo "H2PEER=$h2peer"
