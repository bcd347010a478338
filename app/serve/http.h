// cpp-httplib as Debian builds it (a compiled library, 0.11.4): its classes change layout with
// the feature macros, so every file that includes it must define the ones the library was built
// with (pkg-config cpp-httplib --cflags). Targets that link PkgConfig::HTTPLIB get them from
// CMake; the test executables include this header instead of <httplib.h>.
#pragma once

#ifndef CPPHTTPLIB_OPENSSL_SUPPORT
#define CPPHTTPLIB_OPENSSL_SUPPORT
#endif
#ifndef CPPHTTPLIB_ZLIB_SUPPORT
#define CPPHTTPLIB_ZLIB_SUPPORT
#endif
#ifndef CPPHTTPLIB_BROTLI_SUPPORT
#define CPPHTTPLIB_BROTLI_SUPPORT
#endif
#include <httplib.h>
