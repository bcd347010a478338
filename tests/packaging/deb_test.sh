#!/usr/bin/env bash
# The Debian package (packaging/CMakeLists.txt), built from a build folder and inspected:
#   bash tests/packaging/deb_test.sh BUILD_DIR VERSION GUI(0|1) SPILLWAY_TESTMODEL
# cpack -G DEB into a temporary folder; `dpkg-deb -c` lists the executables, man pages, systemd
# user units and (GUI) the desktop entry, hicolor icon and AppStream metainfo; `dpkg-deb -f` has
# Package, Version, Architecture and a Depends from dpkg-shlibdeps (libc6, Qt 6 Core) plus (GUI)
# libqt6svg6; appstreamcli validates the metainfo offline; installed with `dpkg --root` into an
# empty root (as root; else unpacked), its spillway-cli runs `--version` and `info -m` on a
# generated model. Exit 77 (CTest: skipped) when dpkg-deb, dpkg-shlibdeps, appstreamcli or cpack
# is missing. tests/packaging/deb_chroot.sh (manual: debootstrap, network) installs the package
# with apt on a clean Debian 12 and runs both programs there.
set -euo pipefail
[[ $# -eq 4 ]] || { echo "usage: deb_test.sh BUILD_DIR VERSION GUI TESTMODEL" >&2; exit 2; }
BUILD=$1 VERSION=$2 GUI=$3 TESTMODEL=$4

for tool in dpkg-deb dpkg-shlibdeps cpack; do
  command -v "$tool" >/dev/null || { echo "SKIP: $tool not found (dpkg-dev, cmake)"; exit 77; }
done
if [[ $GUI == 1 ]] && ! command -v appstreamcli >/dev/null; then
  echo "SKIP: appstreamcli not found (Debian's appstream package)"
  exit 77
fi

fail() { echo "FAIL: $*" >&2; exit 1; }
OUT=$(mktemp -d "${TMPDIR:-/tmp}/spillway-deb-test.XXXXXX")
trap 'rm -rf "$OUT"' EXIT

cpack -G DEB --config "$BUILD/CPackConfig.cmake" -B "$OUT" >"$OUT/cpack.log" 2>&1 ||
  { cat "$OUT/cpack.log" >&2; fail "cpack -G DEB failed"; }
ARCH=$(dpkg --print-architecture)
DEB="$OUT/spillway_${VERSION}_${ARCH}.deb"
[[ -f $DEB ]] || { ls -l "$OUT" >&2; fail "no $(basename "$DEB") from cpack"; }
echo "built $(basename "$DEB") ($(stat -c %s "$DEB") bytes)"

LIST=$(dpkg-deb -c "$DEB" | awk '{print $NF}')
want=(
  ./usr/bin/spillway-cli
  ./usr/share/man/man1/spillway-cli.1.gz
  ./usr/lib/systemd/user/spillway-jobs.service
  ./usr/lib/systemd/user/spillway-jobs.timer
)
if [[ $GUI == 1 ]]; then
  want+=(
    ./usr/bin/spillway
    ./usr/share/man/man1/spillway.1.gz
    ./usr/share/applications/spillway.desktop
    ./usr/share/icons/hicolor/scalable/apps/spillway.svg
    ./usr/share/metainfo/io.github.spillway.Spillway.metainfo.xml
  )
fi
for f in "${want[@]}"; do
  grep -qxF "$f" <<<"$LIST" || { echo "$LIST" >&2; fail "dpkg-deb -c does not list $f"; }
done
echo "dpkg-deb -c: all ${#want[@]} expected files"
# Nothing of the build's own (tests, static libraries, headers) goes in.
if grep -E '\.a$|/include/|_tests$|testmodel' <<<"$LIST"; then fail "build-only files packaged"; fi

field() { dpkg-deb -f "$DEB" "$1"; }
[[ $(field Package) == spillway ]] || fail "Package: $(field Package)"
[[ $(field Version) == "$VERSION" ]] || fail "Version: $(field Version), want $VERSION"
[[ $(field Architecture) == "$ARCH" ]] || fail "Architecture: $(field Architecture)"
DEPENDS=$(field Depends)
echo "Depends: $DEPENDS"
grep -qE '(^|, )libc6 \(>= ' <<<"$DEPENDS" || fail "Depends lacks a versioned libc6"
grep -qE '(^|, )libqt6core6' <<<"$DEPENDS" || fail "Depends lacks Qt 6 Core (libqt6core6)"
if [[ $GUI == 1 ]]; then  # the SVG plugins, invisible to dpkg-shlibdeps (packaging/CMakeLists.txt)
  grep -qE '(^|, )libqt6svg6' <<<"$DEPENDS" || fail "Depends lacks libqt6svg6 (the SVG icon)"
fi

# As root, install it with dpkg into an empty root (its Depends forced: that root has no other
# package; `apt-get install -s ./spillway_*.deb` checks them against the machine's); else unpack.
ROOT="$OUT/root"
if [[ $(id -u) -eq 0 ]]; then
  mkdir -p "$ROOT/var/lib/dpkg/info" "$ROOT/var/lib/dpkg/updates"
  touch "$ROOT/var/lib/dpkg/status"
  dpkg --root="$ROOT" --force-depends -i "$DEB" >"$OUT/dpkg.log" 2>&1 ||
    { cat "$OUT/dpkg.log" >&2; fail "dpkg --root -i"; }
  [[ $(dpkg --root="$ROOT" -s spillway | sed -n 's/^Status: //p') == "install ok installed" ]] ||
    fail "dpkg --root -s spillway: not installed"
  echo "installed with dpkg --root (Depends forced)"
else
  dpkg-deb -x "$DEB" "$ROOT"
  echo "not root: unpacked with dpkg-deb -x instead of installed"
fi
if [[ $GUI == 1 ]]; then
  appstreamcli validate --no-net "$ROOT/usr/share/metainfo/io.github.spillway.Spillway.metainfo.xml" ||
    fail "appstreamcli validate"
fi
for page in "$ROOT"/usr/share/man/man1/*.1.gz; do
  zcat "$page" | head -1 | grep -q "^\.TH .* \"Spillway $VERSION\"" || fail "$page: no .TH line"
done

CLI="$ROOT/usr/bin/spillway-cli"
[[ $("$CLI" --version) == *"$VERSION"* ]] || fail "spillway-cli --version: $("$CLI" --version)"
"$TESTMODEL" -o "$OUT/model.gguf" --arch llama --type Q8_0 >/dev/null
INFO=$("$CLI" info -m "$OUT/model.gguf") || fail "spillway-cli info -m failed"
grep -q "llama" <<<"$INFO" || { echo "$INFO" >&2; fail "info does not name the architecture"; }
echo "the installed spillway-cli runs: --version, info -m"
echo "PASS"
