// The small readers of kernel text (cgroup and /proc files): PSI lines (core/host_features.cc),
// /proc/meminfo (core/meminfo.cc), flat-keyed cgroup files such as memory.stat and cpu.stat and
// single numbers (controller/cgroup.cc), io.stat and blkio (replay/recorder.cc), the kernel
// release. The kernel writes them, but a container sees and can shape some (its own cgroup
// namespace, a FUSE /proc in a fake tree). The first byte picks the reader; all must return,
// never crash, on anything.
#include <cmath>

#include "controller/cgroup.h"
#include "controller/cgroup_internal.h"
#include "core/host_features.h"
#include "core/meminfo.h"
#include "core/units.h"
#include "replay/recorder.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sandgate;
  if (size == 0) return 0;
  std::string_view text = fuzz::as_text(data + 1, size - 1);
  switch (data[0] % 8) {
    case 0:
      if (auto p = parse_pressure(text); p.ok()) {
        // The monitor compares avg10 with a threshold: NaN or infinity would never (or always)
        // trip it.
        FUZZ_CHECK(std::isfinite(p->some.avg10) && std::isfinite(p->some.avg60) &&
                       std::isfinite(p->some.avg300),
                   "a pressure average that is not a number: " + fuzz::brief(text));
      }
      break;
    case 1:
      if (auto m = parse_meminfo(text); m.ok()) (void)m->used_bytes();
      break;
    case 2:
      if (auto m = controller::parse_flat_keyed(text); !m.ok()) (void)m.error().message();
      break;
    case 3:
      (void)controller::cgroup_detail::parse_u64(text);
      break;
    case 4:
      (void)replay::parse_io_stat_v2(text);
      (void)replay::parse_blkio_service_bytes(text);
      break;
    case 5:
      (void)controller::cgroup_detail::parse_kernel_release(text);
      break;
    case 6:
      (void)parse_bytes(text);
      (void)parse_duration(text);
      break;
    case 7: {
      uint64_t a = 0, b = 0;
      (void)controller::cgroup_detail::parse_flat_keyed_into(text, {{"usage_usec", &a}, {"nr_throttled", &b}});
      break;
    }
  }
  return 0;
}
