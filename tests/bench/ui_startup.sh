#!/usr/bin/env bash
# Desktop app start-up: wall time from exec to the first page on screen (spillway --screenshot,
# delay 0), with no model, on a fresh data folder (the sample contract is ingested first) and on
# a second start (the library exists). Median of N runs (default 5).
#   tests/bench/ui_startup.sh [BUILD_DIR] [N]
set -euo pipefail
build=${1:-build}
n=${2:-5}
bin=$build/ui/spillway
[[ -x $bin ]] || { echo "no $bin: build the spillway target first" >&2; exit 1; }
export QT_QPA_PLATFORM=${QT_QPA_PLATFORM:-offscreen}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
run() {  # prints seconds
  local s e
  s=$(date +%s.%N)
  "$bin" --data-dir "$1" --screenshot "$tmp/shot.png" --screenshot-delay 0 >/dev/null 2>&1
  e=$(date +%s.%N)
  awk -v s="$s" -v e="$e" 'BEGIN { print e - s }'
}
fresh=() warm=()
for ((i = 0; i < n; i++)); do
  fresh+=("$(run "$tmp/data$i")")
  warm+=("$(run "$tmp/data$i")")
done
printf 'first start (sample ingested): median %.3f s over %d runs\n' "$(printf '%s\n' "${fresh[@]}" | median)" "$n"
printf 'later start (library exists):  median %.3f s over %d runs\n' "$(printf '%s\n' "${warm[@]}" | median)" "$n"
