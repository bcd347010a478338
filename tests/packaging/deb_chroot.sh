#!/usr/bin/env bash
# The Debian package on a clean Debian 12: a minimal bookworm root made by debootstrap, the .deb
# installed in it with apt (its Depends alone, no Recommends: what dpkg-shlibdeps found plus
# CPACK_DEBIAN_PACKAGE_DEPENDS must be enough), then the installed programs run in it:
#   spillway-cli --version, spillway-cli info -m MODEL, spillway --help and a screenshot of the
#   app's window (QT_QPA_PLATFORM=offscreen), which must load Qt's SVG icon engine (the app's
#   icon is an SVG; dpkg-shlibdeps cannot see plugins).
#
#   bash tests/packaging/deb_chroot.sh DEB MODEL
#     DEB    the package: cpack -G DEB --config build/CPackConfig.cmake -B build/package
#            (build/package/spillway_<version>_amd64.deb)
#     MODEL  a small GGUF model, e.g. ../shared/models/stories260K.gguf
#
# Manual, not in ctest: needs root, debootstrap (Debian's package), a few minutes and the
# network (deb.debian.org, security.debian.org). Environment:
#   SPILLWAY_DEBIAN_MIRROR  default http://deb.debian.org/debian
#   SPILLWAY_CHROOT_CACHE   a .tar of the bare debootstrap root: made on the first run, reused
#                           after (skips debootstrap)
#   SPILLWAY_CHROOT_KEEP=1  keep the root (its path is printed) instead of removing it
#   SPILLWAY_CHROOT_SHOT    copy the app's screenshot there
# /proc, /sys and /dev are mounted in the root while it runs and unmounted on every exit; the
# root is only removed once nothing is mounted in it.
set -euo pipefail
[[ $# -eq 2 ]] || { echo "usage: deb_chroot.sh DEB MODEL" >&2; exit 2; }
DEB=$(realpath "$1") MODEL=$(realpath "$2")
MIRROR=${SPILLWAY_DEBIAN_MIRROR:-http://deb.debian.org/debian}
CACHE=${SPILLWAY_CHROOT_CACHE:-}

fail() { echo "FAIL: $*" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || fail "run as root (debootstrap, chroot, mount)"
command -v debootstrap >/dev/null || fail "debootstrap not found: apt-get install debootstrap"
[[ -f $DEB && $DEB == *.deb ]] || fail "$1 is no .deb"
[[ -f $MODEL ]] || fail "no model $2"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/spillway-chroot.XXXXXX")
ROOT=$WORK/root
MOUNTS=()
cleanup() {
  local i
  for ((i = ${#MOUNTS[@]} - 1; i >= 0; i--)); do
    umount "${MOUNTS[i]}" 2>/dev/null || umount -l "${MOUNTS[i]}" || true
  done
  if [[ ${SPILLWAY_CHROOT_KEEP:-0} == 1 ]]; then
    echo "kept $ROOT"
  elif findmnt -rn -o TARGET | grep -q "^$ROOT"; then
    echo "deb_chroot.sh: something is still mounted under $ROOT; not removing $WORK" >&2
  else
    rm -rf --one-file-system "$WORK"
  fi
}
trap cleanup EXIT

if [[ -n $CACHE && -f $CACHE ]]; then
  echo "== bookworm root from $CACHE"
  mkdir -p "$ROOT"
  tar -xpf "$CACHE" -C "$ROOT"
else
  echo "== debootstrap --variant=minbase bookworm ($MIRROR)"
  debootstrap --variant=minbase bookworm "$ROOT" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 ||
    { tail -n 30 "$WORK/debootstrap.log" >&2; fail "debootstrap"; }
  if [[ -n $CACHE ]]; then
    tar -cpf "$CACHE" -C "$ROOT" .
    echo "saved the bare root as $CACHE"
  fi
fi

# A Debian 12 as installed: the release, its updates and security updates.
cat >"$ROOT/etc/apt/sources.list" <<EOF
deb $MIRROR bookworm main
deb $MIRROR bookworm-updates main
deb http://security.debian.org/debian-security bookworm-security main
EOF
cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
# No service starts inside the chroot.
printf '#!/bin/sh\nexit 101\n' >"$ROOT/usr/sbin/policy-rc.d"
chmod +x "$ROOT/usr/sbin/policy-rc.d"
cp "$DEB" "$MODEL" "$ROOT/tmp/"
DEB_IN=/tmp/$(basename "$DEB") MODEL_IN=/tmp/$(basename "$MODEL")

mount -t proc proc "$ROOT/proc" && MOUNTS+=("$ROOT/proc")
mount -t sysfs sysfs "$ROOT/sys" && MOUNTS+=("$ROOT/sys")
mount --bind /dev "$ROOT/dev" && MOUNTS+=("$ROOT/dev")

in_root() { chroot "$ROOT" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 "$@"; }

echo "== apt-get install --no-install-recommends $DEB_IN"
in_root apt-get update -q >"$WORK/apt.log" 2>&1 || { cat "$WORK/apt.log" >&2; fail "apt-get update"; }
before=$(in_root dpkg-query -W -f='${Package}\n' | sort)
in_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$DEB_IN" \
  >>"$WORK/apt.log" 2>&1 || { tail -n 40 "$WORK/apt.log" >&2; fail "apt-get install $DEB_IN"; }
after=$(in_root dpkg-query -W -f='${Package}\n' | sort)
echo "installed $(comm -13 <(echo "$before") <(echo "$after") | wc -l) packages," \
  "$(in_root dpkg-query -W -f='${Version}' spillway) of spillway"
in_root dpkg-query -W -f='${Status}\n' spillway | grep -qx "install ok installed" ||
  fail "dpkg: spillway not installed"
echo "Depends: $(in_root dpkg-query -W -f='${Depends}' spillway)"

echo "== spillway-cli --version"
version=$(in_root spillway-cli --version)
echo "$version"
[[ $version == "$(dpkg-deb -f "$DEB" Version)" ]] || fail "spillway-cli --version: '$version'"

echo "== spillway-cli info -m $MODEL_IN"
info=$(in_root spillway-cli info -m "$MODEL_IN") || { echo "$info" >&2; fail "spillway-cli info"; }
echo "$info" | head -n 4
grep -qE "^architecture +llama" <<<"$info" || fail "spillway-cli info: no 'architecture llama'"

echo "== spillway --help (QT_QPA_PLATFORM=offscreen)"
help=$(in_root env QT_QPA_PLATFORM=offscreen spillway --help 2>&1) ||
  { echo "$help" >&2; fail "spillway --help"; }
grep -q "^Usage: spillway" <<<"$help" || { echo "$help" >&2; fail "spillway --help: no usage"; }
echo "$help" | head -n 2

echo "== spillway --screenshot (QT_QPA_PLATFORM=offscreen, a new library)"
in_root env QT_QPA_PLATFORM=offscreen QT_DEBUG_PLUGINS=1 XDG_RUNTIME_DIR=/tmp \
  spillway --data-dir /tmp/spillway-data --window-size 1200x800 --screenshot /tmp/shot.png \
  >"$WORK/app.log" 2>&1 || { tail -n 40 "$WORK/app.log" >&2; fail "spillway --screenshot"; }
file "$ROOT/tmp/shot.png" | grep -q "PNG image data, 1200 x 800" ||
  fail "screenshot: $(file "$ROOT/tmp/shot.png")"
grep -q 'iconengines/libqsvgicon.so" loaded library' "$WORK/app.log" ||
  { grep -i "svg\|icon" "$WORK/app.log" >&2 || true; fail "Qt's SVG icon engine did not load"; }
echo "screenshot 1200 x 800; the SVG icon engine loaded"
if [[ -n ${SPILLWAY_CHROOT_SHOT:-} ]]; then cp "$ROOT/tmp/shot.png" "$SPILLWAY_CHROOT_SHOT"; fi
echo "PASS: the .deb installs on a clean Debian 12 and its programs run"
