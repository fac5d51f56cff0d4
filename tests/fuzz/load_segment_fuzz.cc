// The load segment (workloads/segment.cc): the file `sandgate-load run SEGMENT` reads inside the
// sandbox, written by the replayer from a trace. A segment that parses writes back the same.
#include "core/json.h"
#include "tests/fuzz/fuzz_check.h"
#include "workloads/segment.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sandgate;
  auto j = parse_json(fuzz::as_text(data, size), "segment.json");
  if (!j.ok()) return 0;
  auto seg = workloads::Segment::from_json(*j);
  if (!seg.ok()) {
    (void)seg.error().message();
    return 0;
  }
  Json out = seg->to_json();
  auto again = workloads::Segment::from_json(out);
  FUZZ_CHECK(again.ok(), "a written segment does not parse: " + again.error().message());
  FUZZ_CHECK(again->to_json() == out, "a segment changed: " + fuzz::brief(dump_json(out)));
  // The report the segment's run prints, read by the replayer from the sandbox's stdout.
  auto achieved = workloads::Achieved::from_json(*j);
  if (achieved.ok()) (void)achieved->to_json();
  return 0;
}
