# Sourced by testbed-bins.sh (the Talos simulator, tests/support/talossim), h2peer-bins.sh (the
# hostile HTTP/2 peer, tests/support/h2peer) and ociregistry-bins.sh (the local OCI registry and
# crane, tests/support/ociregistry): the cached build of a local Go module from its committed go.mod
# and go.sum. Defines functions only; the caller sets `set -euo pipefail`.

# source_hash DIR: 12 hex digits of the module's go.mod, go.sum and Go sources (its cache key's tail).
source_hash() {
  (cd "$1" && cat go.mod go.sum $(ls ./*.go | sort) | sha256sum | cut -c1-12)
}

# build_local_module SCRIPT WHAT SRC OUT [OTHERS] [PACKAGE]: builds PACKAGE (default: the module's
# root package) of the module in SRC into OUT with -mod=readonly (a go.mod that needs changes fails
# the build instead of being rewritten), without a go.work, and with the go directive's Go version
# or newer, and moves the binary into place only when the build succeeded. OTHERS, a cache folder
# prefix (e.g. "$CACHE/talossim-"), removes the other folders under it that are more than a day old:
# builds of other sources are of no further use, except to a test run of another checkout (another
# branch's sources) that may be using its build right now. SCRIPT and WHAT name the caller and the
# module in errors.
build_local_module() {
  local script="$1" what="$2" src="$3" out="$4" others="${5:-}" package="${6:-.}" want v d
  command -v go >/dev/null || { echo "$script: Go is required to build $what" >&2; exit 1; }
  want="$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$src/go.mod")"
  v="$(go env GOVERSION)"
  if [[ "$(printf '%s\n%s\n' "$want" "${v#go}" | sort -V | head -1)" != "$want" ]]; then
    echo "$script: Go >= $want is required to build $what (found: $v)" >&2
    exit 1
  fi
  mkdir -p "$(dirname "$out")"
  (cd "$src" && GOWORK=off CGO_ENABLED=0 GOTOOLCHAIN=local go build -mod=readonly -buildvcs=false -trimpath \
    -ldflags "-s -w" -o "$out.tmp.$$" "$package")
  mv "$out.tmp.$$" "$out"
  if [[ -n "$others" ]]; then
    for d in "$others"*; do
      [[ "$d" == "$(dirname "$out")" ]] && continue
      if [[ -n "$(find "$d" -maxdepth 0 -mmin +1440 2>/dev/null)" ]]; then rm -rf "$d"; fi
    done
  fi
}
