#!/usr/bin/env bash
# Builds the hostile HTTP/2 peer of tests/e2e/h2-hostile.test.ts (tests/support/h2peer, a local
# module on golang.org/x/net's http2 Framer and hpack encoder) from its committed go.mod and go.sum,
# and caches it outside the repository keyed by the x/net version and a hash of its sources, as
# testbed-bins.sh does for the Talos simulator. Prints an H2PEER= line; honours H2PEER when set.
set -euo pipefail

CACHE="${TESTBED_CACHE:-$HOME/.cache/talos-ccm-testbed}"
SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/h2peer"

source "$(dirname "${BASH_SOURCE[0]}")/gomodule.sh"

key() {
  local xnet
  xnet="$(sed -n 's#^\s*\(require \)\{0,1\}golang.org/x/net \(v[^ ]*\)$#\2#p' "$SRC/go.mod")"
  echo "xnet-$xnet-$(source_hash "$SRC")"
}
h2peer="${H2PEER:-$CACHE/h2peer-$(key)/h2peer}"

# Unless H2PEER names the binary, one peer stays in the cache.
others="$CACHE/h2peer-"
[[ -z "${H2PEER:-}" ]] || others=""
[[ -x "$h2peer" ]] || build_local_module h2peer-bins.sh "the hostile HTTP/2 peer" "$SRC" "$h2peer" "$others" >&2

echo "H2PEER=$h2peer"
