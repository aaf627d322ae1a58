#!/usr/bin/env bash
# BF.SCANDUMP into BF.LOADCHUNK of one large filter, in MiB/s (docs/performance.md).
#
#   bench/scandump.sh [ROUNDS]   (default 3)
#
# A source data plane in memory holds one filter of CAPACITY (default 1e8) items at 0.001,
# NONSCALING: one layer of 171 MiB, holding ITEMS (default 1e6) items. `bloomery move-from-redis`
# moves it into each destination of DESTS in turn, ROUNDS times over: BF.SCANDUMP at the source,
# BF.LOADCHUNK at the destination, chunk after chunk (10 MiB each, less 512 bytes: the default limits).
# The destinations:
#   memory    one data plane, --in-memory: the port and the engine alone;
#   everysec  one data plane on disk, logSync everysec (the default): every chunk journaled;
#   always    the same with logSync always: every chunk fsynced before it is answered;
#   cluster   three pods on disk (everysec) at writeConsistency all, loaded through one: every
#             chunk replicated to the two others before it is answered;
#   redisbloom  with REDISBLOOM_MODULE set to a built redisbloom.so: RedisBloom into RedisBloom,
#             two redis-servers without persistence loading it, the source holding the same
#             filter (the same capacity, error rate and items): RedisBloom's own rate, which
#             memory's of the same round is divided by.
# It prints each round's rate, MiB moved per second of the command's wall clock, and each
# destination's median. With two or more cores the data planes run on core 0 and the command on
# core 1.
#
# Env: BLOOMERY_BIN  benchmark this binary instead of building bin/bloomery
#      DESTS         the destinations (default "memory everysec always cluster")
#      DEST_BIN      run the destinations with this binary (default the same): a former build's, to
#                    compare the two
#      REDISBLOOM_MODULE  a RedisBloom module to compare with: adds redisbloom to the default
#                    DESTS (docs/performance.md says how to build one)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source bench/lib.sh
rounds=${1:-3}
capacity=${CAPACITY:-100000000}
items=${ITEMS:-1000000}
module=${REDISBLOOM_MODULE:-}
[[ -z $module || -f $module ]] || die "REDISBLOOM_MODULE=$module: no such file"
dests=${DESTS:-memory everysec always cluster${module:+ redisbloom}}
for tool in redis-cli curl; do
	command -v "$tool" >/dev/null || die "needs $tool (apt-get install redis-tools curl)"
done
bloomery_binary
dest_bin=${DEST_BIN:-$bin}
pin_cores
work_dir scandump

# plane NAME FLAGS...: starts a lone data plane of $plane_bin with a RESP port, sets resp_NAME.
plane() {
	local name=$1 resp
	shift
	resp=$(free_port)
	mkdir -p "$work/$name"
	"${server_pin[@]}" "$plane_bin" dataplane -p "$(free_port)" --ops-port 0 --resp-port "$resp" --bind-address 127.0.0.1 \
		--data-dir "$work/$name" --log-level warn "$@" >"$work/$name.log" 2>&1 &
	pids+=($!)
	await_pong "$resp"
	printf -v "resp_$name" '%s' "$resp"
}

# redisbloom NAME: starts a redis-server loading $module, sets resp_NAME.
redisbloom() {
	local resp
	resp=$(free_port)
	"${server_pin[@]}" redis-server --port "$resp" --save '' --appendonly no --dir "$work" --loadmodule "$(realpath "$module")" \
		>"$work/$1.log" 2>&1 &
	pids+=($!)
	await_pong "$resp"
	printf -v "resp_$1" '%s' "$resp"
}

# await_pong waits up to 30 s for the server on RESP port $1 to answer PING.
await_pong() {
	for _ in $(seq 300); do
		redis-cli -p "$1" PING 2>/dev/null | grep -q PONG && return
		sleep 0.1
	done
}

# fill PORT: makes the filter to move at PORT.
fill() {
	[[ $(redis-cli -p "$1" BF.RESERVE big 0.001 "$capacity" NONSCALING) == OK ]] || die "BF.RESERVE at $1 failed"
	log "adding $items items to the source at $1"
	awk -v n="$items" 'BEGIN { for (i = 0; i < n; i += 1000) { printf "BF.MADD big"; for (j = i; j < i + 1000 && j < n; j++) printf " item-%d", j; printf "\r\n" } }' |
		redis-cli -p "$1" --pipe >/dev/null
}

plane_bin=$bin
plane source --in-memory
fill "$resp_source"

plane_bin=$dest_bin
for dest in $dests; do
	case $dest in
	memory) plane memory --in-memory ;;
	everysec) plane everysec --log-sync everysec ;;
	always) plane always --log-sync always ;;
	cluster)
		printf 'writeConsistency: all\n' >"$work/extra.yaml"
		for pod in a b c; do
			printf -v "resp_pod_$pod" '%s' "$(free_port)"
			p=resp_pod_$pod
			bin=$dest_bin pod_start "$pod" --resp-port "${!p}" --log-level warn
		done
		pod_tell 1 a b c
		for pod in a b c; do pod_wait_ready "$pod"; done
		resp_cluster=$resp_pod_a
		;;
	redisbloom)
		[[ -n $module ]] || die "the redisbloom destination needs REDISBLOOM_MODULE"
		redisbloom rb_source
		fill "$resp_rb_source"
		redisbloom redisbloom
		;;
	*) die "unknown destination $dest" ;;
	esac
done

declare -A rates
ratios="" # memory's rate over redisbloom's, each round, when both are measured
for round in $(seq "$rounds"); do
	for dest in $dests; do
		port=resp_$dest from=$resp_source
		[[ $dest == redisbloom ]] && from=$resp_rb_source
		start=$(date +%s.%N)
		out=$("${client_pin[@]}" "$bin" move-from-redis --replace --from "redis://127.0.0.1:$from" --to "redis://127.0.0.1:${!port}" 2>"$work/move.log") ||
			die "$dest: move-from-redis failed: $(cat "$work/move.log")"
		end=$(date +%s.%N)
		bytes=$(sed -n 's/.*chunks, \([0-9]*\) bytes.*/\1/p' <<<"$out")
		[[ -n $bytes && $bytes -gt 0 ]] || die "$dest: move-from-redis said: $out"
		rate=$(awk -v b="$bytes" -v s="$start" -v e="$end" 'BEGIN {printf "%.0f", b / 1048576 / (e - s)}')
		log "round $round, $dest: $(awk -v b="$bytes" 'BEGIN {printf "%.0f", b / 1048576}') MiB in $(awk -v s="$start" -v e="$end" 'BEGIN {printf "%.2f", e - s}') s: $rate MiB/s"
		rates[$dest]+=" $rate"
		[[ $dest == redisbloom && -n ${rates[memory]:-} ]] && ratios+=" $(awk -v a="${rates[memory]##* }" -v b="$rate" 'BEGIN {printf "%.2f", a / b}')"
	done
done
for dest in $dests; do
	printf '%-10s MiB/s:%s; median %s\n' "$dest" "${rates[$dest]}" "$(median "${rates[$dest]}")"
done
if [[ -n $ratios ]]; then
	printf 'memory / redisbloom, each round:%s; median %s\n' "$ratios" "$(median "$ratios")"
fi
