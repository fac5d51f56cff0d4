// The policy file (controller/policy_json.cc): `--policy FILE` on every command, and the policy a
// `serve` client may send. A policy that parses must write out as JSON that parses to the same
// policy.
#include "controller/policy.h"
#include "core/json.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sandgate;
  auto j = parse_json(fuzz::as_text(data, size), "fuzz-policy.json");
  if (!j.ok()) return 0;
  auto policy = controller::parse_policy(*j, "fuzz-policy.json");
  if (!policy.ok()) {
    (void)policy.error().message();
    return 0;
  }
  Json out = controller::to_json(*policy);
  auto again = controller::parse_policy(out, "written");
  FUZZ_CHECK(again.ok(), "a written policy does not parse: " + again.error().message());
  FUZZ_CHECK(controller::to_json(*again) == out,
             "a policy changed on the way out and back: " + fuzz::brief(dump_json(out)));
  return 0;
}
