#include "probes/witness.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <optional>
#include <sstream>
#include <string_view>

#include "core/dns.h"
#include "core/fd.h"
#include "core/units.h"
#include "probes/disclosure.h"

namespace sandgate::probes {
namespace {

// /proc/<pid>/cmdline and environ are NUL-separated.
std::string printable_args(std::string s) {
  for (char& c : s)
    if (c == '\0') c = ' ';
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s.size() > 160 ? s.substr(0, 157) + "..." : s;
}

std::vector<pid_t> list_pids(const std::string& proc) {
  std::vector<pid_t> out;
  DIR* d = ::opendir(proc.c_str());
  if (!d) return out;
  while (struct dirent* e = ::readdir(d)) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (pid > 0 && end && *end == '\0') out.push_back(static_cast<pid_t>(pid));
  }
  ::closedir(d);
  return out;
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// A cgroup control file of `cg` in hierarchy `h` ("" when the hierarchy or file is absent).
std::optional<std::string> control_file(const controller::Cgroup& cg, const std::string& h,
                                        const std::string& name) {
  auto it = cg.dirs.find(h);
  if (it == cg.dirs.end()) return std::nullopt;
  auto text = read_file(it->second + "/" + name);
  if (!text.ok()) return std::nullopt;
  return trim(*text);
}

}  // namespace

std::vector<lab::LabEvent> take_allowlisted(std::vector<lab::LabEvent>& events,
                                            const std::vector<EgressRule>& allow) {
  std::vector<lab::LabEvent> allowed, rest;
  for (auto& e : events) {
    std::array<uint8_t, 16> addr{};
    int family = e.local_address.find(':') == std::string::npos ? AF_INET : AF_INET6;
    bool parsed = ::inet_pton(family, e.local_address.c_str(), addr.data()) == 1;
    uint8_t protocol =
        e.kind == lab::LabEvent::Kind::kUdpDatagram || e.kind == lab::LabEvent::Kind::kDnsQuery
            ? IPPROTO_UDP
            : IPPROTO_TCP;
    bool permitted = parsed && std::any_of(allow.begin(), allow.end(), [&](const EgressRule& r) {
                       return egress_allows(r, family, addr, e.local_port, protocol);
                     });
    // A name of the list asked of the lab's DNS: the run's resolver forwarding it, by design.
    if (e.kind == lab::LabEvent::Kind::kDnsQuery)
      permitted = permitted || std::any_of(allow.begin(), allow.end(), [&](const EgressRule& r) {
                    return r.is_name() && dns::normalize_name(e.dns_name) == r.name;
                  });
    (permitted ? allowed : rest).push_back(std::move(e));
  }
  events = std::move(rest);
  return allowed;
}

std::vector<std::string> decoy_evidence(const std::vector<lab::LabEvent>& events,
                                        const std::string& marker, bool any_event) {
  std::vector<std::string> out;
  for (const auto& e : events) {
    bool marked = !marker.empty() && (e.request_line.find(marker) != std::string::npos ||
                                      e.payload.find(marker) != std::string::npos ||
                                      e.dns_name.find(marker) != std::string::npos);
    for (const auto& [k, v] : e.headers)
      marked = marked || (!marker.empty() && v.find(marker) != std::string::npos);
    if (!marked && !any_event) continue;
    std::string line = e.decoy + " " + lab::to_string(e.kind) + " " + e.local_address + ":" +
                       std::to_string(e.local_port) + " from " + e.peer_address;
    if (!e.request_line.empty()) line += " \"" + e.request_line + "\"";
    if (!e.dns_name.empty()) line += " " + e.dns_name;
    out.push_back(line);
  }
  return out;
}

unsigned long long pidns_inode(const std::string& proc, pid_t pid) {
  struct stat st {};
  std::string path = proc + "/" + std::to_string(pid) + "/ns/pid";
  if (::stat(path.c_str(), &st) != 0) return 0;
  return st.st_ino;
}

HeldPidns hold_pidns(const std::string& proc, pid_t pid) {
  HeldPidns held;
  std::string path = proc + "/" + std::to_string(pid) + "/ns/pid";
  held.fd = UniqueFd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  struct stat st {};
  if (held.fd && ::fstat(held.fd.get(), &st) == 0) held.inode = st.st_ino;
  return held;
}

std::vector<std::string> marked_processes(const std::string& proc, const std::string& marker,
                                          const std::set<pid_t>& exclude) {
  std::vector<std::string> out;
  if (marker.empty()) return out;
  for (pid_t pid : list_pids(proc)) {
    if (exclude.count(pid)) continue;
    std::string base = proc + "/" + std::to_string(pid);
    auto cmdline = read_file(base + "/cmdline", 1 << 16);
    auto environ = read_file(base + "/environ", 1 << 20);
    bool in_cmd = cmdline.ok() && cmdline->find(marker) != std::string::npos;
    bool in_env = environ.ok() && environ->find(marker) != std::string::npos;
    if (!in_cmd && !in_env) continue;  // gone meanwhile, or not ours: expect the races
    out.push_back(std::to_string(pid) + " " + (cmdline.ok() ? printable_args(*cmdline) : "?") +
                  (in_env && !in_cmd ? " (marker in its environment)" : ""));
  }
  return out;
}

std::vector<std::string> processes_in_pidns(const std::string& proc, unsigned long long pidns) {
  std::vector<std::string> out;
  if (pidns == 0 || pidns == pidns_inode(proc, ::getpid())) return out;
  for (pid_t pid : list_pids(proc)) {
    if (pidns_inode(proc, pid) != pidns) continue;
    auto cmdline = read_file(proc + "/" + std::to_string(pid) + "/cmdline", 1 << 16);
    out.push_back(std::to_string(pid) + " " + (cmdline.ok() ? printable_args(*cmdline) : "?"));
  }
  return out;
}

std::vector<std::string> marked_entries(const std::string& dir, const std::string& marker) {
  std::vector<std::string> out;
  if (marker.empty()) return out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  while (struct dirent* e = ::readdir(d))
    if (std::string(e->d_name).find(marker) != std::string::npos)
      out.push_back(dir + "/" + e->d_name);
  ::closedir(d);
  return out;
}

TreeSnapshot snapshot_tree(const std::string& dir) {
  TreeSnapshot snap;
  // One open directory stream per level on the way down, never more than kSnapshotMaxDepth:
  // the depth bound is what keeps descriptors (and path lengths) bounded, without recursion.
  struct Level {
    std::unique_ptr<DIR, int (*)(DIR*)> dir;
    std::string rel;  // "" for dir itself
  };
  auto open_level = [](int at, const char* name, std::string rel) -> std::optional<Level> {
    int fd = ::openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR* d = fd >= 0 ? ::fdopendir(fd) : nullptr;
    if (d == nullptr) {
      if (fd >= 0) ::close(fd);
      return std::nullopt;  // unreadable or gone meanwhile: skipped, as before
    }
    return Level{{d, ::closedir}, std::move(rel)};
  };
  std::vector<Level> levels;
  if (auto root = open_level(AT_FDCWD, dir.c_str(), "")) levels.push_back(std::move(*root));
  size_t seen = 0;
  while (!levels.empty()) {
    Level& top = levels.back();
    struct dirent* e = ::readdir(top.dir.get());
    if (e == nullptr) {
      levels.pop_back();
      continue;
    }
    std::string_view name = e->d_name;
    if (name == "." || name == "..") continue;
    if (++seen > kSnapshotMaxEntries) {
      snap.stopped = "more than " + std::to_string(kSnapshotMaxEntries) + " entries";
      break;
    }
    std::string rel = top.rel.empty() ? std::string(name) : top.rel + "/" + e->d_name;
    struct stat st {};
    if (::fstatat(::dirfd(top.dir.get()), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    snap.entries[rel] = std::to_string(st.st_size) + ":" +
                        std::to_string(st.st_mtim.tv_sec * 1'000'000'000LL + st.st_mtim.tv_nsec);
    if (!S_ISDIR(st.st_mode)) continue;
    if (levels.size() >= static_cast<size_t>(kSnapshotMaxDepth)) {
      snap.stopped = "deeper than " + std::to_string(kSnapshotMaxDepth) + " levels";
      continue;  // the rest of this level is still within bounds
    }
    if (auto next = open_level(::dirfd(top.dir.get()), e->d_name, std::move(rel)))
      levels.push_back(std::move(*next));
  }
  return snap;
}

std::vector<std::string> tree_changes(const std::string& dir, const TreeSnapshot& before,
                                      const TreeSnapshot& after) {
  std::vector<std::string> out;
  for (const auto& [rel, sig] : after.entries) {
    auto it = before.entries.find(rel);
    if (it == before.entries.end())
      out.push_back(dir + "/" + rel + " (new)");
    else if (it->second != sig)
      out.push_back(dir + "/" + rel + " (changed)");
  }
  if (!after.stopped.empty() && after.stopped != before.stopped)
    out.push_back(dir + " (snapshot stopped: " + after.stopped + ")");
  return out;
}

std::vector<std::string> remaining_cgroups(const controller::Cgroup& cg) {
  std::vector<std::string> out;
  for (const auto& [h, dir] : cg.dirs)
    if (::access(dir.c_str(), F_OK) == 0) out.push_back(dir);
  return out;
}

LimitReadback read_back_limits(const controller::Cgroup& cg, const controller::Grant& grant) {
  LimitReadback r;
  auto check = [&](const std::string& file, const std::optional<std::string>& host,
                   const std::string& want, const std::string& granted) {
    if (!host) {
      r.mismatches.push_back(file + ": granted " + granted + ", not found on the host");
    } else if (*host != want) {
      r.mismatches.push_back(file + ": granted " + granted + ", host has " + *host);
    } else {
      r.checked.push_back(file + " = " + *host + " (granted " + granted + ")");
    }
  };
  bool v1 = cg.dirs.count("memory") || cg.dirs.count("pids") || cg.dirs.count("cpu");
  if (grant.memory_max) {
    std::string want = std::to_string(grant.memory_max->value);
    std::string granted = format_bytes(*grant.memory_max);
    if (v1)
      check("memory.limit_in_bytes", control_file(cg, "memory", "memory.limit_in_bytes"), want,
            granted);
    else
      check("memory.max", control_file(cg, "unified", "memory.max"), want, granted);
  }
  if (grant.pids_max) {
    std::string want = std::to_string(*grant.pids_max);
    if (v1)
      check("pids.max", control_file(cg, "pids", "pids.max"), want, want);
    else
      check("pids.max", control_file(cg, "unified", "pids.max"), want, want);
  }
  if (grant.cpu_cores) {
    std::string granted = std::to_string(*grant.cpu_cores) + " cores";
    if (v1) {
      auto quota = control_file(cg, "cpu", "cpu.cfs_quota_us");
      auto period = control_file(cg, "cpu", "cpu.cfs_period_us");
      std::optional<std::string> cores;
      if (quota && period && std::atoll(period->c_str()) > 0 && std::atoll(quota->c_str()) > 0)
        cores = std::to_string(static_cast<double>(std::atoll(quota->c_str())) /
                               std::atoll(period->c_str()));
      else if (quota)
        cores = *quota;  // "-1": no quota
      check("cpu.cfs_quota_us/cpu.cfs_period_us", cores, std::to_string(*grant.cpu_cores), granted);
    } else {
      auto max = control_file(cg, "unified", "cpu.max");
      std::optional<std::string> cores;
      if (max) {
        long long q = 0, p = 0;
        if (std::sscanf(max->c_str(), "%lld %lld", &q, &p) == 2 && p > 0)
          cores = std::to_string(static_cast<double>(q) / p);
        else
          cores = *max;  // "max 100000": no quota
      }
      check("cpu.max", cores, std::to_string(*grant.cpu_cores), granted);
    }
  }
  return r;
}

namespace {

std::string evidence_string(const ProbeReport& r, const char* key) {
  if (!r.evidence.is_object() || !r.evidence.contains(key) || !r.evidence[key].is_string())
    return "";
  return r.evidence[key].get<std::string>();
}

// Block device names of a /proc/partitions text.
std::set<std::string> partition_names(const std::string& text) {
  std::set<std::string> names;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string major, minor, blocks, name;
    f >> major >> minor >> blocks >> name;
    if (!major.empty() && std::isdigit(static_cast<unsigned char>(major[0])) && !name.empty())
      names.insert(name);
  }
  return names;
}

}  // namespace

HostView disclosure_host_view(const std::string& id, const ProbeReport& report,
                              const std::string& proc, const std::string& uname_release,
                              const std::vector<std::string>& host_paths,
                              std::optional<uint64_t> memory_grant) {
  HostView v;
  auto host_text = [&](const std::string& rel) {
    auto t = read_file(proc + "/" + rel, 1 << 20);
    return t.ok() ? *t : std::string();
  };
  const bool reached = report.result == ProbeResult::kReached;
  if (id == "disclosure.proc_cmdline" || id == "disclosure.proc_version" ||
      id == "disclosure.boot_id") {
    std::string rel = id == "disclosure.proc_cmdline"   ? "cmdline"
                      : id == "disclosure.proc_version" ? "version"
                                                        : "sys/kernel/random/boot_id";
    std::string host = host_text(rel);
    if (reached && !host.empty() && content_digest(host) == evidence_string(report, "digest"))
      v.disclosed.push_back("/proc/" + rel + " (the same bytes: digest " + content_digest(host) +
                            ")");
  } else if (id == "disclosure.kernel_release") {
    if (reached && !uname_release.empty() && evidence_string(report, "release") == uname_release)
      v.disclosed.push_back("kernel release " + uname_release + " (uname(2))");
    v.notes.push_back(
        "a shared kernel answers uname(2) itself: only a separate kernel (a microVM) hides its "
        "release");
  } else if (id == "disclosure.meminfo") {
    std::string total = meminfo_total_line(host_text("meminfo"));
    if (reached && !total.empty() && content_digest(total) == evidence_string(report, "digest"))
      v.disclosed.push_back(total +
                            " (/proc/meminfo shows the host's memory, not the run's grant)");
    v.notes.push_back(
        "/proc/meminfo shows the run's grant only through a per-run /proc view (the namespaces "
        "jail's, podman's) or a separate kernel; sysinfo(2), the kernel's own answer unless the "
        "sandbox answers it, is disclosure.sysinfo's");
    // The probe's sysinfo(2) total against the host's MemTotal (kB, so compared in kB): the
    // view does not cover it, and the report says so where it is the host's.
    const std::string host_total = total.empty() ? "" : total.substr(9);
    if (report.evidence.is_object() && report.evidence.contains("sysinfo_totalram_bytes") &&
        report.evidence["sysinfo_totalram_bytes"].is_number_unsigned() && !host_total.empty()) {
      const uint64_t kb = report.evidence["sysinfo_totalram_bytes"].get<uint64_t>() / 1024;
      if (kb != 0 && kb == std::strtoull(host_total.c_str(), nullptr, 10))
        v.notes.push_back("sysinfo(2) in the sandbox says the host's memory (totalram " +
                          std::to_string(kb) + " kB, the host's MemTotal)");
    }
  } else if (id == "disclosure.sysinfo") {
    // The total the call saw against the host's MemTotal and against the call's own grant
    // (kB, as MemTotal is): the host's total is the disclosure; the grant is the run's answer.
    std::string total = meminfo_total_line(host_text("meminfo"));
    const uint64_t host_kb = total.empty() ? 0 : std::strtoull(total.c_str() + 9, nullptr, 10);
    std::optional<uint64_t> seen;
    if (report.evidence.is_object() && report.evidence.contains("totalram_bytes") &&
        report.evidence["totalram_bytes"].is_number_unsigned())
      seen = report.evidence["totalram_bytes"].get<uint64_t>();
    if (reached && seen && host_kb != 0 && *seen / 1024 == host_kb) {
      v.disclosed.push_back("sysinfo(2) totalram " + std::to_string(host_kb) +
                            " kB: the host's MemTotal, not the run's grant");
    } else if (reached && seen && memory_grant && *seen == *memory_grant) {
      v.notes.push_back("sysinfo(2) totalram " + std::to_string(*seen) +
                        " bytes: the call's memory grant");
    } else if (reached && seen) {
      v.notes.push_back("sysinfo(2) totalram " + std::to_string(*seen) +
                        " bytes: neither the host's MemTotal (" + std::to_string(host_kb) +
                        " kB) nor the call's grant" +
                        (memory_grant ? " (" + std::to_string(*memory_grant) + " bytes)" : ""));
    }
    v.notes.push_back(
        "sysinfo(2) is the kernel's answer (the host's memory, load and uptime) unless the "
        "sandbox answers it itself (the run's views server through a seccomp listener: "
        "namespaces, podman) or runs its own kernel");
  } else if (id == "disclosure.vmstat") {
    // The host's count since boot, read after the probe's: the host's own text read then is at
    // most this and, faults being counted since boot, far more than half of it; a run's own
    // count (its cgroup's, from a view) is a sliver of the machine's.
    auto host = vmstat_value(host_text("vmstat"), "pgfault");
    std::optional<uint64_t> seen;
    if (report.evidence.is_object() && report.evidence.contains("pgfault") &&
        report.evidence["pgfault"].is_number_unsigned())
      seen = report.evidence["pgfault"].get<uint64_t>();
    if (reached && host && seen && *seen <= *host && *seen >= *host / 2)
      v.disclosed.push_back("pgfault " + std::to_string(*seen) +
                            " (/proc/vmstat counts the host's page faults, every tenant's; the "
                            "host's count is " +
                            std::to_string(*host) + ")");
    v.notes.push_back(
        "/proc/vmstat shows the run's own counters only through a per-run /proc view (the "
        "namespaces jail's; runc refuses podman's bind) or a separate kernel");
  } else if (id == "disclosure.interrupts") {
    std::string host = interrupt_sources(host_text("interrupts"));
    if (reached && !host.empty() && content_digest(host) == evidence_string(report, "digest"))
      v.disclosed.push_back("/proc/interrupts (the host's interrupt sources: digest " +
                            content_digest(host) + ")");
  } else if (id == "disclosure.block_devices") {
    auto host = partition_names(host_text("partitions"));
    if (reached && report.evidence.is_object() && report.evidence.contains("devices") &&
        report.evidence["devices"].is_array()) {
      std::string seen;
      for (const auto& d : report.evidence["devices"])
        if (d.is_string() && host.count(d.get<std::string>()))
          seen += (seen.empty() ? "" : ", ") + d.get<std::string>();
      if (!seen.empty()) v.disclosed.push_back("block devices " + seen);
    }
  } else if (id == "disclosure.mountinfo_host_path") {
    std::string line = evidence_string(report, "workspace_mount");
    std::string inside = evidence_string(report, "workspace");
    for (const auto& p : host_paths) {
      if (!p.empty() && inside == p) {
        v.disclosed.push_back("path " + p + ": the workspace is at its host path");
        break;
      }
      if (reached && !p.empty() && line.find(p) != std::string::npos) {
        v.disclosed.push_back("path " + p + " in the workspace's /proc/self/mountinfo line");
        break;
      }
    }
    v.notes.push_back(
        "a bind or overlay mount names its host source in mountinfo; only a per-run filesystem "
        "(a loop-mounted image) or a separate kernel hides the host path");
  }
  return v;
}

}  // namespace sandgate::probes
