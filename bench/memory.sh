#!/usr/bin/env bash
# Memory of a data plane holding one filter: RSS against the filter's bit array.
#
#   bench/memory.sh [CAPACITY...]        (default: 1000 1000000 10000000 100000000)
#
# For each capacity it starts `bloomery dataplane --in-memory --pprof PORT` alone, reads VmRSS from
# /proc/<pid>/status, creates one filter of that capacity at fpp 0.001 (not scalable, so the
# filter is exactly one bit array), writes to every page of it by inserting KEYS random keys
# with multi-set (300000 by default: about 7 bits per 4 KiB page of the 1e8 filter, so no page
# is left untouched, as in a filter in use), forces a garbage collection (GET
# /debug/pprof/heap?gc=1) so that the garbage of those requests is not counted, and reads VmRSS
# again. It prints the bit array's size (sizeBytes of GET /v1/bloomfilter/NAME), RSS before and
# after, and the overhead: (RSS after - RSS after of the first capacity) /
# (sizeBytes - sizeBytes of the first) - 1. The first capacity (default 1000, a 1.8 KB filter)
# takes the same requests, so the process's own memory and that of serving them cancel out.
#
# Env: BLOOMERY_BIN  binary to measure (default: make build, bin/bloomery)
#      KEYS          keys inserted into each filter (default 300000)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
source bench/lib.sh
command -v curl >/dev/null || die "curl not found"
if [[ -n ${BLOOMERY_BIN:-} ]]; then
	bin=$BLOOMERY_BIN
else
	make --no-print-directory build >&2
	bin=bin/bloomery
fi
capacities=("$@")
[[ ${#capacities[@]} -gt 0 ]] || capacities=(1000 1000000 10000000 100000000)
keys=${KEYS:-300000}

rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }

pid=""
trap '[[ -n $pid ]] && kill "$pid" 2>/dev/null; wait 2>/dev/null || true' EXIT

printf '%-12s %14s %14s %14s %14s %9s\n' capacity 'bits (bytes)' 'RSS empty' 'RSS with' 'RSS - first' overhead
for n in "${capacities[@]}"; do
	port=$((20000 + RANDOM % 40000))
	pprof=$((port + 1))
	"$bin" dataplane -p "$port" --ops-port 0 --bind-address 127.0.0.1 --in-memory --pprof "$pprof" --log-level warn >/dev/null 2>&1 &
	pid=$!
	for _ in $(seq 100); do
		curl -sf --max-time 1 "http://127.0.0.1:$port/v1/ping" >/dev/null 2>&1 && break
		sleep 0.1
	done
	base="http://127.0.0.1:$port/v1/bloomfilter/mem"
	empty=$(rss_kib "$pid")
	curl -sf -X PUT -d "{\"expectedInsertions\":$n,\"fpp\":0.001,\"scalable\":false,\"validPeriodAfterCreate\":0}" "$base" >/dev/null ||
		die "creating a filter of $n failed"
	# Insert keys in batches of 10000 from a generated body file, so every page of the bit
	# array is written, as in a filter in use.
	batch=1000
	body=$(mktemp)
	for ((start = 0; start < keys; start += batch)); do
		awk -v s="$start" -v b="$batch" -v n="$keys" 'BEGIN {
			printf "{\"values\":["
			for (i = s; i < s + b && i < n; i++) printf "%s\"key-%d\"", (i > s ? "," : ""), i
			printf "]}" }' >"$body"
		curl -sf -X POST --data-binary "@$body" "$base/multi-set" >/dev/null || die "multi-set failed"
	done
	rm -f "$body"
	size=$(curl -sf "$base" | sed -n 's/.*"sizeBytes":\([0-9]*\).*/\1/p')
	curl -sf -o /dev/null "http://127.0.0.1:$pprof/debug/pprof/heap?gc=1" || die "forcing a GC through --pprof failed"
	sleep 1
	with=$(rss_kib "$pid")
	if [[ -z ${first_with:-} ]]; then
		first_with=$with first_size=$size
	fi
	awk -v n="$n" -v size="$size" -v e="$empty" -v w="$with" -v fw="$first_with" -v fs="$first_size" 'BEGIN {
		d = (w - fw) * 1024
		overhead = size > fs ? sprintf("%8.2f%%", (d / (size - fs) - 1) * 100) : "       -"
		printf "%-12d %14d %10.1f MiB %10.1f MiB %10.1f MiB %s\n", n, size, e / 1024, w / 1024, d / 1048576, overhead }'
	kill "$pid"
	wait "$pid" 2>/dev/null || true
	pid=""
done
