#!/usr/bin/env bash
# Check-and-set throughput with persistence off and under each log sync policy, side by side in
# one run, so that the ratios are comparable on a noisy machine. The modes take turns, ROUNDS
# times (default 3), and each mode's median is compared: a neighbour's burst of CPU during one
# run then moves one sample, not the result.
#
#   bench/persistence.sh [DURATION] [THREADS] [CONNECTIONS]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source bench/lib.sh
duration=${1:-10s}
threads=${2:-4}
connections=${3:-20}
rounds=${ROUNDS:-3}

make --no-print-directory build >&2
export BLOOMERY_BIN=bin/bloomery
declare -A runs
modes=("--in-memory" "--log-sync no" "--log-sync everysec" "--log-sync always")
for ((round = 1; round <= rounds; round++)); do
	for mode in "${modes[@]}"; do
		out=$(BENCH_SERVER_ARGS=$mode bench/run.sh check-and-set "$duration" "$threads" "$connections" 2>/dev/null)
		runs[$mode]+=" $(awk '/^Requests\/sec:/ {print $2; exit}' <<<"$out")"
	done
done

base=$(median "${runs[--in-memory]}")
printf '\n%-22s %14s %8s   %s\n' "check-and-set" "median req/s" "ratio" "runs (requests/s)"
for mode in "${modes[@]}"; do
	m=$(median "${runs[$mode]}")
	printf '%-22s %14.0f %8s  %s\n' "$mode" "$m" "$(awk -v a="$m" -v b="$base" 'BEGIN {printf "%.2f", a / b}')" "${runs[$mode]}"
done
