#include "workloads/segment.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

namespace sandgate::workloads {
namespace {

using ::testing::HasSubstr;

Segment sample_segment() {
  Segment s;
  s.name = "c12";
  s.points = {{0, 100 << 20, 1500, 4, 0}, {500, 300 << 20, 200, 2, 4096}, {900, 0, 0, 1, 8192}};
  s.end_ms = 1200;
  s.workdir = "/workspace/load";
  return s;
}

std::string parse_error(const std::string& text) {
  auto r = Segment::from_json(Json::parse(text));
  EXPECT_FALSE(r.ok()) << text << " parsed";
  return r.ok() ? "" : r.error().message();
}

TEST(Segment, RoundTrips) {
  Segment s = sample_segment();
  auto back = Segment::from_json(Json::parse(s.to_json().dump()));
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(*back, s);
}

TEST(Segment, ReadsTheContractExampleWithIntegralFloatsAndDefaults) {
  auto r = Segment::from_json(Json::parse(
      R"({"name":"c12","points":[{"t_ms":0,"mem_bytes":1e8,"cpu_millicores":1500,"pids":4,
          "io_bytes":0},{"t_ms":100}],"end_ms":2300,"workdir":"/workspace/load"})"));
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->points[0].mem_bytes, 100000000u);
  EXPECT_EQ(r->points[1].mem_bytes, 0u);  // absent targets are zero
  EXPECT_EQ(r->end_ms, 2300);
  auto no_workdir = Segment::from_json(Json::parse(R"({"points":[{"t_ms":0}],"end_ms":5})"));
  ASSERT_TRUE(no_workdir.ok());
  EXPECT_EQ(no_workdir->workdir, ".");
}

TEST(Segment, ErrorsNameTheField) {
  EXPECT_THAT(parse_error(R"({"points":[{"t_ms":0}]})"), HasSubstr("end_ms: missing"));
  EXPECT_THAT(parse_error(R"({"end_ms":1})"), HasSubstr("points: missing"));
  EXPECT_THAT(parse_error(R"({"points":[],"end_ms":1})"), HasSubstr("points: needs at least"));
  EXPECT_THAT(parse_error(R"({"points":[{"t_ms":5}],"end_ms":10})"),
              HasSubstr("points[0].t_ms: the first point must be at 0, got 5"));
  EXPECT_THAT(parse_error(R"({"points":[{"t_ms":0},{"t_ms":10},{"t_ms":10}],"end_ms":20})"),
              HasSubstr("points[2].t_ms: must be greater than points[1].t_ms (10), got 10"));
  EXPECT_THAT(parse_error(R"({"points":[{"t_ms":0,"mem_bytes":-1}],"end_ms":1})"),
              HasSubstr("points[0].mem_bytes: expected a non-negative integer, got -1"));
  EXPECT_THAT(parse_error(R"({"points":[{"t_ms":0,"cpu_millicores":1.5}],"end_ms":1})"),
              HasSubstr("points[0].cpu_millicores: expected a non-negative integer, got 1.5"));
  EXPECT_THAT(parse_error(R"({"points":[{"t_ms":0,"pids":"4"}],"end_ms":1})"),
              HasSubstr("points[0].pids: expected a non-negative integer"));
  EXPECT_THAT(parse_error(R"({"points":[{"t_ms":0,"io_bytes":10},{"t_ms":5,"io_bytes":9}],"end_ms":9})"),
              HasSubstr("points[1].io_bytes: is cumulative and must not go down"));
  EXPECT_THAT(parse_error(R"({"points":[{"t_ms":0},{"t_ms":50}],"end_ms":40})"),
              HasSubstr("end_ms: must not be before the last point (50), got 40"));
  EXPECT_THAT(parse_error(R"({"points":[{"t_ms":0,"mem":1}],"end_ms":1})"),
              HasSubstr("points[0].mem: unknown key"));
  EXPECT_THAT(parse_error(R"({"points":[{"t_ms":0}],"end_ms":1,"extra":1})"),
              HasSubstr("extra: unknown key"));
  EXPECT_THAT(parse_error(R"({"points":[{"t_ms":0}],"end_ms":1,"workdir":""})"),
              HasSubstr("workdir: must not be empty"));
  EXPECT_THAT(parse_error(R"([1,2])"), HasSubstr("expected an object"));
  EXPECT_THAT(parse_error(R"({"points":[{"t_ms":0}],"end_ms":1,"name":3})"),
              HasSubstr("name: expected a string"));
}

TEST(Achieved, RoundTripsEveryField) {
  Achieved a;
  a.name = "c1";
  a.wall_ms = 2001;
  a.target_peak_mem = 800 << 20;
  a.achieved_peak_mem = 801 << 20;
  a.target_cpu_ms = 2000;
  a.achieved_cpu_ms = 1987.5;
  a.target_peak_pids = 9;
  a.achieved_peak_pids = 9;
  a.target_io_bytes = 1 << 20;
  a.achieved_io_bytes = 1 << 20;
  a.target_peak_at_ms = 1000;
  a.achieved_peak_at_ms = 995;
  a.base_rss_bytes = 2 << 20;
  a.touched_peak_bytes = 799 << 20;
  a.cpu_threads = 2;
  a.cpu_cores_available = 2;
  a.cpu_capped = true;
  a.cpu_wait_ms = 12.5;
  a.control_wait_ms = 3.25;
  a.behind_touch_ms = 7.5;
  a.io_files_removed = false;
  a.interrupted = true;
  a.errors = {"pids: clone: EAGAIN"};
  auto back = Achieved::from_json(Json::parse(a.to_json().dump()));
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(back->to_json(), a.to_json());
}

TEST(Achieved, ReadsTheContractFieldsAloneAndIgnoresUnknownKeys) {
  auto r = Achieved::from_json(Json::parse(
      R"({"name":"x","wall_ms":10,"target_peak_mem":1,"achieved_peak_mem":2,"target_cpu_ms":0,
          "achieved_cpu_ms":0.5,"target_peak_pids":1,"achieved_peak_pids":1,
          "target_io_bytes":0,"achieved_io_bytes":0,"added_later":{"a":1}})"));
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->achieved_peak_mem, 2u);
  EXPECT_EQ(r->achieved_peak_at_ms, -1);
  auto missing = Achieved::from_json(Json::parse(R"({"wall_ms":1})"));
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.error().message(), HasSubstr("target_peak_mem: missing"));
  auto version = Achieved::from_json(Json::parse(
      R"({"schema_version":2,"wall_ms":10,"target_peak_mem":1,"achieved_peak_mem":2,
          "target_cpu_ms":0,"achieved_cpu_ms":0.5,"target_peak_pids":1,"achieved_peak_pids":1,
          "target_io_bytes":0,"achieved_io_bytes":0})"));
  ASSERT_FALSE(version.ok());
  EXPECT_THAT(version.error().message(), HasSubstr("schema_version: unsupported version 2"));
}

}  // namespace
}  // namespace sandgate::workloads
