#!/usr/bin/env bash
# Spillway set-up on Debian 12, the two commands of the README:
#   bash packaging/setup.sh run    install packages, build (Release) and start the app
#   bash packaging/setup.sh test   install packages, build every target and run the tests
# Works as root (apt-get directly) or as a user with sudo. Re-running is cheap: apt is only
# touched when a package is missing, and ccache + Ninja rebuild only what changed.
set -euo pipefail

usage() {
  echo "usage: bash packaging/setup.sh run|test" >&2
  exit 2
}
[[ $# -eq 1 ]] || usage
MODE=$1
[[ $MODE == run || $MODE == test ]] || usage

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
BUILD_DIR=build

say() { printf '\n==> %s\n' "$*"; }
die() { printf 'setup.sh: %s\n' "$*" >&2; exit 1; }

# The Debian 12 package set known to build together (Qt 6, poppler, CUDA-optional toolchain).
# Each is used by the build or its tests: libnuma-dev binds the host KV tier to a NUMA node
# (optional in CMake); dpkg-dev (dpkg-shlibdeps), file and appstream are for the .deb and its
# test (cpack -G DEB, appstreamcli validate). libqt6svg6 is no build input: its plugins draw the
# app's SVG icon at run time. The OpenGL headers Qt 6 Gui wants come with qt6-base-dev.
PACKAGES=(
  cmake ninja-build pkg-config ccache g++
  qt6-base-dev qt6-base-dev-tools qt6-charts-dev libqt6opengl6-dev libqt6svg6
  libpoppler-qt6-dev libsqlite3-dev libicu-dev
  libgtest-dev
  libpcre2-dev nlohmann-json3-dev libcli11-dev libzstd-dev libxxhash-dev libfmt-dev
  libnuma-dev
  libtesseract-dev tesseract-ocr tesseract-ocr-eng
  libcpp-httplib-dev qpdf wamerican
  xvfb xauth imagemagick
  dpkg-dev file appstream
)

install_packages() {
  command -v dpkg-query >/dev/null || die "dpkg-query not found: this script is for Debian 12"
  local missing=() p native
  native=$(dpkg --print-architecture)
  for p in "${PACKAGES[@]}"; do
    # One line per installed architecture (a machine with arm64 added for cross builds lists
    # both): the package counts when the native or the architecture-independent one is there.
    if ! dpkg-query -W -f='${Architecture} ${Status}\n' "$p" 2>/dev/null |
      grep -qE "^($native|all) install ok installed$"; then
      missing+=("$p")
    fi
  done
  if [[ ${#missing[@]} -eq 0 ]]; then
    say "Packages: all ${#PACKAGES[@]} present"
    return
  fi
  local sudo=()
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || die "missing packages (${missing[*]}) and no sudo: run as root"
    sudo=(sudo)
  fi
  say "Packages: installing ${#missing[@]} missing: ${missing[*]}"
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

configure_and_build() {
  local args=(-S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release)
  if [[ -x /usr/local/cuda/bin/nvcc ]]; then
    export PATH="/usr/local/cuda/bin:$PATH"
    # CI: one real architecture keeps the CUDA part of the build short.
    if [[ ${CI:-} == true ]]; then
      args+=(-DCMAKE_CUDA_ARCHITECTURES=86-real)
    fi
  fi
  say "Configure: cmake ${args[*]}"
  cmake "${args[@]}"
  say "Build: $BUILD_DIR (Release, $(nproc) cores)"
  if [[ $MODE == run ]]; then  # only what the app needs; `test` builds everything
    cmake --build "$BUILD_DIR" --parallel "$(nproc)" --target spillway spillway-cli
  else
    cmake --build "$BUILD_DIR" --parallel "$(nproc)"
  fi
  if command -v ccache >/dev/null; then
    ccache --show-stats 2>/dev/null | grep -E '^[[:space:]]*(Hits|Misses):' | sed 's/^ */ccache /' ||
      true
  fi
}

launch() {
  local bin="$BUILD_DIR/ui/spillway"
  [[ -x $bin ]] || die "$bin was not built (configured with -DSPILLWAY_GUI=OFF?)"
  if [[ -n ${DISPLAY:-} || -n ${WAYLAND_DISPLAY:-} ]]; then
    say "Starting $bin"
    exec "$bin"
  fi
  local shot="$ROOT/$BUILD_DIR/spillway.png"
  say "No display: running the window under xvfb-run and saving a screenshot"
  xvfb-run -a -s "-screen 0 1600x1000x24" "$bin" --screenshot "$shot"
  echo "Screenshot of the main window: $shot"
}

install_packages
configure_and_build
case $MODE in
  run) launch ;;
  test)
    say "Test: ctest --test-dir $BUILD_DIR --output-on-failure"
    ctest --test-dir "$BUILD_DIR" --output-on-failure
    ;;
esac
