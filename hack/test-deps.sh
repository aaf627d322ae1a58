#!/usr/bin/env bash
# Installs, with apt, the Debian packages that `make test` needs and the machine lacks: Chromium,
# in which a test opens the API documentation page (headless) to check that it lists and calls
# the endpoints, redis-tools, whose redis-cli a test drives the RESP port with, and python3-redis
# (redis-py), with which a test runs the docs' Python example against it; Debian's python3 must
# import it, whatever other python3 comes first on the PATH; strace, under which a test
# watches the binary make every acknowledged write durable; and iproute2 and iptables, with which
# test/faults partitions pods in network namespaces. Under CI those tests fail rather than
# skip without them, so a missing install cannot pass unnoticed. CHROMIUM, if set, names a browser
# to use instead.
set -euo pipefail

missing=()
command -v chromium >/dev/null || command -v chromium-browser >/dev/null || [[ -n ${CHROMIUM:-} ]] || missing+=(chromium)
command -v redis-cli >/dev/null || missing+=(redis-tools)
/usr/bin/python3 -c "import redis" 2>/dev/null || missing+=(python3-redis)
command -v strace >/dev/null || missing+=(strace)
command -v ip >/dev/null || missing+=(iproute2)
command -v iptables >/dev/null || missing+=(iptables)
((${#missing[@]})) || exit 0

sudo=()
if [[ $(id -u) -ne 0 ]]; then
	command -v sudo >/dev/null || {
		echo "hack/test-deps.sh: ${missing[*]} missing, and installing them needs root or sudo" >&2
		exit 1
	}
	sudo=(sudo)
fi
echo "not found: ${missing[*]}; ${sudo[*]:+${sudo[*]} }apt-get update && apt-get install -y ${missing[*]}"
"${sudo[@]}" apt-get update
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}"
