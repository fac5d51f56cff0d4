#include "reports/fleet.h"

#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <set>

#include "reports/field_reader.h"
#include "reports/from_qualify.h"
#include "reports/text.h"

namespace sandgate::reports {
namespace {

using detail::FieldError;
using detail::Reader;

// The value at a path of object keys, or nullptr: the doctor's facts are read leniently
// (a report from before doctor printed a fact simply lacks it).
const Json* find_at(const Json& j, std::initializer_list<const char*> keys) {
  const Json* at = &j;
  for (const char* key : keys) {
    if (!at->is_object() || !at->contains(key)) return nullptr;
    at = &(*at)[key];
  }
  return at;
}

std::optional<std::string> string_at(const Json& j, std::initializer_list<const char*> keys) {
  const Json* v = find_at(j, keys);
  if (!v || !v->is_string() || v->get_ref<const std::string&>().empty()) return std::nullopt;
  return v->get<std::string>();
}

// "6.1.0-57-cloud-amd64" -> "6.1": a distribution's patch releases of one kernel are one kind
// (a node pool half-way through an upgrade should still agree); a release that does not start
// with major.minor is kept whole.
std::string major_minor(const std::string& release) {
  size_t i = 0;
  auto digits = [&] {
    size_t start = i;
    while (i < release.size() && release[i] >= '0' && release[i] <= '9') ++i;
    return i > start;
  };
  if (digits() && i < release.size() && release[i] == '.' && (++i, digits()))
    return release.substr(0, i);
  return release;
}

const ProviderReport* find_provider(const Report& r, const std::string& name) {
  for (const auto& p : r.providers)
    if (p.name == name) return &p;
  return nullptr;
}

const ProbeVerdict* find_verdict(const ProviderReport& p, const std::string& id) {
  if (!p.probes) return nullptr;
  for (const auto& v : *p.probes)
    if (v.id == id) return &v;
  return nullptr;
}

std::string join(const std::vector<std::string>& items, const char* sep) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : sep) + s;
  return out;
}

// Host names and files in error messages: they come from the reports (a hostname), so they are
// made printable and short before they reach a terminal.
std::string shown(std::string_view s) {
  CleanOptions o;
  o.max_bytes = 120;
  return clean_text(s, o);
}

bool values_differ(const HostDifference& d) {
  std::set<std::string> values;
  for (const auto& c : d.hosts) values.insert(c.value);
  return values.size() > 1;
}

// Every difference between the hosts of one class about one provider.
void compare_provider(const std::string& provider, const std::vector<const FleetHost*>& hosts,
                      std::vector<HostDifference>& out) {
  using Kind = HostDifference::Kind;
  std::vector<std::pair<const FleetHost*, const ProviderReport*>> present, available, probed;
  HostDifference status{provider, Kind::kProvider, "", {}};
  for (const FleetHost* h : hosts) {
    const ProviderReport* p = find_provider(h->report, provider);
    if (!p) {
      status.hosts.push_back({h->name, "absent", "not in this host's report"});
      continue;
    }
    present.push_back({h, p});
    if (p->unavailable) {
      status.hosts.push_back({h->name, "unavailable", *p->unavailable});
      continue;
    }
    available.push_back({h, p});
    if (p->probes) probed.push_back({h, p});
    status.hosts.push_back(
        {h->name, p->qualified ? "qualified" : "not qualified", join(p->disqualifications, "; ")});
  }
  if (values_differ(status)) out.push_back(std::move(status));

  HostDifference ran{provider, Kind::kProbes, "", {}};
  for (const auto& [h, p] : available)
    ran.hosts.push_back({h->name, p->probes ? "ran" : "did not run",
                         p->probes ? std::to_string(p->probes->size()) + " probes" : ""});
  if (values_differ(ran)) out.push_back(std::move(ran));

  // Each probe, in the order the first host ran them, then any only later hosts ran.
  std::vector<std::string> ids;
  std::set<std::string> seen;
  for (const auto& [h, p] : probed)
    for (const auto& v : *p->probes)
      if (seen.insert(v.id).second) ids.push_back(v.id);
  for (const auto& id : ids) {
    HostDifference d{provider, Kind::kProbe, id, {}};
    for (const auto& [h, p] : probed) {
      const ProbeVerdict* v = find_verdict(*p, id);
      d.hosts.push_back(
          v ? HostDifference::Cell{h->name, verdict_cell(*v), v->why}
            : HostDifference::Cell{h->name, "not run", "not in this host's probe suite"});
    }
    if (values_differ(d)) out.push_back(std::move(d));
  }

  std::vector<std::string> capabilities;
  seen.clear();
  for (const auto& [h, p] : present)
    for (const auto& c : p->capabilities)
      if (seen.insert(c).second) capabilities.push_back(c);
  for (const auto& capability : capabilities) {
    HostDifference d{provider, Kind::kCapability, capability, {}};
    for (const auto& [h, p] : present) {
      bool declared = std::find(p->capabilities.begin(), p->capabilities.end(), capability) !=
                      p->capabilities.end();
      std::string by;
      for (const auto& c : p->contradicted_capabilities)
        if (c.capability == capability) by = join(c.probes, ", ");
      if (!declared)
        d.hosts.push_back({h->name, "not declared", ""});
      else if (!by.empty())
        d.hosts.push_back({h->name, "contradicted", "declared, and disproved by " + by});
      else
        d.hosts.push_back({h->name, "declared", ""});
    }
    if (values_differ(d)) out.push_back(std::move(d));
  }
}

// The path where `got` first departs from `want`; "" when they are equal. Recursion follows
// `want`, a derived section a few levels deep, whatever depth `got` has.
std::string first_difference(const Json& got, const Json& want, const std::string& path) {
  if (got.type() != want.type()) return path;
  if (want.is_object()) {
    for (const auto& [key, value] : got.items())
      if (!want.contains(key)) return path + "." + key;
    for (const auto& [key, value] : want.items()) {
      if (!got.contains(key)) return path + "." + key;
      if (auto at = first_difference(got[key], value, path + "." + key); !at.empty()) return at;
    }
    return "";
  }
  if (want.is_array()) {
    for (size_t i = 0; i < want.size() && i < got.size(); ++i)
      if (auto at = first_difference(got[i], want[i], detail::item_path(path, i)); !at.empty())
        return at;
    return got.size() == want.size() ? "" : path;
  }
  return got == want ? "" : path;
}

Json opt(const std::optional<double>& v) { return v ? Json(*v) : Json(nullptr); }
Json opt(const std::optional<uint64_t>& v) { return v ? Json(*v) : Json(nullptr); }
Json opt(const std::optional<std::string>& v) { return v ? Json(*v) : Json(nullptr); }
Json opt(const std::optional<bool>& v) { return v ? Json(*v) : Json(nullptr); }

Json to_json(const HostFacts& f) {
  return {{"machine", opt(f.machine)},
          {"kernel", opt(f.kernel)},
          {"cgroup_layout", opt(f.cgroup_layout)},
          {"kvm", opt(f.kvm)}};
}

const char* to_string(NameFrom n) {
  switch (n) {
    case NameFrom::kHostname:
      return "hostname";
    case NameFrom::kFile:
      return "file";
    case NameFrom::kArgument:
      return "argument";
  }
  return "";
}

const char* to_string(ClassFrom c) { return c == ClassFrom::kFacts ? "facts" : "argument"; }

// The sections computed from the hosts' reports: what a reader recomputes and compares.
Json derived_json(const Fleet& f) {
  Json matrix = Json::array();
  for (const auto& row : fleet_matrix(f)) {
    Json cells = Json::array();
    for (const auto& c : row.cells)
      cells.push_back({{"provider", c.provider},
                       {"status", to_string(c.status)},
                       {"why_not", c.why_not},
                       {"exposed", opt(c.exposed)},
                       {"blocked", opt(c.blocked)},
                       {"inconclusive", opt(c.inconclusive)},
                       {"warning", opt(c.warning)},
                       {"run_ms", opt(c.run_ms)},
                       {"run_ratio", opt(c.run_ratio)},
                       {"call_ms", opt(c.call_ms)}});
    matrix.push_back({{"host", row.host}, {"cells", cells}});
  }
  Json classes = Json::array();
  for (const auto& c : fleet_classes(f)) {
    Json differences = Json::array();
    for (const auto& d : c.differences) {
      Json hosts = Json::array();
      for (const auto& cell : d.hosts)
        hosts.push_back({{"host", cell.host}, {"value", cell.value}, {"evidence", cell.evidence}});
      differences.push_back(
          {{"provider", d.provider}, {"kind", to_string(d.kind)}, {"id", d.id}, {"hosts", hosts}});
    }
    classes.push_back({{"name", c.name}, {"hosts", c.hosts}, {"differences", differences}});
  }
  Json between = Json::array();
  for (const auto& p : between_classes(f)) {
    Json per_class = Json::array();
    for (const auto& c : p.classes)
      per_class.push_back({{"class", c.name},
                           {"hosts", c.hosts},
                           {"present", c.present},
                           {"qualified", c.qualified}});
    between.push_back({{"provider", p.provider},
                       {"classes", per_class},
                       {"probes_differing", p.probes_differing}});
  }
  return {{"providers", fleet_providers(f)},
          {"matrix", matrix},
          {"classes", classes},
          {"between_classes", between}};
}

}  // namespace

// ---- Facts and names.

HostFacts host_facts(const Json& doctor) {
  HostFacts f;
  f.machine = string_at(doctor, {"system", "machine"});
  if (auto release = string_at(doctor, {"system", "kernel_release"}))
    f.kernel = major_minor(*release);
  f.cgroup_layout = string_at(doctor, {"cgroup_layout", "kind"});
  if (const Json* kvm = find_at(doctor, {"kvm", "usable"}); kvm && kvm->is_boolean())
    f.kvm = kvm->get<bool>();
  return f;
}

std::string class_name(const HostFacts& f) {
  return fmt::format("{}/linux-{}/{}/{}", f.machine.value_or("?"), f.kernel.value_or("?"),
                     f.cgroup_layout.value_or("?"), f.kvm ? (*f.kvm ? "kvm" : "tcg") : "?");
}

std::optional<std::string> doctor_hostname(const Json& doctor) {
  return string_at(doctor, {"system", "hostname"});
}

std::string host_name_from_file(const std::string& path) {
  std::filesystem::path p(path);
  std::string stem = p.stem().string();
  if (p.extension() != ".json") stem = p.filename().string();
  if (stem == "report" || stem == "qualify") {
    std::string dir = p.parent_path().filename().string();
    if (!dir.empty() && dir != "." && dir != "..") return dir;
  }
  return stem;
}

// ---- The derived views.

std::string to_string(FleetCell::Status s) {
  switch (s) {
    case FleetCell::Status::kQualified:
      return "qualified";
    case FleetCell::Status::kNotQualified:
      return "not qualified";
    case FleetCell::Status::kUnavailable:
      return "unavailable";
    case FleetCell::Status::kAbsent:
      return "absent";
  }
  return "";
}

std::string to_string(HostDifference::Kind k) {
  switch (k) {
    case HostDifference::Kind::kProvider:
      return "provider";
    case HostDifference::Kind::kProbes:
      return "probes";
    case HostDifference::Kind::kProbe:
      return "probe";
    case HostDifference::Kind::kCapability:
      return "capability";
  }
  return "";
}

std::vector<std::string> fleet_providers(const Fleet& f) {
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (const auto& h : f.hosts)
    for (const auto& p : h.report.providers)
      if (seen.insert(p.name).second) out.push_back(p.name);
  return out;
}

std::vector<FleetRow> fleet_matrix(const Fleet& f) {
  std::vector<std::string> providers = fleet_providers(f);
  std::vector<FleetRow> rows;
  for (const auto& h : f.hosts) {
    FleetRow row{h.name, {}};
    for (const auto& name : providers) {
      FleetCell c;
      c.provider = name;
      if (const ProviderReport* p = find_provider(h.report, name)) {
        c.status = p->unavailable ? FleetCell::Status::kUnavailable
                   : p->qualified ? FleetCell::Status::kQualified
                                  : FleetCell::Status::kNotQualified;
        c.why_not = p->disqualifications;
        if (p->probes) {
          c.exposed = c.blocked = c.inconclusive = c.warning = 0;
          for (const auto& v : *p->probes) switch (v.verdict) {
              case probes::Verdict::kBlocked:
                ++*c.blocked;
                break;
              case probes::Verdict::kExposed:
                ++*c.exposed;
                break;
              case probes::Verdict::kInconclusive:
                ++*c.inconclusive;
                break;
              case probes::Verdict::kWarning:
                ++*c.warning;
                break;
            }
        }
        c.run_ms = p->costs.run_ms;
        c.run_ratio = cost_ratios(h.report, *p).run;
        c.call_ms = p->costs.call_ms;
      }
      row.cells.push_back(std::move(c));
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

std::vector<FleetClass> fleet_classes(const Fleet& f) {
  std::vector<FleetClass> out;
  std::vector<std::vector<const FleetHost*>> members;
  std::map<std::string, size_t> index;
  for (const auto& h : f.hosts) {
    auto [it, fresh] = index.emplace(h.host_class, out.size());
    if (fresh) {
      out.push_back({h.host_class, {}, {}});
      members.emplace_back();
    }
    out[it->second].hosts.push_back(h.name);
    members[it->second].push_back(&h);
  }
  std::vector<std::string> providers = fleet_providers(f);
  for (size_t i = 0; i < out.size(); ++i) {
    if (members[i].size() < 2) continue;
    for (const auto& provider : providers) {
      bool any = false;
      for (const FleetHost* h : members[i]) any = any || find_provider(h->report, provider);
      if (any) compare_provider(provider, members[i], out[i].differences);
    }
  }
  return out;
}

std::vector<ProviderAcrossClasses> between_classes(const Fleet& f) {
  std::vector<std::string> class_names;
  std::map<std::string, std::vector<const FleetHost*>> members;
  for (const auto& h : f.hosts) {
    if (!members.count(h.host_class)) class_names.push_back(h.host_class);
    members[h.host_class].push_back(&h);
  }
  std::vector<ProviderAcrossClasses> out;
  if (class_names.size() < 2) return out;
  for (const auto& provider : fleet_providers(f)) {
    ProviderAcrossClasses summary{provider, {}, {}};
    std::vector<std::string> ids;
    std::set<std::string> seen;
    // Per probe, per class: the verdicts its hosts gave (those that ran the probes).
    std::map<std::string, std::map<std::string, std::set<std::string>>> cells;
    for (const auto& name : class_names) {
      ProviderAcrossClasses::PerClass c{name, members[name].size(), 0, 0};
      for (const FleetHost* h : members[name]) {
        const ProviderReport* p = find_provider(h->report, provider);
        if (!p) continue;
        ++c.present;
        c.qualified += p->qualified;
        if (!p->probes || p->unavailable) continue;
        for (const auto& v : *p->probes)
          if (seen.insert(v.id).second) ids.push_back(v.id);
      }
      summary.classes.push_back(c);
    }
    for (const auto& name : class_names)
      for (const FleetHost* h : members[name]) {
        const ProviderReport* p = find_provider(h->report, provider);
        if (!p || !p->probes || p->unavailable) continue;
        for (const auto& id : ids) {
          const ProbeVerdict* v = find_verdict(*p, id);
          cells[id][name].insert(v ? verdict_cell(*v) : "not run");
        }
      }
    // Some two hosts of different classes disagree unless every class that ran it gave one
    // and the same verdict (a class split within itself always disagrees with another).
    for (const auto& id : ids) {
      const auto& by_class = cells[id];
      if (by_class.size() < 2) continue;
      std::set<std::string> all;
      bool split = false;
      for (const auto& [name, set] : by_class) {
        split = split || set.size() > 1;
        all.insert(set.begin(), set.end());
      }
      if (split || all.size() > 1) summary.probes_differing.push_back(id);
    }
    out.push_back(std::move(summary));
  }
  return out;
}

// ---- Making one.

Result<Fleet> merge_reports(std::vector<MergeInput> inputs, const MergeOptions& options) {
  Fleet f;
  f.created = options.created;
  f.sandgate_version = SANDGATE_VERSION;
  std::map<std::string, std::string> source_of;  // host name -> its file
  for (auto& in : inputs) {
    FleetHost h;
    h.source = in.source;
    if (!in.name.empty()) {
      h.name = in.name;
      h.name_from = NameFrom::kArgument;
    } else if (auto hostname = doctor_hostname(in.report.host)) {
      h.name = *hostname;
      h.name_from = NameFrom::kHostname;
    } else {
      h.name = host_name_from_file(in.source);
      h.name_from = NameFrom::kFile;
    }
    if (h.name.empty()) return logic_error("report merge", "no name for its host", in.source);
    auto [it, fresh] = source_of.emplace(h.name, in.source);
    if (!fresh)
      return logic_error("report merge",
                         fmt::format("two hosts named \"{}\": {} and {} (name one with FILE=NAME)",
                                     shown(h.name), shown(it->second), shown(in.source)));
    h.report = std::move(in.report);
    f.hosts.push_back(std::move(h));
  }
  for (const auto& [host, name] : options.classes) {
    if (!source_of.count(host)) {
      std::vector<std::string> names;
      for (const auto& h : f.hosts) names.push_back(shown(h.name));
      return logic_error("--class", fmt::format("no host named \"{}\" (the hosts: {})", shown(host),
                                                join(names, ", ")));
    }
    if (name.empty()) return logic_error("--class", "an empty class for " + shown(host));
  }
  for (auto& h : f.hosts) {
    if (auto it = options.classes.find(h.name); it != options.classes.end()) {
      h.host_class = it->second;
      h.class_from = ClassFrom::kArgument;
    } else {
      h.host_class = class_name(host_facts(h.report.host));
      h.class_from = ClassFrom::kFacts;
    }
  }
  return f;
}

Result<Fleet> merge_report_files(const std::vector<std::string>& args,
                                 const std::map<std::string, std::string>& names,
                                 const MergeOptions& options) {
  std::vector<MergeInput> inputs;
  std::set<std::string> files;
  for (const auto& arg : args) {
    std::string file = arg, name;
    if (auto eq = arg.rfind('='); eq != std::string::npos && ::access(arg.c_str(), F_OK) != 0) {
      file = arg.substr(0, eq);
      name = arg.substr(eq + 1);
      if (file.empty() || name.empty())
        return logic_error("report merge",
                           "expected FILE or FILE=NAME, got \"" + shown(arg) + "\"");
    }
    if (auto it = names.find(file); it != names.end()) {
      if (!name.empty() && name != it->second)
        return logic_error("report merge",
                           fmt::format("{} is named both \"{}\" and \"{}\"", shown(file),
                                       shown(name), shown(it->second)));
      name = it->second;
    }
    if (!files.insert(file).second)
      return logic_error("report merge", "the same file twice", shown(file));
    auto report = load_report(file);
    if (!report.ok()) return std::move(report).error();
    inputs.push_back({file, name, std::move(report).value()});
  }
  for (const auto& [file, name] : names)
    if (!files.count(file))
      return logic_error("--name", fmt::format("{}={}: {} is not one of the reports merged",
                                               shown(file), shown(name), shown(file)));
  return merge_reports(std::move(inputs), options);
}

// ---- The document.

Json to_json(const Fleet& f) {
  Json hosts = Json::array();
  for (const auto& h : f.hosts)
    hosts.push_back({{"name", h.name},
                     {"name_from", to_string(h.name_from)},
                     {"source", h.source},
                     {"class", h.host_class},
                     {"class_from", to_string(h.class_from)},
                     {"facts", to_json(host_facts(h.report.host))},
                     {"report", to_json(h.report)}});
  Json j = {{"type", kFleetType},
            {"schema_version", f.schema_version},
            {"created", f.created},
            {"sandgate_version", f.sandgate_version},
            {"hosts", hosts}};
  Json derived = derived_json(f);
  for (auto& [key, value] : derived.items()) j[key] = std::move(value);
  return j;
}

Result<Fleet> fleet_from_json(const Json& j) {
  try {
    Reader r(j, "");
    Fleet f;
    if (r.str("type") != kFleetType) r.fail("type", std::string("expected \"") + kFleetType + "\"");
    f.schema_version = r.integer("schema_version");
    if (f.schema_version < 1 || f.schema_version > kFleetSchemaVersion)
      r.fail("schema_version", "this sandgate reads versions 1 to " +
                                   std::to_string(kFleetSchemaVersion) + ", got " +
                                   std::to_string(f.schema_version));
    f.created = r.str("created");
    f.sandgate_version = r.str("sandgate_version");
    const Json& hosts = r.array("hosts");
    std::set<std::string> names;
    for (size_t i = 0; i < hosts.size(); ++i) {
      Reader h(hosts[i], "hosts[" + std::to_string(i) + "]");
      FleetHost host;
      host.name = h.str("name");
      if (host.name.empty()) h.fail("name", "empty");
      if (!names.insert(host.name).second)
        h.fail("name", "a second host named \"" + shown(host.name) + "\"");
      std::string from = h.str("name_from");
      if (from == "hostname")
        host.name_from = NameFrom::kHostname;
      else if (from == "file")
        host.name_from = NameFrom::kFile;
      else if (from == "argument")
        host.name_from = NameFrom::kArgument;
      else
        h.fail("name_from",
               "expected one of hostname, file, argument; got \"" + shown(from) + "\"");
      host.source = h.str("source");
      host.host_class = h.str("class");
      if (host.host_class.empty()) h.fail("class", "empty");
      std::string class_from = h.str("class_from");
      if (class_from == "facts")
        host.class_from = ClassFrom::kFacts;
      else if (class_from == "argument")
        host.class_from = ClassFrom::kArgument;
      else
        h.fail("class_from", "expected facts or argument; got \"" + shown(class_from) + "\"");
      const Json& facts = h.object("facts");
      auto report = report_from_json(h.object("report"));
      if (!report.ok()) {
        // "providers[0].name: missing" under this host's path.
        const std::string& detail = report.error().detail;
        auto colon = detail.find(": ");
        if (colon == std::string::npos) h.fail("report", detail);
        throw FieldError{h.at("report") + "." + detail.substr(0, colon), detail.substr(colon + 2)};
      }
      host.report = std::move(report).value();
      HostFacts derived = host_facts(host.report.host);
      if (auto at = first_difference(facts, to_json(derived), h.at("facts")); !at.empty())
        throw FieldError{at, "does not follow from report.host (derived: recomputed on reading)"};
      if (host.name_from == NameFrom::kHostname && doctor_hostname(host.report.host) != host.name)
        h.fail("name", "name_from is hostname, and the report's system.hostname is not this name");
      if (host.class_from == ClassFrom::kFacts && host.host_class != class_name(derived))
        h.fail("class", "class_from is facts, and the facts make the class \"" +
                            shown(class_name(derived)) + "\"");
      h.done();
      f.hosts.push_back(std::move(host));
    }
    // The derived sections: recomputed from the reports, and what the file says must be that.
    Json derived = derived_json(f);
    for (const auto& [key, want] : derived.items())
      if (auto at = first_difference(r.raw(key), want, key); !at.empty())
        throw FieldError{at,
                         "does not follow from the hosts' reports (derived: recomputed on "
                         "reading; edit the reports, not this)"};
    r.done();
    return f;
  } catch (const FieldError& e) {
    return logic_error("read fleet", e.path + ": " + e.message);
  }
}

Result<Format> parse_fleet_format(const std::string& name) {
  auto f = parse_format(name);
  if (f.ok() && (*f == Format::kJson || *f == Format::kMarkdown || *f == Format::kHtml)) return f;
  return logic_error("--format", "a fleet is rendered as json, md or html; got \"" +
                                     shown(name.substr(0, 40)) + "\"");
}

std::string render_fleet_json(const Fleet& f) { return dump_json(to_json(f), 1) + "\n"; }

std::string render_fleet(const Fleet& f, Format format) {
  switch (format) {
    case Format::kHtml:
      return render_fleet_html(f);
    case Format::kMarkdown:
      return render_fleet_markdown(f);
    default:
      return render_fleet_json(f);
  }
}

// ---- Renderings. Every string from a report (host names, classes, providers, verdicts,
// evidence, files) is hostile text: clean_text'd, then escaped for the format (reports/text.h).

namespace {

constexpr size_t kMaxDifferencesShown = 60;  // in all classes; the JSON has every one
constexpr size_t kMaxHostsShown = 12;        // per difference: the odd ones out come first
constexpr size_t kMaxIdsShown = 12;          // probes differing between classes, per provider

// The hosts of a difference grouped by value, the smallest group first: in a class of fifty
// the one host that disagrees is what the reader is looking for.
std::vector<const HostDifference::Cell*> odd_ones_first(const HostDifference& d) {
  std::vector<std::string> order;
  std::map<std::string, std::vector<const HostDifference::Cell*>> groups;
  for (const auto& c : d.hosts) {
    if (!groups.count(c.value)) order.push_back(c.value);
    groups[c.value].push_back(&c);
  }
  std::stable_sort(order.begin(), order.end(), [&](const std::string& a, const std::string& b) {
    return groups[a].size() < groups[b].size();
  });
  std::vector<const HostDifference::Cell*> out;
  for (const auto& v : order) out.insert(out.end(), groups[v].begin(), groups[v].end());
  return out;
}

bool is_bad(const std::string& value) {
  return value == "exposed" || value == "not qualified" || value == "unavailable" ||
         value == "contradicted";
}

std::string what_differs(const HostDifference& d) {
  switch (d.kind) {
    case HostDifference::Kind::kProvider:
      return "qualification";
    case HostDifference::Kind::kProbes:
      return "whether the escape probes ran";
    case HostDifference::Kind::kProbe:
      return "probe " + d.id;
    case HostDifference::Kind::kCapability:
      return "capability " + d.id;
  }
  return "";
}

struct Tally {
  size_t qualified = 0, runs = 0, classes = 0, compared = 0, differences = 0;
};
Tally tally(const std::vector<FleetRow>& matrix, const std::vector<FleetClass>& classes) {
  Tally t;
  for (const auto& row : matrix)
    for (const auto& c : row.cells) {
      t.runs += c.status != FleetCell::Status::kAbsent;
      t.qualified += c.status == FleetCell::Status::kQualified;
    }
  t.classes = classes.size();
  for (const auto& c : classes) {
    t.compared += c.hosts.size() > 1;
    t.differences += c.differences.size();
  }
  return t;
}

std::string plural(size_t n, const char* one, const char* many) {
  return fmt::format("{} {}", n, n == 1 ? one : many);
}

// Whether any host's report marks the provider unsafe (the bypass cable).
bool unsafe_anywhere(const Fleet& f, const std::string& provider) {
  for (const auto& h : f.hosts)
    if (const ProviderReport* p = find_provider(h.report, provider); p && p->unsafe) return true;
  return false;
}

const FleetHost* host_named(const Fleet& f, const std::string& name) {
  for (const auto& h : f.hosts)
    if (h.name == name) return &h;
  return nullptr;
}

std::string md_value(const std::string& value) {
  return is_bad(value) ? "**" + md(value, 80) + "**" : md(value, 80);
}

std::string md_cell(const FleetHost& h, const FleetCell& c) {
  std::string s;
  switch (c.status) {
    case FleetCell::Status::kAbsent:
      return "–";
    case FleetCell::Status::kQualified:
      s = "yes";
      break;
    case FleetCell::Status::kNotQualified:
      s = "**no**";
      break;
    case FleetCell::Status::kUnavailable:
      s = "**unavailable**";
      break;
  }
  if (!c.why_not.empty()) {
    // An unavailable provider's reason is its one disqualification.
    s += ": " + md(c.why_not.front(), 80);
    if (c.why_not.size() > 1) s += fmt::format(" (+{} more)", c.why_not.size() - 1);
  }
  if (c.exposed) s += fmt::format(" · {}/{}/{}", *c.exposed, *c.inconclusive, *c.warning);
  if (c.run_ms) {
    s += fmt::format(" · {:.1f} ms", *c.run_ms);
    if (c.run_ratio && c.provider != h.report.baseline_provider)
      s += fmt::format(" ({:.2f}×)", *c.run_ratio);
  }
  return s;
}

}  // namespace

std::string render_fleet_markdown(const Fleet& f) {
  auto matrix = fleet_matrix(f);
  auto classes = fleet_classes(f);
  auto providers = fleet_providers(f);
  Tally t = tally(matrix, classes);
  std::string s =
      fmt::format("## sandgate fleet: {} in {}; {} of {} qualified\n\n",
                  plural(f.hosts.size(), "host", "hosts"), plural(t.classes, "class", "classes"),
                  t.qualified, plural(t.runs, "provider run", "provider runs"));

  s += "### Where hosts of one kind disagree\n\n";
  if (t.compared == 0) {
    s += "No two hosts are of one class: nothing to compare within a class.\n\n";
  } else {
    size_t shown_n = 0;
    std::vector<std::string> agree;
    for (const auto& c : classes) {
      if (c.hosts.size() < 2) continue;
      if (c.differences.empty()) {
        agree.push_back(md(c.name, 120) + " (" + plural(c.hosts.size(), "host", "hosts") + ")");
        continue;
      }
      std::string names;
      for (size_t i = 0; i < c.hosts.size() && i < kMaxHostsShown; ++i)
        names += (i ? ", " : "") + md(c.hosts[i], 80);
      if (c.hosts.size() > kMaxHostsShown)
        names += fmt::format(", … {} more", c.hosts.size() - kMaxHostsShown);
      s += fmt::format("#### {}: {} ({}), {}\n\n", md(c.name, 120),
                       plural(c.hosts.size(), "host", "hosts"), names,
                       plural(c.differences.size(), "difference", "differences"));
      for (const auto& d : c.differences) {
        if (shown_n++ >= kMaxDifferencesShown) break;
        s += fmt::format("- **{}** {}\n", md(d.provider, 80), md(what_differs(d), 160));
        auto cells = odd_ones_first(d);
        for (size_t i = 0; i < cells.size() && i < kMaxHostsShown; ++i) {
          s += fmt::format("  - {}: {}", md(cells[i]->host, 80), md_value(cells[i]->value));
          if (!cells[i]->evidence.empty()) s += " — " + md(cells[i]->evidence, 240);
          s += "\n";
        }
        if (cells.size() > kMaxHostsShown)
          s += fmt::format("  - … and {} more hosts\n", cells.size() - kMaxHostsShown);
      }
      s += "\n";
    }
    if (shown_n > kMaxDifferencesShown)
      s += fmt::format("… and {} more differences: fleet.json has every one.\n\n",
                       t.differences - kMaxDifferencesShown);
    if (!agree.empty()) s += "Agree on everything: " + join(agree, ", ") + ".\n\n";
  }

  s += "### Hosts × providers\n\n| host | class |";
  for (const auto& p : providers) s += " " + md(p, 80) + (unsafe_anywhere(f, p) ? " ⚠" : "") + " |";
  s += "\n|---|---|";
  for (size_t i = 0; i < providers.size(); ++i) s += "---|";
  s += "\n";
  for (size_t i = 0; i < matrix.size(); ++i) {
    const FleetHost& h = f.hosts[i];
    s += "| " + md(h.name, 80) + " | " + md(h.host_class, 120) + " |";
    for (const auto& c : matrix[i].cells) s += " " + md_cell(h, c) + " |";
    s += "\n";
  }
  s += "\nA cell: qualified · probes exposed/inconclusive/warning · the median run (create + "
       "exec + destroy) and its ratio to that host's own no-isolation run. ⚠: no isolation.\n\n";

  auto between = between_classes(f);
  if (!between.empty()) {
    s += "### Between classes (expected to differ; summarised)\n\n";
    for (const auto& p : between) {
      std::vector<std::string> per;
      for (const auto& c : p.classes)
        per.push_back(c.present == 0
                          ? fmt::format("absent in {}", md(c.name, 120))
                          : fmt::format("{} of {} in {}", c.qualified, c.present, md(c.name, 120)));
      s += fmt::format("- **{}** qualified on {}", md(p.provider, 80), join(per, ", "));
      if (!p.probes_differing.empty()) {
        std::vector<std::string> ids;
        for (size_t i = 0; i < p.probes_differing.size() && i < kMaxIdsShown; ++i)
          ids.push_back(md(p.probes_differing[i], 120));
        if (p.probes_differing.size() > kMaxIdsShown)
          ids.push_back(fmt::format("… {} more", p.probes_differing.size() - kMaxIdsShown));
        s += fmt::format("; {} judged differently between classes: {}",
                         plural(p.probes_differing.size(), "probe", "probes"), join(ids, ", "));
      }
      s += "\n";
    }
    s += "\n";
  }

  s += "### Hosts\n\n| host | named from | class | class from | report |\n|---|---|---|---|---|\n";
  for (const auto& h : f.hosts)
    s += fmt::format("| {} | {} | {} | {} | {} ({}, {}) |\n", md(h.name, 80),
                     to_string(h.name_from), md(h.host_class, 120), to_string(h.class_from),
                     md(h.source, 200), md(h.report.job, 40),
                     h.report.created.empty() ? "time unknown" : md(h.report.created, 40));
  return s;
}

namespace {

std::string h(std::string_view s, size_t max = 400) {
  CleanOptions o;
  o.max_bytes = max;
  return escape_markup(clean_text(s, o));
}

std::string pre(std::string_view s, size_t max = 2000) {
  CleanOptions o;
  o.max_bytes = max;
  o.keep_newlines = true;
  return "<pre>" + escape_markup(clean_text(s, o)) + "</pre>";
}

const char* css_class(const std::string& value) {
  if (value == "exposed" || value == "not qualified" || value == "unavailable" ||
      value == "contradicted")
    return "bad";
  if (value == "warning") return "warning";
  if (value == "qualified" || value.rfind("blocked", 0) == 0 || value == "declared") return "ok";
  return "dim";
}

constexpr const char* kFleetStyle = R"(
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#212121;background:#fff}
h1{font-size:22px}h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ddd}h3{font-size:15px}
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ddd;padding:4px 8px;
text-align:left;vertical-align:top}th{background:#f5f5f5}
.ok{color:#2e7d32}.bad{color:#c62828;font-weight:bold}.warning{color:#ef6c00;font-weight:bold}
.dim{color:#616161}td.q{background:#e8f5e9}td.nq{background:#ffebee}td.na{background:#fafafa}
pre{white-space:pre-wrap;word-break:break-all;background:#fafafa;border:1px solid #eee;
padding:6px;margin:4px 0;max-height:16em;overflow:auto}
)";

// What the host saw for a probe (the second witness), from the host's own report.
std::string html_host_evidence(const Fleet& f, const HostDifference& d,
                               const HostDifference::Cell& c) {
  if (d.kind != HostDifference::Kind::kProbe) return "";
  const FleetHost* host = host_named(f, c.host);
  const ProviderReport* p = host ? find_provider(host->report, d.provider) : nullptr;
  const ProbeVerdict* v = p ? find_verdict(*p, d.id) : nullptr;
  const Json* seen = v ? find_at(v->judgement, {"host"}) : nullptr;
  if (!seen || !seen->is_object()) return "";
  std::string text;
  for (const auto& [key, lines] : seen->items()) {
    if (!lines.is_array()) continue;
    for (const auto& line : lines)
      text += key + ": " + (line.is_string() ? line.get<std::string>() : dump_json(line)) + "\n";
  }
  return text.empty() ? "" : "What the host saw:" + pre(text, 1000);
}

}  // namespace

std::string render_fleet_html(const Fleet& f) {
  auto matrix = fleet_matrix(f);
  auto classes = fleet_classes(f);
  auto providers = fleet_providers(f);
  Tally t = tally(matrix, classes);
  std::string s =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
      "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
      "style-src 'unsafe-inline'\">\n"
      "<meta name=\"viewport\" content=\"width=device-width\">\n<title>sandgate fleet</title>\n"
      "<style>" +
      std::string(kFleetStyle) + "</style></head>\n<body>\n";
  s += fmt::format(
      "<h1>sandgate fleet: {} in {}; {} of {} qualified</h1>\n<p>Fleet schema {} · sandgate {} · "
      "{}</p>\n",
      plural(f.hosts.size(), "host", "hosts"), plural(t.classes, "class", "classes"), t.qualified,
      plural(t.runs, "provider run", "provider runs"), f.schema_version, h(f.sandgate_version, 40),
      f.created.empty() ? "time unknown" : h(f.created, 40));

  s += "<h2 id=\"differences\">Where hosts of one kind disagree</h2>\n";
  if (t.compared == 0)
    s += "<p>No two hosts are of one class: nothing to compare within a class.</p>\n";
  for (const auto& c : classes) {
    if (c.hosts.size() < 2) continue;
    std::string names;
    for (const auto& n : c.hosts) names += (names.empty() ? "" : ", ") + h(n, 80);
    s += fmt::format("<h3>{}: {} ({})</h3>\n", h(c.name, 200),
                     plural(c.hosts.size(), "host", "hosts"), names);
    if (c.differences.empty()) {
      s += "<p class=\"ok\">They agree on every provider, probe and capability.</p>\n";
      continue;
    }
    s += "<table><tr><th>provider</th><th>what</th><th>each host</th></tr>\n";
    for (const auto& d : c.differences) {
      std::string cells;
      for (const auto* cell : odd_ones_first(d)) {
        cells += fmt::format("<div><b>{}</b>: <span class=\"{}\">{}</span>", h(cell->host, 120),
                             css_class(cell->value), h(cell->value, 80));
        if (!cell->evidence.empty()) cells += pre(cell->evidence);
        cells += html_host_evidence(f, d, *cell) + "</div>\n";
      }
      s += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td></tr>\n", h(d.provider, 120),
                       h(what_differs(d), 200), cells);
    }
    s += "</table>\n";
  }

  s += "<h2 id=\"matrix\">Hosts × providers</h2>\n<table><tr><th>host</th><th>class</th>";
  for (const auto& p : providers)
    s += "<th>" + h(p, 120) + (unsafe_anywhere(f, p) ? " (UNSAFE: no isolation)" : "") + "</th>";
  s += "</tr>\n";
  for (size_t i = 0; i < matrix.size(); ++i) {
    const FleetHost& host = f.hosts[i];
    s += "<tr><td>" + h(host.name, 120) + "</td><td>" + h(host.host_class, 200) + "</td>";
    for (const auto& c : matrix[i].cells) {
      if (c.status == FleetCell::Status::kAbsent) {
        s += "<td class=\"na\">–</td>";
        continue;
      }
      bool q = c.status == FleetCell::Status::kQualified;
      std::string cell = fmt::format("<b>{}</b>", h(to_string(c.status)));
      for (const auto& why : c.why_not) cell += "<br>" + h(why, 300);
      if (c.exposed)
        cell += fmt::format("<br>exposed {} · inconclusive {} · warning {} · blocked {}",
                            *c.exposed, *c.inconclusive, *c.warning, *c.blocked);
      if (c.run_ms) {
        cell += fmt::format("<br>run {:.1f} ms", *c.run_ms);
        if (c.run_ratio && c.provider != host.report.baseline_provider)
          cell += fmt::format(" ({:.2f}× no isolation)", *c.run_ratio);
      }
      if (c.call_ms) cell += fmt::format("<br>call {:.1f} ms", *c.call_ms);
      s += fmt::format("<td class=\"{}\">{}</td>", q ? "q" : "nq", cell);
    }
    s += "</tr>\n";
  }
  s += "</table>\n";

  auto between = between_classes(f);
  if (!between.empty()) {
    s += "<h2 id=\"between\">Between classes (expected to differ; summarised)</h2>\n<table><tr>"
         "<th>provider</th><th>qualified, per class</th><th>probes judged differently between "
         "classes</th></tr>\n";
    for (const auto& p : between) {
      std::string per, ids;
      for (const auto& c : p.classes)
        per += fmt::format("{}: {} of {} (of {} hosts)<br>", h(c.name, 200), c.qualified, c.present,
                           c.hosts);
      for (const auto& id : p.probes_differing) ids += (ids.empty() ? "" : ", ") + h(id, 120);
      s += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td></tr>\n", h(p.provider, 120), per,
                       ids.empty() ? "none" : ids);
    }
    s += "</table>\n";
  }

  s += "<h2 id=\"hosts\">Hosts</h2>\n<table><tr><th>host</th><th>named from</th><th>class</th>"
       "<th>class from</th><th>facts</th><th>report</th></tr>\n";
  for (const auto& host : f.hosts) {
    HostFacts facts = host_facts(host.report.host);
    s += fmt::format(
        "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{} ({}, {})</td></tr>\n",
        h(host.name, 120), to_string(host.name_from), h(host.host_class, 200),
        to_string(host.class_from), h(class_name(facts), 200), h(host.source, 300),
        h(host.report.job, 40),
        host.report.created.empty() ? "time unknown" : h(host.report.created, 40));
  }
  s += "</table>\n</body></html>\n";
  return s;
}

}  // namespace sandgate::reports
