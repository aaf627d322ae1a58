#!/usr/bin/env bash
# Load-test the data plane over HTTP with wrk.
#
#   bench/run.sh SCRIPT [DURATION] [THREADS] [CONNECTIONS] [SCRIPT ARGS...]
#
# SCRIPT is a wrk Lua script: a path, or a name in bench/ (check, check-and-set, create,
# multi-check-and-set). Defaults: 10s, 4 threads, 20 connections. Arguments after
# CONNECTIONS go to the script (multi-check-and-set takes the batch size).
#
# It builds bin/bloomery, starts `bloomery dataplane` on a free port with an empty data
# directory, waits for GET /v1/ping, creates the filter "bench" the scripts use, runs wrk,
# prints requests/s and latency percentiles, and stops the server. With two or more cores
# the server runs on core 0 and wrk on core 1, so they do not steal CPU from each other.
# The full output is kept in bench/results/.
#
# Env: BLOOMERY_BIN  benchmark this binary instead of building bin/bloomery
#      PORT          port to listen on (default: a free one)
#      BENCH_FILTER  filter the scripts use (default "bench")
#      BENCH_BATCH   values per request for multi-check-and-set (default 10)
#      BENCH_SERVER_ARGS  extra flags for the data plane, e.g. "--log-sync always" or "--in-memory"
set -euo pipefail

usage() {
	sed -n '2,20s/^# \{0,1\}//p' "$0" >&2
	exit 2
}

[[ $# -ge 1 ]] || usage
case "$1" in -h | --help) usage ;; esac

script_arg=$1
duration=${2:-10s}
threads=${3:-4}
connections=${4:-20}
shift $(($# < 4 ? $# : 4))
script_args=("$@")

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

source bench/lib.sh

script=""
for candidate in "$script_arg" "bench/$script_arg" "bench/$script_arg.lua"; do
	if [[ -f $candidate ]]; then
		script=$candidate
		break
	fi
done
[[ -n $script ]] || die "no wrk script $script_arg (try: $(cd bench && echo *.lua))"

# Installs Debian packages, saying what it runs; needs root or sudo.
apt_install() {
	local sudo=()
	if [[ $(id -u) -ne 0 ]]; then
		command -v sudo >/dev/null || die "$* not installed, and installing it needs root or sudo"
		sudo=(sudo)
	fi
	log "installing $*: ${sudo[*]:+${sudo[*]} }apt-get update && apt-get install -y $*"
	"${sudo[@]}" apt-get update
	"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@"
}

missing=()
command -v wrk >/dev/null || missing+=(wrk)
command -v curl >/dev/null || missing+=(curl)
if [[ ${#missing[@]} -gt 0 ]]; then
	log "not found on PATH: ${missing[*]}"
	apt_install "${missing[@]}"
fi

if [[ -n ${BLOOMERY_BIN:-} ]]; then
	bin=$BLOOMERY_BIN
	[[ -x $bin ]] || die "BLOOMERY_BIN=$bin is not an executable"
else
	log "building bin/bloomery"
	make --no-print-directory build >&2
	bin=bin/bloomery
fi

# Core pinning: server on core 0, wrk on core 1.
server_pin=()
wrk_pin=()
cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
if [[ $cores -ge 2 ]] && command -v taskset >/dev/null; then
	server_pin=(taskset -c 0)
	wrk_pin=(taskset -c 1)
	pinning="server pinned to core 0, wrk to core 1 (taskset; $cores cores)"
elif [[ $cores -ge 2 ]]; then
	pinning="NOT pinned: taskset (util-linux) not found; server and wrk share $cores cores"
else
	pinning="NOT pinned: 1 core, server and wrk share it (numbers are pessimistic)"
fi

# A port nobody answers on. The server may still lose a race for it; then it exits and
# the wait below reports its log.
port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
port=${PORT:-}
if [[ -z $port ]]; then
	for _ in $(seq 100); do
		candidate=$((20000 + RANDOM % 40000))
		if ! port_in_use "$candidate"; then
			port=$candidate
			break
		fi
	done
	[[ -n $port ]] || die "found no free port"
elif port_in_use "$port"; then
	die "port $port is already in use"
fi

data_dir=$(mktemp -d -t bloomery-bench.XXXXXX)
server_log=$data_dir.log
server_pid=""

cleanup() {
	local status=$?
	if [[ -n $server_pid ]] && kill -0 "$server_pid" 2>/dev/null; then
		log "stopping server (pid $server_pid)"
		kill -TERM "$server_pid" 2>/dev/null || true
		for _ in $(seq 100); do
			kill -0 "$server_pid" 2>/dev/null || break
			sleep 0.1
		done
		if kill -0 "$server_pid" 2>/dev/null; then
			log "server did not stop within 10s of SIGTERM; killing it"
			kill -KILL "$server_pid" 2>/dev/null || true
		fi
		wait "$server_pid" 2>/dev/null || true
	fi
	if [[ $status -ne 0 && -s $server_log ]]; then
		printf '\n--- server log (last 30 lines of %s) ---\n' "$server_log" >&2
		tail -n 30 "$server_log" >&2
	fi
	rm -rf "$data_dir"
	# The log stays only when it explains a failure.
	if [[ $status -eq 0 || ! -s $server_log ]]; then
		rm -f "$server_log"
	else
		log "server log kept at $server_log"
	fi
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

base=http://127.0.0.1:$port
read -r -a server_args <<<"${BENCH_SERVER_ARGS:-}"
log "starting $bin dataplane -p $port --data-dir $data_dir ${server_args[*]}"
"${server_pin[@]}" "$bin" dataplane -p "$port" --ops-port 0 --data-dir "$data_dir" "${server_args[@]}" >"$server_log" 2>&1 &
server_pid=$!

ready=""
for _ in $(seq 300); do
	kill -0 "$server_pid" 2>/dev/null || die "server exited before answering GET /v1/ping"
	if [[ $(curl -sf --max-time 1 "$base/v1/ping" 2>/dev/null) == pong* ]]; then
		ready=yes
		break
	fi
	sleep 0.1
done
[[ -n $ready ]] || die "server did not answer GET /v1/ping with pong within 30s"

filter=${BENCH_FILTER:-bench}
export BENCH_FILTER=$filter
body='{"expectedInsertions":10000000,"fpp":0.001,"validPeriodAfterCreate":0}'
log "creating filter $filter: PUT /v1/bloomfilter/$filter $body"
code=$(curl -sS -o "$data_dir.create" -w '%{http_code}' -X PUT \
	-H 'Content-Type: application/json' -d "$body" "$base/v1/bloomfilter/$filter")
answer=$(cat "$data_dir.create")
rm -f "$data_dir.create"
[[ $code == 201 || $code == 200 ]] || die "creating filter $filter answered $code: $answer"

mkdir -p bench/results
name=$(basename "$script" .lua)
result=bench/results/$(date +%Y%m%d-%H%M%S)-$name.txt
wrk_cmd=(wrk --latency -t "$threads" -c "$connections" -d "$duration" -s "$script" "$base")
[[ ${#script_args[@]} -eq 0 ]] || wrk_cmd+=(-- "${script_args[@]}")

{
	echo "bloomery:  $("$bin" version 2>/dev/null || echo unknown)"
	echo "git:       $(git describe --tags --always --dirty 2>/dev/null || echo none)"
	echo "host:      $(uname -srm), $cores cores"
	echo "cpu:       $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -n 1)"
	echo "pinning:   $pinning"
	echo "server:    dataplane ${server_args[*]}"
	echo "command:   ${wrk_pin[*]:+${wrk_pin[*]} }${wrk_cmd[*]}"
	echo
} | tee "$result"

log "running wrk for $duration"
"${wrk_pin[@]}" "${wrk_cmd[@]}" | tee -a "$result"

# wrk reports failures as counters and still exits 0: a run of 404s must not pass.
failed=""
if grep -q 'Non-2xx or 3xx responses' "$result"; then
	failed="the server answered non-2xx responses"
elif grep -q 'Socket errors' "$result"; then
	failed="wrk saw socket errors"
fi

{
	echo
	echo "== summary: $name, $duration, $threads threads, $connections connections"
	echo "$pinning"
	grep -E '^Requests/sec:' "$result" || echo "Requests/sec: (missing from wrk output)"
	echo "latency percentiles:"
	sed -n '/Latency Distribution/,/requests in/{/%/p}' "$result"
	echo "filter $filter after the run: $(curl -sS --max-time 5 "$base/v1/bloomfilter/$filter" || echo unavailable)"
	echo "results saved to $result"
} | tee -a "$result"

[[ -z $failed ]] || die "$failed (see $result)"
