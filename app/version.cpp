#include "app/version.h"

// SPILLWAY_VERSION_STRING is defined for this file only, so a version bump recompiles one file.
namespace spw::app {

std::string_view version() { return SPILLWAY_VERSION_STRING; }

}  // namespace spw::app
