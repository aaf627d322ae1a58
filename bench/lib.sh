# shellcheck shell=bash
# Sourced by the scripts of bench/: what they all say and compute the same way.

log() { printf '==> %s\n' "$*" >&2; }

die() {
	printf 'bench/%s: %s\n' "${0##*/}" "$*" >&2
	exit 1
}

# median prints the median of the numbers among its words.
median() {
	# shellcheck disable=SC2048,SC2086 # the words are what is wanted
	printf '%s\n' $* | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}
