// Plain-Linux host features sandgate depends on, each found out by reading the kernel's own
// answer or by trying the thing: system-wide PSI, user namespaces, seccomp, and the host tools
// providers run (podman, crun, qemu, ...). Every path comes from HostPaths or an explicit root,
// so each parser runs against fake trees in tests.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/check.h"
#include "core/host_paths.h"
#include "core/result.h"
#include "core/units.h"

namespace sandgate {

// ---- PSI (Documentation/accounting/psi.rst) ----

struct PressureLine {
  double avg10 = 0, avg60 = 0, avg300 = 0;
  unsigned long long total_us = 0;
};
struct Pressure {
  PressureLine some;
  std::optional<PressureLine> full;  // absent in /proc/pressure/cpu before Linux 5.13
};
// Parses the text of a pressure file ("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n...").
Result<Pressure> parse_pressure(std::string_view text);

// <proc>/pressure/{cpu,memory,io}: one check each.
std::vector<Check> system_pressure_checks(const HostPaths& paths);

// ---- user namespaces ----

// <proc>/sys/user/max_user_namespaces.
Result<long> read_max_user_namespaces(const HostPaths& paths);
// Forks a child that calls unshare(CLONE_NEWUSER) and exits with 0 or the errno; reaps it.
// A child still running at `deadline` is killed and reaped.
Status try_user_namespace(Duration deadline = std::chrono::seconds(2));
// The limit, then the real attempt.
Check user_namespace_check(const HostPaths& paths);

// ---- seccomp ----

// The value of a "Name:\tvalue" line of /proc/<pid>/status, or nullopt.
std::optional<std::string> status_field(std::string_view status_text, std::string_view name);
// prctl(PR_GET_SECCOMP), the Seccomp: line of <proc>/self/status, libseccomp's version.
std::vector<Check> seccomp_checks(const HostPaths& paths);

// ---- process start ----

// What starting a process costs here, measured: a spawn, exec and wait of `program` (the
// median of `runs`), and one CPUID instruction (x86; 0 elsewhere). A hypervisor traps CPUID,
// and glibc's start runs it tens of times (CPU features, cache sizes) in every process, static
// or dynamic: where a trap is slow (a nested VM: ~13 us on this project's), most of a process
// start is those traps, which every exec of every call pays, and sandgate's own processes too.
struct ProcessStartCost {
  double exec_ms = 0;
  int runs = 0;  // the starts exec_ms is the median of
  double cpuid_us = 0;
};
Result<ProcessStartCost> measure_process_start(const std::string& program = "/bin/true",
                                               int runs = 10);
// doctor's "process start" line: the two figures of `cost` (measured of `program`), and what
// they mean; a failed measurement says why.
Check process_start_check(const Result<ProcessStartCost>& cost,
                          const std::string& program = "/bin/true");

// ---- host tools ----

struct ToolSpec {
  std::string name;                       // looked up on PATH
  std::vector<std::string> version_args;  // appended to the tool's path to print its version
  bool want_static = false;               // report whether the binary is statically linked
  std::string purpose;                    // what sandgate uses it for (said when it is missing)
};
// The tools providers and the guest lane run.
std::vector<ToolSpec> default_tools();

// The first executable `name` in the colon-separated `path_env`; nullopt if none.
std::optional<std::string> find_on_path(const std::string& name, const std::string& path_env);
// The first non-empty line of a tool's version output, trimmed.
std::string first_line(std::string_view output);
// Whether an ELF executable has no PT_INTERP (no dynamic loader): a static binary.
Result<bool> is_static_elf(const std::string& path);

Check tool_check(const ToolSpec& tool, const std::string& path_env,
                 Duration timeout = std::chrono::seconds(5));
// The guest kernel the microVM lane boots: <boot_dir>/vmlinuz-*cloud-amd64.
Check guest_kernel_check(const std::string& boot_dir);

}  // namespace sandgate
