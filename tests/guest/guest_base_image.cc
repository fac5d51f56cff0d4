// Prints the path of the microVM's cached read-only base image (providers/guest_image.h),
// building it first when the cache has none for this host's current /usr. The guest lane's
// end-to-end run (tests/guest/lane_e2e.sh) attaches that image as the guest's /usr, so that
// the session-level tests see on a pure cgroup v2 kernel the userland they see here.
//
//   guest_base_image        path on stdout, exit 0; an error on stderr, exit 1
#include <cstdio>

#include "providers/guest_image.h"
#include "providers/provider.h"

int main() {
  using namespace sandgate;
  const providers::EnvSpec spec;  // the sandbox user every provider defaults to
  auto image = providers::guest_base_image(providers::guest_cache_dir(), spec.uid, spec.gid);
  if (!image.ok()) {
    std::fprintf(stderr, "guest_base_image: %s\n", image.error().message().c_str());
    return 1;
  }
  std::printf("%s\n", image->c_str());
  return 0;
}
