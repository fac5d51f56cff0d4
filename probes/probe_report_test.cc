#include "probes/probe_report.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace sandgate::probes {
namespace {

using ::testing::HasSubstr;

ProbeReport sample() {
  ProbeReport r;
  r.id = "fs.read_host_canary";
  r.boundary = "fs";
  r.attempt = "open(/home/u/canary, O_RDONLY) and read it";
  r.result = ProbeResult::kDenied;
  r.errno_name = "EACCES";
  r.evidence = {{"bytes_read", 0}, {"path", "/home/u/canary"}};
  r.preconditions = true;
  r.detail = "Permission denied";
  return r;
}

TEST(ProbeResult, EveryValueRoundTrips) {
  for (auto r :
       {ProbeResult::kReached, ProbeResult::kDenied, ProbeResult::kNotFound, ProbeResult::kError}) {
    auto back = probe_result_from_string(to_string(r));
    ASSERT_TRUE(back.ok()) << back.error().message();
    EXPECT_EQ(*back, r);
  }
  EXPECT_EQ(to_string(ProbeResult::kNotFound), "not_found");
}

TEST(ProbeResult, UnknownNameIsAnErrorListingTheValidOnes) {
  auto r = probe_result_from_string("blocked");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error().message(), HasSubstr("'blocked'"));
  EXPECT_THAT(r.error().message(), HasSubstr("not_found"));
}

TEST(ProbeReport, JsonRoundTripKeepsEveryField) {
  ProbeReport r = sample();
  Json j = r.to_json();
  EXPECT_EQ(j["result"], "denied");
  EXPECT_EQ(j["errno"], "EACCES");
  auto back = ProbeReport::from_json(j);
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(back->to_json(), j);
  EXPECT_EQ(back->id, r.id);
  EXPECT_EQ(back->result, r.result);
  EXPECT_EQ(back->evidence, r.evidence);
  EXPECT_TRUE(back->preconditions);

  r.preconditions = false;
  r.result = ProbeResult::kError;
  auto back2 = ProbeReport::from_json(Json::parse(r.to_json().dump()));
  ASSERT_TRUE(back2.ok()) << back2.error().message();
  EXPECT_FALSE(back2->preconditions);
  EXPECT_EQ(back2->result, ProbeResult::kError);
}

TEST(ProbeReport, OptionalFieldsMayBeAbsent) {
  auto r = ProbeReport::from_json({{"id", "net.raw_socket"},
                                   {"boundary", "net"},
                                   {"attempt", "socket"},
                                   {"result", "reached"}});
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_TRUE(r->preconditions);
  EXPECT_TRUE(r->evidence.is_object());
  EXPECT_EQ(r->errno_name, "");
}

// Each malformed report names the field at fault.
struct Malformed {
  const char* name;
  const char* field_in_message;
  void (*mutate)(Json&);
};

TEST(ProbeReport, MalformedInputNamesTheField) {
  const Malformed cases[] = {
      {"missing id", "'id'", [](Json& j) { j.erase("id"); }},
      {"id not a string", "'id'", [](Json& j) { j["id"] = 7; }},
      {"missing boundary", "'boundary'", [](Json& j) { j.erase("boundary"); }},
      {"missing attempt", "'attempt'", [](Json& j) { j.erase("attempt"); }},
      {"missing result", "'result'", [](Json& j) { j.erase("result"); }},
      {"unknown result", "'result'", [](Json& j) { j["result"] = "blocked"; }},
      {"result not a string", "'result'", [](Json& j) { j["result"] = true; }},
      {"errno not a string", "'errno'", [](Json& j) { j["errno"] = 13; }},
      {"evidence not an object", "'evidence'", [](Json& j) { j["evidence"] = Json::array(); }},
      {"preconditions not a bool", "'preconditions'", [](Json& j) { j["preconditions"] = "yes"; }},
      {"detail not a string", "'detail'", [](Json& j) { j["detail"] = Json::object(); }},
      {"id outside its boundary", "'id'", [](Json& j) { j["boundary"] = "net"; }},
      {"empty id", "'id'", [](Json& j) { j["id"] = ""; }},
  };
  for (const auto& c : cases) {
    Json j = sample().to_json();
    c.mutate(j);
    auto r = ProbeReport::from_json(j);
    ASSERT_FALSE(r.ok()) << c.name;
    EXPECT_THAT(r.error().message(), HasSubstr(c.field_in_message)) << c.name;
  }
  auto not_object = ProbeReport::from_json(Json::array());
  ASSERT_FALSE(not_object.ok());
  EXPECT_THAT(not_object.error().message(), HasSubstr("expected an object"));
}

}  // namespace
}  // namespace sandgate::probes
