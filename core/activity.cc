#include "core/activity.h"

#include <cerrno>

#include "core/result.h"

namespace sandgate {

std::string TracedConnect::verdict() const {
  if (err == 0 || err == EINPROGRESS) return "allowed";
  if (err == EPERM || err == EACCES) return "denied";
  return "failed";
}

Json to_json(const TracedActivity& a) {
  Json execs = Json::array(), connects = Json::array(), opens = Json::array();
  for (const auto& e : a.execs) {
    Json j = {{"pid", e.pid}, {"ppid", e.ppid}, {"path", e.path}, {"argv", e.argv}};
    if (e.args_cut) j["argv_cut"] = true;
    execs.push_back(std::move(j));
  }
  for (const auto& c : a.connects) {
    Json j = {{"pid", c.pid},          {"syscall", c.syscall}, {"family", c.family},
              {"address", c.address},  {"port", c.port},       {"protocol", c.protocol},
              {"verdict", c.verdict()}};
    if (c.err != 0) j["errno"] = errno_name(c.err);
    connects.push_back(std::move(j));
  }
  for (const auto& o : a.sensitive_opens) {
    Json j = {{"pid", o.pid}, {"path", o.path}, {"flags", o.flags},
              {"result", o.err == 0 ? "opened" : errno_name(o.err)}};
    opens.push_back(std::move(j));
  }
  Json j = {{"execs", execs},   {"connects", connects},   {"sensitive_opens", opens},
            {"forks", a.forks}, {"exits", a.exits},       {"lost", a.lost},
            {"runq_delay_ms", a.runq_delay_ns / 1e6}, {"runq_waits", a.runq_waits},
            {"runq_delay_max_ms", a.runq_delay_max_ns / 1e6}};
  if (a.execs_not_kept + a.connects_not_kept + a.opens_not_kept > 0) {
    j["not_kept"] = {{"execs", a.execs_not_kept},
                     {"connects", a.connects_not_kept},
                     {"sensitive_opens", a.opens_not_kept}};
  }
  return j;
}

std::vector<std::string> describe(const TracedActivity& a) {
  std::vector<std::string> lines;
  for (const auto& e : a.execs) {
    std::string argv;
    for (const auto& arg : e.argv) argv += (argv.empty() ? "" : " ") + arg;
    lines.push_back("exec    pid " + std::to_string(e.pid) + " " + e.path + (argv.empty() ? "" : "  [" + argv + (e.args_cut ? " ..." : "") + "]"));
  }
  for (const auto& c : a.connects) {
    std::string where = c.family == "inet6" ? "[" + c.address + "]:" + std::to_string(c.port)
                        : c.family == "inet" ? c.address + ":" + std::to_string(c.port)
                                             : c.address;
    lines.push_back(c.syscall + (c.syscall == "connect" ? " " : "  ") + "pid " + std::to_string(c.pid) + " " +
                    c.protocol + " " + where + " " + c.verdict() +
                    (c.err ? " (" + errno_name(c.err) + ")" : ""));
  }
  for (const auto& o : a.sensitive_opens)
    lines.push_back("open    pid " + std::to_string(o.pid) + " " + o.path + " " +
                    (o.err ? "failed (" + errno_name(o.err) + ")" : "opened"));
  std::string counts = std::to_string(a.forks) + " forks, " + std::to_string(a.exits) + " exits, " +
                       std::to_string(a.execs.size() + a.execs_not_kept) + " execs, " +
                       std::to_string(a.connects.size() + a.connects_not_kept) + " connects, " +
                       std::to_string(a.sensitive_opens.size() + a.opens_not_kept) + " sensitive opens";
  counts += "; waited for a CPU " + std::to_string(a.runq_delay_ns / 1000000) + " ms in " +
            std::to_string(a.runq_waits) + " waits (longest " + std::to_string(a.runq_delay_max_ns / 1000) + " us)";
  if (a.lost) counts += "; " + std::to_string(a.lost) + " events lost (ring buffer full)";
  lines.push_back(counts);
  return lines;
}

}  // namespace sandgate
