// The AgentCgroup importer (replay/agentcgroup.cc, `sandgate trace import --from agentcgroup`):
// files from other people's runs, of every vintage. What it imports must be a valid
// `sandgate trace v1` trace: written out, it reads back as the same trace.
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
  std::string text = replay::format_trace(*trace);
  auto again = replay::parse_trace(text, "imported");
  FUZZ_CHECK(again.ok(), "an imported trace does not parse: " + again.error().message());
  FUZZ_CHECK(*again == *trace, "an imported trace changed when read back: " + fuzz::brief(text));
  return 0;
}
