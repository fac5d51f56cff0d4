#include "core/host_features.h"

#include <dirent.h>
#include <elf.h>
#include <fmt/format.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <seccomp.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/fd.h"
#include "core/probe_child.h"
#include "core/process.h"
#include "core/strings.h"

namespace sandgate {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r'))
    s.remove_prefix(1);
  while (!s.empty() &&
         (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n'))
    s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> lines(std::string_view text) {
  std::vector<std::string_view> out;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    out.push_back(text.substr(0, nl));
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
  return out;
}

// "avg10=0.00 avg60=0.00 avg300=0.00 total=0".
bool parse_pressure_fields(std::string_view rest, PressureLine& out) {
  int seen = 0;
  while (!rest.empty()) {
    rest = trim(rest);
    size_t sp = rest.find(' ');
    std::string field(rest.substr(0, sp));
    rest = sp == std::string_view::npos ? std::string_view() : rest.substr(sp + 1);
    size_t eq = field.find('=');
    if (eq == std::string::npos) return false;
    std::string key = field.substr(0, eq), value = field.substr(eq + 1);
    char* end = nullptr;
    errno = 0;
    // The kernel writes digits ("%lu.%02lu", "%llu"); strtod and strtoull would also take
    // "nan", "inf", "-5" and hex, which a threshold compared with avg10 cannot use (NaN never
    // trips it): only digits and one dot are numbers here.
    if (value.empty() || value.find_first_not_of(key == "total" ? "0123456789" : "0123456789.") !=
                             std::string::npos)
      return false;
    if (key == "total") {
      out.total_us = std::strtoull(value.c_str(), &end, 10);
    } else {
      double v = std::strtod(value.c_str(), &end);
      if (key == "avg10")
        out.avg10 = v;
      else if (key == "avg60")
        out.avg60 = v;
      else if (key == "avg300")
        out.avg300 = v;
      else
        continue;  // a future field: ignore
    }
    if (errno != 0 || end == value.c_str() || *end != '\0') return false;
    ++seen;
  }
  return seen == 4;
}

}  // namespace

Result<Pressure> parse_pressure(std::string_view text) {
  Pressure p;
  bool some = false;
  for (auto line : lines(text)) {
    line = trim(line);
    if (line.empty()) continue;
    size_t sp = line.find(' ');
    auto kind = line.substr(0, sp);
    auto rest = sp == std::string_view::npos ? std::string_view() : line.substr(sp + 1);
    PressureLine pl;
    if (!parse_pressure_fields(rest, pl))
      return logic_error("parse pressure", "malformed line '" + excerpt(line) + "'");
    if (kind == "some") {
      p.some = pl;
      some = true;
    } else if (kind == "full") {
      p.full = pl;
    } else {
      return logic_error("parse pressure", "unknown line kind '" + excerpt(kind) + "'");
    }
  }
  if (!some) return logic_error("parse pressure", "no 'some' line");
  return p;
}

std::vector<Check> system_pressure_checks(const HostPaths& paths) {
  std::vector<Check> out;
  for (const char* resource : {"cpu", "memory", "io"}) {
    std::string path = paths.proc + "/pressure/" + resource;
    std::string name = std::string("PSI ") + resource;
    auto text = read_file(path, 4096);
    if (!text.ok()) {
      std::string why = text.error().message();
      if (text.error().err == ENOENT) why += " (kernel built without CONFIG_PSI)";
      if (text.error().err == EOPNOTSUPP) why += " (PSI disabled: boot with psi=1)";
      out.push_back(check_failed(name, why));
      continue;
    }
    auto p = parse_pressure(*text);
    if (!p.ok()) {
      out.push_back(check_failed(name, p.error().message() + " in " + path));
      continue;
    }
    char buf[128];
    std::snprintf(buf, sizeof buf, "%s: some avg10=%.2f%% total=%.3fs", path.c_str(), p->some.avg10,
                  static_cast<double>(p->some.total_us) / 1e6);
    out.push_back(check_ok(name, buf));
  }
  return out;
}

Result<long> read_max_user_namespaces(const HostPaths& paths) {
  std::string path = paths.proc + "/sys/user/max_user_namespaces";
  SG_ASSIGN_OR_RETURN(std::string text, read_file(path, 64));
  std::string value(trim(text));
  char* end = nullptr;
  errno = 0;
  long n = std::strtol(value.c_str(), &end, 10);
  if (value.empty() || errno != 0 || *end != '\0' || n < 0)
    return logic_error("parse", "not a count: '" + value + "'", path);
  return n;
}

Status try_user_namespace(Duration deadline) {
  SG_ASSIGN_OR_RETURN(
      ProbeOutcome o,
      run_probe_child([] { return ::unshare(CLONE_NEWUSER) == 0 ? 0 : errno; }, deadline));
  if (o.timed_out) return logic_error("unshare(CLONE_NEWUSER)", "the probe child hung; killed");
  if (!o.status->exited) return logic_error("unshare(CLONE_NEWUSER)", o.status->describe());
  if (o.status->code != 0) return sys_error(o.status->code, "unshare(CLONE_NEWUSER)");
  return {};
}

Check user_namespace_check(const HostPaths& paths) {
  const char* name = "user namespaces";
  auto max = read_max_user_namespaces(paths);
  if (!max.ok())
    return check_failed(name, max.error().message() + " (kernel without CONFIG_USER_NS?)");
  if (*max == 0)
    return check_failed(name,
                        "user.max_user_namespaces is 0: enable with "
                        "`sysctl -w user.max_user_namespaces=15000`");
  if (auto s = try_user_namespace(); !s.ok()) {
    std::string why = s.error().message();
    if (s.error().err == EPERM || s.error().err == EACCES)
      why += " (restricted by a sysctl such as kernel.unprivileged_userns_clone, or an LSM)";
    return check_failed(name, why);
  }
  return check_ok(name,
                  "unshare(CLONE_NEWUSER) works; user.max_user_namespaces=" + std::to_string(*max));
}

std::optional<std::string> status_field(std::string_view status_text, std::string_view name) {
  for (auto line : lines(status_text)) {
    if (line.size() > name.size() && line.substr(0, name.size()) == name &&
        line[name.size()] == ':') {
      return std::string(trim(line.substr(name.size() + 1)));
    }
  }
  return std::nullopt;
}

std::vector<Check> seccomp_checks(const HostPaths& paths) {
  std::vector<Check> out;
  int mode = ::prctl(PR_GET_SECCOMP, 0, 0, 0, 0);
  if (mode < 0) {
    out.push_back(check_failed("seccomp", sys_error("prctl(PR_GET_SECCOMP)").message() +
                                              " (kernel without CONFIG_SECCOMP)"));
  } else {
    out.push_back(check_ok("seccomp", "prctl(PR_GET_SECCOMP) = " + std::to_string(mode) +
                                          (mode == 0 ? " (this process is not filtered)"
                                                     : " (this process already runs filtered)")));
  }
  std::string status_path = paths.proc + "/self/status";
  if (auto status = read_file(status_path); !status.ok()) {
    out.push_back(check_failed("Seccomp: in status", status.error().message()));
  } else if (auto v = status_field(*status, "Seccomp"); !v) {
    out.push_back(
        check_failed("Seccomp: in status",
                     status_path + " has no Seccomp: line (kernel without CONFIG_SECCOMP)"));
  } else {
    auto filters = status_field(*status, "Seccomp_filters");
    out.push_back(check_ok("Seccomp: in status",
                           "Seccomp: " + *v + (filters ? ", Seccomp_filters: " + *filters : "")));
  }

  // Really install a filter (allow everything) in a child: what providers do before exec.
  auto filter = run_probe_child(
      [] {
        struct sock_filter allow[] = {BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)};
        struct sock_fprog prog = {1, allow};
        if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return errno;
        if (::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) != 0) return errno;
        return 0;
      },
      std::chrono::seconds(2));
  if (!filter.ok()) {
    out.push_back(check_failed("seccomp filter", filter.error().message()));
  } else if (filter->timed_out || !filter->status->exited) {
    out.push_back(check_failed("seccomp filter", "the probe child hung or crashed"));
  } else if (filter->status->code != 0) {
    out.push_back(check_failed("seccomp filter",
                               sys_error(filter->status->code, "prctl(PR_SET_SECCOMP)").message()));
  } else {
    out.push_back(check_ok("seccomp filter",
                           "a child installed a filter (no_new_privs + "
                           "SECCOMP_MODE_FILTER)"));
  }

  const scmp_version* v = seccomp_version();
  if (!v) {
    out.push_back(check_failed("libseccomp", "seccomp_version() returned nothing"));
  } else {
    std::string version =
        std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->micro);
    // The API level says which kernel features libseccomp found (seccomp_api_get(3)).
    out.push_back(
        check_ok("libseccomp", version + ", API level " + std::to_string(seccomp_api_get())));
  }
  return out;
}

std::vector<ToolSpec> default_tools() {
  return {
      {"podman", {"--version"}, false, "the podman provider"},
      {"runc", {"--version"}, false, "podman's OCI runtime (runc or crun)"},
      {"crun", {"--version"}, false, "podman's OCI runtime (runc or crun)"},
      {"qemu-system-x86_64", {"--version"}, false, "the microVM provider"},
      {"bwrap", {"--version"}, false, "comparison runs against bubblewrap"},
      {"busybox", {"--help"}, true, "the microVM guest's userland, statically linked"},
  };
}

std::optional<std::string> find_on_path(const std::string& name, const std::string& path_env) {
  if (name.find('/') != std::string::npos) {
    return ::access(name.c_str(), X_OK) == 0 ? std::optional(name) : std::nullopt;
  }
  size_t start = 0;
  for (;;) {
    size_t end = path_env.find(':', start);
    std::string dir = path_env.substr(start, end == std::string::npos ? end : end - start);
    if (dir.empty()) dir = ".";  // POSIX: an empty entry is the current directory
    std::string candidate = dir + "/" + name;
    struct stat st;
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        ::access(candidate.c_str(), X_OK) == 0)
      return candidate;
    if (end == std::string::npos) return std::nullopt;
    start = end + 1;
  }
}

std::string first_line(std::string_view output) {
  for (auto line : lines(output)) {
    auto t = trim(line);
    if (!t.empty()) return std::string(t);
  }
  return {};
}

Result<bool> is_static_elf(const std::string& path) {
  SG_ASSIGN_OR_RETURN(std::string head, read_file(path, 64 << 10));
  if (head.size() < sizeof(Elf64_Ehdr) || std::memcmp(head.data(), ELFMAG, SELFMAG) != 0)
    return logic_error("read ELF header", "not an ELF file", path);
  if (head[EI_CLASS] != ELFCLASS64) return logic_error("read ELF header", "not a 64-bit ELF", path);
  Elf64_Ehdr eh;
  std::memcpy(&eh, head.data(), sizeof eh);
  if (eh.e_phentsize != sizeof(Elf64_Phdr) ||
      eh.e_phoff + static_cast<uint64_t>(eh.e_phnum) * sizeof(Elf64_Phdr) > head.size())
    return logic_error("read ELF header", "program headers out of range", path);
  for (int i = 0; i < eh.e_phnum; ++i) {
    Elf64_Phdr ph;
    std::memcpy(&ph, head.data() + eh.e_phoff + i * sizeof ph, sizeof ph);
    if (ph.p_type == PT_INTERP) return false;
  }
  return true;
}

Check tool_check(const ToolSpec& tool, const std::string& path_env, Duration timeout) {
  auto path = find_on_path(tool.name, path_env);
  if (!path) return check_failed(tool.name, "not found on PATH (used for " + tool.purpose + ")");
  std::vector<std::string> argv = {*path};
  argv.insert(argv.end(), tool.version_args.begin(), tool.version_args.end());
  auto r = run_command(argv, timeout, 64 << 10);
  if (!r.ok()) return check_failed(tool.name, *path + ": " + r.error().message());
  if (r->timed_out)
    return check_failed(tool.name,
                        *path + ": printed no version within " + format_duration(timeout));
  std::string version = first_line(r->output);
  if (version.empty())
    return check_failed(tool.name, *path + ": no version output (" + r->status.describe() + ")");
  std::string detail = *path + ": " + version;
  if (tool.want_static) {
    auto st = is_static_elf(*path);
    if (!st.ok()) return check_failed(tool.name, detail + "; " + st.error().message());
    if (!*st)
      return check_failed(tool.name, detail + "; dynamically linked, a static build is needed");
    detail += " (static)";
  }
  return check_ok(tool.name, detail);
}

namespace {

// The median of `runs` CPUIDs (leaf 0), in microseconds; 0 where there is no CPUID.
double cpuid_cost_us(int runs) {
#if defined(__x86_64__) || defined(__i386__)
  std::vector<double> us;
  for (int i = 0; i < runs; ++i) {
    [[maybe_unused]] unsigned a = 0, b = 0, c = 0, d = 0;
    const auto began = std::chrono::steady_clock::now();
    __cpuid(0, a, b, c, d);  // a volatile asm: never dropped for its unused results
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - began)
                     .count());
  }
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
#else
  (void)runs;
  return 0;
#endif
}

}  // namespace

Result<ProcessStartCost> measure_process_start(const std::string& program, int runs) {
  if (runs < 1) return logic_error("measure a process start", "runs must be at least 1");
  std::vector<double> ms;
  for (int i = 0; i < runs; ++i) {
    const auto began = std::chrono::steady_clock::now();
    SG_ASSIGN_OR_RETURN(ChildProcess child, spawn({program}));
    SG_ASSIGN_OR_RETURN(ExitStatus status, child.wait());
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - began)
                     .count());
    if (!status.exited || status.code != 0)
      return logic_error("measure a process start", program + " ended with " + status.describe());
  }
  std::sort(ms.begin(), ms.end());
  return ProcessStartCost{ms[ms.size() / 2], runs, cpuid_cost_us(101)};
}

Check process_start_check(const Result<ProcessStartCost>& cost, const std::string& program) {
  const char* name = "process start";
  if (!cost.ok()) return check_failed(name, cost.error().message());
  std::string detail =
      fmt::format("{} spawned, run and reaped in {:.2f} ms (median of {})", program, cost->exec_ms,
                  cost->runs);
  if (cost->cpuid_us > 0)
    detail += fmt::format("; one CPUID {:.1f} us{}", cost->cpuid_us,
                          cost->cpuid_us >= 1
                              ? " (trapped by the hypervisor: glibc's start runs CPUID tens of "
                                "times in every process, so every exec here pays tens of these)"
                              : "");
  return check_ok(name, detail);
}

Check guest_kernel_check(const std::string& boot_dir) {
  const char* name = "guest kernel";
  DIR* d = ::opendir(boot_dir.c_str());
  if (!d) return check_failed(name, sys_error("opendir", boot_dir).message());
  std::vector<std::string> found;
  while (struct dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n.starts_with("vmlinuz-") && n.ends_with("cloud-amd64")) found.push_back(n);
  }
  ::closedir(d);
  if (found.empty())
    return check_failed(name, "no " + boot_dir +
                                  "/vmlinuz-*cloud-amd64 (the microVM lane boots "
                                  "it: apt-get install linux-image-cloud-amd64)");
  std::sort(found.begin(), found.end());
  return check_ok(name, boot_dir + "/" + found.back());
}

}  // namespace sandgate
