# Cross build for 64-bit Arm Linux (Jetson, Raspberry Pi 5, Graviton) on a Debian x86-64 host,
# with Debian's cross compiler and the arm64 -dev packages installed through multiarch:
#
#   apt-get install g++-aarch64-linux-gnu qemu-user-static
#   dpkg --add-architecture arm64 && apt-get update
#   apt-get install libzstd-dev:arm64 libxxhash-dev:arm64 libpcre2-dev:arm64 libfmt-dev:arm64 \
#                   libgtest-dev:arm64 libnuma-dev:arm64
#   cmake -S . -B build-arm64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake \
#         -DSPILLWAY_ENGINE_ONLY=ON -DSPILLWAY_CUDA=OFF
#
# tests/cross/aarch64.sh does all of it and runs the engine tests under qemu-aarch64. Only the
# engine, its tests and bench tools build this way (SPILLWAY_ENGINE_ONLY): app/ needs Qt, poppler
# and ICU for arm64 as well.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(SPILLWAY_CROSS_TRIPLE aarch64-linux-gnu)
set(CMAKE_C_COMPILER ${SPILLWAY_CROSS_TRIPLE}-gcc)
set(CMAKE_CXX_COMPILER ${SPILLWAY_CROSS_TRIPLE}-g++)

# Multiarch: arm64 libraries live in /usr/lib/aarch64-linux-gnu of the host itself (no
# sysroot); headers are shared in /usr/include. The library architecture makes find_package
# and find_library look there and not in the host's /usr/lib/x86_64-linux-gnu.
set(CMAKE_LIBRARY_ARCHITECTURE ${SPILLWAY_CROSS_TRIPLE})
set(CMAKE_IGNORE_PATH /usr/lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu/cmake)

# pkg-config (PCRE2, zstd, xxHash): the arm64 .pc files only.
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/${SPILLWAY_CROSS_TRIPLE}/pkgconfig:/usr/share/pkgconfig)
set(ENV{PKG_CONFIG_PATH} "")

# Test binaries run under user-mode QEMU (gtest_discover_tests and add_test use this), with the
# multiarch loader /lib/ld-linux-aarch64.so.1 (libc6:arm64), the one that belongs to the libc.so.6
# they load. Not with -L /usr/aarch64-linux-gnu: the cross toolchain's ld.so is another glibc
# build, and with the multiarch libc its first pthread_create never returns.
find_program(SPILLWAY_QEMU_AARCH64 NAMES qemu-aarch64-static qemu-aarch64)
if(SPILLWAY_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${SPILLWAY_QEMU_AARCH64} -L /)
endif()
