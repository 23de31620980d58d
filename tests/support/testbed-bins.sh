#!/usr/bin/env bash
# Builds the test bed's kube-apiserver (with kubectl), etcd and helm from Go modules, the Talos simulator
# (tests/support/talossim, a local module on pinned upstream modules) and Talos' apid (from the Talos
# module of the simulator's Talos version), and caches them outside the repository, keyed by version
# (the simulator also by a hash of its sources), so a machine builds them once. Prints
# KUBE_APISERVER=, KUBECTL=, ETCD=, HELM=, TALOS_SIM= and TALOS_APID= lines. Honours
# KUBEBUILDER_ASSETS (kube-apiserver and etcd), KUBE_APISERVER, KUBECTL, ETCD, HELM, TALOS_SIM and
# TALOS_APID when they are already set, and TESTBED_PARTS (below) to make only some of them.
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-v1.36.3}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.5}"
HELM_VERSION="${HELM_VERSION:-v3.22.0}"
CACHE="${TESTBED_CACHE:-$HOME/.cache/talos-ccm-testbed}"

# The oldest Go that builds everything here: Talos' apid (the Talos module 1.13) says go 1.26.3, the
# simulator's modules 1.26.2, kube-apiserver 1.37 1.26. An older Go would try to fetch a toolchain,
# which an offline machine cannot, or fail deep in the build after the first binaries were built:
# checked once, before anything is built.
GO_MIN=1.26.3

# Whether version $1 (a.b[.c]) is at least $2.
version_at_least() {
  local -a a b
  IFS=. read -r -a a <<<"$1"
  IFS=. read -r -a b <<<"$2"
  local i
  for i in 0 1 2; do
    ((${a[i]:-0} > ${b[i]:-0})) && return 0
    ((${a[i]:-0} < ${b[i]:-0})) && return 1
  done
  return 0
}

need_go() {
  local v
  v="$(go env GOVERSION 2>/dev/null || true)"
  if [[ ! "$v" =~ ^go([0-9]+)\.([0-9]+)(\.([0-9]+))? ]] ||
    ! version_at_least "${BASH_REMATCH[1]}.${BASH_REMATCH[2]}.${BASH_REMATCH[4]:-0}" "$GO_MIN"; then
    echo "testbed-bins.sh: Go >= $GO_MIN is required to build the test bed (Talos' apid needs $GO_MIN, the Talos simulator 1.26.2, kube-apiserver $K8S_VERSION 1.26); found: ${v:-no go}" >&2
    exit 1
  fi
}

apiserver="${KUBE_APISERVER:-${KUBEBUILDER_ASSETS:+$KUBEBUILDER_ASSETS/kube-apiserver}}"
apiserver="${apiserver:-$CACHE/kubernetes-$K8S_VERSION/kube-apiserver}"
kubectl="${KUBECTL:-$CACHE/kubernetes-$K8S_VERSION/kubectl}"
etcd="${ETCD:-${KUBEBUILDER_ASSETS:+$KUBEBUILDER_ASSETS/etcd}}"
etcd="${etcd:-$CACHE/etcd-$ETCD_VERSION/etcd}"
helm="${HELM:-$CACHE/helm-$HELM_VERSION/helm}"

# The simulator's cache key: the upstream versions its go.mod pins and a hash of its sources.
SIM_SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/talossim"
source "$(dirname "${BASH_SOURCE[0]}")/gomodule.sh"
# The Talos version: the simulator's machinery module's.
TALOS_VERSION="$(sed -n 's#^\s*github.com/siderolabs/talos/pkg/machinery \(v[^ ]*\)$#\1#p' "$SIM_SRC/go.mod")"
sim_key() {
  local cosi
  cosi="$(sed -n 's#^\s*github.com/cosi-project/runtime \(v[^ ]*\)$#\1#p' "$SIM_SRC/go.mod")"
  echo "cosi-$cosi-talos-$TALOS_VERSION-$(source_hash "$SIM_SRC")"
}
talossim="${TALOS_SIM:-$CACHE/talossim-$(sim_key)/talossim}"
apid="${TALOS_APID:-$CACHE/apid-talos-$TALOS_VERSION/apid}"

# kube-apiserver and kubectl (for people trying the demo: `npm run demo -- --keep` prints its path),
# built from one throw-away module that points k8s.io/kubernetes's staging modules at their releases.
build_kubernetes() {
  local work staging_ver gomod
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' RETURN
  staging_ver="v0.${K8S_VERSION#v1.}"
  cd "$work"
  go mod init testbed/apiserver >/dev/null 2>&1
  gomod="$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
  # k8s.io/kubernetes replaces its staging modules with local paths; point each at its release.
  {
    echo "require k8s.io/kubernetes $K8S_VERSION"
    echo "replace ("
    sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#\t\1 => \1 '"$staging_ver"'#p' "$gomod"
    echo ")"
  } >>go.mod
  go mod tidy -e >/dev/null 2>&1 || true
  go get "k8s.io/kubernetes/cmd/kube-apiserver@$K8S_VERSION" "k8s.io/kubernetes/cmd/kubectl@$K8S_VERSION" >/dev/null
  local ldflags="-s -w"
  ldflags+=" -X k8s.io/component-base/version.gitVersion=$K8S_VERSION"
  ldflags+=" -X k8s.io/component-base/version.gitMajor=1"
  ldflags+=" -X k8s.io/component-base/version.gitMinor=$(echo "$K8S_VERSION" | cut -d. -f2)"
  ldflags+=" -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION"
  if [[ ! -x "$apiserver" ]]; then
    mkdir -p "$(dirname "$apiserver")"
    CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$apiserver.tmp.$$" k8s.io/kubernetes/cmd/kube-apiserver
    mv "$apiserver.tmp.$$" "$apiserver"
  fi
  if [[ ! -x "$kubectl" ]]; then
    mkdir -p "$(dirname "$kubectl")"
    CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$kubectl.tmp.$$" k8s.io/kubernetes/cmd/kubectl
    mv "$kubectl.tmp.$$" "$kubectl"
  fi
}

# build_module OUT MODULE@VERSION PACKAGE LDFLAGS: builds one command of a released Go module in a
# throw-away module, statically, and moves it into place only when the build succeeded.
build_module() {
  local out="$1" module="$2" package="$3" ldflags="$4" work
  work="$(mktemp -d)"
  # Fires once, when this function returns (a RETURN trap would otherwise outlive it).
  trap "rm -rf '$work'; trap - RETURN" RETURN
  cd "$work"
  go mod init "testbed/$(basename "$out")" >/dev/null 2>&1
  go get "$module" >/dev/null
  mkdir -p "$(dirname "$out")"
  CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$out.tmp.$$" "$package"
  mv "$out.tmp.$$" "$out"
}

build_etcd() {
  build_module "$etcd" "go.etcd.io/etcd/server/v3@$ETCD_VERSION" go.etcd.io/etcd/server/v3 "-s -w"
}

# helm's version string set as its release build sets it.
build_helm() {
  build_module "$helm" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" helm.sh/helm/v3/cmd/helm \
    "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
}

# The simulator (tests/support/gomodule.sh); unless TALOS_SIM names it, one build of it (28 MB)
# stays in the cache.
build_talossim() {
  local others="$CACHE/talossim-"
  [[ -z "${TALOS_SIM:-}" ]] || others=""
  build_local_module testbed-bins.sh "the Talos simulator" "$SIM_SRC" "$talossim" "$others"
}

# module_dir WORK MODULE@VERSION: the module's folder in Go's module cache, downloaded if need be.
module_dir() {
  local json dir
  if ! json="$(cd "$1" && GOWORK=off GOFLAGS=-mod=mod go mod download -json "$2")"; then
    echo "testbed-bins.sh: cannot download $2 to build Talos' apid: $(sed -n 's/^\s*"Error": "\(.*\)",\?$/\1/p' <<<"$json")" >&2
    exit 1
  fi
  dir="$(sed -n 's/^\s*"Dir": "\(.*\)",\?$/\1/p' <<<"$json")"
  [[ -d "$dir" ]] || { echo "testbed-bins.sh: go mod download $2 gave no module folder" >&2; exit 1; }
  echo "$dir"
}

# Talos' apid, which the simulator runs in front of its machines in --apid mode: the Talos module's
# internal/app/apid, unchanged, with a two-line main package added to a copy of the module (its
# go.mod replaces the machinery module by ./pkg/machinery: the machinery module of the same version
# goes there). Built with the Talos module's go.mod and go.sum as released (-mod=readonly) and its
# go directive's Go version; unless TALOS_APID names it, one build (26 MB) stays in the cache.
build_apid() {
  local work talos machinery others="$CACHE/apid-talos-"
  [[ -z "${TALOS_APID:-}" ]] || others=""
  work="$(mktemp -d)"
  # build_apid runs in a subshell: its end removes the copy (read-only, as the module cache's files).
  trap "chmod -R u+w '$work' 2>/dev/null; rm -rf '$work'" EXIT
  talos="$(module_dir "$work" "github.com/siderolabs/talos@$TALOS_VERSION")"
  machinery="$(module_dir "$work" "github.com/siderolabs/talos/pkg/machinery@$TALOS_VERSION")"
  cp -r "$talos" "$work/talos"
  chmod -R u+w "$work/talos"
  rm -rf "$work/talos/pkg/machinery"
  cp -r "$machinery" "$work/talos/pkg/machinery"
  mkdir -p "$work/talos/cmd/testbed-apid"
  cat >"$work/talos/cmd/testbed-apid/main.go" <<'GO'
// Command testbed-apid is Talos' apid (internal/app/apid), unchanged, as a command of its own.
package main

import "github.com/siderolabs/talos/internal/app/apid"

func main() { apid.Main() }
GO
  build_local_module testbed-bins.sh "Talos' apid $TALOS_VERSION" "$work/talos" "$apid" "$others" ./cmd/testbed-apid
}

# TESTBED_PARTS: which of them to make and print (default all): apiserver (with kubectl), etcd, helm,
# talossim, apid. `npm run demo` asks for apiserver and etcd only.
PARTS=" ${TESTBED_PARTS:-apiserver etcd helm talossim apid} "
want() { [[ "$PARTS" == *" $1 "* ]]; }
missing() {
  (want etcd && [[ ! -x "$etcd" ]]) || (want apiserver && [[ ! -x "$apiserver" || ! -x "$kubectl" ]]) ||
    (want helm && [[ ! -x "$helm" ]]) || (want talossim && [[ ! -x "$talossim" ]]) || (want apid && [[ ! -x "$apid" ]])
}

if missing; then
  command -v go >/dev/null || { echo "testbed-bins: Go is required to build kube-apiserver, etcd, helm, the Talos simulator and Talos' apid" >&2; exit 1; }
  need_go
fi
if want etcd; then
  [[ -x "$etcd" ]] || (build_etcd) >&2
  echo "ETCD=$etcd"
fi
if want apiserver; then
  [[ -x "$apiserver" && -x "$kubectl" ]] || (build_kubernetes) >&2
  echo "KUBE_APISERVER=$apiserver"
  echo "KUBECTL=$kubectl"
fi
if want helm; then
  [[ -x "$helm" ]] || (build_helm) >&2
  echo "HELM=$helm"
fi
if want talossim; then
  [[ -x "$talossim" ]] || (build_talossim) >&2
  echo "TALOS_SIM=$talossim"
fi
if want apid; then
  [[ -x "$apid" ]] || (build_apid) >&2
  echo "TALOS_APID=$apid"
fi
