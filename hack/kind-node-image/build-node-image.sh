#!/usr/bin/env bash
# Builds a kind node image locally (no registry): a debootstrapped Debian root with Debian's
# systemd, containerd, runc and CNI plugins, kind v0.33.0's own node files (entrypoint, systemd
# units, containerd config, read from the module cache), the Kubernetes binaries built from the
# Go module proxy, and the control-plane and add-on images (built FROM scratch) preloaded into the
# node's containerd under the names kubeadm expects.
#
# Idempotent: when $NODE_IMAGE exists this is a no-op. Intermediate outputs live in $BUILD_DIR
# (outside the repository) and each stage resumes from them.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/versions.env"
export BUILD_DIR=${BUILD_DIR:-/var/tmp/quotaqual-kind-build}
BIN=$BUILD_DIR/bin
ROOT=$BUILD_DIR/rootfs
KIND_MODULE=sigs.k8s.io/kind@v0.33.0
case $(realpath -m "$BUILD_DIR")/ in
"$(realpath "$HERE/../..")"/*) echo "BUILD_DIR $BUILD_DIR is inside the repository: build outputs and downloaded sources stay outside it" >&2; exit 2 ;;
esac

if docker image inspect "$NODE_IMAGE" >/dev/null 2>&1; then
	echo "kind node image $NODE_IMAGE exists: nothing to do (docker rmi it to rebuild)"
	exit 0
fi

stage() { echo "== $(date -u +%T) $*"; }
timed() { local name=$1; shift; local t0=$SECONDS; "$@"; echo "== stage $name took $((SECONDS - t0))s"; }
t_all=$SECONDS

timed binaries "$HERE/build-binaries.sh"
timed rootfs "$HERE/build-rootfs.sh"

kind_dir=$(cd "$HERE" && GOFLAGS=-mod=mod go mod download -json "$KIND_MODULE" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
kind_files=$kind_dir/images/base/files
[ -d "$kind_files" ] || { echo "kind's node files are missing from $kind_dir" >&2; exit 1; }

# kubeadm names the images it will run; they are tagged exactly so.
mapfile -t kubeadm_images < <("$BIN/kubeadm" config images list --kubernetes-version "$KUBE_VERSION")
image_named() { local img; for img in "${kubeadm_images[@]}"; do [[ $img == *"/$1:"* ]] && { echo "$img"; return; }; done; echo "kubeadm lists no $1 image" >&2; return 1; }
PAUSE_IMAGE=$(image_named pause)
NETPOL_IMAGE=registry.k8s.io/networking/kube-network-policies:$KNP_VERSION

configure_rootfs() {
	stage "configuring the node root"
	# kind's own node files, as its base image Dockerfile installs them.
	install -D -m 0755 -t "$ROOT/usr/local/bin" "$kind_files/usr/local/bin/entrypoint" "$HERE/node-entrypoint"
	mkdir -p "$ROOT/kind/bin" "$ROOT/kind/manifests" "$ROOT/etc/systemd/system/kubelet.service.d" \
		"$ROOT/etc/containerd" "$ROOT/etc/default" "$ROOT/etc/sysctl.d" "$ROOT/etc/kubernetes/manifests" \
		"$ROOT/etc/cni/net.d" "$ROOT/opt/cni"
	install -m 0755 "$kind_files"/kind/bin/* "$ROOT/kind/bin/"
	install -m 0644 "$kind_files"/etc/crictl.yaml "$ROOT/etc/"
	install -m 0644 "$kind_files"/etc/default/* "$ROOT/etc/default/"
	# Kubernetes >= 1.35 refuses cgroup v1 hosts unless told otherwise; these machines' Docker
	# runs on cgroup v1. The flag changes nothing on a cgroup v2 host.
	sed -i 's#^KUBELET_EXTRA_ARGS=\(.*\)$#KUBELET_EXTRA_ARGS=\1 --fail-cgroupv1=false#' "$ROOT/etc/default/kubelet"
	grep -q -- '--fail-cgroupv1=false' "$ROOT/etc/default/kubelet"
	install -m 0644 "$kind_files"/etc/sysctl.d/* "$ROOT/etc/sysctl.d/"
	install -m 0644 "$kind_files"/etc/systemd/system/{kubelet.slice,kubelet.service,containerd.service,undo-mount-hacks.service} "$ROOT/etc/systemd/system/"
	install -m 0644 "$kind_files"/etc/systemd/system/kubelet.service.d/* "$ROOT/etc/systemd/system/kubelet.service.d/"
	rm -f "$ROOT/etc/systemd/system/containerd-fuse-overlayfs.service"
	# Debian's containerd is 1.6 (config version 2, which kind's file uses); drop the
	# fuse-overlayfs proxy plugin (rootless only, its snapshotter is not installed) and pin the
	# sandbox image to the pause kubeadm names.
	sed -e '/^\[proxy_plugins\]/,/^  address = /d' -e '/^# fuse-overlayfs is used for rootless/d' \
		-e "s#sandbox_image = .*#sandbox_image = \"$PAUSE_IMAGE\"#" \
		"$kind_files/etc/containerd/config.toml" > "$ROOT/etc/containerd/config.toml"
	ln -sf /usr/bin/containerd "$ROOT/usr/local/bin/containerd" # kind's unit runs /usr/local/bin/containerd
	rm -rf "$ROOT/opt/cni/bin" && ln -s /usr/lib/cni "$ROOT/opt/cni/bin" # Debian's CNI plugins
	chroot "$ROOT" ctr oci spec \
		| chroot "$ROOT" jq '.hooks.createContainer[.hooks.createContainer| length] |= . + {"path": "/kind/bin/mount-product-files.sh"}' \
		| chroot "$ROOT" jq 'del(.process.rlimits)' > "$ROOT/etc/containerd/cri-base.json"
	install -m 0755 "$BIN/kubelet" "$BIN/kubeadm" "$BIN/kubectl" "$ROOT/usr/bin/"
	echo -n "$KUBE_VERSION" > "$ROOT/kind/version"
	sed -e "s#@NETPOL_IMAGE@#$NETPOL_IMAGE#" "$HERE/default-cni.yaml" > "$ROOT/kind/manifests/default-cni.yaml"
	install -m 0644 "$HERE/default-storage.yaml" "$ROOT/kind/manifests/default-storage.yaml"
	# The static volumes' directories, writable by the pods' non-root users as the directories of
	# kind's local-path-provisioner are (hostPath volumes ignore fsGroup).
	local pv
	for pv in $(sed -n 's#^ *path: /var/local-pv/##p' "$HERE/default-storage.yaml"); do
		install -d -m 0777 "$ROOT/var/local-pv/$pv"
	done
	install -m 0644 "$HERE/10-bridge.conflist" "$ROOT/etc/cni/net.d/10-bridge.conflist"
	# systemd as kind's base image sets it up: only the units the node needs.
	find "$ROOT/lib/systemd/system/sysinit.target.wants/" -name systemd-tmpfiles-setup.service -delete
	rm -f "$ROOT"/lib/systemd/system/multi-user.target.wants/* "$ROOT"/etc/systemd/system/*.wants/* \
		"$ROOT"/lib/systemd/system/local-fs.target.wants/* "$ROOT"/lib/systemd/system/sockets.target.wants/*udev* \
		"$ROOT"/lib/systemd/system/sockets.target.wants/*initctl* "$ROOT"/lib/systemd/system/basic.target.wants/*
	grep -q '^ReadKMsg=no' "$ROOT/etc/systemd/journald.conf" || echo "ReadKMsg=no" >> "$ROOT/etc/systemd/journald.conf"
	ln -sf /usr/lib/systemd/systemd "$ROOT/sbin/init"
	chroot "$ROOT" systemctl enable kubelet.service containerd.service undo-mount-hacks.service dbus.service >/dev/null 2>&1 || \
		chroot "$ROOT" systemctl enable kubelet.service containerd.service undo-mount-hacks.service
	chroot "$ROOT" systemctl mask systemd-binfmt.service
	rm -rf "$ROOT"/var/cache/apt/archives/*.deb "$ROOT"/var/lib/apt/lists/*
}

# scratch_image TAG ENTRYPOINT-JSON FILE... builds TAG FROM scratch holding each FILE: a name in
# $BIN (copied to /usr/local/bin), ROOT:/path (a program of the node root, copied with the shared
# libraries it links: the tools kube-proxy execs), DIR:/path (a directory of the node root, e.g.
# the iptables extensions xtables loads at run time) or LINK:/usr/sbin/name (a name of iptables'
# multi-call binary xtables-nft-multi).
scratch_image() {
	local tag=$1 entry=$2; shift 2
	local ctx; ctx=$(mktemp -d "$BUILD_DIR/image.XXXXXX")
	mkdir -p "$ctx/fs/usr/local/bin" "$ctx/fs/tmp" "$ctx/fs/etc"
	local f
	for f in "$@"; do
		case $f in
		ROOT:*)
			f=${f#ROOT:}
			local lib
			for lib in "$f" $(chroot "$ROOT" ldd "$f" | grep -o '/[^ ]*'); do
				mkdir -p "$ctx/fs$(dirname "$lib")"
				cp -L "$ROOT$lib" "$ctx/fs$lib"
			done ;;
		DIR:*)
			f=${f#DIR:}
			mkdir -p "$ctx/fs$(dirname "$f")"
			cp -a "$ROOT$f" "$ctx/fs$f"
			local so lib
			for so in "$ctx/fs$f"/*.so; do # the libraries the modules link (libm for xt_statistic)
				for lib in $(chroot "$ROOT" ldd "${so#"$ctx/fs"}" | grep -o '/[^ ]*'); do
					mkdir -p "$ctx/fs$(dirname "$lib")"
					cp -L "$ROOT$lib" "$ctx/fs$lib"
				done
			done ;;
		LINK:*) ln -s xtables-nft-multi "$ctx/fs${f#LINK:}" ;;
		*) install -m 0755 "$BIN/$f" "$ctx/fs/usr/local/bin/$f" ;;
		esac
	done
	cp "$ROOT/etc/nsswitch.conf" "$ctx/fs/etc/" 2>/dev/null || true
	printf 'FROM scratch\nCOPY fs/ /\nENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin\nENTRYPOINT %s\n' "$entry" > "$ctx/Dockerfile"
	docker build -q -t "$tag" "$ctx" >/dev/null
	rm -rf "$ctx"
	echo "$tag"
}

component_images() {
	stage "building the control-plane and add-on images FROM scratch"
	local c
	for c in kube-apiserver kube-controller-manager kube-scheduler; do
		scratch_image "$(image_named "$c")" "[\"/usr/local/bin/$c\"]" "$c"
	done
	# kube-proxy programs the node with iptables (nft backend) or nft, whichever mode it runs;
	# iptables' programs are names of one multi-call binary.
	scratch_image "$(image_named kube-proxy)" '["/usr/local/bin/kube-proxy"]' kube-proxy \
		ROOT:/usr/sbin/xtables-nft-multi ROOT:/usr/sbin/nft ROOT:/usr/sbin/conntrack \
		DIR:"/$(cd "$ROOT" && echo usr/lib/*/xtables)" \
		LINK:/usr/sbin/iptables LINK:/usr/sbin/iptables-save LINK:/usr/sbin/iptables-restore \
		LINK:/usr/sbin/ip6tables LINK:/usr/sbin/ip6tables-save LINK:/usr/sbin/ip6tables-restore
	scratch_image "$(image_named etcd)" '["/usr/local/bin/etcd"]' etcd
	scratch_image "$(image_named coredns)" '["/usr/local/bin/coredns"]' coredns
	scratch_image "$PAUSE_IMAGE" '["/usr/local/bin/pause"]' pause
	scratch_image "$NETPOL_IMAGE" '["/usr/local/bin/kube-network-policies"]' kube-network-policies \
		ROOT:/usr/sbin/nft
}

# assemble imports the root as an image, preloads the component images into its containerd
# (as kind's own node-image build does: containerd in a build container, ctr import) and
# commits the result as $NODE_IMAGE.
assemble() {
	local base=$NODE_IMAGE-rootfs build=quotaqual-kind-build-$$
	stage "importing the node root"
	tar -C "$ROOT" --numeric-owner --exclude=./.debootstrap-done -c . | docker import \
		--change 'ENV container=docker' \
		--change 'ENTRYPOINT [ "/usr/local/bin/node-entrypoint", "/sbin/init" ]' - "$base" >/dev/null
	# systemd stops on SIGRTMIN+3; `docker import --change` cannot set a stop signal.
	printf 'FROM %s\nSTOPSIGNAL SIGRTMIN+3\n' "$base" | docker build -q -t "$base" - >/dev/null
	stage "preloading images into the node's containerd"
	docker run -d --name "$build" --entrypoint sleep --security-opt seccomp=unconfined "$base" infinity >/dev/null
	trap "docker rm -f -v $build >/dev/null 2>&1 || true" EXIT
	docker exec "$build" bash -c 'nohup containerd > /var/log/containerd-build.log 2>&1 &'
	docker exec "$build" bash -c 'for i in $(seq 1 50); do [ -S /run/containerd/containerd.sock ] && ctr version >/dev/null 2>&1 && exit 0; sleep 0.2; done; cat /var/log/containerd-build.log; exit 1'
	local imgs=("${kubeadm_images[@]}" "$NETPOL_IMAGE")
	docker save "${imgs[@]}" | docker exec -i "$build" ctr --namespace=k8s.io images import \
		--all-platforms --no-unpack --digests -
	docker exec "$build" ctr --namespace=k8s.io images list -q | grep -v '^sha256:\|^import-'
	docker exec "$build" pkill containerd
	# The build container's PID 1 (sleep) does not reap: a stopped containerd stays a zombie.
	docker exec "$build" bash -c 'for i in $(seq 1 100); do ps -C containerd -o stat= | grep -qv Z || exit 0; sleep 0.2; done; echo "containerd did not stop" >&2; exit 1'
	docker commit --change 'ENTRYPOINT [ "/usr/local/bin/node-entrypoint", "/sbin/init" ]' \
		--change 'ENV container=docker' "$build" "$NODE_IMAGE" >/dev/null
	docker rm -f -v "$build" >/dev/null
	trap - EXIT
	# The component images live on inside the node image; the host keeps none of them.
	docker rmi "$base" "${imgs[@]}" >/dev/null
}

timed configure configure_rootfs
timed images component_images
timed assemble assemble
stage "built $NODE_IMAGE in $((SECONDS - t_all))s: $(docker image inspect -f '{{.Size}}' "$NODE_IMAGE") bytes"
