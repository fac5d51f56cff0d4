#include "probes/catalogue.h"

#include <signal.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <set>

#include "probes/probe_util.h"

namespace sandgate::probes {

namespace {

// Parameters the runner itself reads.
constexpr const char* kRunnerParams[] = {"probe_timeout_ms"};
constexpr long long kDefaultProbeTimeoutMs = 150000;
// Parameters that make a probe hold or sleep on purpose: the runner's deadline grows by them.
constexpr const char* kDurationParams[] = {"hold_ms", "sleep_ms", "spin_ms", "resource_hold_ms"};

}  // namespace

std::optional<std::string> Params::get(const std::string& key) const {
  auto it = values_.find(key);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

std::optional<long long> Params::number(const std::string& key) const {
  auto v = get(key);
  if (!v || v->empty()) return std::nullopt;
  size_t digits = 0;
  while (digits < v->size() && std::isdigit(static_cast<unsigned char>((*v)[digits]))) ++digits;
  if (digits == 0 || digits > 18) return std::nullopt;
  long long n = std::stoll(v->substr(0, digits));
  std::string unit = v->substr(digits);
  int shift = 0;
  if (unit == "KiB")
    shift = 10;
  else if (unit == "MiB")
    shift = 20;
  else if (unit == "GiB")
    shift = 30;
  else if (!unit.empty())
    return std::nullopt;
  if (n > (1LL << (62 - shift))) return std::nullopt;
  return n << shift;
}

long long Params::number_or(const std::string& key, long long fallback, long long max) const {
  auto n = number(key);
  long long v = n ? *n : fallback;
  return std::clamp(v, 0LL, max);
}

std::vector<std::string> Params::list(const std::string& key) const {
  std::vector<std::string> out;
  auto v = get(key);
  if (!v) return out;
  size_t start = 0;
  while (start <= v->size()) {
    size_t comma = v->find(',', start);
    if (comma == std::string::npos) comma = v->size();
    if (comma > start) out.push_back(v->substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

Json ProbeSpec::describe() const {
  return Json{{"id", id},
              {"boundary", boundary()},
              {"attempt", attempt},
              {"params", params},
              {"explicit", explicit_only}};
}

Status Catalogue::add(ProbeSpec spec) {
  const auto& bs = all_boundaries();
  if (spec.id.find('.') == std::string::npos ||
      std::find(bs.begin(), bs.end(), spec.boundary()) == bs.end()) {
    return logic_error("register probe", "id '" + spec.id + "' is not <boundary>.<name>");
  }
  if (find(spec.id)) return logic_error("register probe", "duplicate id '" + spec.id + "'");
  if (!spec.run) return logic_error("register probe", "'" + spec.id + "' has no function");
  probes_.push_back(std::move(spec));
  return {};
}

const ProbeSpec* Catalogue::find(const std::string& id) const {
  for (const auto& p : probes_)
    if (p.id == id) return &p;
  return nullptr;
}

Result<std::vector<const ProbeSpec*>> Catalogue::select(const std::vector<std::string>& boundaries,
                                                        const std::vector<std::string>& ids) const {
  const auto& bs = all_boundaries();
  for (const auto& b : boundaries) {
    if (std::find(bs.begin(), bs.end(), b) == bs.end()) {
      return logic_error("select probes",
                         "unknown boundary '" + b +
                             "' (fs, net, creds, proc, disclosure, crossrun, persist, resource)");
    }
  }
  for (const auto& id : ids) {
    if (!find(id)) {
      return logic_error("select probes",
                         "unknown probe id '" + id + "' (`sandgate-probe list` shows them)");
    }
  }
  std::vector<const ProbeSpec*> out;
  for (const auto& p : probes_) {
    bool all = boundaries.empty() && ids.empty() && !p.explicit_only;
    bool by_boundary = !p.explicit_only && std::find(boundaries.begin(), boundaries.end(),
                                                     p.boundary()) != boundaries.end();
    bool by_id = std::find(ids.begin(), ids.end(), p.id) != ids.end();
    if (all || by_boundary || by_id) out.push_back(&p);
  }
  return out;
}

std::vector<std::string> Catalogue::known_params() const {
  std::set<std::string> names(std::begin(kRunnerParams), std::end(kRunnerParams));
  for (const auto& p : probes_) names.insert(p.params.begin(), p.params.end());
  return {names.begin(), names.end()};
}

Status register_builtin_probes(Catalogue& c) {
  SG_TRY(register_fs_probes(c));
  SG_TRY(register_net_probes(c));
  SG_TRY(register_creds_probes(c));
  SG_TRY(register_proc_probes(c));
  SG_TRY(register_disclosure_probes(c));
  SG_TRY(register_crossrun_probes(c));
  SG_TRY(register_persist_probes(c));
  SG_TRY(register_resource_probes(c));
  return {};
}

ProbeReport run_probe(const ProbeSpec& spec, const Params& params) {
  long long timeout = params.number_or("probe_timeout_ms", kDefaultProbeTimeoutMs, 3600000);
  for (const char* name : kDurationParams) timeout += params.number_or(name, 0, 3600000);

  // Each probe runs in its own child: a crash, a hang or a leak in one cannot take the others
  // (or the runner's output) with it.
  util::ChildResult child = util::run_child(
      [&](int out_fd) -> int {
        ProbeReport r = spec.run(params);
        r.id = spec.id;
        r.boundary = spec.boundary();
        if (r.attempt.empty()) r.attempt = spec.attempt;
        std::string line = r.to_json().dump(-1, ' ', false, Json::error_handler_t::replace);
        size_t off = 0;
        while (off < line.size()) {
          ssize_t n = ::write(out_fd, line.data() + off, line.size() - off);
          if (n < 0 && errno == EINTR) continue;
          if (n <= 0) return 1;
          off += static_cast<size_t>(n);
        }
        return 0;
      },
      static_cast<int>(std::min<long long>(timeout, 0x7fffffff)));

  if (child.exited && child.code == 0) {
    auto j = parse_json(child.output, spec.id);
    if (j.ok()) {
      auto r = ProbeReport::from_json(*j);
      if (r.ok()) return std::move(r).value();
    }
  }
  ProbeReport report = util::make(spec.attempt);
  report.id = spec.id;
  report.boundary = spec.boundary();
  if (!child.started) {
    report.errno_name = errno_name(child.fork_errno);
    report.detail = "could not fork the probe's child";
  } else if (child.timed_out) {
    report.detail = "the probe did not finish within " + std::to_string(timeout) + " ms: killed";
  } else if (!child.exited) {
    report.detail = "the probe's child was killed by signal " + std::to_string(child.signal) +
                    " (" + (sigabbrev_np(child.signal) ? sigabbrev_np(child.signal) : "?") + ")";
  } else {
    report.detail =
        "the probe's child exited " + std::to_string(child.code) + " without a readable report";
  }
  return report;
}

}  // namespace sandgate::probes
