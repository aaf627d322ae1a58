#!/usr/bin/env bash
# Side-by-side load test: the data plane against the HTTP ceiling, in one run.
#
#   bench/compare.sh [DURATION] [THREADS] [CONNECTIONS]
#
# Starts three servers, each on a free port and an empty data directory:
#   reference   bench/reference: echo/v4, decodes the same JSON, answers false (no filter)
#   in-memory   bloomery dataplane --in-memory
#   persistent  bloomery dataplane (default persistence: snapshots and the log on everysec)
# The data planes run with their default settings (info logs, metrics, request IDs), logging to a
# file.
# and runs, for each scenario, wrk against each server in turn (so that the three numbers of a
# scenario are taken seconds apart under the same machine noise):
#   check, check-and-set (unique values), multi-check-and-set with 100 values per request,
#   multi-check-and-set with 1000 values per request on a 1e8 / 0.001 filter, create.
# It prints requests/s, keys/s, p50 and p99 latency, and the ratio to the reference.
# With two or more cores every server runs on core 0 and wrk on core 1 (taskset); the output
# says so. Defaults: 10s, 4 threads, 20 connections. The output is kept in bench/results/.
#
# Env: BLOOMERY_BIN   data plane binary (default: make build, bin/bloomery)
#      SCENARIOS      subset to run, e.g. "check check-and-set" (default: all five:
#                     check check-and-set mcas100 mcas1000 create)
#      SERVERS        subset of servers (default: "reference in-memory persistent"); "baseline"
#                     is another build in memory, BASELINE_BIN, such as the parent commit's
#      BASELINE_BIN   the baseline's binary: SERVERS="reference in-memory baseline" compares a
#                     change with the build before it in one run, the two taking turns
#      PERSIST_ARGS   extra flags of the persistent data plane, e.g. "--log-sync always"
#      ROUNDS         run every scenario this many times, in turn (default 1), and end with each
#                     ratio's median: one neighbour's burst of CPU then moves one sample only
set -euo pipefail

usage() {
	sed -n '2,25s/^# \{0,1\}//p' "$0" >&2
	exit 2
}
case "${1:-}" in -h | --help) usage ;; esac

duration=${1:-10s}
threads=${2:-4}
connections=${3:-20}
scenarios=(${SCENARIOS:-check check-and-set mcas100 mcas1000 create})
servers=(${SERVERS:-reference in-memory persistent})

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

source bench/lib.sh

for tool in wrk curl; do
	command -v "$tool" >/dev/null || die "$tool not found (Debian: apt-get install wrk curl; bench/run.sh installs them)"
done

if [[ -n ${BLOOMERY_BIN:-} ]]; then
	bin=$BLOOMERY_BIN
else
	log "building bin/bloomery"
	make --no-print-directory build >&2
	bin=bin/bloomery
fi
log "building bin/bench-reference"
go build -o bin/bench-reference ./bench/reference
ref_bin=bin/bench-reference

server_pin=()
wrk_pin=()
cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
if [[ $cores -ge 2 ]] && command -v taskset >/dev/null; then
	server_pin=(taskset -c 0)
	wrk_pin=(taskset -c 1)
	pinning="servers pinned to core 0, wrk to core 1 (taskset; $cores cores)"
else
	pinning="NOT pinned ($cores cores, taskset $(command -v taskset >/dev/null && echo found || echo missing)): server and wrk share the CPU"
fi

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
free_port() {
	local candidate
	for _ in $(seq 100); do
		candidate=$((20000 + RANDOM % 40000))
		if ! port_in_use "$candidate"; then
			echo "$candidate"
			return
		fi
	done
	die "found no free port"
}

work=$(mktemp -d -t bloomery-compare.XXXXXX)
declare -A pid port
cleanup() {
	local status=$?
	for s in "${!pid[@]}"; do
		if kill -0 "${pid[$s]}" 2>/dev/null; then
			kill -TERM "${pid[$s]}" 2>/dev/null || true
			for _ in $(seq 100); do
				kill -0 "${pid[$s]}" 2>/dev/null || break
				sleep 0.1
			done
			kill -KILL "${pid[$s]}" 2>/dev/null || true
			wait "${pid[$s]}" 2>/dev/null || true
		fi
	done
	if [[ $status -ne 0 ]]; then
		for f in "$work"/*.log; do
			[[ -s $f ]] && { printf '\n--- %s (last 20 lines) ---\n' "$f" >&2; tail -n 20 "$f" >&2; }
		done
	fi
	rm -rf "$work"
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# start runs server $1 on a free port; another process may take the port first, so a server that
# exits before answering is started again on another port, up to 5 times.
start() {
	local s=$1 p attempt
	for attempt in 1 2 3 4 5; do
		p=$(free_port)
		port[$s]=$p
		case $s in
		reference) cmd=("$ref_bin" -p "$p") ;;
		in-memory) cmd=("$bin" dataplane -p "$p" --ops-port "$(free_port)" --bind-address 127.0.0.1 --in-memory) ;;
		baseline)
			[[ -n ${BASELINE_BIN:-} ]] || die "the baseline server needs BASELINE_BIN"
			cmd=("$BASELINE_BIN" dataplane -p "$p" --ops-port "$(free_port)" --bind-address 127.0.0.1 --in-memory)
			;;
		persistent)
			read -r -a extra <<<"${PERSIST_ARGS:-}"
			rm -rf "$work/data"
			mkdir -p "$work/data"
			cmd=("$bin" dataplane -p "$p" --ops-port "$(free_port)" --bind-address 127.0.0.1 --data-dir "$work/data" "${extra[@]}")
			;;
		*) die "unknown server $s (reference, in-memory, persistent, baseline)" ;;
		esac
		log "starting $s: ${server_pin[*]} ${cmd[*]}"
		"${server_pin[@]}" "${cmd[@]}" >"$work/$s.log" 2>&1 &
		pid[$s]=$!
		for _ in $(seq 300); do
			if ! kill -0 "${pid[$s]}" 2>/dev/null; then
				log "$s exited before answering (attempt $attempt): $(tail -n 1 "$work/$s.log")"
				continue 2
			fi
			[[ $(curl -sf --max-time 1 "http://127.0.0.1:$p/v1/ping" 2>/dev/null) == pong* ]] && return
			sleep 0.1
		done
		die "$s did not answer GET /v1/ping within 30s"
	done
	die "$s did not start in 5 attempts"
}

create_filter() { # server name capacity
	local code
	code=$(curl -sS -o /dev/null -w '%{http_code}' -X PUT -H 'Content-Type: application/json' \
		-d "{\"expectedInsertions\":$3,\"fpp\":0.001,\"validPeriodAfterCreate\":0}" \
		"http://127.0.0.1:${port[$1]}/v1/bloomfilter/$2")
	[[ $code == 201 || $code == 200 ]] || die "creating $2 on $1 answered $code"
}

for s in "${servers[@]}"; do
	start "$s"
	create_filter "$s" bench 10000000
	create_filter "$s" bench1e8 100000000
done

# to_ms converts wrk's latency ("812.00us", "1.23ms", "1.02s") to milliseconds.
to_ms() {
	awk -v v="$1" 'BEGIN {
		n = v + 0; u = v; sub(/^[0-9.]+/, "", u)
		if (u == "us") n /= 1000; else if (u == "s") n *= 1000; else if (u == "m") n *= 60000
		printf "%.3f", n }'
}

mkdir -p bench/results
result=bench/results/$(date +%Y%m%d-%H%M%S)-compare.txt
{
	echo "bloomery:  $("$bin" version 2>/dev/null || echo unknown)"
	echo "git:       $(git describe --tags --always --dirty 2>/dev/null || echo none)"
	echo "host:      $(uname -srm), $cores cores"
	echo "cpu:       $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -n 1)"
	echo "pinning:   $pinning"
	echo "wrk:       ${wrk_pin[*]:+${wrk_pin[*]} }wrk --latency -t $threads -c $connections -d $duration"
	echo "persistent data plane: default persistence ${PERSIST_ARGS:-(logSync everysec)}"
	[[ -z ${BASELINE_BIN:-} ]] || echo "baseline:  $("$BASELINE_BIN" version 2>/dev/null || echo unknown) ($BASELINE_BIN)"
	echo
} | tee "$result"

declare -A rps ratios
rounds=${ROUNDS:-1}
printf '%-15s %-11s %12s %12s %9s %9s %8s\n' scenario server 'requests/s' 'keys/s' 'p50 ms' 'p99 ms' ratio | tee -a "$result"
failed=""
for ((round = 1; round <= rounds; round++)); do
	for sc in "${scenarios[@]}"; do
		filter=bench keys=1 args=()
		case $sc in
		check) script=bench/check.lua ;;
		check-and-set) script=bench/check-and-set.lua ;;
		mcas100) script=bench/multi-check-and-set.lua keys=100 args=(-- 100) ;;
		mcas1000) script=bench/multi-check-and-set.lua keys=1000 args=(-- 1000) filter=bench1e8 ;;
		create) script=bench/create.lua ;;
		*) die "unknown scenario $sc (check check-and-set mcas100 mcas1000 create)" ;;
		esac
		for s in "${servers[@]}"; do
			out="$work/$sc-$s.wrk"
			BENCH_FILTER=$filter "${wrk_pin[@]}" wrk --latency -t "$threads" -c "$connections" -d "$duration" \
				-s "$script" "http://127.0.0.1:${port[$s]}" "${args[@]}" >"$out"
			{
				echo "--- $sc / $s"
				cat "$out"
			} >>"$result.wrk"
			if grep -qE 'Non-2xx or 3xx responses|Socket errors' "$out"; then
				failed+=" $sc/$s"
			fi
			r=$(awk '/^Requests\/sec:/ {print $2}' "$out")
			p50=$(to_ms "$(awk '$1 == "50%" {print $2}' "$out")")
			p99=$(to_ms "$(awk '$1 == "99%" {print $2}' "$out")")
			rps[$sc/$s]=$r
			ratio=""
			if [[ $s != reference && -n ${rps[$sc/reference]:-} ]]; then
				ratio=$(awk -v a="$r" -v b="${rps[$sc/reference]}" 'BEGIN {printf "%.2f", a / b}')
				ratios[$sc/$s]+=" $ratio"
			fi
			printf '%-15s %-11s %12.0f %12.0f %9s %9s %8s\n' "$sc" "$s" "$r" \
				"$(awk -v a="$r" -v k="$keys" 'BEGIN {print a * k}')" "$p50" "$p99" "$ratio" | tee -a "$result"
		done
	done
done
if ((rounds > 1)); then
	{
		echo
		printf '%-15s %-11s %12s   %s\n' scenario server 'median ratio' "ratios of the $rounds rounds"
		for sc in "${scenarios[@]}"; do
			for s in "${servers[@]}"; do
				[[ -n ${ratios[$sc/$s]:-} ]] || continue
				printf '%-15s %-11s %12.2f  %s\n' "$sc" "$s" "$(median "${ratios[$sc/$s]}")" "${ratios[$sc/$s]}"
			done
		done
	} | tee -a "$result"
fi
{
	echo
	echo "ratio = requests/s of the data plane / requests/s of the reference in the same scenario"
	echo "wrk output: $result.wrk"
} | tee -a "$result"
[[ -z $failed ]] || die "non-2xx responses or socket errors in:$failed (see $result.wrk)"
