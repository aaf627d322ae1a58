#!/usr/bin/env bash
# Memory at the peaks of a data plane's life, for about 1 GiB of filters (docs/performance.md).
#
#   bench/peaks.sh
#
# Pod a is filled with DATA_MIB (default 1024) of filters: one of 2.2e8 values at 1% (about
# 250 MiB, the largest) and then filters of 1e8 (114 MiB), each written to on every page. Then,
# reading the peak RSS (VmHWM, reset before each step through /proc/PID/clear_refs):
#
#   steady      a, filled and idle
#   snapshot    a snapshot of everything (a merge that changes bits asks for one and answers
#               once it is written)
#   4 dumps     four concurrent dumps of the largest filter, read by curl
#   recovery    a restarted on its data directory, until /readyz answers 200
#   catch-up    a new, empty pod b told the membership {a, b}, until it is ready: it pulls
#               every filter from a
#
# and prints each peak with what it exceeds the data by, against the target: the data plus the
# largest filter plus 64 MiB.
#
# Env: BLOOMERY_BIN  measure this binary instead of building bin/bloomery
#      DATA_MIB      size of the data set in MiB (default 1024)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source bench/lib.sh
command -v curl >/dev/null || die "needs curl"
[[ -w /proc/self/clear_refs ]] || die "needs /proc/PID/clear_refs to reset the peak RSS"
bloomery_binary
data_mib=${DATA_MIB:-1024}
server_pin=() # the pods run on any core: RSS, not speed, is measured

work_dir peaks
printf 'logSync: "no"\nmaxTotalBytes: 0\n' >"$work/extra.yaml"

mib() { awk -v k="$1" 'BEGIN {printf "%.0f", k / 1024}'; }
peak_kib() {
	local pid=pid_$1
	awk '/^VmHWM:/ {print $2}' "/proc/${!pid}/status"
}
rss_kib() {
	local pid=pid_$1
	awk '/^VmRSS:/ {print $2}' "/proc/${!pid}/status"
}
reset_peak() {
	local pid=pid_$1
	echo 5 >"/proc/${!pid}/clear_refs"
}

# fill NAME CAPACITY KEYS: creates a fixed filter at 1% and writes KEYS random values to it,
# enough to write every page; prints its size in bytes.
fill() {
	local name=$1 capacity=$2 keys=$3 body size
	size=$(curl -sSf -X PUT -H 'Content-Type: application/json' \
		-d "{\"expectedInsertions\":$capacity,\"fpp\":0.01,\"scalable\":false}" \
		"http://127.0.0.1:$port_a/v1/bloomfilter/$name" | sed -n 's/.*"sizeBytes":\([0-9]*\).*/\1/p')
	body=$work/body.json
	for ((start = 0; start < keys; start += 10000)); do
		awk -v s="$start" -v n="$name" 'BEGIN {
			printf "{\"values\":["
			for (i = 0; i < 10000; i++) printf "%s\"%s-%d-%d\"", (i ? "," : ""), n, s + i, rand() * 1e9
			printf "]}"
		}' >"$body"
		curl -sSf -X POST -H 'Content-Type: application/json' --data-binary "@$body" \
			"http://127.0.0.1:$port_a/v1/bloomfilter/$name/multi-set" >/dev/null
	done
	echo "$size"
}

declare -A peak
log "pod a: filling ${data_mib} MiB of filters"
pod_start a
pod_tell 1 a
pod_wait_ready a
data=$(fill largest 220000000 400000)
largest=$data
i=0
while ((data < data_mib * 1048576)); do
	size=$(fill "f$i" 100000000 200000)
	data=$((data + size))
	i=$((i + 1))
done
# Two small filters of one shape, for a merge that changes bits.
for name in merge-from merge-into; do
	curl -sSf -X PUT -H 'Content-Type: application/json' -d '{"expectedInsertions":1000,"fpp":0.01,"scalable":false}' \
		"http://127.0.0.1:$port_a/v1/bloomfilter/$name" >/dev/null
done
curl -sSf -X POST -H 'Content-Type: application/json' -d '{"value":"only-in-merge-from"}' \
	"http://127.0.0.1:$port_a/v1/bloomfilter/merge-from/check-and-set" >/dev/null
log "filled: $((i + 1)) filters, $(mib $((data / 1024))) MiB, the largest $(mib $((largest / 1024))) MiB"
peak[steady]=$(rss_kib a)

log "snapshot"
reset_peak a
curl -sSf "http://127.0.0.1:$port_a/v1/bloomfilter/merge-from/dump" -o "$work/small.dump"
curl -sSf -X POST -H 'Content-Type: application/octet-stream' --data-binary "@$work/small.dump" \
	"http://127.0.0.1:$port_a/v1/bloomfilter/merge-into/merge" >/dev/null
peak[snapshot]=$(peak_kib a)

log "4 concurrent dumps of the largest filter"
reset_peak a
dumpers=()
for d in 1 2 3 4; do
	curl -sSf "http://127.0.0.1:$port_a/v1/bloomfilter/largest/dump" -o /dev/null &
	dumpers+=($!)
done
for d in "${dumpers[@]}"; do wait "$d"; done
peak[4 dumps]=$(peak_kib a)

log "recovery"
pod_stop a
pod_start a
pod_tell 1 a
pod_wait_ready a
peak[recovery]=$(peak_kib a)

log "catch-up of a new pod"
pod_start b
pod_tell 2 a b
pod_wait_ready b
peak[catch-up]=$(peak_kib b)
grep -h '"Caught up"' "$work/b.log" | tail -1 >&2

data_kib=$((data / 1024))
target_kib=$((data_kib + largest / 1024 + 65536))
printf '\nbinary: %s\ndata: %s MiB in %d filters, the largest %s MiB; target: every peak at most %s MiB\n\n' \
	"$("$bin" --version 2>/dev/null | head -1)" "$(mib "$data_kib")" "$((i + 1))" "$(mib $((largest / 1024)))" "$(mib "$target_kib")"
printf '%-10s %12s %16s %8s\n' peak 'RSS (MiB)' 'above data (MiB)' target
for step in steady snapshot '4 dumps' recovery catch-up; do
	kib=${peak[$step]}
	printf '%-10s %12s %16s %8s\n' "$step" "$(mib "$kib")" "$(mib $((kib - data_kib)))" "$( ((kib <= target_kib)) && echo met || echo missed)"
done
