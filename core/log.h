// Logging: spdlog to stderr. Level from --log-level or SANDGATE_LOG (trace..off).
// Never log between clone() and execve(): the child may only make async-signal-safe calls.
#pragma once

#include <spdlog/spdlog.h>

#include <string_view>

namespace sandgate {

// Sets up the stderr logger; unknown level names fall back to "warn".
void init_logging(std::string_view level);

}  // namespace sandgate
