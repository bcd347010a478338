// Byte sizes as users type them: "8K", "1M", "2G", "512MiB", "1.5GiB", "4096". K/M/G/T and
// KiB/MiB/GiB/TiB are all powers of 1024 (so "1M" == "1MiB" == 1048576); "B" may follow.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "engine/common/expected.h"

namespace spw {

/// Parses a size. Errors name the text: "invalid size '12Q' (use a number with K, M, G or T,
/// e.g. 512M or 8GiB; all powers of 1024)"; negative or overflowing values are errors.
Expected<int64_t> parse_size(std::string_view text);

/// 1536 -> "1.5 KiB", 8388608 -> "8.0 MiB", 100 -> "100 B".
std::string format_size(int64_t bytes);

}  // namespace spw
