// Skip loudly, never pass quietly (bubblewrap BWRAP_MUST_WORK, gVisor SKIP_IF).
//
// SANDGATE_REQUIRE(cond, reason) skips the test with the reason when cond is false, unless
// SANDGATE_MUST_WORK=1 (set by CI), where the same situation is a failure.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace sandgate::testing {

inline bool must_work() {
  const char* v = std::getenv("SANDGATE_MUST_WORK");
  return v && std::string(v) == "1";
}

inline bool is_root() { return ::geteuid() == 0; }

// The source tree (for testdata): SANDGATE_SOURCE_DIR, set by CTest.
inline std::string source_dir() {
  const char* v = std::getenv("SANDGATE_SOURCE_DIR");
  return v ? v : ".";
}

}  // namespace sandgate::testing

#define SANDGATE_REQUIRE(cond, reason)                                              \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      if (::sandgate::testing::must_work()) {                                       \
        FAIL() << "SANDGATE_MUST_WORK=1 but this test cannot run: " << (reason);    \
      } else {                                                                      \
        GTEST_SKIP() << (reason);                                                   \
      }                                                                             \
    }                                                                               \
  } while (0)

#define SANDGATE_REQUIRE_ROOT() SANDGATE_REQUIRE(::sandgate::testing::is_root(), "needs root")
