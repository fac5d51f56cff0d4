#include "core/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>
#include <string>

namespace sandgate {

void init_logging(std::string_view level) {
  std::string name(level);
  if (name.empty()) {
    const char* env = std::getenv("SANDGATE_LOG");
    name = env ? env : "warn";
  }
  // The thread-safe sink: serve's connections, the controller's reaper and monitor and a
  // provider's warm-up (providers/provider.h) log from threads of their own, and the
  // single-threaded sink formats each line in state of its own, unguarded.
  auto logger = spdlog::stderr_color_mt("sandgate");
  logger->set_pattern("sandgate: %^%l%$: %v");
  auto lvl = spdlog::level::from_str(name);
  // from_str maps unknown names to "off"; treat that as a typo and keep warnings.
  if (lvl == spdlog::level::off && name != "off") lvl = spdlog::level::warn;
  logger->set_level(lvl);
  spdlog::set_default_logger(logger);
}

}  // namespace sandgate

namespace sandgate {

void StepClock::lap(const char* step) {
  if (!spdlog::should_log(spdlog::level::debug)) return;
  auto now = std::chrono::steady_clock::now();
  steps_ += fmt::format(" {} {:.2f}", step,
                        std::chrono::duration<double, std::milli>(now - last_).count());
  last_ = now;
}

StepClock::~StepClock() {
  if (!steps_.empty())
    spdlog::debug("{}: {} (ms):{}; total {:.2f}", subject_, what_, steps_,
                  std::chrono::duration<double, std::milli>(last_ - start_).count());
}

}  // namespace sandgate
