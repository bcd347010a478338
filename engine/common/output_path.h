// Where a file written by "temporary file + rename" may go. Renaming onto a path replaces
// whatever is there, so the path is checked first: a symbolic link is followed (dangling ones
// too) to the file it names, so the link stays a link; anything that exists and is not a regular
// file (a device such as /dev/null, a FIFO, a folder) is refused, as is a path whose folder does
// not exist.
#pragma once

#include <string>

#include "engine/common/expected.h"

namespace spw {

/// The path to write (the link target for a symlink). Errors name the path:
/// "/dev/null: exists and is not a regular file; refusing to replace it",
/// "out/x.gguf: folder out does not exist", "no output path given".
Expected<std::string> resolve_output_path(const std::string& path);

}  // namespace spw
