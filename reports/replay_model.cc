#include "reports/replay_model.h"

#include "reports/field_reader.h"

namespace sandgate::reports {
namespace {

using detail::FieldError;
using detail::Reader;

LatencySummary latency_from(const Json& j, const std::string& path) {
  Reader r(j, path);
  LatencySummary l;
  l.count = r.count("count");
  l.p50_us = r.number("p50_us");
  l.p90_us = r.number("p90_us");
  l.p99_us = r.number("p99_us");
  l.max_us = r.number("max_us");
  l.missed_deadlines = r.count("missed_deadlines");
  r.done();
  if (!(l.p50_us <= l.p90_us && l.p90_us <= l.p99_us && l.p99_us <= l.max_us))
    r.fail("", "percentiles out of order (p50 <= p90 <= p99 <= max)");
  return l;
}

TraceTimeline timeline_from(const Json& j, const std::string& path) {
  Reader r(j, path);
  TraceTimeline t;
  t.trace = r.str("trace");
  const Json& samples = r.array("samples");
  for (size_t i = 0; i < samples.size(); ++i) {
    Reader s(samples[i], r.at("samples", i));
    t.samples.push_back({s.number("t_ms"), s.count("memory_bytes"), s.number("cpu_cores")});
    s.done();
    if (i && t.samples[i].t_ms < t.samples[i - 1].t_ms) s.fail("t_ms", "earlier than the last");
  }
  const Json& calls = r.array("calls");
  for (size_t i = 0; i < calls.size(); ++i) {
    Reader c(calls[i], r.at("calls", i));
    TimelineCall call{c.str("id"), c.str("intent"), c.number("start_ms"), c.number("end_ms"),
                      c.str("ended")};
    c.done();
    if (call.end_ms < call.start_ms) c.fail("end_ms", "before start_ms");
    t.calls.push_back(std::move(call));
  }
  const Json& actions = r.array("actions");
  for (size_t i = 0; i < actions.size(); ++i) {
    Reader a(actions[i], r.at("actions", i));
    t.actions.push_back({a.str("call_id"), a.str("action"), a.number("at_ms"), a.str("reason")});
    a.done();
  }
  t.error = r.opt_str("error").value_or("");
  r.done();
  return t;
}

ReplayPolicy replay_policy_from(const Json& j, const std::string& path) {
  Reader r(j, path);
  ReplayPolicy p;
  p.scores = r.object("scores");
  // The scores are kept whole; what the charts read from them is checked here.
  std::string scores_at = r.at("scores");
  if (!p.scores.contains("policy") || !p.scores["policy"].is_string())
    throw FieldError{scores_at + ".policy", "expected a string"};
  p.label = p.scores["policy"].get<std::string>();
  if (!p.scores.contains("victim")) throw FieldError{scores_at + ".victim", "missing"};
  if (!p.scores["victim"].is_null())
    p.victim = latency_from(p.scores["victim"], scores_at + ".victim");
  const Json& timelines = r.array("timelines");
  for (size_t i = 0; i < timelines.size(); ++i)
    p.timelines.push_back(timeline_from(timelines[i], r.at("timelines", i)));
  r.done();
  return p;
}

}  // namespace

Json to_json(const LatencySummary& l) {
  return {{"count", l.count},   {"p50_us", l.p50_us}, {"p90_us", l.p90_us},
          {"p99_us", l.p99_us}, {"max_us", l.max_us}, {"missed_deadlines", l.missed_deadlines}};
}

Json to_json(const ReplaySection& s) {
  Json policies = Json::array();
  for (const auto& p : s.policies) {
    Json timelines = Json::array();
    for (const auto& t : p.timelines) {
      Json samples = Json::array(), calls = Json::array(), actions = Json::array();
      for (const auto& x : t.samples)
        samples.push_back(
            {{"t_ms", x.t_ms}, {"memory_bytes", x.memory_bytes}, {"cpu_cores", x.cpu_cores}});
      for (const auto& c : t.calls)
        calls.push_back({{"id", c.id},
                         {"intent", c.intent},
                         {"start_ms", c.start_ms},
                         {"end_ms", c.end_ms},
                         {"ended", c.ended}});
      for (const auto& a : t.actions)
        actions.push_back({{"call_id", a.call_id},
                           {"action", a.action},
                           {"at_ms", a.at_ms},
                           {"reason", a.reason}});
      Json tj = {{"trace", t.trace}, {"samples", samples}, {"calls", calls}, {"actions", actions}};
      if (!t.error.empty()) tj["error"] = t.error;
      timelines.push_back(std::move(tj));
    }
    // The label and the victim are the scores' own: written once, there.
    Json scores = p.scores;
    scores["policy"] = p.label;
    scores["victim"] = p.victim ? to_json(*p.victim) : Json(nullptr);
    policies.push_back({{"scores", scores}, {"timelines", timelines}});
  }
  return {{"provider", s.provider},
          {"time_scale", s.time_scale},
          {"compress_silence", s.compress_silence},
          {"victim_solo", s.victim_solo ? to_json(*s.victim_solo) : Json(nullptr)},
          {"policies", policies}};
}

ReplaySection replay_section_from(const Json& j, const std::string& path) {
  Reader r(j, path);
  ReplaySection s;
  s.provider = r.str("provider");
  s.time_scale = r.number("time_scale");
  if (!(s.time_scale > 0)) r.fail("time_scale", "expected a positive number");
  s.compress_silence = r.boolean("compress_silence");
  const Json& solo = r.raw("victim_solo");
  if (!solo.is_null()) s.victim_solo = latency_from(solo, r.at("victim_solo"));
  const Json& policies = r.array("policies");
  for (size_t i = 0; i < policies.size(); ++i)
    s.policies.push_back(replay_policy_from(policies[i], r.at("policies", i)));
  r.done();
  return s;
}

}  // namespace sandgate::reports
