# shellcheck shell=bash
# Sourced by the scripts of bench/: what they all say and compute the same way.

log() { printf '==> %s\n' "$*" >&2; }

die() {
	printf 'bench/%s: %s\n' "${0##*/}" "$*" >&2
	exit 1
}

# median prints the median of the numbers among its words.
median() {
	# shellcheck disable=SC2048,SC2086 # the words are what is wanted
	printf '%s\n' $* | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}

# bloomery_binary sets bin: $BLOOMERY_BIN, or bin/bloomery, built with make.
bloomery_binary() {
	if [[ -n ${BLOOMERY_BIN:-} ]]; then
		bin=$BLOOMERY_BIN
	else
		make --no-print-directory build >&2
		bin=bin/bloomery
	fi
}

# pin_cores sets server_pin and client_pin, the taskset prefixes that put servers on core 0 and
# load generators on core 1, so that they do not take CPU from each other; empty on one core.
pin_cores() {
	server_pin=()
	client_pin=()
	if [[ $(nproc) -ge 2 ]] && command -v taskset >/dev/null; then
		server_pin=(taskset -c 0)
		client_pin=(taskset -c 1)
	fi
}

# work_dir NAME makes $work, a temporary directory, and $pids, the processes a script starts:
# at exit the processes are stopped and the directory removed.
work_dir() {
	work=$(mktemp -d -t "bloomery-$1.XXXXXX")
	pids=()
	trap 'stop_pids; rm -rf "$work"' EXIT
}

# stop_pids stops the processes of $pids and waits for them.
stop_pids() {
	for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
	for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
	pids=()
}

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# free_port prints a port nothing listens on, below the kernel's ephemeral range (32768 and up
# by default), which the load generators' connections take from.
free_port() {
	local p
	while :; do
		p=$((20000 + RANDOM % 12000))
		port_in_use "$p" || {
			echo "$p"
			return
		}
	done
}

# Pods of a cluster run by hand, as the operator would run them: each with a client, an internal
# and an ops port, the cluster's token, and a data directory under $work (which the caller
# makes). pod_start NAME [FLAGS...] starts one awaiting its membership and sets port_NAME,
# internal_NAME, ops_NAME and pid_NAME; extra configuration lines go in $work/extra.yaml.
pod_start() {
	local name=$1 port internal ops
	shift
	port=$(free_port)
	internal=$(free_port)
	ops=$(free_port)
	mkdir -p "$work/$name"
	[[ -f $work/token ]] || head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$work/token"
	{
		printf 'awaitMembership: true\ndefaultValidSecondsAfterCreate: 0\n'
		[[ -f $work/extra.yaml ]] && cat "$work/extra.yaml"
	} >"$work/config.yaml"
	"${server_pin[@]}" "$bin" dataplane -p "$port" --internal-port "$internal" --ops-port "$ops" \
		--internal-token-file "$work/token" -c "$work/config.yaml" --data-dir "$work/$name" "$@" \
		>>"$work/$name.log" 2>&1 &
	pids+=($!)
	printf -v "pid_$name" '%s' "$!"
	printf -v "port_$name" '%s' "$port"
	printf -v "internal_$name" '%s' "$internal"
	printf -v "ops_$name" '%s' "$ops"
	for _ in $(seq 600); do
		curl -sf "http://127.0.0.1:$ops/healthz" >/dev/null 2>&1 && return
		sleep 0.1
	done
	die "pod $name did not start: $(tail -5 "$work/$name.log")"
}

# internal_curl NAME PATH [CURL ARGS...]: calls pod NAME's internal port with the token.
internal_curl() {
	local port=internal_$1 path=$2
	shift 2
	curl -sSf -H "Authorization: Bearer $(cat "$work/token")" "$@" "http://127.0.0.1:${!port}$path"
}

# pod_tell EPOCH NAME...: tells each named pod the membership of all of them.
pod_tell() {
	local epoch=$1 members="" name port
	shift
	for name in "$@"; do
		port=internal_$name
		members+="${members:+,}{\"name\":\"$name\",\"url\":\"http://127.0.0.1:${!port}\"}"
	done
	for name in "$@"; do
		internal_curl "$name" /internal/v1/membership -X PUT -H 'Content-Type: application/json' \
			-d "{\"epoch\":$epoch,\"self\":\"$name\",\"members\":[$members]}" >/dev/null
	done
}

# pod_wait_ready NAME: waits until pod NAME's /readyz answers 200.
pod_wait_ready() {
	local port=ops_$1
	for _ in $(seq 12000); do
		[[ $(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:${!port}/readyz") == 200 ]] && return
		sleep 0.05
	done
	die "pod $1 not ready: $(tail -5 "$work/$1.log")"
}

# pod_stop NAME: stops pod NAME gracefully and waits for it.
pod_stop() {
	local pid=pid_$1
	kill -TERM "${!pid}" 2>/dev/null || true
	wait "${!pid}" 2>/dev/null || true
}
