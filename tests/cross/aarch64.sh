#!/usr/bin/env bash
# Cross-builds the engine and its tests for aarch64 (cmake/aarch64-linux-gnu.cmake) and runs the
# engine tests under user-mode QEMU, once per emulated CPU:
#   max         every ARMv8.x extension QEMU has, dot products (SDOT) included: the levels
#               scalar, neon and neon-dotprod all run (the kernel tests loop over them);
#   cortex-a53  ARMv8.0-A without dot products (Raspberry Pi 3): scalar and neon.
#
#   tests/cross/aarch64.sh [build-dir]          default: build-aarch64 in the source tree
#
# Environment: SPILLWAY_QEMU_CPUS   CPUs to run on (default "max cortex-a53");
#              SPILLWAY_CROSS_FILTER gtest filter (default: every test);
#              SPILLWAY_CROSS_JOBS   build jobs (default 2);
#              SPILLWAY_CROSS_BENCH=1 also runs level_ratio_bench (each level's speed against the
#                                    scalar level's, median of interleaved rounds) per CPU.
# Needs (Debian 12, as root):
#   apt-get install g++-aarch64-linux-gnu qemu-user-static
#   dpkg --add-architecture arm64 && apt-get update
#   apt-get install libzstd-dev:arm64 libxxhash-dev:arm64 libpcre2-dev:arm64 libfmt-dev:arm64 \
#                   libgtest-dev:arm64 libnuma-dev:arm64
# The binaries run with the arm64 multiarch loader and C library (libc6:arm64, pulled in by the
# -dev:arm64 packages), never with the cross toolchain's copy in /usr/aarch64-linux-gnu: that
# ld.so would load the multiarch libc.so.6 from /lib/aarch64-linux-gnu (its default path), and a
# loader and a libc of two glibc builds disagree on the layout of their shared private data (on
# Debian 12: libc6-arm64-cross 2.36-8 against libc6:arm64 2.36-9+deb12u*, where the list of
# cached thread stacks moved by 8 bytes), so the first pthread_create loops forever.
# Prints one "aarch64 <cpu>: N tests, P passed, S skipped, F failed" line per CPU; exits non-zero
# when a build or a test fails.
set -euo pipefail

src="$(cd "$(dirname "$0")/../.." && pwd)"
build="${1:-$src/build-aarch64}"
cpus="${SPILLWAY_QEMU_CPUS:-max cortex-a53}"
filter="${SPILLWAY_CROSS_FILTER:-*}"
jobs="${SPILLWAY_CROSS_JOBS:-2}"
triple=aarch64-linux-gnu

missing=()
command -v "$triple-g++" >/dev/null || missing+=(g++-aarch64-linux-gnu)
qemu="$(command -v qemu-aarch64-static || command -v qemu-aarch64 || true)"
[[ -n "$qemu" ]] || missing+=(qemu-user-static)
for h in zstd.h xxhash.h pcre2.h fmt/format.h; do
  [[ -e /usr/include/$h ]] || missing+=("(header $h)")
done
for lib in libzstd.so libxxhash.so libpcre2-8.so libfmt.so libnuma.so; do
  [[ -e /usr/lib/$triple/$lib ]] || missing+=("(arm64 $lib)")
done
[[ -e /lib/ld-linux-aarch64.so.1 ]] || missing+=("libc6:arm64")
if ((${#missing[@]})); then
  echo "aarch64.sh: missing ${missing[*]}; install them as this script's header says" >&2
  exit 2
fi

# The loader and the C library the tests will run with (see the header): one glibc build.
glibc_of() { grep -aoE "GLIBC [0-9][^)]*\\) stable release" "$1" | head -n 1; }
ld_so="$(readlink -f /lib/ld-linux-aarch64.so.1)"
libc_so="$(readlink -f "/lib/$triple/libc.so.6")"
if [[ "$(glibc_of "$ld_so")" != "$(glibc_of "$libc_so")" ]]; then
  echo "aarch64.sh: $ld_so ($(glibc_of "$ld_so")) and $libc_so ($(glibc_of "$libc_so")) are" \
    "different glibc builds; apt-get install --reinstall libc6:arm64" >&2
  exit 2
fi

mkdir -p "$build"
cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_TOOLCHAIN_FILE="$src/cmake/aarch64-linux-gnu.cmake" \
  -DSPILLWAY_ENGINE_ONLY=ON -DSPILLWAY_CUDA=OFF -DSPILLWAY_GUI=OFF >"$build/configure.log" ||
  { cat "$build/configure.log" >&2; exit 1; }
nice -n 10 cmake --build "$build" --parallel "$jobs" --target spillway_engine_tests \
  level_ratio_bench

tests="$build/tests/spillway_engine_tests"
file "$tests" | grep -q "ARM aarch64" || { echo "aarch64.sh: $tests is not an aarch64 binary" >&2; exit 1; }

status=0
for cpu in $cpus; do
  xml="$build/engine_tests.$cpu.xml"
  echo "== spillway_engine_tests under $(basename "$qemu") -cpu $cpu (filter $filter)"
  set +e
  QEMU_CPU="$cpu" QEMU_LD_PREFIX=/ "$qemu" "$tests" --gtest_filter="$filter" \
    --gtest_output="xml:$xml" >"$build/engine_tests.$cpu.log" 2>&1
  rc=$?
  set -e
  grep -E "^\[  (FAILED|SKIPPED) |^\[  PASSED|^\[==========\]" "$build/engine_tests.$cpu.log" | tail -n 40
  if [[ -f "$xml" ]]; then
    python3 - "$xml" "$cpu" <<'EOF'
import sys, xml.etree.ElementTree as ET
r = ET.parse(sys.argv[1]).getroot()
n = int(r.get("tests")); f = int(r.get("failures")) + int(r.get("errors", "0"))
s = sum(1 for c in r.iter("testcase") if c.get("result") == "skipped" or c.find("skipped") is not None)
print(f"aarch64 {sys.argv[2]}: {n} tests, {n - f - s} passed, {s} skipped, {f} failed")
EOF
  fi
  ((rc == 0)) || { echo "aarch64.sh: tests failed under -cpu $cpu (log $build/engine_tests.$cpu.log)" >&2; status=1; }
  if [[ "${SPILLWAY_CROSS_BENCH:-0}" == 1 ]]; then
    echo "== level_ratio_bench under -cpu $cpu (emulated: compare the ratios, not the times)"
    QEMU_CPU="$cpu" QEMU_LD_PREFIX=/ "$qemu" "$build/tests/bench/level_ratio_bench" ||
      status=1
  fi
done
exit $status
