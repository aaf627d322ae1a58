#!/usr/bin/env bash
# The RESP port against Redis itself, side by side in one run (docs/performance.md).
#
#   bench/resp.sh [REQUESTS] [CONNECTIONS] [ROUNDS]   (defaults: 200000 requests, 20 connections, 3 rounds)
#
# redis-benchmark (Debian's redis-tools) sends, with CONNECTIONS connections:
#   - GET to a Debian redis-server: the cost of one RESP round trip in a server users trust;
#   - BF.ADD and BF.EXISTS of random items to a Bloomery data plane in memory, on a filter of
#     1e8 items at 0.001 (made with BF.RESERVE), and BF.MADD of 100 items to a filter of the same
#     shape made anew for each run: a run of BF.MADD adds REQUESTS × 100 items, and on the first
#     filter it would soon pass its capacity and measure a filter grown a second layer;
# each unpipelined and with 16 commands pipelined (-P 16), in turn, ROUNDS times over (pipelined
# GET, BF.ADD and BF.EXISTS send 16 × REQUESTS commands, so that a run lasts seconds too), then prints
# each command's median rate and the median of its ratios to GET's of the same round and
# pipelining: one round alone swings by a fifth on a shared machine. With two or more cores the servers run on core 0 and
# redis-benchmark on core 1. Bloomery's REST check-and-set (wrk, bench/check-and-set.lua, the
# same connections) is measured too, for the ratio of BF.ADD to it.
#
# Transactions: redis-benchmark sends a transaction's commands as separate requests, so
# bench/txload (built into bin/txload) measures them, with the same connections, each sending
# MULTI, 16 commands and EXEC in one write and reading the 18 replies before the next: SET of
# random keys to Redis (of 100,000 keys, so that its memory holds still over the rounds), BF.ADD
# of random items to Bloomery's filter of 1e8 items, for TX_SECONDS each; the ratio is to SET's
# of the same round.
#
# RedisBloom: with REDISBLOOM_MODULE set to a built redisbloom.so, a second redis-server on core 0
# loads it and answers BF.ADD and BF.EXISTS (and the transactions of BF.ADD) on a filter of the
# same shape; Bloomery's rate of each is then also divided by RedisBloom's of the same round.
#
# Env: BLOOMERY_BIN       benchmark this binary instead of building bin/bloomery
#      TX_SECONDS         how long each run of transactions lasts (default 5)
#      REDISBLOOM_MODULE  a RedisBloom module to compare with (docs/performance.md says how to build one)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source bench/lib.sh
requests=${1:-200000}
connections=${2:-20}
rounds=${3:-3}
for tool in redis-server redis-benchmark wrk curl; do
	command -v "$tool" >/dev/null || die "needs $tool (apt-get install redis-server redis-tools wrk curl)"
done
bloomery_binary
go build -o bin/txload ./bench/txload
tx_seconds=${TX_SECONDS:-5}
module=${REDISBLOOM_MODULE:-}
[[ -z $module || -f $module ]] || die "REDISBLOOM_MODULE=$module: no such file"
pin_cores

work_dir resp

redis_port=$(free_port)
"${server_pin[@]}" redis-server --port "$redis_port" --save '' --appendonly no --dir "$work" >"$work/redis.log" 2>&1 &
pids+=($!)
resp_port=$(free_port)
http_port=$(free_port)
"${server_pin[@]}" "$bin" dataplane -p "$http_port" --ops-port 0 --resp-port "$resp_port" --bind-address 127.0.0.1 \
	--in-memory --log-level warn >"$work/bloomery.log" 2>&1 &
pids+=($!)
rb_port=$resp_port # without RedisBloom, the PINGs below ask Bloomery twice
if [[ -n $module ]]; then
	rb_port=$(free_port)
	"${server_pin[@]}" redis-server --port "$rb_port" --save '' --appendonly no --dir "$work" --loadmodule "$(realpath "$module")" \
		>"$work/redisbloom.log" 2>&1 &
	pids+=($!)
fi
for _ in $(seq 100); do
	redis-cli -p "$redis_port" PING >/dev/null 2>&1 && redis-cli -p "$resp_port" PING >/dev/null 2>&1 &&
		redis-cli -p "$rb_port" PING >/dev/null 2>&1 && break
	sleep 0.1
done
redis-cli -p "$resp_port" BF.RESERVE bench 0.001 100000000 >/dev/null
if [[ -n $module ]]; then
	[[ $(redis-cli -p "$rb_port" BF.RESERVE bench 0.001 100000000) == OK ]] || die "RedisBloom: $(tail -3 "$work/redisbloom.log")"
fi
curl -sSf -X PUT -H 'Content-Type: application/json' -d '{"expectedInsertions":100000000,"fpp":0.001,"validPeriodAfterCreate":0}' \
	"http://127.0.0.1:$http_port/v1/bloomfilter/rest" >/dev/null

# rate PORT PIPELINE REQUESTS COMMAND...: requests per second redis-benchmark measured.
rate() {
	local port=$1 pipeline=$2 n=$3
	shift 3
	"${client_pin[@]}" redis-benchmark -p "$port" -c "$connections" -n "$n" -P "$pipeline" -r 100000000 -q "$@" |
		tr '\r' '\n' | awk '/requests per second/ {for (i = 1; i <= NF; i++) if ($(i + 1) == "requests") r = $i} END {print r}'
}

# txrate PORT COMMAND...: transactions per second of MULTI, 16 × COMMAND, EXEC (bench/txload).
txrate() {
	local port=$1
	shift
	"${client_pin[@]}" bin/txload -p "$port" -c "$connections" -n 16 -d "${tx_seconds}s" "$@" | awk '{print $1}'
}

# ratio A B prints A / B.
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", a / b}'; }

madd=(BF.MADD bench-madd)
for i in $(seq 100); do madd+=("__rand_int__-$i"); done

declare -A rates ratios
for round in $(seq "$rounds"); do
	for p in 1 16; do
		log "round $round of $rounds, pipeline $p"
		get=$(rate "$redis_port" "$p" $((requests * p)) GET key:__rand_int__)
		rates["GET $p"]+=" $get"
		for c in BF.ADD BF.EXISTS BF.MADD; do
			if [[ $c == BF.MADD ]]; then
				redis-cli -p "$resp_port" DEL bench-madd >/dev/null
				redis-cli -p "$resp_port" BF.RESERVE bench-madd 0.001 100000000 >/dev/null
				r=$(rate "$resp_port" "$p" "$requests" "${madd[@]}")
			else
				r=$(rate "$resp_port" "$p" $((requests * p)) "$c" bench __rand_int__)
				if [[ -n $module ]]; then
					rb=$(rate "$rb_port" "$p" $((requests * p)) "$c" bench __rand_int__)
					rates["RedisBloom $c $p"]+=" $rb"
					ratios["RedisBloom $c $p"]+=" $(ratio "$r" "$rb")"
				fi
			fi
			rates["$c $p"]+=" $r"
			ratios["$c $p"]+=" $(ratio "$r" "$get")"
		done
	done
	log "round $round of $rounds, transactions of 16"
	set=$(txrate "$redis_port" -r 100000 SET key:__rand_int__ v)
	add=$(txrate "$resp_port" BF.ADD bench __rand_int__)
	rates["tx SET"]+=" $set"
	rates["tx BF.ADD"]+=" $add"
	ratios["tx BF.ADD"]+=" $(ratio "$add" "$set")"
	if [[ -n $module ]]; then
		rb=$(txrate "$rb_port" BF.ADD bench __rand_int__)
		rates["RedisBloom tx BF.ADD"]+=" $rb"
		ratios["RedisBloom tx BF.ADD"]+=" $(ratio "$add" "$rb")"
	fi
done
log "REST check-and-set"
rest=$(BENCH_FILTER=rest "${client_pin[@]}" wrk -t 1 -c "$connections" -d 10s -s bench/check-and-set.lua "http://127.0.0.1:$http_port" |
	awk '/^Requests\/sec:/ {print $2}')

printf '\n%-10s %-9s %14s %12s %12s   %s\n' command pipeline 'requests/s' 'items/s' 'ratio to GET' "ratios of the $rounds rounds"
for p in 1 16; do
	for c in GET BF.ADD BF.EXISTS BF.MADD; do
		# shellcheck disable=SC2086 # the lists are numbers, split on purpose
		r=$(median ${rates["$c $p"]})
		items=$r
		[[ $c == BF.MADD ]] && items=$(awk -v r="$r" 'BEGIN {printf "%.0f", r * 100}')
		ratio=1.00 each=""
		if [[ $c != GET ]]; then
			# shellcheck disable=SC2086
			ratio=$(printf '%.2f' "$(median ${ratios["$c $p"]})")
			each=${ratios["$c $p"]}
		fi
		printf '%-10s %-9s %14.0f %12.0f %12s  %s\n' "$c" "$p" "$r" "$items" "$ratio" "$each"
	done
done
# shellcheck disable=SC2086
add16=$(median ${rates["BF.ADD 16"]})
printf '\nREST check-and-set (wrk, 1 thread, %d connections): %s requests/s; BF.ADD -P 16 is %s times it\n' \
	"$connections" "$rest" "$(awk -v a="$add16" -v b="$rest" 'BEGIN {printf "%.1f", a / b}')"

# shellcheck disable=SC2086 # the lists are numbers, split on purpose
printf '\nMULTI, 16 commands, EXEC (bin/txload, %d connections, %s s a run):\n' "$connections" "$tx_seconds"
printf '%-18s %14s %12s   %s\n' transaction 'transactions/s' 'ratio to SET' "ratios of the $rounds rounds"
# shellcheck disable=SC2086
printf '%-18s %14.0f %12s\n' '16 SET (Redis)' "$(median ${rates["tx SET"]})" 1.00
# shellcheck disable=SC2086
printf '%-18s %14.0f %12.2f  %s\n' '16 BF.ADD' "$(median ${rates["tx BF.ADD"]})" "$(median ${ratios["tx BF.ADD"]})" "${ratios["tx BF.ADD"]}"

if [[ -n $module ]]; then
	printf '\nBloomery against RedisBloom (%s), the same commands and filter shape:\n' "$module"
	printf '%-22s %16s %16s %9s   %s\n' command 'Bloomery /s' 'RedisBloom /s' ratio "ratios of the $rounds rounds"
	for c in "BF.ADD 1" "BF.EXISTS 1" "BF.ADD 16" "BF.EXISTS 16" "tx BF.ADD"; do
		label=$c
		[[ $c == *' 16' ]] && label="${c% 16} -P 16"
		[[ $c == *' 1' ]] && label="${c% 1}"
		[[ $c == tx* ]] && label="MULTI 16 BF.ADD EXEC"
		# shellcheck disable=SC2086
		printf '%-22s %16.0f %16.0f %9.2f  %s\n' "$label" "$(median ${rates["$c"]})" "$(median ${rates["RedisBloom $c"]})" \
			"$(median ${ratios["RedisBloom $c"]})" "${ratios["RedisBloom $c"]}"
	done
fi
