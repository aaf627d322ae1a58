#!/usr/bin/env bash
# Builds, once, the Kubernetes binaries that envtest and the end-to-end tests need
# (etcd, kube-apiserver, kube-controller-manager, kubectl) from the Go module proxy,
# because setup-envtest cannot download on machines without internet; with -n, also those
# of a node (kube-scheduler, kubelet, kube-proxy) that the node tests (test/node) run.
# See usage() for the interface.

set -euo pipefail

K8S_VERSION=${BLOOMERY_K8S_VERSION:-v1.37.2}
ETCD_VERSION=${BLOOMERY_ETCD_VERSION:-v3.6.16}
BINARIES=(etcd kube-apiserver kube-controller-manager kubectl)
# The node's binaries have a stamp of their own and are added to a complete DIR, so a cache
# built without -n stays valid and scripts that know only BINARIES keep using it.
NODE_BINARIES=(kube-scheduler kubelet kube-proxy)
# Bump when the way the binaries are built changes, so existing caches are rebuilt.
STAMP_FORMAT=1
STAMP_NAME=.stamp
NODE_STAMP_NAME=.stamp-node

usage() {
	cat <<EOF
Usage: $(basename "$0") [-f] [-n] [DIR]

Builds ${BINARIES[*]} (Kubernetes ${K8S_VERSION}, etcd ${ETCD_VERSION})
from the Go module proxy into DIR, once, and prints DIR as the last line on stdout.
With -n, also ${NODE_BINARIES[*]}, added to DIR once the others are there.
Progress goes to stderr, so:

    export KUBEBUILDER_ASSETS=\$($0)

DIR defaults to \${BLOOMERY_CACHE:-\$HOME/.cache/bloomery}/k8s/${K8S_VERSION}, outside the
work tree. A complete DIR whose stamp file matches the versions is reused at once.
The build goes to a temporary directory renamed into place, so an interrupted build
leaves no half cache. A cold build takes about 10 minutes on 2 cores.

Options:
  -f    rebuild even if DIR is complete
  -n    also build the node's binaries (${NODE_BINARIES[*]})
  -h    show this help

Environment: BLOOMERY_CACHE, BLOOMERY_K8S_VERSION, BLOOMERY_ETCD_VERSION.
EOF
}

log() { printf '[envtest-assets %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

force=false
node=false
while getopts ':fnh' opt; do
	case $opt in
	f) force=true ;;
	n) node=true ;;
	h) usage; exit 0 ;;
	*) usage >&2; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
[[ $# -le 1 ]] || { usage >&2; exit 2; }

[[ $K8S_VERSION =~ ^v1\.([0-9]+)\.([0-9]+)$ ]] || die "BLOOMERY_K8S_VERSION must look like v1.Y.Z, got $K8S_VERSION"
k8s_minor=${BASH_REMATCH[1]}
# Each staging module k8s.io/<name> is published as v0.Y.Z alongside k8s.io/kubernetes v1.Y.Z.
STAGING_VERSION="v0.${BASH_REMATCH[1]}.${BASH_REMATCH[2]}"

dir=${1:-${BLOOMERY_CACHE:-$HOME/.cache/bloomery}/k8s/$K8S_VERSION}
[[ $dir == /* ]] || dir=$PWD/$dir
dir=${dir%/}

# The stamp names everything the binaries depend on; a comment line records the toolchain
# for information only (a Go patch release does not force a 10-minute rebuild).
expected_stamp="format=$STAMP_FORMAT
kubernetes=$K8S_VERSION
staging=$STAGING_VERSION
etcd=$ETCD_VERSION"

# Succeeds when $dir holds every binary and a stamp for these versions. Pure shell, so a
# warm call costs milliseconds.
complete() {
	local bin
	[[ -f $dir/$STAMP_NAME ]] || return 1
	[[ "$(grep -v '^#' "$dir/$STAMP_NAME")" == "$expected_stamp" ]] || return 1
	for bin in "${BINARIES[@]}"; do
		[[ -x $dir/$bin && -s $dir/$bin ]] || return 1
	done
}

# Succeeds without -n, or when $dir holds the node's binaries and their stamp.
node_complete() {
	local bin
	$node || return 0
	[[ -f $dir/$NODE_STAMP_NAME ]] || return 1
	[[ "$(grep -v '^#' "$dir/$NODE_STAMP_NAME")" == "$expected_stamp" ]] || return 1
	for bin in "${NODE_BINARIES[@]}"; do
		[[ -x $dir/$bin && -s $dir/$bin ]] || return 1
	done
}

if ! $force && complete && node_complete; then
	printf '%s\n' "$dir"
	exit 0
fi

# One build at a time per DIR: a second caller waits, then finds the cache complete.
parent=$(dirname "$dir")
mkdir -p "$parent"
exec 9>"$dir.lock"
if ! flock -n 9; then
	log "another build of $dir is running; waiting for it"
	flock 9
fi
if ! $force && complete && node_complete; then
	printf '%s\n' "$dir"
	exit 0
fi
build_base=true
if ! $force && complete; then
	build_base=false
fi

# Refuse to replace a directory this script did not make (say, a mistyped DIR).
if $build_base && [[ -e $dir && ! -f $dir/$STAMP_NAME ]] && [[ -n "$(ls -A "$dir" 2>/dev/null || echo x)" ]]; then
	die "$dir exists, is not empty and has no $STAMP_NAME; not replacing it"
fi

command -v go >/dev/null || die "go is not on PATH"

# Leftovers of a build killed too hard to clean up after itself (SIGKILL, power loss); the
# lock guarantees no build of this DIR is running.
rm -rf "$parent/.$(basename "$dir").tmp."* "$parent/.$(basename "$dir").old."*

# The temporary output lives next to DIR so the final rename stays on one file system.
work=$(mktemp -d "${TMPDIR:-/tmp}/bloomery-envtest-assets.XXXXXX")
out=$(mktemp -d "$parent/.$(basename "$dir").tmp.XXXXXX")
cleanup() { rm -rf "$work" "$out" "${old:-}"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

# Throwaway modules: resolve dependencies freely, never switch toolchains, ignore any
# go.work, and link statically as the upstream release builds do.
export GOFLAGS=-mod=mod GOTOOLCHAIN=local GOWORK=off CGO_ENABLED=0
log "$(go version); building into $dir (temporary: $out)"
total_start=$SECONDS

# go_mod_header FILE: the go and godebug lines of a dependency's go.mod, so the throwaway
# main module runs with the GODEBUG defaults upstream builds with.
go_mod_header() {
	awk '
		/^go [0-9]/ { print; next }
		/^godebug \(/ { block = 1 }
		block { print; if ($0 ~ /^\)/) block = 0; next }
		/^godebug / { print }
	' "$1"
}

# go_mod_file MODULE@VERSION: downloads the module and prints the path of its go.mod.
go_mod_file() {
	local json
	json=$(cd "$work" && go mod download -json "$1") || die "go mod download $1 failed"
	sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p' <<<"$json"
}

# --- check ---------------------------------------------------------------------------------
check() {
	local want=$1 got
	shift
	got=$("$@" 2>&1) || die "$* failed: $got"
	[[ $got == *"$want"* ]] || die "$* printed '$got', expected it to contain '$want'"
	log "ok: $(basename "$1") reports $want"
}

# --- etcd --------------------------------------------------------------------------------
if $build_base; then
	# The etcd server module's root package is etcd's main (go.etcd.io/etcd/v3, the repository
	# root module, is not on the proxy).
	step_start=$SECONDS
	log "etcd $ETCD_VERSION: resolving go.etcd.io/etcd/server/v3"
	etcd_mod=$(go_mod_file "go.etcd.io/etcd/server/v3@$ETCD_VERSION")
	[[ -f $etcd_mod ]] || die "no go.mod for go.etcd.io/etcd/server/v3@$ETCD_VERSION"
	mkdir "$work/etcd"
	{
		echo "module bloomery.local/envtest-assets/etcd"
		echo
		go_mod_header "$etcd_mod"
		echo
		echo "require go.etcd.io/etcd/server/v3 $ETCD_VERSION"
	} >"$work/etcd/go.mod"
	log "etcd $ETCD_VERSION: building"
	(cd "$work/etcd" && go build -trimpath -ldflags "-s -w" -o "$out/etcd" go.etcd.io/etcd/server/v3)
	log "etcd $ETCD_VERSION: built in $((SECONDS - step_start))s"
fi

# --- Kubernetes ----------------------------------------------------------------------------
# k8s.io/kubernetes requires its staging modules at v0.0.0 and replaces them with
# ./staging/src/...; a dependency's replaces do not apply, so repeat them with the
# published versions.
step_start=$SECONDS
log "kubernetes $K8S_VERSION: resolving k8s.io/kubernetes (a large download when cold)"
k8s_mod=$(go_mod_file "k8s.io/kubernetes@$K8S_VERSION")
[[ -f $k8s_mod ]] || die "no go.mod for k8s.io/kubernetes@$K8S_VERSION"
staging=$(sed -n 's#^[[:space:]]*\(k8s\.io/[^[:space:]]*\)[[:space:]]*=>[[:space:]]*\./staging/src/.*#\1#p' "$k8s_mod")
[[ -n $staging ]] || die "found no ./staging/src replace block in $k8s_mod"
log "kubernetes $K8S_VERSION: $(wc -l <<<"$staging") staging modules, replaced at $STAGING_VERSION"
mkdir "$work/kubernetes"
{
	echo "module bloomery.local/envtest-assets/kubernetes"
	echo
	go_mod_header "$k8s_mod"
	echo
	echo "require k8s.io/kubernetes $K8S_VERSION"
	echo
	echo "replace ("
	while read -r module; do
		printf '\t%s => %s %s\n' "$module" "$module" "$STAGING_VERSION"
	done <<<"$staging"
	echo ")"
} >"$work/kubernetes/go.mod"

# What upstream's hack/lib/version.sh sets, so /version and --version report the release;
# -s -w as upstream's release builds, which drops about a third of the size.
ldflags=(-s -w)
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ldflags+=(
		"-X $pkg.gitVersion=$K8S_VERSION"
		"-X $pkg.gitMajor=1"
		"-X $pkg.gitMinor=$k8s_minor"
		"-X $pkg.gitTreeState=clean"
		"-X $pkg.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
	)
done
if $build_base; then
	log "kubernetes $K8S_VERSION: building kube-apiserver, kube-controller-manager, kubectl (about 10 minutes cold on 2 cores)"
	(cd "$work/kubernetes" && go build -trimpath -ldflags "${ldflags[*]}" -o "$out/" \
		k8s.io/kubernetes/cmd/kube-apiserver \
		k8s.io/kubernetes/cmd/kube-controller-manager \
		k8s.io/kubernetes/cmd/kubectl)
	log "kubernetes $K8S_VERSION: built in $((SECONDS - step_start))s"

	# --- publish -------------------------------------------------------------------------------
	check "etcd Version: ${ETCD_VERSION#v}" "$out/etcd" --version
	check "Kubernetes $K8S_VERSION" "$out/kube-apiserver" --version
	check "Kubernetes $K8S_VERSION" "$out/kube-controller-manager" --version
	check "$K8S_VERSION" "$out/kubectl" version --client

	{
		echo "# built $(date -u +%Y-%m-%dT%H:%M:%SZ) with $(go version) by hack/envtest-assets.sh"
		echo "$expected_stamp"
	} >"$out/$STAMP_NAME"
	chmod 0755 "$out"

	if [[ -e $dir ]]; then
		old=$(mktemp -d "$parent/.$(basename "$dir").old.XXXXXX")
		mv "$dir" "$old/"
	fi
	mv "$out" "$dir"
	log "done in $((SECONDS - total_start))s: ${BINARIES[*]} in $dir"
fi

# --- the node's binaries ---------------------------------------------------------------------
# Built into $out (a new one when the rename above took it) and moved into the complete DIR
# one by one; the stamp, written last, makes them count.
if $node && { $force || ! node_complete; }; then
	step_start=$SECONDS
	[[ -d $out ]] || out=$(mktemp -d "$parent/.$(basename "$dir").tmp.XXXXXX")
	rm -f "$dir/$NODE_STAMP_NAME"
	log "kubernetes $K8S_VERSION: building ${NODE_BINARIES[*]} (a few minutes with the build cache warm from the others)"
	(cd "$work/kubernetes" && go build -trimpath -ldflags "${ldflags[*]}" -o "$out/" \
		k8s.io/kubernetes/cmd/kube-scheduler \
		k8s.io/kubernetes/cmd/kubelet \
		k8s.io/kubernetes/cmd/kube-proxy)
	for bin in "${NODE_BINARIES[@]}"; do
		check "Kubernetes $K8S_VERSION" "$out/$bin" --version
		mv -f "$out/$bin" "$dir/$bin"
	done
	{
		echo "# built $(date -u +%Y-%m-%dT%H:%M:%SZ) with $(go version) by hack/envtest-assets.sh -n"
		echo "$expected_stamp"
	} >"$dir/$NODE_STAMP_NAME"
	log "kubernetes $K8S_VERSION: ${NODE_BINARIES[*]} built in $((SECONDS - step_start))s"
fi
printf '%s\n' "$dir"
