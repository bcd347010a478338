// The product version, from project(VERSION) in the top-level CMakeLists.txt.
#pragma once

#include <string_view>

namespace spw::app {

/// "0.1.0"
std::string_view version();

}  // namespace spw::app
