// The trace `sandgate qualify` replays by default: traces/burst.trace (a short real
// burst-silence recording), compiled in by cli/CMakeLists.txt so that qualify needs no file
// beside the binary.
#pragma once

#include <string_view>

namespace sandgate::cli {

std::string_view qualify_trace_text();

}  // namespace sandgate::cli
