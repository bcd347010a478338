#!/bin/sh
# The screenshot set (ctest ui.screenshot_set): a generated model answers a question about the
# sample contract, and the window is rendered when the answer is complete (the dashboard has moved
# by then: the run's samples are on it) at 1280x800 light, 1280x800 dark and 1024x640 light. Each
# PNG must have the size asked for and more than 64 colours (not blank); the files stay in OUT_DIR
# to be looked at.
#   screenshot_set.sh TESTMODEL SPILLWAY SAMPLE.pdf OUT_DIR
set -eu
testmodel=$1 spillway=$2 pdf=$3 out=$4
rm -rf "$out"
mkdir -p "$out"
"$testmodel" -o "$out/m.gguf" --ctx 4096 >/dev/null
shot() {  # NAME SIZE THEME
  "$spillway" --data-dir "$out/data-$1" --model "$out/m.gguf" --window-size "$2" --theme "$3" \
    --ask 'What is the term of the agreement?' --screenshot "$out/$1.png" "$pdf"
  got=$(identify -format '%wx%h' "$out/$1.png")
  n=$(identify -format %k "$out/$1.png")
  echo "$1: $got, $n colours"
  [ "$got" = "$2" ] || { echo "$1: expected $2" >&2; exit 1; }
  [ "$n" -gt 64 ] || { echo "$1: blank (only $n colours)" >&2; exit 1; }
}
shot light-1280x800 1280x800 light
shot dark-1280x800 1280x800 dark
shot light-1024x640 1024x640 light
echo "screenshot set: 3 written to $out"
