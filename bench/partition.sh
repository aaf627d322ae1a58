#!/usr/bin/env bash
# Partitioned clusters, side by side in one run (docs/replication.md, "Partitioning").
#
#   bench/partition.sh [DURATION] [THREADS] [CONNECTIONS]
#
# 1. Cost of a write: six pods, a filter of 12 partitions, multi-sets and multi-check-and-sets of
#    100 new values through pod a at consistency=quorum, once with every partition on every pod
#    (R = 6, the placement of a cluster of full replicas) and once with each on two (R = 2). For
#    each, the CPU seconds all six pods used (utime + stime from /proc) per acknowledged value,
#    counted until every peer has applied what was queued for it (the lagging pods' part too),
#    the snapshots they wrote meanwhile, and the ratio. ROUNDS (default 1) repeats the pair that many times, R = 6 and R = 2 in turn,
#    and reports each round's ratio and their median (ROUNDS=0 skips it); OPS (default "multi-set
#    multi-check-and-set") names the requests measured.
# 2. Routing: checks of a value of a filter of one partition, R = 2 of six pods, sent to an owner
#    and to a pod that is not one (which forwards it): requests/s and latency of each.
# 3. Rebalance: MOVE_MIB (default 1024) of partitions on four pods at R = 2 gain two pods; the
#    time from the move's membership until every pod reports it caught up, the bytes pulled, and
#    the errors of a writer and a reader (consistency=one) running throughout. MOVE_MIB=0 skips it.
#
# The pods share core 0 and wrk runs on core 1 (2 or more cores).
# Env: BLOOMERY_BIN  benchmark this binary instead of building bin/bloomery
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
duration=${1:-10s}
threads=${2:-2}
connections=${3:-20}
move_mib=${MOVE_MIB:-1024}
rounds=${ROUNDS:-1}
read -ra ops <<<"${OPS:-multi-set multi-check-and-set}"

source bench/lib.sh
command -v wrk >/dev/null && command -v curl >/dev/null || die "needs wrk and curl (apt-get install wrk curl)"
bloomery_binary
pin_cores
work_dir partition
printf 'replicationTimeoutMillis: 3000\nantiEntropyIntervalSeconds: 0\n' >"$work/extra.yaml"

pods=(a b c d e f)
epoch=0

# place EPOCH_MEMBERS PLACEMENT: tells the pods of EPOCH_MEMBERS (a space-separated list) the next
# epoch, with the placement's JSON fields (such as '"replicationFactor":2').
place() {
	local names=$1 fields=$2 members="" name port
	epoch=$((epoch + 1))
	for name in $names; do
		port=internal_$name
		members+="${members:+,}{\"name\":\"$name\",\"url\":\"http://127.0.0.1:${!port}\"}"
	done
	for name in $names; do
		internal_curl "$name" /internal/v1/membership -X PUT -H 'Content-Type: application/json' \
			-d "{\"epoch\":$epoch,\"self\":\"$name\",\"members\":[$members]${fields:+,$fields}}" >/dev/null
	done
}

# cpu_ticks NAMES...: the clock ticks of CPU the named pods used so far.
cpu_ticks() {
	local total=0 name pid
	for name in "$@"; do
		pid=pid_$name
		total=$((total + $(awk '{print $14 + $15}' "/proc/${!pid}/stat")))
	done
	echo "$total"
}

# metric_sum NAME [PODS...]: the sum of the metric NAME's samples over the pods (default all).
metric_sum() {
	local metric=$1 name port total=0 value names
	shift
	names=("$@")
	((${#names[@]})) || names=("${pods[@]}")
	for name in "${names[@]}"; do
		port=ops_$name
		value=$(curl -sSf "http://127.0.0.1:${!port}/metrics" | awk -v m="$metric" '$1 == m || index($1, m "{") == 1 {s += $2} END {printf "%.0f", s}')
		total=$((total + value))
	done
	echo "$total"
}

# drained: waits until pod a, whose senders carry every write of the benchmark, has none queued
# for a peer. At R = 6 an answer at quorum waits for four of the six pods, and the others may
# lag: their applies are part of the writes' cost. Polled gently: the scrapes are counted too.
drained() {
	for _ in $(seq 600); do
		(($(metric_sum bloomery_replication_queued_writes a) == 0)) && return
		sleep 0.2
	done
	die "writes still queued for peers after 120 s"
}

# snapshots: how many snapshots the pods wrote so far (their logs say each).
snapshots() {
	cat "$work"/[a-f].log | grep -c '"Snapshot written"' || true
}

# wrk_run URL SCRIPT [ARGS]: runs wrk; prints "requests requests/s p50 p99".
wrk_run() {
	local url=$1 script=$2 out
	shift 2
	out=$("${client_pin[@]}" wrk --latency -t "$threads" -c "$connections" -d "$duration" -s "bench/$script.lua" "$url" -- "$@")
	if grep -qE 'Non-2xx|Socket errors' <<<"$out"; then
		die "wrk saw errors: $out"
	fi
	awk '/requests in/ {n=$1} /^Requests\/sec:/ {r=$2} /^ +50%/ {p50=$2} /^ +99%/ {p99=$2} END {print n, r, p50, p99}' <<<"$out"
}

start_cluster() {
	for p in "${pods[@]}"; do pod_start "$p"; done
}

log "six pods"
start_cluster
declare -A cost ratios
for round in $(seq "$rounds"); do
	for r in 6 2; do
		place "${pods[*]}" "\"replicationFactor\":$r"
		for p in "${pods[@]}"; do pod_wait_ready "$p"; done
		for op in "${ops[@]}"; do
			log "round $round of $rounds: cost of a write, R = $r, $op"
			curl -sSf -X PUT -H 'Content-Type: application/json' -d '{"expectedInsertions":50000000,"fpp":0.001,"partitions":12}' \
				"http://127.0.0.1:$port_a/v1/bloomfilter/bench?consistency=all" >/dev/null
			# For its first 30 s a filter's adds carry its create (writes.createEcho): measure after.
			sleep 31
			before=$(cpu_ticks "${pods[@]}") snaps=$(snapshots) dropped=$(metric_sum bloomery_replication_dropped_writes_total)
			read -r requests rps p50 p99 <<<"$(BENCH_OP=$op BENCH_QUERY='?consistency=quorum' wrk_run "http://127.0.0.1:$port_a" multi-check-and-set 100)"
			drained
			after=$(cpu_ticks "${pods[@]}") snaps=$(($(snapshots) - snaps))
			dropped=$(($(metric_sum bloomery_replication_dropped_writes_total) - dropped))
			((dropped == 0)) || die "$dropped writes were dropped from full queues: the peers that missed them did not do their part"
			cost[$r $op]=$(awk -v t=$((after - before)) -v hz="$(getconf CLK_TCK)" -v n="$requests" 'BEGIN {printf "%.3g", t / hz / (n * 100)}')
			printf 'round %d, R = %d, %s: %s values/s (p50 %s, p99 %s), %s CPU seconds of all pods per value, %d snapshots\n' "$round" "$r" "$op" \
				"$(awk -v r="$rps" 'BEGIN {printf "%.0f", r * 100}')" "$p50" "$p99" "${cost[$r $op]}" "$snaps"
			curl -sSf -X DELETE "http://127.0.0.1:$port_a/v1/bloomfilter/bench?consistency=all" >/dev/null
		done
	done
	for op in "${ops[@]}"; do
		ratios[$op]+=" $(awk -v a="${cost[2 $op]}" -v b="${cost[6 $op]}" 'BEGIN {printf "%.2f", a / b}')"
	done
done
echo
for op in "${ops[@]}"; do
	((rounds > 0)) || break
	printf 'cost of a write (%s) at R = 2 against R = 6 (six pods), each round:%s; median %s\n' "$op" "${ratios[$op]}" "$(median ${ratios[$op]})"
done

log "routing"
place "${pods[*]}" '"replicationFactor":2'
curl -sSf -X PUT -H 'Content-Type: application/json' -d '{"expectedInsertions":1000000,"fpp":0.001,"partitions":1}' \
	"http://127.0.0.1:$port_a/v1/bloomfilter/bench?consistency=all" >/dev/null
owner="" other=""
for p in "${pods[@]}"; do
	held=$(internal_curl "$p" /internal/v1/filters/bench/status | sed -n 's/.*"partitionsHeld":\([0-9]*\).*/\1/p')
	if [[ $held == 1 ]]; then owner=${owner:-$p}; else other=${other:-$p}; fi
done
[[ -n $owner && -n $other ]] || die "no owner or no other pod of the filter"
declare -A route
for who in owner other; do
	port=port_${!who}
	read -r _ rps p50 p99 <<<"$(wrk_run "http://127.0.0.1:${!port}" check)"
	route[$who]=$rps
	printf 'check through %s (%s): %s requests/s, p50 %s, p99 %s\n' "$who" "${!who}" "$rps" "$p50" "$p99"
done
printf 'a check through a pod that is not an owner: %s of the requests/s through an owner\n' \
	"$(awk -v a="${route[other]}" -v b="${route[owner]}" 'BEGIN {printf "%.2f", a / b}')"
stop_pids
rm -rf "${work:?}"/[a-f] "$work"/*.log

((move_mib > 0)) || exit 0
log "rebalance of ${move_mib} MiB"
for p in a b c d; do pod_start "$p"; done
place "a b c d" '"replicationFactor":2'
for p in a b c d; do pod_wait_ready "$p"; done
# A fixed filter at 1 %: 9.6 bits per value. Each of its 16 partitions is 1/16 of it.
capacity=$((move_mib * 1048576 * 8 * 10 / 96))
curl -sSf -X PUT -H 'Content-Type: application/json' \
	-d "{\"expectedInsertions\":$capacity,\"fpp\":0.01,\"scalable\":false,\"partitions\":16}" \
	"http://127.0.0.1:$port_a/v1/bloomfilter/big?consistency=all" >/dev/null
pod_start e
pod_start f
BENCH_FILTER=big BENCH_QUERY='?consistency=one' "${client_pin[@]}" wrk -t 1 -c 4 -d 600s -s bench/multi-check-and-set.lua "http://127.0.0.1:$port_b" -- 10 >"$work/writer.out" &
writer=$!
BENCH_FILTER=big BENCH_QUERY='?consistency=one' "${client_pin[@]}" wrk -t 1 -c 4 -d 600s -s bench/check.lua "http://127.0.0.1:$port_c" >"$work/reader.out" &
reader=$!
sleep 2
start_ns=$(date +%s%N)
place "a b c d e f" '"replicationFactor":2,"previous":{"owners":["a","b","c","d"],"replicationFactor":2}'
for p in a b c d e f; do
	until internal_curl "$p" /internal/v1/placement | grep -q "\"epoch\":$epoch,\"caughtUp\":true"; do sleep 0.2; done
done
end_ns=$(date +%s%N)
place "a b c d e f" '"replicationFactor":2'
sleep 2
kill -INT "$writer" "$reader"
wait "$writer" "$reader" || true
moved=0
for p in e f; do
	moved=$((moved + $(internal_curl "$p" /internal/v1/placement | sed -n 's/.*"movedBytes":\([0-9]*\).*/\1/p')))
done
printf '\nrebalance: %d MiB on 4 pods gained 2; every pod caught up after %.2f s; the new pods pulled %d MiB\n' \
	"$move_mib" "$(awk -v d=$((end_ns - start_ns)) 'BEGIN {print d / 1e9}')" "$((moved / 1048576))"
for who in writer reader; do
	printf '%s (consistency=one): %s requests, %s\n' "$who" "$(awk '/requests in/ {print $1}' "$work/$who.out")" \
		"$(grep -E 'Non-2xx|Socket errors' "$work/$who.out" || echo 'no errors')"
done
