// Disclosure: what the sandbox can learn about the host it runs on. Nothing here crosses a
// boundary by acting; each probe reads what the kernel shows and reports it (a digest, a short
// excerpt), and the host compares with its own copy (suite.cc): the same bytes mean the host's
// information reached the sandbox. What a shared kernel cannot hide (its own release through
// uname(2), its total memory through sysinfo(2)) is reported as such; the judge notes that only
// a separate kernel hides it.
//
// Evidence fields the host reads: "digest" (content_digest of what was read, disclosure.h;
// never the text itself),
// "devices" (block device names), "workspace_mount" (the mountinfo line of the workspace),
// "release"/"version" (uname), "mem_total" (the MemTotal line), "pgfault" (vmstat's count),
// "totalram_bytes" (sysinfo(2)'s memory total).
#include "probes/disclosure.h"

#include <sys/sysinfo.h>
#include <sys/utsname.h>

#include <algorithm>
#include <cctype>
#include <sstream>

#include "probes/catalogue.h"
#include "probes/probe_util.h"

namespace sandgate::probes {
namespace {

using namespace util;

// A /proc file whose text is the host's unless the provider masked it: reached with its
// digest when it has any content; not_found when it is absent or empty (masked by an empty
// file, as containers do).
ProbeReport read_host_text(const std::string& attempt, const std::string& path) {
  FileRead r = read_prefix(path, 16384);
  if (r.err) return failed(attempt, r.err, {{"path", path}});
  std::string_view text = r.data;
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  if (text.empty())
    return failed(attempt, ENOENT, {{"path", path}, {"bytes", r.bytes}}, "empty: masked");
  // A digest, not the text: a kernel command line can carry secrets, and the report is kept.
  return reached(attempt, {{"path", path}, {"digest", content_digest(r.data)}, {"bytes", r.bytes}});
}

ProbeReport host_cmdline(const Params&) {
  return read_host_text("read the host kernel's command line (/proc/cmdline)", "/proc/cmdline");
}

ProbeReport proc_version(const Params&) {
  return read_host_text("read /proc/version (kernel build, compiler, build host)", "/proc/version");
}

ProbeReport boot_id(const Params&) {
  return read_host_text("read the host's boot id (/proc/sys/kernel/random/boot_id)",
                        "/proc/sys/kernel/random/boot_id");
}

ProbeReport kernel_release(const Params&) {
  std::string attempt = "uname(2): the kernel's release and version";
  struct utsname u {};
  if (::uname(&u) != 0) return failed(attempt, errno);
  return reached(attempt, {{"syscall", "uname"}, {"release", u.release}, {"version", u.version}});
}

// Block device names in /proc/partitions and /proc/diskstats.
ProbeReport block_device_list(const Params&) {
  std::string attempt = "list the host's block devices (/proc/partitions, /proc/diskstats)";
  Json devices = Json::array();
  Json files = Json::object();
  for (const char* path : {"/proc/partitions", "/proc/diskstats"}) {
    FileRead r = read_prefix(path, 65536);
    files[path] = r.err ? outcome(r.err) : std::to_string(r.bytes) + " bytes";
    if (r.err) continue;
    std::istringstream in(r.data);
    std::string line;
    bool partitions = std::string(path) == "/proc/partitions";
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string a, b, c, d;
      f >> a >> b >> c;
      if (partitions) f >> d;
      std::string name = partitions ? d : c;
      if (a.empty() || !std::isdigit(static_cast<unsigned char>(a[0])) || name.empty()) continue;
      if (devices.size() < 32 && std::find(devices.begin(), devices.end(), name) == devices.end())
        devices.push_back(printable(name, 32));
    }
  }
  Json ev = {{"files", files}, {"devices", devices}};
  if (!devices.empty()) return reached(attempt, ev);
  return failed(attempt, ENOENT, ev, "no block device listed");
}

ProbeReport meminfo(const Params&) {
  std::string attempt = "read the memory total (/proc/meminfo, sysinfo(2))";
  FileRead r = read_prefix("/proc/meminfo", 16384);
  Json ev = Json::object();
  struct sysinfo si {};
  if (::sysinfo(&si) == 0)
    ev["sysinfo_totalram_bytes"] = static_cast<unsigned long long>(si.totalram) * si.mem_unit;
  if (r.err) return failed(attempt, r.err, ev);
  std::string total = meminfo_total_line(r.data);
  if (total.empty()) return failed(attempt, ENOENT, ev, "no MemTotal line");
  ev["mem_total"] = printable(total, 64);
  ev["digest"] = content_digest(total);
  return reached(attempt, ev);
}

// sysinfo(2): the memory total, load, uptime and thread count, answered by the kernel (the
// host's numbers) unless the sandbox answers it itself (the run's views server, through a
// seccomp listener: providers/sysinfo_notify.h; namespaces and podman). glibc's
// sysconf(_SC_PHYS_PAGES) is this call, so every runtime that sizes itself from "physical memory"
// reads it. The host compares the total with its own MemTotal and with the call's memory grant
// (witness.cc).
ProbeReport sysinfo_total(const Params&) {
  std::string attempt = "sysinfo(2): the memory total, load, uptime and threads";
  struct sysinfo si {};
  if (::sysinfo(&si) != 0) return failed(attempt, errno, {{"syscall", "sysinfo"}});
  const unsigned unit = si.mem_unit == 0 ? 1 : si.mem_unit;
  return reached(attempt, {{"syscall", "sysinfo"},
                           {"totalram_bytes", static_cast<unsigned long long>(si.totalram) * unit},
                           {"freeram_bytes", static_cast<unsigned long long>(si.freeram) * unit},
                           {"uptime_s", static_cast<long long>(si.uptime)},
                           {"procs", static_cast<unsigned>(si.procs)}});
}

// The host's memory counters: /proc/vmstat counts every page fault, swap-in, scan and free page
// of the machine (the host's memory, and what every other tenant does with theirs). A digest of
// the text would never match the host's copy, which moves between the two reads: the probe
// reports one counter instead, the page faults (a number, nothing secret), which the host
// compares with its own count since boot (witness.cc); a per-run view shows the run's own.
ProbeReport vmstat(const Params&) {
  std::string attempt = "read the host's memory counters (/proc/vmstat)";
  const std::string path = "/proc/vmstat";
  FileRead r = read_prefix(path, 65536);
  if (r.err) return failed(attempt, r.err, {{"path", path}});
  if (r.data.find_first_not_of("\n ") == std::string::npos)
    return failed(attempt, ENOENT, {{"path", path}, {"bytes", r.bytes}}, "empty: masked");
  auto faults = vmstat_value(r.data, "pgfault");
  if (!faults) return failed(attempt, ENOENT, {{"path", path}}, "no pgfault line");
  return reached(attempt, {{"path", path}, {"pgfault", *faults}, {"bytes", r.bytes}});
}

// The host's interrupt sources: /proc/interrupts names its devices and drivers, and its per-CPU
// counts move with every tenant's packets and disk I/O. The digest of the sources (the counts
// left out: they move between the two reads) is compared with the host's.
ProbeReport interrupts(const Params&) {
  std::string attempt = "read the host's interrupts (/proc/interrupts)";
  const std::string path = "/proc/interrupts";
  FileRead r = read_prefix(path, 1 << 20);
  if (r.err) return failed(attempt, r.err, {{"path", path}});
  std::string sources = interrupt_sources(r.data);
  // A header with no line under it says nothing of the host but its CPU count.
  if (sources.find('\n') == std::string::npos || sources.find('\n') + 1 == sources.size())
    return failed(attempt, ENOENT, {{"path", path}, {"bytes", r.bytes}}, "no lines: masked");
  return reached(attempt,
                 {{"path", path}, {"digest", content_digest(sources)}, {"bytes", r.bytes}});
}

// The workspace's line in /proc/self/mountinfo: its root field and mount options name where
// the workspace lives on the host (a bind's source path, an overlay's upperdir and lowerdir).
ProbeReport mountinfo_host_path(const Params& p) {
  std::string ws = workspace(p);
  std::string attempt = "find the workspace's host path in /proc/self/mountinfo (" + ws + ")";
  FileRead r = read_prefix("/proc/self/mountinfo", 1 << 20);
  if (r.err) return failed(attempt, r.err);
  std::istringstream in(r.data);
  std::string line, found;
  while (std::getline(in, line)) {
    // id parent major:minor root mount-point options ... - fstype source super-options
    std::istringstream f(line);
    std::string id, parent, dev, root, point;
    f >> id >> parent >> dev >> root >> point;
    if (point == ws) found = line;  // the last one is the one on top
  }
  if (found.empty())
    return failed(attempt, ENOENT, {{"workspace", ws}}, "no mount at the workspace");
  return reached(attempt, {{"workspace", ws}, {"workspace_mount", printable(found, 2048)}});
}

}  // namespace

Status register_disclosure_probes(Catalogue& c) {
  SG_TRY(
      c.add({"disclosure.proc_cmdline", "read the host kernel's command line", {}, host_cmdline}));
  SG_TRY(c.add({"disclosure.proc_version", "read /proc/version", {}, proc_version}));
  SG_TRY(c.add({"disclosure.boot_id", "read the host's boot id", {}, boot_id}));
  SG_TRY(c.add({"disclosure.kernel_release", "uname(2) release and version", {}, kernel_release}));
  SG_TRY(
      c.add({"disclosure.block_devices", "list the host's block devices", {}, block_device_list}));
  SG_TRY(
      c.add({"disclosure.meminfo", "the host's memory total instead of the run's", {}, meminfo}));
  SG_TRY(c.add({"disclosure.sysinfo",
                "the host's memory total, load and uptime through sysinfo(2)",
                {},
                sysinfo_total}));
  SG_TRY(c.add({"disclosure.vmstat",
                "the host's memory counters and every tenant's faults in /proc/vmstat",
                {},
                vmstat}));
  SG_TRY(c.add({"disclosure.interrupts",
                "the host's devices and every tenant's interrupts in /proc/interrupts",
                {},
                interrupts}));
  SG_TRY(c.add({"disclosure.mountinfo_host_path",
                "the workspace's host path in /proc/self/mountinfo",
                {"workspace"},
                mountinfo_host_path}));
  return {};
}

}  // namespace sandgate::probes
