#!/usr/bin/env bash
# Builds every Go binary the kind node image needs from the Go module proxy:
# the Kubernetes binaries (one `go build` so shared packages compile once), etcd,
# CoreDNS, kube-network-policies and the pause program. Outputs go to $BUILD_DIR/bin.
# Each stage is skipped when its outputs exist, so a re-run after a failure resumes.
set -euo pipefail

. "$(dirname "$0")/versions.env"
BUILD_DIR=${BUILD_DIR:-/var/tmp/quotaqual-kind-build}
BIN=$BUILD_DIR/bin
SRC=$BUILD_DIR/src
mkdir -p "$BIN" "$SRC"
export GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0 GOTOOLCHAIN=local

stage() { echo "== $(date -u +%T) $*"; }
timed() { local name=$1; shift; local t0=$SECONDS; "$@"; echo "== stage $name took $((SECONDS - t0))s"; }

# module_src copies a module out of the module cache into $SRC/<name>, writable.
module_src() {
	local mod=$1 ver=$2 name=$3
	local dir
	dir=$(go mod download -json "$mod@$ver" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	[ -n "$dir" ] || { echo "go mod download $mod@$ver gave no directory" >&2; exit 1; }
	rm -rf "${SRC:?}/$name"
	cp -r "$dir" "$SRC/$name"
	chmod -R u+w "$SRC/$name"
}

build_kubernetes() {
	local targets=(kubelet kubeadm kubectl kube-apiserver kube-controller-manager kube-scheduler kube-proxy)
	local missing=0 t
	for t in "${targets[@]}"; do [ -x "$BIN/$t" ] || missing=1; done
	[ $missing = 1 ] || { stage "kubernetes $KUBE_VERSION binaries present, skipping"; return; }
	stage "kubernetes $KUBE_VERSION: preparing module source"
	module_src k8s.io/kubernetes "$KUBE_VERSION" kubernetes
	local d=$SRC/kubernetes staging=v0.${KUBE_VERSION#v1.}
	rm -rf "$d/vendor" "$d/go.work" "$d/go.work.sum"
	# The module zip has no staging/ tree: drop the replaces pointing into it and
	# require the published staging modules of the same release instead.
	sed -i -e '/=> \.\/staging\//d' \
		-e "s#^\(\s*k8s\.io/[a-z0-9-]*\) v0\.0\.0\(\s\|\$\)#\1 $staging\2#" "$d/go.mod"
	local major=${KUBE_VERSION#v}; major=${major%%.*}
	local minor=${KUBE_VERSION#v*.}; minor=${minor%%.*}
	local date; date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
	local ld="-s -w"
	for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		ld+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
		ld+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$date"
	done
	stage "kubernetes $KUBE_VERSION: go build ${targets[*]}"
	(cd "$d" && go build -trimpath -ldflags "$ld" -o "$BIN/" $(printf './cmd/%s ' "${targets[@]}"))
}

build_etcd() {
	[ -x "$BIN/etcd" ] && { stage "etcd present, skipping"; return; }
	stage "etcd $ETCD_VERSION"
	module_src go.etcd.io/etcd/server/v3 "$ETCD_VERSION" etcd-server
	# Its go.mod points its sibling modules at ../ (the repository layout): use the published
	# modules of the same release instead (their requirements name them).
	sed -i '/=> \.\.\//d' "$SRC/etcd-server/go.mod"
	(cd "$SRC/etcd-server" && go build -trimpath -ldflags "-s -w" -o "$BIN/etcd" .)
}

build_coredns() {
	[ -x "$BIN/coredns" ] && { stage "coredns present, skipping"; return; }
	stage "coredns $COREDNS_VERSION"
	module_src github.com/coredns/coredns "$COREDNS_VERSION" coredns
	(cd "$SRC/coredns" && go build -trimpath -ldflags "-s -w" -o "$BIN/coredns" .)
}

build_network_policies() {
	[ -x "$BIN/kube-network-policies" ] && { stage "kube-network-policies present, skipping"; return; }
	stage "kube-network-policies $KNP_VERSION"
	module_src sigs.k8s.io/kube-network-policies "$KNP_VERSION" kube-network-policies
	(cd "$SRC/kube-network-policies" && go build -trimpath -ldflags "-s -w" -o "$BIN/kube-network-policies" ./cmd)
}

build_pause() {
	[ -x "$BIN/pause" ] && { stage "pause present, skipping"; return; }
	stage "pause"
	(cd "$(dirname "$0")/pause" && go build -trimpath -ldflags "-s -w" -o "$BIN/pause" .)
}

timed kubernetes build_kubernetes
timed etcd build_etcd
timed coredns build_coredns
timed kube-network-policies build_network_policies
timed pause build_pause
stage "binaries done"
