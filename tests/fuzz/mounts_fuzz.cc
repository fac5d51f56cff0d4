// The mount table (core/mounts.cc) and the cgroup layout read from it
// (controller/cgroup_layout.cc): /proc/self/mountinfo is the kernel's text, but its paths are
// what processes mounted, inside a user namespace anything (spaces, newlines as \012, any bytes).
#include "controller/cgroup_layout.h"
#include "core/mounts.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sandgate;
  std::string_view text = fuzz::as_text(data, size);
  auto mounts = parse_mount_table(text);
  if (mounts.ok()) {
    for (const auto& m : *mounts) (void)mount_points_under(*mounts, m.mount_point);
    (void)mount_points_under(*mounts, "/sys/fs/cgroup");
    (void)controller::classify_cgroup_mounts(*mounts);
  } else {
    (void)mounts.error().message();
  }
  auto layout = controller::parse_mountinfo(text);
  if (!layout.ok()) (void)layout.error().message();
  return 0;
}
