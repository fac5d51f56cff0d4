// The external provider protocol as sandgate reads it (providers/external_protocol.cc): every
// line an external provider program prints, read as each kind of reply it may be. base64 output
// fields decode, and what decodes encodes back to the same text.
#include "providers/external_protocol.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sandgate;
  using namespace sandgate::providers::external;
  std::string line(fuzz::as_text(data, size));
  for (long long id : {1LL, -1LL}) {
    auto parsed = parse_line(line, id, "fuzz");
    if (!parsed.ok()) {
      (void)parsed.error().message();
      continue;
    }
    const Json& j = parsed->json;
    if (parsed->event) {
      (void)parse_started_event(j);
      continue;
    }
    if (auto d = parse_describe_reply(j); !d.ok()) (void)d.error().message();
    if (auto c = parse_create_reply(j); !c.ok()) (void)c.error().message();
    if (auto e = parse_exec_reply(j, 1 << 20); !e.ok()) (void)e.error().message();
    if (auto s = parse_destroy_reply(j); !s.ok()) (void)s.error().message();
  }
  auto decoded = base64_decode(line);
  if (decoded.ok()) {
    std::string encoded = base64_encode(*decoded);
    auto back = base64_decode(encoded);
    FUZZ_CHECK(back.ok() && *back == *decoded, "base64 did not round-trip: " + fuzz::brief(line));
  }
  return 0;
}
