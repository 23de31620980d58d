#!/usr/bin/env bash
# Builds Prometheus' promtool (cmd/promtool of the Go module github.com/prometheus/prometheus at an
# exact version), which tests/e2e/observability.test.ts runs on the chart's PrometheusRule
# (`promtool check rules`, `promtool test rules`), and caches it outside the repository keyed by
# version, as testbed-bins.sh does for helm. Built in the released module's own folder with its go.mod
# and go.sum as released (-mod=readonly, no go.work). Prints a PROMTOOL= line; honours PROMTOOL when set.
set -euo pipefail

PROMETHEUS_VERSION="${PROMETHEUS_VERSION:-v0.316.0}"
CACHE="${TESTBED_CACHE:-$HOME/.cache/talos-ccm-testbed}"
# remove_all_sd: Prometheus' own build tag that leaves out every service discovery (cloud SDKs, the
# Kubernetes client): rule checks and rule unit tests use none, and the build takes a fraction of the time.
promtool="${PROMTOOL:-$CACHE/promtool-$PROMETHEUS_VERSION-nosd/promtool}"

build_promtool() {
  local work json dir want v release ldflags
  command -v go >/dev/null || { echo "promtool-bins.sh: Go is required to build promtool $PROMETHEUS_VERSION" >&2; exit 1; }
  work="$(mktemp -d)"
  trap "rm -rf '$work'" EXIT
  if ! json="$(cd "$work" && GOWORK=off GOFLAGS=-mod=mod go mod download -json "github.com/prometheus/prometheus@$PROMETHEUS_VERSION")"; then
    echo "promtool-bins.sh: cannot download github.com/prometheus/prometheus@$PROMETHEUS_VERSION: $(sed -n 's/^\s*"Error": "\(.*\)",\?$/\1/p' <<<"$json")" >&2
    exit 1
  fi
  dir="$(sed -n 's/^\s*"Dir": "\(.*\)",\?$/\1/p' <<<"$json")"
  [[ -d "$dir" ]] || { echo "promtool-bins.sh: go mod download gave no module folder" >&2; exit 1; }
  want="$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$dir/go.mod")"
  v="$(go env GOVERSION)"
  if [[ "$(printf '%s\n%s\n' "$want" "${v#go}" | sort -V | head -1)" != "$want" ]]; then
    echo "promtool-bins.sh: Go >= $want is required to build promtool $PROMETHEUS_VERSION (found: $v)" >&2
    exit 1
  fi
  # Module v0.3MM.P is Prometheus 3.MM.P: the version string promtool --version prints.
  release="$(sed -n 's/^v0\.3\([0-9][0-9]\)\.\([0-9]*\)$/3.\1.\2/p' <<<"$PROMETHEUS_VERSION" | sed 's/^3\.0\([0-9]\)/3.\1/')"
  ldflags="-s -w -X github.com/prometheus/common/version.Version=${release:-$PROMETHEUS_VERSION}"
  mkdir -p "$(dirname "$promtool")"
  (cd "$dir" && GOWORK=off CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS= go build -mod=readonly -buildvcs=false -trimpath -tags remove_all_sd \
    -ldflags "$ldflags" -o "$promtool.tmp.$$" ./cmd/promtool)
  mv "$promtool.tmp.$$" "$promtool"
}

[[ -x "$promtool" ]] || (build_promtool) >&2
echo "PROMTOOL=$promtool"
