// Test-only: the reports the writer tests render. A small real one (a qualify run committed
// under testdata/) and a hostile one: every string a sandbox can put into a report, at once.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "reports/from_qualify.h"
#include "reports/model.h"
#include "tests/support/privileged.h"

namespace sandgate::reports::testing {

// `sandgate qualify --cycles 1 --calls 3 --only creds --allow-unsafe-host --provider
// namespaces --provider host_dir`, as written (the probe files' recorded paths point at the
// directory it was written to, since removed: the loader finds them beside qualify.json).
inline std::string fixture_dir() {
  return ::sandgate::testing::source_dir() + "/reports/testdata/qualify-creds";
}

inline Report real_report() {
  auto r = load_report(fixture_dir() + "/qualify.json");
  EXPECT_TRUE(r.ok()) << r.error().message();
  return r.ok() ? std::move(r).value() : Report{};
}

// Control characters, an ANSI colour and a terminal title sequence, markup of every kind,
// CDATA and comment terminators, invalid UTF-8, a bidirectional override, a Markdown link and
// table pipe, and a line far longer than any writer keeps.
inline std::string hostile_text() {
  return std::string(
             "\x1b[31mRED\x1b[0m \x1b]0;pwned\x07 <script>alert(1)</script> "
             "<img src=x onerror=alert(2)> & \"dq\" 'sq' ]]> --> <!-- \x01\x02\x7f "
             "\xc2\x9b \xc3\x28 \xff\xfe \xe2\x80\xae"
             "evil\xe2\x80\xac "
             "[link](https://attacker.example/x) | cell | `code` *bold* # head\n"
             "second line\r\n") +
         std::string(50000, 'A') + "TAIL-NEVER-SHOWN";
}

// The real report with hostile text wherever a sandbox (or a hostile provider) can put it: one
// exposed, one inconclusive and one warning verdict whose every field is hostile.
inline Report hostile_report() {
  Report r = real_report();
  std::string evil = hostile_text();
  ProviderReport p;
  p.name = "evil" + evil.substr(0, 200);
  p.display_name = evil;
  p.unsafe = false;
  p.capabilities = {evil.substr(0, 300)};
  p.qualified = false;
  p.disqualifications = {evil};
  p.costs.run_samples_ms = {10};
  p.costs.run_ms = 10;
  p.costs.exec_ms = 2;
  p.costs.call_ms = 5;
  p.probes.emplace();
  auto verdict = [&](probes::Verdict v, const std::string& id) {
    ProbeVerdict pv;
    pv.id = id;
    pv.boundary = "creds";
    pv.attempt = evil;
    pv.verdict = v;
    pv.why = evil;
    pv.witness = "canary";
    pv.judgement = {{"id", id},
                    {"host", {{"decoy_events", {evil}}, {"notes", {evil}}}},
                    {"sandbox", {{"attempt", evil}, {"evidence", {{"bytes", evil}}}}}};
    p.probes->push_back(pv);
  };
  verdict(probes::Verdict::kExposed, "creds.env_tokens");
  verdict(probes::Verdict::kInconclusive, "creds.home_files");
  verdict(probes::Verdict::kWarning, "persist.git_hooks");
  verdict(probes::Verdict::kExposed, "creds." + evil.substr(0, 100));
  r.providers.push_back(std::move(p));
  r.rules["persist.git_hooks"] = {"persist.git_hooks", "persist", evil, "host_file", evil};
  std::string odd = "creds." + evil.substr(0, 100);
  r.rules[odd] = {odd, "creds", evil, "canary", evil};
  return r;
}

}  // namespace sandgate::reports::testing
