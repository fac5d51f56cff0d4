// The AgentCgroup importer (replay/agentcgroup.cc, `sandgate trace import --from agentcgroup`):
// files from other people's runs, of every vintage. What it imports must be a valid
// `sandgate trace v1` trace: written out, it reads back as the same trace.
#include <cstdint>
#include <string>

#include "controller/policy.h"
#include "replay/agentcgroup.h"
#include "replay/trace.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sandgate;
  auto trace = replay::parse_agentcgroup(fuzz::as_text(data, size), "fuzz.jsonl");
  if (!trace.ok()) {
    (void)trace.error().message();
    return 0;
  }
  // Millicores come from a finite percentage times 10, rounded: never beyond int64 (llround's
  // range), whatever the percentage was.
  for (const auto& sample : trace->samples)
    FUZZ_CHECK(sample.cpu_millicores <= static_cast<uint64_t>(INT64_MAX),
               "cpu_millicores out of range: " + std::to_string(sample.cpu_millicores));
  std::string text = replay::format_trace(*trace);
  auto again = replay::parse_trace(text, "imported");
  FUZZ_CHECK(again.ok(), "an imported trace does not parse: " + again.error().message());
  FUZZ_CHECK(*again == *trace, "an imported trace changed when read back: " + fuzz::brief(text));
  return 0;
}
