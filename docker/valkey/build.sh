#!/usr/bin/env bash
# Builds quotaqual-valkey:8 — the host's valkey-server plus the shared libraries ldd lists, on
# scratch — without pulling anything. The docker topology does the same itself when the image
# is missing (topology.EnsureValkeyImage); this script is the by-hand equivalent.
#
#   docker/valkey/build.sh [TAG]          # default TAG: quotaqual-valkey:8
#
# Needs valkey-server on this host (Debian 12: apt-get install -t bookworm-backports
# valkey-server; .ci/install-deps does it), ldd and the docker CLI.
# With a registry, skip all this and use the official image: valkey/valkey:8.
set -euo pipefail
tag="${1:-quotaqual-valkey:8}"
here="$(cd "$(dirname "$0")" && pwd)"
bin="$(command -v valkey-server || true)"
if [[ -z "$bin" ]]; then
  echo "valkey-server is not installed: install it (bookworm-backports) or use valkey/valkey:8 from a registry" >&2
  exit 1
fi
ctx="$(mktemp -d)"
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/rootfs/usr/bin" "$ctx/data"
# The binary under its server name (Debian links valkey-server to valkey-check-rdb; the name
# the process is started as decides which one runs).
cp -L "$bin" "$ctx/rootfs/usr/bin/valkey-server"
# Every shared library and the ELF interpreter, at the paths ldd reports.
ldd "$bin" | grep -o '/[^ ]*' | sort -u | while read -r lib; do
  mkdir -p "$ctx/rootfs$(dirname "$lib")"
  cp -L "$lib" "$ctx/rootfs$lib"
done
cp "$here/Dockerfile" "$ctx/Dockerfile"
docker build --quiet --rm --force-rm -t "$tag" "$ctx"
docker run --rm "$tag" valkey-server --version
