#!/usr/bin/env bash
# Check-and-set throughput with persistence off and under each log sync policy, side by side in
# one run, so that the ratios are comparable on a noisy machine.
#
#   bench/persistence.sh [DURATION] [THREADS] [CONNECTIONS]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
duration=${1:-10s}
threads=${2:-4}
connections=${3:-20}

make --no-print-directory build >&2
export BLOOMERY_BIN=bin/bloomery
declare -A rps
modes=("--in-memory" "--log-sync no" "--log-sync everysec" "--log-sync always")
for mode in "${modes[@]}"; do
	out=$(BENCH_SERVER_ARGS=$mode bench/run.sh check-and-set "$duration" "$threads" "$connections" 2>/dev/null)
	rps[$mode]=$(awk '/^Requests\/sec:/ {print $2; exit}' <<<"$out")
done

base=${rps[--in-memory]}
printf '\n%-22s %14s %8s\n' "check-and-set" "requests/s" "ratio"
for mode in "${modes[@]}"; do
	printf '%-22s %14s %8s\n' "$mode" "${rps[$mode]}" "$(awk -v a="${rps[$mode]}" -v b="$base" 'BEGIN {printf "%.2f", a / b}')"
done
