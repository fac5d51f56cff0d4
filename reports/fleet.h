// A fleet: many hosts' qualification reports in one document (`sandgate report merge`). A
// matrix host × provider, and the differences between hosts of one kind called out: hosts of
// one class should agree, so within a class every verdict, capability and qualification that
// differs is shown with each host's evidence; across classes differences are expected and only
// summarised.
//
// The document carries each host's report whole (what every derived section is computed from)
// beside the derived sections (the matrix, the classes and their differences, the summary
// between classes), which a reader recomputes and refuses when they do not follow from the
// reports. Versioned by kFleetSchemaVersion; the README documents each field.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/json.h"
#include "core/result.h"
#include "reports/model.h"
#include "reports/writers.h"

namespace sandgate::reports {

inline constexpr int kFleetSchemaVersion = 1;
inline constexpr const char* kFleetType = "sandgate-fleet";

// What makes hosts "of one kind", from the doctor's facts (Report::host). Absent: the report
// does not say (a report from before doctor printed it); unknown is a value of its own.
struct HostFacts {
  std::optional<std::string> machine;        // system.machine: "x86_64"
  std::optional<std::string> kernel;         // system.kernel_release's major.minor: "6.1"
  std::optional<std::string> cgroup_layout;  // cgroup_layout.kind: "v1", "hybrid", "v2"
  std::optional<bool> kvm;                   // kvm.usable: a KVM guest runs (else TCG only)
  bool operator==(const HostFacts&) const = default;
};
HostFacts host_facts(const Json& doctor);
// "x86_64/linux-6.1/hybrid/kvm"; "?" for each fact the report does not have.
std::string class_name(const HostFacts& f);
// The doctor's system.hostname; absent when it has none.
std::optional<std::string> doctor_hostname(const Json& doctor);

// Where a host's name came from, and its class.
enum class NameFrom { kHostname, kFile, kArgument };
enum class ClassFrom { kFacts, kArgument };

struct FleetHost {
  std::string name;  // unique in the fleet
  NameFrom name_from = NameFrom::kFile;
  std::string source;  // the file the report was read from
  std::string host_class;
  ClassFrom class_from = ClassFrom::kFacts;
  Report report;
};

struct Fleet {
  int schema_version = kFleetSchemaVersion;
  std::string created;  // when merged, UTC ISO 8601
  std::string sandgate_version;
  std::vector<FleetHost> hosts;  // in the order given
};

// ---- What a fleet shows, each derived from its hosts' reports.

// Every provider of any host, in the order they first appear.
std::vector<std::string> fleet_providers(const Fleet& f);

// One host × one provider.
struct FleetCell {
  enum class Status { kQualified, kNotQualified, kUnavailable, kAbsent };
  std::string provider;
  Status status = Status::kAbsent;   // kAbsent: not in this host's report
  std::vector<std::string> why_not;  // the disqualifications
  // Probe verdicts by kind; absent when the probes did not run for it on this host.
  std::optional<uint64_t> exposed, blocked, inconclusive, warning;
  std::optional<double> run_ms;     // create + exec(true) + destroy, median
  std::optional<double> run_ratio;  // over this host's own no-isolation baseline
  std::optional<double> call_ms;    // a call through the controller, median
};
std::string to_string(FleetCell::Status s);

struct FleetRow {
  std::string host;
  std::vector<FleetCell> cells;  // one per fleet_providers(), in that order
};
std::vector<FleetRow> fleet_matrix(const Fleet& f);

// Something hosts of one class do not agree on.
struct HostDifference {
  enum class Kind {
    kProvider,    // qualified / not qualified / unavailable / absent
    kProbes,      // the escape probes ran for it on one host and not on another
    kProbe,       // one probe's verdict (with the layer that blocked it)
    kCapability,  // declared, contradicted by an exposed probe, or not declared
  };
  struct Cell {
    std::string host;
    std::string value;     // "blocked (seccomp)", "exposed", "not run", "qualified", ...
    std::string evidence;  // the host's evidence for it (the probe's why, the reasons)
  };
  std::string provider;
  Kind kind = Kind::kProbe;
  std::string id;           // the probe or the capability; "" for kProvider and kProbes
  std::vector<Cell> hosts;  // every host of the class the comparison covers, in fleet order
};
std::string to_string(HostDifference::Kind k);

struct FleetClass {
  std::string name;
  std::vector<std::string> hosts;  // in fleet order
  // What its hosts disagree on, by provider (in fleet order), then kind, then suite order.
  // Empty with a single host: nothing to compare.
  std::vector<HostDifference> differences;
};
// Classes in the order their first host appears.
std::vector<FleetClass> fleet_classes(const Fleet& f);

// Between classes, where differences are expected: per provider, how each class fared and
// which probes some two hosts of different classes judged differently. Empty with one class.
struct ProviderAcrossClasses {
  struct PerClass {
    std::string name;
    uint64_t hosts = 0;      // in the class
    uint64_t present = 0;    // whose report has the provider
    uint64_t qualified = 0;  // where it qualified
  };
  std::string provider;
  std::vector<PerClass> classes;
  std::vector<std::string> probes_differing;  // probe ids, in suite order
};
std::vector<ProviderAcrossClasses> between_classes(const Fleet& f);

// ---- Making one.

struct MergeInput {
  std::string source;  // the file, for naming the host and for errors
  std::string name;    // the operator's name for the host; "" to derive it
  Report report;
};
struct MergeOptions {
  std::map<std::string, std::string> classes;  // host name -> class (--class HOST=NAME)
  std::string created;                         // when merged, UTC ISO 8601
};
// Names each host (the operator's name, else the doctor's hostname, else the file's name) and
// classes it (the operator's class, else class_name(host_facts)). Two hosts with one name, an
// empty name, or a class for a host that is not there, are errors that name the files.
Result<Fleet> merge_reports(std::vector<MergeInput> inputs, const MergeOptions& options);

// An argument `FILE` or `FILE=NAME` (split at the last '=' unless the whole argument is an
// existing file), the files read with load_report. `names` (--name FILE=NAME) names hosts too.
// Errors name the file and the field.
Result<Fleet> merge_report_files(const std::vector<std::string>& args,
                                 const std::map<std::string, std::string>& names,
                                 const MergeOptions& options);

// The file's name for a host: the file name without .json, or the directory's name when the
// file is one sandgate writes under the same name on every host (report.json, qualify.json).
std::string host_name_from_file(const std::string& path);

// ---- The document.

Json to_json(const Fleet& f);
// Strict as report_from_json: an unknown or missing field, a wrong type, a newer
// schema_version, a derived section that does not follow from the hosts' reports, each an
// error naming the field's path ("hosts[1].report.providers[0].name: missing").
Result<Fleet> fleet_from_json(const Json& j);

// json, md or html; the others are refused with the ones a fleet has.
Result<Format> parse_fleet_format(const std::string& name);
std::string render_fleet_json(const Fleet& f);
// Within-class differences first, then the matrix, then the summary between classes.
std::string render_fleet_markdown(const Fleet& f);
// One self-contained page, as render_html: nothing fetched, every string escaped.
std::string render_fleet_html(const Fleet& f);
std::string render_fleet(const Fleet& f, Format format);

}  // namespace sandgate::reports
