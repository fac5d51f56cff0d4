#include "workloads/segment.h"

#include <cmath>
#include <set>

namespace sandgate::workloads {
namespace {

constexpr const char* kSegmentStep = "parse segment";
constexpr const char* kAchievedStep = "parse achieved";

Error field_error(const char* step, const std::string& field, const std::string& what) {
  return logic_error(step, field + ": " + what);
}

std::string shown(const Json& v) {
  std::string s = v.dump();
  return s.size() > 40 ? s.substr(0, 40) + "..." : s;
}

// A non-negative whole number; integral floats (1e8, as a trace tool may write) are accepted.
Result<uint64_t> get_count(const char* step, const Json& v, const std::string& field) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer()) {
    if (v.get<int64_t>() >= 0) return static_cast<uint64_t>(v.get<int64_t>());
  } else if (v.is_number_float()) {
    double d = v.get<double>();
    // 2^64 is exact as a double; anything at or above it does not fit.
    if (d >= 0 && d < 18446744073709551616.0 && std::floor(d) == d)
      return static_cast<uint64_t>(d);
  }
  return field_error(step, field, "expected a non-negative integer, got " + shown(v));
}

Result<int64_t> get_time(const char* step, const Json& v, const std::string& field) {
  SG_ASSIGN_OR_RETURN(uint64_t n, get_count(step, v, field));
  if (n > static_cast<uint64_t>(INT64_MAX / 1000000))  // keeps ms -> ns conversions in range
    return field_error(step, field, "expected a time in ms below 9.2e12, got " + shown(v));
  return static_cast<int64_t>(n);
}

Result<std::string> get_string(const char* step, const Json& v, const std::string& field) {
  if (!v.is_string()) return field_error(step, field, "expected a string, got " + shown(v));
  return v.get<std::string>();
}

Status check_keys(const char* step, const Json& obj, const std::string& where,
                  const std::set<std::string>& allowed) {
  if (!obj.is_object())
    return field_error(step, where.empty() ? "segment" : where,
                       "expected an object, got " + shown(obj));
  for (const auto& [key, value] : obj.items()) {
    if (!allowed.count(key)) {
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
      return field_error(step, where.empty() ? key : where + "." + key,
                         "unknown key (known: " + list + ")");
    }
  }
  return ok_status();
}

Json point_to_json(const SegmentPoint& p) {
  return Json{{"t_ms", p.t_ms},
              {"mem_bytes", p.mem_bytes},
              {"cpu_millicores", p.cpu_millicores},
              {"pids", p.pids},
              {"io_bytes", p.io_bytes}};
}

}  // namespace

Json Segment::to_json() const {
  Json pts = Json::array();
  for (const auto& p : points) pts.push_back(point_to_json(p));
  return Json{{"name", name}, {"points", pts}, {"end_ms", end_ms}, {"workdir", workdir}};
}

Result<Segment> Segment::from_json(const Json& j) {
  const char* step = kSegmentStep;
  SG_TRY(check_keys(step, j, "", {"name", "points", "end_ms", "workdir"}));
  Segment s;
  if (!j.contains("points")) return field_error(step, "points", "missing");
  if (!j.contains("end_ms")) return field_error(step, "end_ms", "missing");
  if (j.contains("name")) {
    SG_ASSIGN_OR_RETURN(s.name, get_string(step, j["name"], "name"));
  }
  if (j.contains("workdir")) {
    SG_ASSIGN_OR_RETURN(s.workdir, get_string(step, j["workdir"], "workdir"));
    if (s.workdir.empty()) return field_error(step, "workdir", "must not be empty");
  }
  const Json& pts = j["points"];
  if (!pts.is_array()) return field_error(step, "points", "expected an array, got " + shown(pts));
  if (pts.empty()) return field_error(step, "points", "needs at least one point (t_ms 0)");
  for (size_t i = 0; i < pts.size(); ++i) {
    std::string where = "points[" + std::to_string(i) + "]";
    const Json& pj = pts[i];
    SG_TRY(check_keys(step, pj, where, {"t_ms", "mem_bytes", "cpu_millicores", "pids", "io_bytes"}));
    if (!pj.contains("t_ms")) return field_error(step, where + ".t_ms", "missing");
    SegmentPoint p;
    SG_ASSIGN_OR_RETURN(p.t_ms, get_time(step, pj["t_ms"], where + ".t_ms"));
    // Absent targets are zero: a segment that only shapes memory need not spell out the rest.
    if (pj.contains("mem_bytes")) {
      SG_ASSIGN_OR_RETURN(p.mem_bytes, get_count(step, pj["mem_bytes"], where + ".mem_bytes"));
    }
    if (pj.contains("cpu_millicores")) {
      SG_ASSIGN_OR_RETURN(p.cpu_millicores,
                          get_count(step, pj["cpu_millicores"], where + ".cpu_millicores"));
    }
    if (pj.contains("pids")) {
      SG_ASSIGN_OR_RETURN(p.pids, get_count(step, pj["pids"], where + ".pids"));
    }
    if (pj.contains("io_bytes")) {
      SG_ASSIGN_OR_RETURN(p.io_bytes, get_count(step, pj["io_bytes"], where + ".io_bytes"));
    }
    if (i == 0 && p.t_ms != 0)
      return field_error(step, where + ".t_ms", "the first point must be at 0, got " +
                                                    std::to_string(p.t_ms));
    if (i > 0) {
      const SegmentPoint& prev = s.points.back();
      if (p.t_ms <= prev.t_ms)
        return field_error(step, where + ".t_ms",
                           "must be greater than points[" + std::to_string(i - 1) +
                               "].t_ms (" + std::to_string(prev.t_ms) + "), got " +
                               std::to_string(p.t_ms));
      if (p.io_bytes < prev.io_bytes)
        return field_error(step, where + ".io_bytes",
                           "is cumulative and must not go down (points[" +
                               std::to_string(i - 1) + "] has " + std::to_string(prev.io_bytes) +
                               "), got " + std::to_string(p.io_bytes));
    }
    s.points.push_back(p);
  }
  SG_ASSIGN_OR_RETURN(s.end_ms, get_time(step, j["end_ms"], "end_ms"));
  if (s.end_ms < s.points.back().t_ms)
    return field_error(step, "end_ms",
                       "must not be before the last point (" +
                           std::to_string(s.points.back().t_ms) + "), got " +
                           std::to_string(s.end_ms));
  return s;
}

Json Achieved::to_json() const {
  Json errs = Json::array();
  for (const auto& e : errors) errs.push_back(e);
  return Json{{"schema_version", schema_version},
              {"name", name},
              {"wall_ms", wall_ms},
              {"target_peak_mem", target_peak_mem},
              {"achieved_peak_mem", achieved_peak_mem},
              {"target_peak_at_ms", target_peak_at_ms},
              {"achieved_peak_at_ms", achieved_peak_at_ms},
              {"mem_measure", mem_measure},
              {"base_rss_bytes", base_rss_bytes},
              {"touched_peak_bytes", touched_peak_bytes},
              {"target_cpu_ms", target_cpu_ms},
              {"achieved_cpu_ms", achieved_cpu_ms},
              {"cpu_threads", cpu_threads},
              {"cpu_cores_available", cpu_cores_available},
              {"cpu_capped", cpu_capped},
              {"cpu_wait_ms", cpu_wait_ms},
              {"control_wait_ms", control_wait_ms},
              {"behind_touch_ms", behind_touch_ms},
              {"target_peak_pids", target_peak_pids},
              {"achieved_peak_pids", achieved_peak_pids},
              {"target_io_bytes", target_io_bytes},
              {"achieved_io_bytes", achieved_io_bytes},
              {"io_files_removed", io_files_removed},
              {"interrupted", interrupted},
              {"errors", errs}};
}

Result<Achieved> Achieved::from_json(const Json& j) {
  const char* step = kAchievedStep;
  if (!j.is_object()) return field_error(step, "achieved", "expected an object, got " + shown(j));
  Achieved a;
  auto count = [&](const char* key, uint64_t& out, bool required) -> Status {
    if (!j.contains(key)) {
      return required ? Status(field_error(step, key, "missing")) : ok_status();
    }
    SG_ASSIGN_OR_RETURN(out, get_count(step, j[key], key));
    return ok_status();
  };
  auto number = [&](const char* key, double& out) -> Status {
    if (!j.contains(key)) return field_error(step, key, "missing");
    if (!j[key].is_number() || j[key].get<double>() < 0)
      return field_error(step, key, "expected a non-negative number, got " + shown(j[key]));
    out = j[key].get<double>();
    return ok_status();
  };
  auto signed_ms = [&](const char* key, int64_t& out) -> Status {
    if (!j.contains(key)) return ok_status();
    if (!j[key].is_number_integer())
      return field_error(step, key, "expected an integer, got " + shown(j[key]));
    out = j[key].get<int64_t>();
    return ok_status();
  };
  auto flag = [&](const char* key, bool& out) -> Status {
    if (!j.contains(key)) return ok_status();
    if (!j[key].is_boolean()) return field_error(step, key, "expected true or false, got " + shown(j[key]));
    out = j[key].get<bool>();
    return ok_status();
  };
  if (j.contains("name")) {
    SG_ASSIGN_OR_RETURN(a.name, get_string(step, j["name"], "name"));
  }
  uint64_t wall = 0;
  SG_TRY(count("wall_ms", wall, true));
  a.wall_ms = static_cast<int64_t>(wall);
  SG_TRY(count("target_peak_mem", a.target_peak_mem, true));
  SG_TRY(count("achieved_peak_mem", a.achieved_peak_mem, true));
  SG_TRY(number("target_cpu_ms", a.target_cpu_ms));
  SG_TRY(number("achieved_cpu_ms", a.achieved_cpu_ms));
  SG_TRY(count("target_peak_pids", a.target_peak_pids, true));
  SG_TRY(count("achieved_peak_pids", a.achieved_peak_pids, true));
  SG_TRY(count("target_io_bytes", a.target_io_bytes, true));
  SG_TRY(count("achieved_io_bytes", a.achieved_io_bytes, true));
  uint64_t version = kAchievedSchemaVersion;
  SG_TRY(count("schema_version", version, false));
  if (version != static_cast<uint64_t>(kAchievedSchemaVersion))
    return field_error(step, "schema_version",
                       "unsupported version " + std::to_string(version) + " (this build reads " +
                           std::to_string(kAchievedSchemaVersion) + ")");
  SG_TRY(signed_ms("target_peak_at_ms", a.target_peak_at_ms));
  SG_TRY(signed_ms("achieved_peak_at_ms", a.achieved_peak_at_ms));
  if (j.contains("mem_measure")) {
    SG_ASSIGN_OR_RETURN(a.mem_measure, get_string(step, j["mem_measure"], "mem_measure"));
  }
  SG_TRY(count("base_rss_bytes", a.base_rss_bytes, false));
  SG_TRY(count("touched_peak_bytes", a.touched_peak_bytes, false));
  uint64_t threads = 0, cores = 0;
  SG_TRY(count("cpu_threads", threads, false));
  SG_TRY(count("cpu_cores_available", cores, false));
  a.cpu_threads = static_cast<int>(threads);
  a.cpu_cores_available = static_cast<int>(cores);
  SG_TRY(flag("cpu_capped", a.cpu_capped));
  if (j.contains("cpu_wait_ms")) {
    SG_TRY(number("cpu_wait_ms", a.cpu_wait_ms));
  }
  if (j.contains("control_wait_ms")) {
    SG_TRY(number("control_wait_ms", a.control_wait_ms));
  }
  if (j.contains("behind_touch_ms")) {
    SG_TRY(number("behind_touch_ms", a.behind_touch_ms));
  }
  SG_TRY(flag("io_files_removed", a.io_files_removed));
  SG_TRY(flag("interrupted", a.interrupted));
  if (j.contains("errors")) {
    if (!j["errors"].is_array())
      return field_error(step, "errors", "expected an array of strings, got " + shown(j["errors"]));
    for (size_t i = 0; i < j["errors"].size(); ++i) {
      SG_ASSIGN_OR_RETURN(std::string e,
                          get_string(step, j["errors"][i], "errors[" + std::to_string(i) + "]"));
      a.errors.push_back(std::move(e));
    }
  }
  return a;
}

}  // namespace sandgate::workloads
