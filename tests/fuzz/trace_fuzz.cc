// The `sandgate trace v1` codec (replay/trace.cc) on hostile bytes: a trace is recorded from
// inside a sandbox, and `trace stats|validate|import`, `replay` and `plan` read it. A trace that
// parses must write back out and read in again as the same trace.
#include "replay/trace.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sandgate;
  auto trace = replay::parse_trace(fuzz::as_text(data, size), "fuzz.trace");
  if (!trace.ok()) {
    (void)trace.error().message();  // every error can be said
    return 0;
  }
  std::string text = replay::format_trace(*trace);
  auto again = replay::parse_trace(text, "formatted");
  FUZZ_CHECK(again.ok(), "a formatted trace does not parse: " + again.error().message());
  FUZZ_CHECK(*again == *trace, "a trace changed on the way out and back: " + fuzz::brief(text));
  return 0;
}
