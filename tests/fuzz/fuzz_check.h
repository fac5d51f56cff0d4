// Shared by the fuzz harnesses (tests/fuzz/*_fuzz.cc). Each harness defines
// LLVMFuzzerTestOneInput; libFuzzer calls it in the fuzz build (SANDGATE_FUZZ), and
// regress_main.cc calls the same function on every checked-in input in the normal test build.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

// An invariant the harness checks: a failure is a finding, reported the way a sanitizer
// reports one (message on stderr, abort), so libFuzzer saves the input as a crash.
#define FUZZ_CHECK(cond, what)                                                        \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      std::fprintf(stderr, "fuzz invariant failed at %s:%d: %s\n  %s\n", __FILE__,    \
                   __LINE__, #cond, std::string(what).c_str());                       \
      std::abort();                                                                   \
    }                                                                                 \
  } while (0)

namespace sandgate::fuzz {

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// The first line of a message, cut: for invariant failures that quote a value.
inline std::string brief(std::string_view s) {
  return std::string(s.substr(0, 300));
}

}  // namespace sandgate::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
