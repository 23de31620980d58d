#!/usr/bin/env bash
# Builds the release test's local OCI registry and crane (tests/support/ociregistry, a local module on
# github.com/google/go-containerregistry: the registry is its pkg/registry on 127.0.0.1 and an
# ephemeral port, crane its cmd/crane, a tool of the module) from the committed go.mod and go.sum
# (-mod=readonly), and caches both outside the repository keyed by the go-containerregistry version
# and a hash of the sources, as h2peer-bins.sh does for the hostile HTTP/2 peer. Prints OCI_REGISTRY=
# and CRANE= lines; honours OCI_REGISTRY and CRANE when both are set.
set -euo pipefail

CACHE="${TESTBED_CACHE:-$HOME/.cache/talos-ccm-testbed}"
SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/ociregistry"

source "$(dirname "${BASH_SOURCE[0]}")/gomodule.sh"

key() {
  local ggcr
  ggcr="$(sed -n 's#^\s*\(require \)\{0,1\}github.com/google/go-containerregistry \(v[^ ]*\)$#\2#p' "$SRC/go.mod")"
  echo "ggcr-$ggcr-$(source_hash "$SRC")"
}
dir="$CACHE/ociregistry-$(key)"
registry="${OCI_REGISTRY:-$dir/ociregistry}"
crane="${CRANE:-$dir/crane}"

# Unless both are given, one build of the pair stays in the cache.
others="$CACHE/ociregistry-"
[[ -z "${OCI_REGISTRY:-}" && -z "${CRANE:-}" ]] || others=""
[[ -x "$registry" ]] || build_local_module ociregistry-bins.sh "the local OCI registry" "$SRC" "$registry" "$others" >&2
[[ -x "$crane" ]] || build_local_module ociregistry-bins.sh "crane" "$SRC" "$crane" "" \
  github.com/google/go-containerregistry/cmd/crane >&2

echo "OCI_REGISTRY=$registry"
echo "CRANE=$crane"
