// One line for the status bar about where the engine runs, for front ends that must not
// include engine headers (ui/).
#pragma once

#include <string>

namespace spw::app {

/// "CUDA: NVIDIA H200 (sm_90), 131.2 GiB of 139.8 GiB free" when a usable device is present;
/// otherwise "CPU — " and the reason CUDA is not used ("no CUDA driver found: ...", "this
/// build has no CUDA backend ..."). Probes the CUDA runtime (cheap after the first call).
std::string backend_status_line();

/// True when sessions with device "auto" would run on a CUDA device.
bool cuda_usable();

}  // namespace spw::app
