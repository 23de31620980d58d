#!/usr/bin/env bash
# Builds tests/support/upstreamcheck (Talos' configpatcher and config validation, the Prometheus
# Operator's monitoring types, the Grafana Foundation SDK's dashboard schema: a local module on those
# pinned upstream modules) from its committed go.mod and go.sum, and caches it outside the repository
# keyed by their versions and a hash of its sources, as testbed-bins.sh does for the Talos simulator.
# Prints an UPSTREAMCHECK= line; honours UPSTREAMCHECK when set.
set -euo pipefail

CACHE="${TESTBED_CACHE:-$HOME/.cache/talos-ccm-testbed}"
SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/upstreamcheck"

source "$(dirname "${BASH_SOURCE[0]}")/gomodule.sh"

# version MODULE: the version go.mod requires of MODULE.
version() {
  sed -n "s#^\s*\(require \)\{0,1\}$1 \(v[^ ]*\)\$#\2#p" "$SRC/go.mod"
}

key() {
  echo "talos-$(version github.com/siderolabs/talos/pkg/machinery)-promop-$(version github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring)-grafanasdk-$(version github.com/grafana/grafana-foundation-sdk/go)-$(source_hash "$SRC")"
}
upstreamcheck="${UPSTREAMCHECK:-$CACHE/upstreamcheck-$(key)/upstreamcheck}"

# Unless UPSTREAMCHECK names the binary, one build stays in the cache.
others="$CACHE/upstreamcheck-"
[[ -z "${UPSTREAMCHECK:-}" ]] || others=""
[[ -x "$upstreamcheck" ]] || build_local_module upstreamcheck-bins.sh "the upstream schema checker" "$SRC" "$upstreamcheck" "$others" >&2

echo "UPSTREAMCHECK=$upstreamcheck"
