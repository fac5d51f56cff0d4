#include "replay/suggest.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/test_temp_dir.h"
#include "replay/call_use.h"

namespace sandgate::replay {
namespace {

constexpr uint64_t MB = uint64_t{1} << 20;

// A run holding 100 MiB, 100 millicores and 2 pids between calls. Each call (intent, k) lasts
// 2 s and peaks at exactly k MiB, 50k millicores and k pids above that baseline.
struct Builder {
  Trace t;
  int64_t now = 0;
  int n = 0;
  Builder() {
    t.header.source = "synthetic";
    t.header.interval_ms = 1000;
    idle();
  }
  void idle() {
    t.samples.push_back({now, 100 * MB, 100, 2, 0, std::nullopt});
    now += 1000;
  }
  void call(const std::string& intent, uint64_t k) {
    std::string id = "c" + std::to_string(++n);
    t.calls.push_back({id, intent, "exec", "x", now, now + 2000, false});
    t.samples.push_back({now + 500, 100 * MB + k * MB / 2, 100 + 25 * k, 2 + k / 2, 0, id});
    t.samples.push_back({now + 1500, 100 * MB + k * MB, 100 + 50 * k, 2 + k, 0, id});
    now += 2000;
    idle();
    idle();
  }
};

std::vector<std::pair<std::string, Trace>> one(const Trace& t) { return {{"t.jsonl", t}}; }

const IntentEvidence& intent(const Suggestion& s, const std::string& name) {
  for (const auto& e : s.intents)
    if (e.intent == name) return e;
  ADD_FAILURE() << "no intent " << name;
  return s.intents.front();
}

// 20 test calls peaking 10, 20, ..., 200 MiB above the baseline.
Trace twenty_tests() {
  Builder b;
  for (uint64_t k = 1; k <= 20; ++k) b.call("test", 10 * k);
  return b.t;
}

TEST(CallUse, BaselineIsTheMedianOutsideCallsAndUseThePeakAboveIt) {
  Builder b;
  b.call("test", 30);
  RunBaseline base = run_baseline(b.t);
  EXPECT_DOUBLE_EQ(base.mem, 100.0 * MB);
  EXPECT_DOUBLE_EQ(base.cpu, 100);
  EXPECT_DOUBLE_EQ(base.pids, 2);
  auto uses = call_uses(b.t, base);
  ASSERT_EQ(uses.size(), 1u);
  EXPECT_DOUBLE_EQ(uses[0].above_baseline, 30.0 * MB);
  EXPECT_DOUBLE_EQ(uses[0].cpu_above_baseline, 1500);
  EXPECT_DOUBLE_EQ(uses[0].pids_above_baseline, 30);
  EXPECT_DOUBLE_EQ(uses[0].seconds, 2);
}

TEST(Suggest, GrantIsTheQuantileTimesHeadroomRoundedUp) {
  SuggestOptions o;  // q0.99, +10%
  auto s = suggest_policy(one(twenty_tests()), controller::default_policy(), o);
  ASSERT_TRUE(s.ok()) << s.error().message();
  const auto& e = intent(*s, "test");
  EXPECT_EQ(e.calls, 20u);
  // Nearest rank of 20 values: p50 is the 10th (100 MiB), p90 the 18th, p99 the 20th.
  EXPECT_DOUBLE_EQ(e.memory.p50, 100.0 * MB);
  EXPECT_DOUBLE_EQ(e.memory.p90, 180.0 * MB);
  EXPECT_DOUBLE_EQ(e.memory.p99, 200.0 * MB);
  EXPECT_DOUBLE_EQ(e.memory.max, 200.0 * MB);
  // 200 MiB x 1.1 = 220 MiB -> 224 MiB (14 x 16 MiB).
  const controller::Grant& g = s->policy.intents.at("test");
  ASSERT_TRUE(g.memory_max);
  EXPECT_EQ(g.memory_max->value, 224 * MB);
  EXPECT_FALSE(g.memory_high) << "memory_high is dropped for a sized intent";
  // 10 cores x 1.1 = 11 cores, exactly; pids 200 x 1.1 = 220 -> 224 (28 x 8).
  ASSERT_TRUE(g.cpu_cores);
  EXPECT_DOUBLE_EQ(*g.cpu_cores, 11.0);
  ASSERT_TRUE(g.pids_max);
  EXPECT_EQ(*g.pids_max, 224u);
  // Everything else is the base policy's.
  const controller::Grant& base = controller::default_policy().intents.at("test");
  EXPECT_EQ(g.timeout, base.timeout);
  EXPECT_EQ(g.open_files, base.open_files);
  EXPECT_EQ(g.file_size, base.file_size);
  EXPECT_EQ(s->policy.inference.size(), controller::default_policy().inference.size());
  // 11 cores are more than the base's run ceiling (2): raised, and said.
  EXPECT_DOUBLE_EQ(*s->policy.run.cpu_cores, 11.0);
  EXPECT_THAT(s->notes, ::testing::Contains(::testing::HasSubstr("run.cpu raised from 2 to 11")));
}

TEST(Suggest, QuantileAndHeadroomAreTheOnesAsked) {
  SuggestOptions o;
  o.quantile = 0.9;  // the 18th of 20: 180 MiB
  o.headroom = 0;
  auto s = suggest_policy(one(twenty_tests()), controller::default_policy(), o);
  ASSERT_TRUE(s.ok()) << s.error().message();
  EXPECT_EQ(s->policy.intents.at("test").memory_max->value, 192 * MB);  // 180 -> 12 x 16
  EXPECT_DOUBLE_EQ(*s->policy.intents.at("test").cpu_cores, 9.0);       // 9000 millicores
  EXPECT_EQ(*s->policy.intents.at("test").pids_max, 184u);              // 180 -> 23 x 8
  o.quantile = 0.5;  // the 10th: 100 MiB, x 1.5 = 150 -> 160
  o.headroom = 0.5;
  s = suggest_policy(one(twenty_tests()), controller::default_policy(), o);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->policy.intents.at("test").memory_max->value, 160 * MB);
  EXPECT_DOUBLE_EQ(*s->policy.intents.at("test").cpu_cores, 7.5);
}

TEST(Suggest, AWholeNumberOfUnitsIsNotRoundedFurther) {
  Builder b;
  for (int i = 0; i < 10; ++i) b.call("run", 32);
  SuggestOptions o;
  o.headroom = 0;
  auto s = suggest_policy(one(b.t), controller::default_policy(), o);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->policy.intents.at("run").memory_max->value, 32 * MB);
  EXPECT_DOUBLE_EQ(*s->policy.intents.at("run").cpu_cores, 1.6);
  EXPECT_EQ(*s->policy.intents.at("run").pids_max, 32u);
}

TEST(Suggest, CallsThatUsedNothingGetOneUnit) {
  Builder b;
  for (int i = 0; i < 10; ++i) b.call("search", 0);
  auto s = suggest_policy(one(b.t), controller::default_policy(), {});
  ASSERT_TRUE(s.ok());
  const auto& g = s->policy.intents.at("search");
  EXPECT_EQ(g.memory_max->value, 16 * MB);
  EXPECT_DOUBLE_EQ(*g.cpu_cores, 0.1);
  EXPECT_EQ(*g.pids_max, 8u);
}

TEST(Suggest, TooFewCallsKeepTheBaseGrantAndTheEvidenceSaysSo) {
  Builder b;
  for (uint64_t k = 1; k <= 9; ++k) b.call("edit", 300);  // 9 calls: below 10
  for (uint64_t k = 1; k <= 10; ++k) b.call("run", 300);  // 10: sized
  const auto& base = controller::default_policy();
  auto s = suggest_policy(one(b.t), base, {});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->policy.intents.at("edit"), base.intents.at("edit"));
  EXPECT_EQ(s->policy.intents.at("compile"), base.intents.at("compile"));  // no calls at all
  EXPECT_NE(s->policy.intents.at("run"), base.intents.at("run"));
  EXPECT_EQ(s->policy.intents.at("run").memory_max->value, 336 * MB);  // 330 -> 21 x 16
  const auto& edit = intent(*s, "edit");
  EXPECT_EQ(edit.calls, 9u);
  EXPECT_FALSE(edit.memory.sized);
  EXPECT_DOUBLE_EQ(edit.memory.max, 300.0 * MB) << "the figures are still reported";
  EXPECT_THAT(edit.why, ::testing::HasSubstr("9 calls, fewer than 10 (--min-calls)"));
  EXPECT_THAT(intent(*s, "compile").why, ::testing::HasSubstr("0 calls"));
  // The threshold is the option's.
  SuggestOptions o;
  o.min_calls = 9;
  s = suggest_policy(one(b.t), base, o);
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(intent(*s, "edit").memory.sized);
  EXPECT_EQ(s->policy.intents.at("edit").memory_max->value, 336 * MB);
}

TEST(Suggest, UnmeasuredPidsKeepTheBasePidsAndANoteSaysWhy) {
  Trace t = twenty_tests();
  t.header.unmeasured = {"pids", "io_bytes"};
  auto s = suggest_policy(one(t), controller::default_policy(), {});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->policy.intents.at("test").pids_max,
            controller::default_policy().intents.at("test").pids_max);
  EXPECT_FALSE(intent(*s, "test").pids.sized);
  EXPECT_THAT(s->notes, ::testing::Contains(::testing::HasSubstr("pids_max not sized: 1 of 1")));
  EXPECT_EQ(s->policy.intents.at("test").memory_max->value, 224 * MB);
}

TEST(Suggest, AnIntentTheBaseLacksCountsUnderDefault) {
  Builder b;
  for (int i = 0; i < 10; ++i) b.call("lint", 40);  // 44 -> 48
  auto s = suggest_policy(one(b.t), controller::default_policy(), {});
  ASSERT_TRUE(s.ok());
  EXPECT_FALSE(s->policy.intents.contains("lint"));
  EXPECT_EQ(s->policy.intents.at("default").memory_max->value, 48 * MB);
  EXPECT_THAT(intent(*s, "default").pooled, ::testing::ElementsAre("lint"));
}

TEST(Suggest, PoolsEveryTrace) {
  Builder a, b;
  for (int i = 0; i < 5; ++i) a.call("run", 16);
  for (int i = 0; i < 5; ++i) b.call("run", 64);
  SuggestOptions o;
  o.headroom = 0;
  auto s = suggest_policy({{"a", a.t}, {"b", b.t}}, controller::default_policy(), o);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(intent(*s, "run").calls, 10u);
  EXPECT_EQ(s->policy.intents.at("run").memory_max->value, 64 * MB);
  EXPECT_EQ(s->traces, (std::vector<std::string>{"a", "b"}));
}

TEST(Suggest, TheResultLoadsBackAsAPolicy) {
  Builder b;
  for (int i = 0; i < 10; ++i) b.call("test", 5000);  // above the 4 GiB run ceiling
  auto s = suggest_policy(one(b.t), controller::default_policy(), {});
  ASSERT_TRUE(s.ok()) << s.error().message();
  EXPECT_GT(s->policy.intents.at("test").memory_max->value, uint64_t{4} << 30);
  EXPECT_EQ(s->policy.run.memory_max, s->policy.intents.at("test").memory_max);
  // Through the file, as `policy --check` and `replay --policy` load it.
  sandgate::testing::TempDir dir;
  const std::string path = dir.path() + "/p.json";
  ASSERT_TRUE(write_json_file_atomic(path, controller::to_json(s->policy)).ok());
  auto back = controller::load_policy_file(path);
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(controller::to_json(*back), controller::to_json(s->policy));
  EXPECT_EQ(back->intents, s->policy.intents);
  EXPECT_EQ(back->run, s->policy.run);
}

TEST(Suggest, EvidenceListsEachIntentWithItsFigures) {
  auto s = suggest_policy(one(twenty_tests()), controller::default_policy(), {});
  ASSERT_TRUE(s.ok());
  Json j = to_json(*s);
  EXPECT_EQ(j["schema_version"], kSuggestEvidenceSchemaVersion);
  EXPECT_EQ(j["calls"], 20);
  EXPECT_EQ(j["quantile"], 0.99);
  const Json* test = nullptr;
  for (const auto& i : j["intents"])
    if (i["intent"] == "test") test = &i;
  ASSERT_NE(test, nullptr);
  EXPECT_EQ((*test)["calls"], 20);
  EXPECT_EQ((*test)["memory"]["p90_bytes"], 180.0 * MB);
  EXPECT_EQ((*test)["memory"]["at_quantile_bytes"], 200.0 * MB);
  EXPECT_EQ((*test)["grant"]["memory_max"], "224MiB");
  EXPECT_EQ((*test)["base_grant"]["memory_max"], "1.50GiB");
  EXPECT_THAT((*test)["memory"]["why"].get<std::string>(), ::testing::HasSubstr("q0.99"));
  EXPECT_EQ(j["intents"].size(), controller::default_policy().intents.size());
}

TEST(Suggest, RefusesWhatItCannotSizeOn) {
  const auto& base = controller::default_policy();
  auto empty = suggest_policy({}, base, {});
  ASSERT_FALSE(empty.ok());
  EXPECT_THAT(empty.error().message(), ::testing::HasSubstr("no traces"));
  Trace no_samples;
  auto bare = suggest_policy({{"dir/bare.jsonl", no_samples}}, base, {});
  ASSERT_FALSE(bare.ok());
  EXPECT_THAT(bare.error().message(), ::testing::HasSubstr("dir/bare.jsonl"));
  EXPECT_THAT(bare.error().message(), ::testing::HasSubstr("no samples"));
  controller::Policy fixed = controller::static_policy({});
  auto st = suggest_policy(one(twenty_tests()), fixed, {});
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.error().message(), ::testing::HasSubstr("static mode"));
}

TEST(SuggestParse, QuantileIsAFractionOrAPercent) {
  EXPECT_DOUBLE_EQ(*parse_quantile("0.99"), 0.99);
  EXPECT_DOUBLE_EQ(*parse_quantile("99%"), 0.99);
  EXPECT_DOUBLE_EQ(*parse_quantile("1"), 1.0);
  EXPECT_DOUBLE_EQ(*parse_quantile("50%"), 0.5);
  for (const char* bad :
       {"0", "0%", "1.5", "101%", "-0.5", "abc", "", "%", "0.9x", " 0.9", "nan", "inf"}) {
    auto q = parse_quantile(bad);
    ASSERT_FALSE(q.ok()) << bad;
    EXPECT_THAT(q.error().message(), ::testing::HasSubstr("--quantile")) << bad;
    EXPECT_THAT(q.error().message(), ::testing::HasSubstr("got '" + std::string(bad) + "'"));
  }
}

TEST(SuggestParse, HeadroomIsAFractionOrAPercent) {
  EXPECT_DOUBLE_EQ(*parse_headroom("10%"), 0.1);
  EXPECT_DOUBLE_EQ(*parse_headroom("0.1"), 0.1);
  EXPECT_DOUBLE_EQ(*parse_headroom("0"), 0.0);
  EXPECT_DOUBLE_EQ(*parse_headroom("150%"), 1.5);
  for (const char* bad : {"-5%", "-0.1", "2000%", "11", "ten", "10 %", "", "10%%"}) {
    auto h = parse_headroom(bad);
    ASSERT_FALSE(h.ok()) << bad;
    EXPECT_THAT(h.error().message(), ::testing::HasSubstr("--headroom")) << bad;
    EXPECT_THAT(h.error().message(), ::testing::HasSubstr("like 10% or 0.1")) << bad;
  }
}

TEST(TraceSplit, EvenAndOddAreDisjointHalvesSortedByPath) {
  std::vector<std::string> files = {"d/c.jsonl", "d/a.jsonl", "d/e.jsonl", "d/b.jsonl",
                                    "d/d.jsonl"};
  EXPECT_EQ(select_split(files, TraceSplit::kEven),
            (std::vector<std::string>{"d/a.jsonl", "d/c.jsonl", "d/e.jsonl"}));
  EXPECT_EQ(select_split(files, TraceSplit::kOdd),
            (std::vector<std::string>{"d/b.jsonl", "d/d.jsonl"}));
  EXPECT_EQ(select_split(files, TraceSplit::kAll).size(), 5u);
  EXPECT_TRUE(select_split({"only"}, TraceSplit::kOdd).empty());
  EXPECT_EQ(*parse_trace_split("odd"), TraceSplit::kOdd);
  auto bad = parse_trace_split("half");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.error().message(), ::testing::HasSubstr("expected all, even or odd, got 'half'"));
}

}  // namespace
}  // namespace sandgate::replay
