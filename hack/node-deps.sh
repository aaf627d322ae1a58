#!/usr/bin/env bash
# Installs, with apt, the Debian packages that the image and node tests need and the machine
# lacks: buildah, which builds the image (make image), and ca-certificates, whose bundle it
# holds; podman, which runs it (test/image); containerd and runc, the node's container runtime,
# containernetworking-plugins, its pod network (bridge, host-local), iptables, which kube-proxy
# programs, and openssl, which makes the node's certificates (test/node). Like hack/test-deps.sh, it installs only what is
# missing, so a warm call costs nothing; without root or sudo it says what is missing and fails.
set -euo pipefail

missing=()
command -v buildah >/dev/null || missing+=(buildah)
command -v podman >/dev/null || missing+=(podman)
command -v containerd >/dev/null || missing+=(containerd)
command -v runc >/dev/null || missing+=(runc)
[[ -x /usr/lib/cni/bridge && -x /usr/lib/cni/host-local ]] || missing+=(containernetworking-plugins)
[[ -s /etc/ssl/certs/ca-certificates.crt ]] || missing+=(ca-certificates)
command -v iptables >/dev/null || missing+=(iptables)
command -v openssl >/dev/null || missing+=(openssl)
((${#missing[@]})) || exit 0

sudo=()
if [[ $(id -u) -ne 0 ]]; then
	command -v sudo >/dev/null || {
		echo "hack/node-deps.sh: ${missing[*]} missing, and installing them needs root or sudo" >&2
		exit 1
	}
	sudo=(sudo)
fi
echo "not found: ${missing[*]}; ${sudo[*]:+${sudo[*]} }apt-get update && apt-get install -y ${missing[*]}"
"${sudo[@]}" apt-get update
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}"
