#!/usr/bin/env bash
# Builds the release image without pulling anything (Dockerfile.scratch) and writes it as an OCI
# archive: the static binary built here with the Go toolchain, the rest gathered from the
# repository (hack/image) and the host's CA bundle, assembled by buildah in a storage of its own.
#
#   hack/image.sh OUT IMAGE VERSION
#
# OUT is the archive to write (oci-archive, the image named IMAGE inside it), IMAGE the name
# and tag, VERSION what `bloomery version` and the image's version label say. Needs buildah
# (make node-deps installs it) and root: buildah's storage keeps the files' owners (65532).
set -euo pipefail

usage() { echo "usage: $(basename "$0") OUT IMAGE VERSION" >&2; exit 2; }
[[ $# -eq 3 && -n $1 && -n $2 && -n $3 ]] || usage
out=$1 image=$2 version=$3
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

log() { printf '[image %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

command -v buildah >/dev/null || die "buildah is not on PATH (make node-deps installs it)"
[[ $(id -u) -eq 0 ]] || die "needs root: the image's files belong to root and to uid 65532"
ca=${BLOOMERY_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
[[ -s $ca ]] || die "no CA bundle at $ca (Debian's ca-certificates package; BLOOMERY_CA_BUNDLE names another)"

ctx=$(mktemp -d "${TMPDIR:-/tmp}/bloomery-image.XXXXXX")
# buildah keeps its images and layers here, apart from any other user's of this machine, and
# the vfs driver works on any file system (overlay on overlay does not).
store=$ctx/store
bud=(buildah --root "$store/root" --runroot "$store/run" --storage-driver vfs)
cleanup() {
	"${bud[@]}" rmi --all --force >/dev/null 2>&1 || true
	rm -rf "$ctx"
}
trap cleanup EXIT

log "building the static binary (version $version)"
(cd "$root" && CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags "-s -w -X main.version=$version" -o "$ctx/bloomery" .)

mkdir -p "$ctx/rootfs/etc/ssl/certs" "$ctx/rootfs/tmp" "$ctx/rootfs/home" "$ctx/nonroot"
install -m 0644 "$root/hack/image/passwd" "$root/hack/image/group" "$ctx/rootfs/etc/"
install -m 0644 "$ca" "$ctx/rootfs/etc/ssl/certs/ca-certificates.crt"
chmod 1777 "$ctx/rootfs/tmp"
cp "$root/Dockerfile.scratch" "$ctx/Dockerfile"

log "building $image with buildah"
"${bud[@]}" build --quiet --pull=never --build-arg "VERSION=$version" -t "$image" -f "$ctx/Dockerfile" "$ctx" >/dev/null
mkdir -p "$(dirname "$out")"
rm -f "$out.tmp"
"${bud[@]}" push --quiet "$image" "oci-archive:$out.tmp:$image"
mv -f "$out.tmp" "$out"
log "wrote $out ($image, $(du -h "$out" | cut -f1))"
