#!/usr/bin/env bash
# actionlint (github.com/rhysd/actionlint, cmd/actionlint) at an exact version, built from its Go
# module with the module's own go.mod and go.sum (`go install module@version`, -mod=readonly) and
# cached outside the repository, as testbed-bins.sh caches the test bed's binaries.
#
#   tests/support/actionlint.sh                # npm run lint: lints .github/workflows/*.yml
#   tests/support/actionlint.sh FILE...        # lints the given workflow files
#   tests/support/actionlint.sh --print        # builds it when missing; prints an ACTIONLINT= line
#
# Honours ACTIONLINT when set. Without Go (and no cached build) it fails: the lint never passes by
# skipping. shellcheck and pyflakes are switched off so the result does not depend on what else the
# machine has installed (actionlint would run them when they are on PATH).
set -euo pipefail

ACTIONLINT_VERSION="v1.7.12"
CACHE="${TESTBED_CACHE:-$HOME/.cache/talos-ccm-testbed}"
actionlint="${ACTIONLINT:-$CACHE/actionlint-$ACTIONLINT_VERSION/actionlint}"

build_actionlint() {
  local v
  command -v go >/dev/null || {
    echo "actionlint.sh: Go is required to build actionlint $ACTIONLINT_VERSION (none on PATH, none cached at $actionlint)" >&2
    exit 1
  }
  # actionlint v1.7.12's go.mod says go 1.25.0; an older Go would try to fetch a toolchain.
  v="$(go env GOVERSION)"
  if [[ ! "$v" =~ ^go1\.([0-9]+) ]] || ((BASH_REMATCH[1] < 25)); then
    echo "actionlint.sh: Go >= 1.25 is required to build actionlint $ACTIONLINT_VERSION (found: $v)" >&2
    exit 1
  fi
  mkdir -p "$(dirname "$actionlint")"
  local bin
  bin="$(mktemp -d "$(dirname "$actionlint")/build.XXXXXX")"
  # Fires once, when this function returns.
  trap "rm -rf '$bin'; trap - RETURN" RETURN
  GOBIN="$bin" GOWORK=off GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=readonly \
    go install -trimpath -ldflags "-s -w" "github.com/rhysd/actionlint/cmd/actionlint@$ACTIONLINT_VERSION" >&2
  mv "$bin/actionlint" "$actionlint"
}

[[ -x "$actionlint" ]] || build_actionlint

if [[ "${1:-}" == "--print" ]]; then
  echo "ACTIONLINT=$actionlint"
  exit 0
fi

if (($# == 0)); then
  cd "$(dirname "${BASH_SOURCE[0]}")/../.."
  shopt -s nullglob
  set -- .github/workflows/*.yml .github/workflows/*.yaml
  (($#)) || { echo "actionlint.sh: no workflow in .github/workflows" >&2; exit 1; }
fi
exec "$actionlint" -shellcheck= -pyflakes= "$@"
