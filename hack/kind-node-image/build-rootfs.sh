#!/usr/bin/env bash
# Debootstraps the node's Debian root into $BUILD_DIR/rootfs with systemd, Debian's containerd,
# runc and CNI plugins and the tools kubeadm and kube-proxy call. The mirror is the one this
# machine's apt sources name (never written into the repository). Skipped when the root exists.
set -euo pipefail

BUILD_DIR=${BUILD_DIR:-/var/tmp/quotaqual-kind-build}
ROOT=$BUILD_DIR/rootfs
PACKAGES=systemd,systemd-sysv,dbus,containerd,runc,containernetworking-plugins,conntrack,iptables,nftables,iproute2,ethtool,util-linux,mount,kmod,libseccomp2,e2fsprogs,ca-certificates,jq,procps

[ -f "$ROOT/.debootstrap-done" ] && { echo "== rootfs present at $ROOT, skipping"; exit 0; }

. /etc/os-release
suite=${VERSION_CODENAME:?/etc/os-release names no VERSION_CODENAME}

# debian_mirror prints the URI of the machine's apt source for $suite (deb822 first, then the
# one-line format).
debian_mirror() {
	local f
	for f in /etc/apt/sources.list.d/*.sources; do
		[ -f "$f" ] || continue
		awk -v suite="$suite" 'BEGIN{RS="";FS="\n"} {
			uri=""; ok=0
			for (i=1;i<=NF;i++) {
				if ($i ~ /^URIs:/) { split($i, u, /[ \t]+/); uri=u[2] }
				if ($i ~ /^Suites:/) { n=split($i, s, /[ \t]+/); for (j=2;j<=n;j++) if (s[j]==suite) ok=1 }
			}
			if (ok && uri!="") { print uri; exit }
		}' "$f"
	done | head -n1
	[ -f /etc/apt/sources.list ] && awk -v suite="$suite" '$1=="deb" { for (i=2;i<=NF;i++) if ($i==suite) { for (k=2;k<i;k++) if ($k !~ /^\[/ && $k !~ /\]$/) { print $k; exit } } }' /etc/apt/sources.list
	return 0
}
mirror=$(debian_mirror | head -n1)
[ -n "$mirror" ] || { echo "no apt source for suite $suite in /etc/apt/sources.list{,.d}: cannot pick a Debian mirror" >&2; exit 1; }
command -v debootstrap >/dev/null || { echo "debootstrap is missing: apt-get install debootstrap" >&2; exit 1; }

echo "== debootstrap $suite from the machine's apt source"
rm -rf "$ROOT"
debootstrap --variant=minbase --include="$PACKAGES" "$suite" "$ROOT" "$mirror"
touch "$ROOT/.debootstrap-done"
