#!/usr/bin/env bash
# Replication cost and catch-up time, side by side in one run (docs/replication.md).
#
#   bench/replication.sh [DURATION] [THREADS] [CONNECTIONS]
#
# 1. check-and-set, multi-check-and-set (100 values) and check (of absent values) through one pod
#    alone, then through pod 0 of a 3-pod cluster with ?consistency=one, quorum and all (W = 1, 2,
#    3; a check at quorum or all asks the peers). The 3-pod runs include the forwarding of
#    check-and-sets to the filter's home pod when pod 0 is not it.
#    With 2 or more cores the pods share core 0 and wrk runs on core 1. Each row also shows the
#    pods' CPU time per request (user and system, all pods together, from /proc/PID/stat).
# 2. Catch-up: a pod holding 1 GiB of filters (CATCHUP_MIB, default 1024), a new empty pod told
#    the membership; the time until the new pod's /readyz answers 200. CATCHUP_MIB=0 skips it.
#
# Env: BLOOMERY_BIN  benchmark this binary instead of building bin/bloomery
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
duration=${1:-10s}
threads=${2:-4}
connections=${3:-20}
catchup_mib=${CATCHUP_MIB:-1024}

source bench/lib.sh
command -v wrk >/dev/null && command -v curl >/dev/null || die "needs wrk and curl (apt-get install wrk curl)"
bloomery_binary
pin_cores
work_dir replication

stop_all() {
	stop_pids
	rm -rf "${work:?}"/*
}

# cpu_ticks prints the CPU time (user and system, in clock ticks) the pods running have used.
cpu_ticks() {
	local pid total=0
	for pid in "${pids[@]}"; do
		# Fields 14 and 15 of /proc/PID/stat; the command name, field 2, holds no space.
		[[ -r /proc/$pid/stat ]] && total=$((total + $(awk '{print $14 + $15}' "/proc/$pid/stat")))
	done
	echo "$total"
}

# load SCRIPT QUERY [ARGS]: runs wrk against pod a; prints "requests/s p50 p99 cpu", cpu being
# the pods' CPU time per request, all pods together, in microseconds.
load() {
	local script=$1 query=$2 out before after
	shift 2
	curl -sSf -X PUT -H 'Content-Type: application/json' -d '{"expectedInsertions":10000000,"fpp":0.001}' \
		"http://127.0.0.1:$port_a/v1/bloomfilter/bench" >/dev/null
	before=$(cpu_ticks)
	out=$(BENCH_QUERY=$query "${client_pin[@]}" wrk --latency -t "$threads" -c "$connections" -d "$duration" -s "bench/$script.lua" "http://127.0.0.1:$port_a" -- "$@")
	after=$(cpu_ticks)
	if grep -qE 'Non-2xx|Socket errors' <<<"$out"; then
		die "wrk saw errors: $out"
	fi
	awk -v ticks=$((after - before)) -v hz="$(getconf CLK_TCK)" '
		/ requests in / {n=$1} /^Requests\/sec:/ {r=$2} /^ +50%/ {p50=$2} /^ +99%/ {p99=$2}
		END {printf "%s %s %s %.0f\n", r, p50, p99, ticks / hz * 1e6 / n}' <<<"$out"
}

declare -A result
run_all() {
	local label=$1 query=$2
	result["$label cas"]=$(load check-and-set "$query")
	result["$label mcas"]=$(load multi-check-and-set "$query" 100)
	result["$label check"]=$(load check "$query")
}

log "one pod alone"
pod_start a
pod_tell 1 a
pod_wait_ready a
run_all "1 pod" ""
stop_all

log "three pods"
pod_start a
pod_start b
pod_start c
pod_tell 1 a b c
for p in a b c; do pod_wait_ready $p; done
for level in one quorum all; do
	log "consistency=$level"
	run_all "3 pods, $level" "?consistency=$level"
	curl -sSf -X DELETE "http://127.0.0.1:$port_a/v1/bloomfilter/bench?consistency=all" >/dev/null
done
stop_all

printf '\n%-22s %-8s %12s %10s %10s %8s %12s\n' "setup" "request" "requests/s" "p50" "p99" "ratio" "CPU µs/req"
for label in "1 pod" "3 pods, one" "3 pods, quorum" "3 pods, all"; do
	for kind in cas mcas check; do
		read -r rps p50 p99 cpu <<<"${result["$label $kind"]}"
		read -r base _ _ _ <<<"${result["1 pod $kind"]}"
		printf '%-22s %-8s %12s %10s %10s %8s %12s\n' "$label" "$kind" "$rps" "$p50" "$p99" "$(awk -v a="$rps" -v b="$base" 'BEGIN {printf "%.2f", a / b}')" "$cpu"
	done
done

((catchup_mib > 0)) || exit 0
log "catch-up of ${catchup_mib} MiB"
pod_start a
pod_tell 1 a
pod_wait_ready a
made=0
i=0
while ((made < catchup_mib)); do
	# A fixed filter of 1e8 keys at 1 % is 114 MiB.
	size=$(curl -sSf -X PUT -H 'Content-Type: application/json' -d '{"expectedInsertions":100000000,"fpp":0.01,"scalable":false}' \
		"http://127.0.0.1:$port_a/v1/bloomfilter/big-$i" | sed -n 's/.*"sizeBytes":\([0-9]*\).*/\1/p')
	made=$((made + size / 1048576))
	i=$((i + 1))
done
pod_start b
start_ns=$(date +%s%N)
pod_tell 2 a b
pod_wait_ready b
end_ns=$(date +%s%N)
printf '\ncatch-up: %d filters, %d MiB, new pod ready after %.2f s\n' "$i" "$made" "$(awk -v d=$((end_ns - start_ns)) 'BEGIN {print d / 1e9}')"
grep -h '"Caught up"' "$work/b.log" | tail -1
