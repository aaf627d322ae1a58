#!/usr/bin/env bash
# A real single-node Kubernetes cluster on this machine, for the node tests (test/node) and for
# trying Bloomery: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and
# kube-proxy (hack/envtest-assets.sh -n builds them), containerd and runc from Debian, the CNI
# bridge and host-local plugins, and a pause image built here. Nothing is pulled from a registry.
#
# Everything runs in a network namespace of its own, so the cluster's addresses exist nowhere
# else and its ports and iptables rules cannot meet the host's:
#   10.77.0.1/32     the node's address, where kube-apiserver listens
#   10.77.1.0/24     the pods' addresses (the bridge bloomery0, 10.77.1.1)
#   10.77.128.0/24   the Services' ClusterIPs (kube-proxy's iptables rules)
# Commands reach the cluster from inside it: `hack/node.sh exec DIR kubectl get pods` (kubectl
# and helm find the cluster's kubeconfig in $KUBECONFIG). A default StorageClass, local, has
# three PersistentVolumes of 2Gi (BLOOMERY_NODE_VOLUMES sets how many).
#
# Usage:
#   hack/node.sh up DIR             start the cluster, its state and logs in DIR (logs/)
#   hack/node.sh import DIR ARCHIVE import an OCI archive (make image) into the node's containerd
#   hack/node.sh exec DIR CMD...    run CMD in the cluster's network namespace, KUBECONFIG set
#   hack/node.sh down DIR           stop the cluster and delete its namespace and mounts
#
# Needs root, the cgroup v1 controllers or cgroup v2, and what make node-deps installs (buildah,
# containerd, runc, containernetworking-plugins). KUBERNETES_ASSETS names the Kubernetes binaries'
# directory (default: hack/envtest-assets.sh -n's, built when missing).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
log() { printf '[node %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { log "error: $*"; exit 1; }
usage() { sed -n '/^# Usage:/,/^#$/p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

NODE_IP=10.77.0.1
POD_CIDR=10.77.1.0/24
POD_GATEWAY=10.77.1.1
SERVICE_CIDR=10.77.128.0/24
API_SERVICE_IP=10.77.128.1
NODE_NAME=node1
PAUSE_IMAGE=localhost/pause:3.10
VOLUMES=${BLOOMERY_NODE_VOLUMES:-3}

[[ $# -ge 2 ]] || usage
cmd=$1 dir=$2
shift 2
[[ $dir == /* ]] || dir=$PWD/$dir
dir=${dir%/}
# One namespace per DIR, so that two clusters (two test runs) never share one.
ns=bloomery-node-$(printf '%s' "$dir" | sha256sum | cut -c1-8)
in_ns() { nsenter --net="/run/netns/$ns" "$@"; }

# start NAME CMD...: runs CMD in the namespace, in the background, its output in logs/NAME.log and
# its pid in run/NAME.pid.
start() {
	local name=$1
	shift
	setsid nsenter --net="/run/netns/$ns" "$@" >"$dir/logs/$name.log" 2>&1 </dev/null &
	echo $! >"$dir/run/$name.pid"
}

# wait_for WHAT SECONDS CMD...: retries CMD every half second until it succeeds.
wait_for() {
	local what=$1 timeout=$2 deadline=$((SECONDS + $2))
	shift 2
	until "$@" >/dev/null 2>&1; do
		((SECONDS < deadline)) || die "$what: not after ${timeout}s; see $dir/logs"
		sleep 0.5
	done
}

# --- down ----------------------------------------------------------------------------------------
down() {
	local name pid m
	# The kubelet first, so that it restarts nothing; containerd last but one, and its shims
	# with it (they run in setsid sessions of their own).
	for name in kubelet kube-proxy kube-scheduler kube-controller-manager kube-apiserver etcd; do
		stop_pid "$dir/run/$name.pid"
	done
	local netns=() id
	# The pods' network namespaces, which containerd made under /run/netns and deletes only when
	# the kubelet removes the pods: the peers of the veths on the cluster's bridge.
	mapfile -t netns < <(ip -n "$ns" -o link show master bloomery0 2>/dev/null | grep -o 'link-netns cni-[0-9a-f-]*' | cut -d' ' -f2)
	if [[ -S $dir/containerd/containerd.sock ]]; then
		# Every container and sandbox the kubelet left, before containerd stops.
		for id in $(ctr_ns tasks ls -q 2>/dev/null); do
			ctr_ns tasks kill -s KILL "$id" >/dev/null 2>&1 || true
		done
	fi
	stop_pid "$dir/run/containerd.pid"
	for m in "${netns[@]}"; do
		ip netns del "$m" 2>/dev/null || true
	done
	pkill_shims
	# The kubelet's and containerd's mounts under DIR (volumes, tokens, overlay roots, netns).
	if [[ -d $dir ]]; then
		for m in $(awk -v d="$dir/" 'index($5, d) == 1 { print $5 }' /proc/self/mountinfo | sort -r); do
			umount -l "$m" 2>/dev/null || true
		done
	fi
	ip netns del "$ns" 2>/dev/null || true
}

stop_pid() {
	local file=$1 pid i
	[[ -f $file ]] || return 0
	pid=$(<"$file")
	if kill -TERM "$pid" 2>/dev/null; then
		for i in $(seq 1 40); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.25
		done
		kill -KILL "$pid" 2>/dev/null || true
	fi
	rm -f "$file"
}

# containerd's shims outlive it; these are the ones whose socket or bundle lies in DIR.
pkill_shims() {
	local pid
	for pid in $(pgrep -f containerd-shim-runc-v2 || true); do
		if tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "-address $dir/containerd/containerd.sock"; then
			kill -KILL "$pid" 2>/dev/null || true
		fi
	done
}

ctr_ns() { ctr --address "$dir/containerd/containerd.sock" --namespace k8s.io "$@"; }

assets() {
	if [[ -n ${KUBERNETES_ASSETS:-} ]]; then
		printf '%s\n' "$KUBERNETES_ASSETS"
	else
		"$root/hack/envtest-assets.sh" -n | tail -n1
	fi
}

# --- certificates and credentials --------------------------------------------------------------
# One CA signs the API server's certificate; the pods trust it through the kube-root-ca.crt
# ConfigMap the controller manager publishes. Every component and the user authenticate with
# one administrator's token (group system:masters): this cluster has one user and one node.
credentials() {
	local pki=$dir/pki
	mkdir -p "$pki"
	openssl req -x509 -newkey rsa:2048 -nodes -days 7 -subj /CN=bloomery-node-ca \
		-keyout "$pki/ca.key" -out "$pki/ca.crt" 2>/dev/null
	openssl req -newkey rsa:2048 -nodes -subj /CN=kube-apiserver \
		-keyout "$pki/apiserver.key" -out "$pki/apiserver.csr" 2>/dev/null
	printf 'subjectAltName=IP:%s,IP:%s,IP:127.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:localhost\n' \
		"$NODE_IP" "$API_SERVICE_IP" >"$pki/apiserver.ext"
	openssl x509 -req -in "$pki/apiserver.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
		-days 7 -extfile "$pki/apiserver.ext" -out "$pki/apiserver.crt" 2>/dev/null
	# The key that signs service account tokens, and its public half that checks them.
	openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
	openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
	token=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
	echo "$token,admin,admin,system:masters" >"$pki/tokens.csv"
	cat >"$dir/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: node
  cluster:
    server: https://$NODE_IP:6443
    certificate-authority: $pki/ca.crt
users:
- name: admin
  user:
    token: $token
contexts:
- name: node
  context: {cluster: node, user: admin}
current-context: node
EOF
	chmod 0600 "$dir/kubeconfig" "$pki/tokens.csv"
}

# --- the network namespace ----------------------------------------------------------------------
network() {
	ip netns add "$ns"
	ip -n "$ns" link set lo up
	# The node's address, on one end of a veth pair whose other end stays down (the kernel may
	# lack the dummy device), and a default route through it, so that a connection from the node
	# to a ClusterIP finds a route before kube-proxy's rules DNAT it; what no rule DNATs is
	# dropped there.
	ip -n "$ns" link add node0 type veth peer name node0-peer
	ip -n "$ns" addr add "$NODE_IP/32" dev node0
	ip -n "$ns" link set node0 up
	ip -n "$ns" route add default dev node0
	in_ns sysctl -qw net.ipv4.ip_forward=1
	mkdir -p "$dir/cni/net.d" "$dir/cni/ipam"
	# bridge: the pods' veths on bloomery0, its address their gateway; ipMasq off, since no
	# traffic leaves the namespace; hairpinMode, so that a pod reaches itself through a Service.
	cat >"$dir/cni/net.d/10-bloomery.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "bloomery",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "bloomery0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$dir/cni/ipam",
        "ranges": [[{"subnet": "$POD_CIDR", "gateway": "$POD_GATEWAY"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    }
  ]
}
EOF
}

# --- containerd -----------------------------------------------------------------------------------
containerd_up() {
	mkdir -p "$dir/containerd"
	# Its root, state and socket in DIR, apart from any other containerd of the machine.
	# restrict_oom_score_adj: the CRI gives sandboxes an oom_score_adj of -998, which a process
	# without CAP_SYS_RESOURCE (a container that runs this cluster) may not set; runc then fails
	# with "can't get final child's PID from pipe". SystemdCgroup = false: cgroupfs, as the kubelet.
	cat >"$dir/containerd/config.toml" <<EOF
version = 2
root = "$dir/containerd/root"
state = "$dir/containerd/state"
[grpc]
  address = "$dir/containerd/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$dir/cni/net.d"
EOF
	start containerd containerd --config "$dir/containerd/config.toml"
	wait_for "containerd" 30 ctr --address "$dir/containerd/containerd.sock" version
}

# The sandbox image: a static program that waits for a signal (test/node/pause), FROM scratch.
pause_image() {
	local ctx store
	ctx=$(mktemp -d "${TMPDIR:-/tmp}/bloomery-pause.XXXXXX")
	store=$ctx/store
	(cd "$root" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$ctx/pause" ./test/node/pause)
	printf 'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n' >"$ctx/Containerfile"
	buildah --root "$store/root" --runroot "$store/run" --storage-driver vfs build --quiet --pull=never \
		-t "$PAUSE_IMAGE" -f "$ctx/Containerfile" "$ctx" >/dev/null
	buildah --root "$store/root" --runroot "$store/run" --storage-driver vfs push --quiet \
		"$PAUSE_IMAGE" "oci-archive:$ctx/pause.tar:$PAUSE_IMAGE"
	ctr_ns images import --no-unpack=false "$ctx/pause.tar" >/dev/null
	buildah --root "$store/root" --runroot "$store/run" --storage-driver vfs rmi --all --force >/dev/null 2>&1 || true
	rm -rf "$ctx"
}

# --- the control plane ----------------------------------------------------------------------------
control_plane() {
	local bin=$1 pki=$dir/pki
	start etcd "$bin/etcd" --data-dir "$dir/etcd" --name node \
		--listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
		--listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
		--initial-cluster node=http://127.0.0.1:2380 --unsafe-no-fsync
	start kube-apiserver "$bin/kube-apiserver" --etcd-servers http://127.0.0.1:2379 \
		--bind-address 0.0.0.0 --secure-port 6443 --advertise-address "$NODE_IP" \
		--service-cluster-ip-range "$SERVICE_CIDR" \
		--tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
		--client-ca-file "$pki/ca.crt" --token-auth-file "$pki/tokens.csv" \
		--authorization-mode Node,RBAC \
		--service-account-issuer https://kubernetes.default.svc \
		--service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key"
	wait_for "kube-apiserver ready" 90 in_ns "$bin/kubectl" --kubeconfig "$dir/kubeconfig" get --raw /readyz
	# The controllers act as the administrator (no credentials per controller); the service
	# account token controller signs with the key above, and the root CA goes to every namespace.
	start kube-controller-manager "$bin/kube-controller-manager" --kubeconfig "$dir/kubeconfig" \
		--leader-elect=false --use-service-account-credentials=false \
		--service-account-private-key-file "$pki/sa.key" --root-ca-file "$pki/ca.crt" \
		--controllers '*,-bootstrapsigner,-tokencleaner'
	start kube-scheduler "$bin/kube-scheduler" --kubeconfig "$dir/kubeconfig" --leader-elect=false
}

# --- the node --------------------------------------------------------------------------------------
node() {
	local bin=$1
	mkdir -p "$dir/kubelet"
	# What this kind of host needs (each setting checked on a host with the cgroup v1
	# controllers, as root in a container without CAP_SYS_RESOURCE):
	#   failCgroupV1: false        the kubelet refuses cgroup v1 hosts unless told otherwise
	#   cgroupDriver: cgroupfs     no systemd to ask; containerd is set to cgroupfs too
	#   cgroupsPerQOS: false, enforceNodeAllocatable: []
	#                              no QoS or node-allocatable cgroups of the kubelet's: it does not
	#                              own the host's cgroup tree, other processes share it
	#   failSwapOn: false          the host may have swap
	#   localStorageCapacityIsolation: false
	#                              the kubelet cannot read the root block device's statistics here
	#   evictionHard low           a busy shared disk or memory must not evict the test's pods
	#   authentication anonymous, authorization AlwaysAllow
	#                              the kubelet's API (logs, exec) answers kube-apiserver, which
	#                              has no client certificate of its own here; it listens in the
	#                              cluster's namespace alone
	cat >"$dir/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
localStorageCapacityIsolation: false
containerRuntimeEndpoint: unix://$dir/containerd/containerd.sock
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
address: $NODE_IP
healthzBindAddress: 127.0.0.1
readOnlyPort: 0
evictionHard:
  memory.available: "100Mi"
  nodefs.available: "1%"
  imagefs.available: "1%"
imageGCHighThresholdPercent: 100
resolvConf: /etc/resolv.conf
EOF
	start kubelet "$bin/kubelet" --config "$dir/kubelet/config.yaml" --kubeconfig "$dir/kubeconfig" \
		--root-dir "$dir/kubelet" --hostname-override "$NODE_NAME" --node-ip "$NODE_IP"
	# kube-proxy's iptables rules in the namespace. masqueradeAll: a pod that calls a Service
	# whose endpoint is on the same bridge gets the answer through the node, not straight from the
	# other pod (whose address it did not call). conntrack's sysctls are the host's: left alone.
	mkdir -p "$dir/kube-proxy"
	cat >"$dir/kube-proxy/config.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection:
  kubeconfig: $dir/kubeconfig
hostnameOverride: $NODE_NAME
clusterCIDR: $POD_CIDR
bindAddress: $NODE_IP
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
iptables:
  masqueradeAll: true
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
EOF
	start kube-proxy "$bin/kube-proxy" --config "$dir/kube-proxy/config.yaml"
	wait_for "node $NODE_NAME Ready" 120 in_ns "$bin/kubectl" --kubeconfig "$dir/kubeconfig" \
		wait --for=condition=Ready "node/$NODE_NAME" --timeout=1s
}

# --- storage --------------------------------------------------------------------------------------
# A default StorageClass without a provisioner and VOLUMES local PersistentVolumes of 2Gi on the
# node, for the claims of a StatefulSet's pods (the samples' BloomCluster has three). Their
# directories belong to uid 65532, the image's user, as a provisioner's volume would be made
# writable to it by the pod's fsGroup.
storage() {
	local bin=$1 i
	{
		cat <<EOF
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: local
  annotations:
    storageclass.kubernetes.io/is-default-class: "true"
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
EOF
		for ((i = 0; i < VOLUMES; i++)); do
			mkdir -p "$dir/volumes/pv$i"
			chown 65532:65532 "$dir/volumes/pv$i"
			cat <<EOF
---
apiVersion: v1
kind: PersistentVolume
metadata:
  name: local-pv$i
spec:
  capacity: {storage: 2Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: local
  local: {path: $dir/volumes/pv$i}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions:
        - {key: kubernetes.io/hostname, operator: In, values: [$NODE_NAME]}
EOF
		done
	} >"$dir/storage.yaml"
	in_ns "$bin/kubectl" --kubeconfig "$dir/kubeconfig" apply -f "$dir/storage.yaml" >/dev/null
}

up() {
	[[ $(id -u) -eq 0 ]] || die "needs root (network namespaces, mounts, containers)"
	local missing=() p bin
	for p in containerd runc ctr buildah nsenter openssl iptables; do
		command -v "$p" >/dev/null || missing+=("$p")
	done
	[[ -x /usr/lib/cni/bridge && -x /usr/lib/cni/host-local && -x /usr/lib/cni/loopback ]] || missing+=("/usr/lib/cni (containernetworking-plugins)")
	((${#missing[@]} == 0)) || die "missing: ${missing[*]} (make node-deps installs them)"
	# The kubelet and runc need the memory, cpu and pids controllers: cgroup v2's, or the v1
	# hierarchies of this kind of host.
	if [[ ! -f /sys/fs/cgroup/cgroup.controllers ]]; then
		for p in memory cpu pids; do
			[[ -d /sys/fs/cgroup/$p ]] || missing+=("the cgroup controller $p (/sys/fs/cgroup/$p)")
		done
		((${#missing[@]} == 0)) || die "missing: ${missing[*]}"
	fi
	[[ ! -e /run/netns/$ns ]] || die "a cluster of $dir runs already (namespace $ns): hack/node.sh down $dir"
	bin=$(assets)
	mkdir -p "$dir/logs" "$dir/run"
	local start_time=$SECONDS
	credentials
	network
	containerd_up
	pause_image
	control_plane "$bin"
	node "$bin"
	storage "$bin"
	echo "$ns" >"$dir/netns"
	log "up in $((SECONDS - start_time))s: KUBECONFIG=$dir/kubeconfig, namespace $ns"
}

case $cmd in
up) up ;;
down) down ;;
import)
	[[ $# -eq 1 && -f $1 ]] || die "import: give the OCI archive to import"
	ctr_ns images import "$1" >/dev/null
	;;
exec)
	[[ $# -ge 1 ]] || usage
	bin=$(assets)
	PATH=$bin:$PATH KUBECONFIG=$dir/kubeconfig exec nsenter --net="/run/netns/$ns" "$@"
	;;
*) usage ;;
esac
