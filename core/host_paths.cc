#include "core/host_paths.h"

#include <cstdlib>

namespace sandgate {

HostPaths HostPaths::from_environment() {
  HostPaths p;
  if (const char* s = std::getenv("SANDGATE_STATE_DIR"); s && *s) p.state_dir = s;
  if (const char* s = std::getenv("SANDGATE_WORK_DIR"); s && *s) p.work_dir = s;
  return p;
}

}  // namespace sandgate
