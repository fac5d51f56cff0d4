// sandgate doctor: what this host supports, and why not where it does not. Wiring only: every
// check lives in a library (controller/, ebpf/, core/host_features, core/kvm_check).
#include <sys/utsname.h>
#include <unistd.h>

#include <cstdlib>
#include <iostream>

#include "cli/common.h"
#include "controller/cgroup_features.h"
#include "controller/cgroup_layout.h"
#include "core/fd.h"
#include "core/host_features.h"
#include "core/json.h"
#include "core/kvm_check.h"
#include "core/state.h"
#include "ebpf/bpf_support.h"
#include "providers/landlock.h"
#include "providers/proc_views.h"
#include "providers/microvm.h"
#include "providers/podman.h"

namespace sandgate::cli {
namespace {

constexpr int kDoctorSchemaVersion = 1;

std::vector<Check> provider_checks(Globals& g) {
  providers::ProviderOptions options = g.provider_options();
  options.allow_unsafe_host = true;  // only to ask it questions; nothing is created
  std::vector<Check> out;
  for (const auto& entry : g.registry.entries()) {
    std::string name = providers::display_name(entry.info);
    auto p = entry.factory(options);
    if (!p.ok()) {
      out.push_back(check_failed(name, p.error().message()));
    } else if (auto s = (*p)->available(); !s.ok()) {
      out.push_back(check_failed(name, s.error().message()));
    } else {
      // The instance's: what a provider declares may depend on this host (proc.landlock).
      out.push_back(check_ok(name, "available; capabilities: " + to_string((*p)->capabilities())));
    }
  }
  return out;
}

// Whether namespaces and podman runs get their own /proc views here (providers/proc_views.h),
// and why not. Nothing is mounted: the check opens /dev/fuse and reads the kernel's filesystem
// list.
Check proc_views_check(const Globals& g, const HostPaths& paths) {
  if (!g.provider_options().proc_views || !providers::proc_views_enabled_by_environment())
    return check_failed("proc views",
                        "turned off (--no-proc-views or SANDGATE_PROC_VIEWS=0): namespaces and "
                        "podman calls read the host's /proc/meminfo, stat, loadavg, uptime, "
                        "vmstat and pressure");
  if (auto s = providers::proc_views_supported(paths); !s.ok())
    return check_failed("proc views", s.error().message() +
                                          ": namespaces and podman runs fail unless "
                                          "--no-proc-views (then calls read the host's /proc "
                                          "files)");
  return check_ok("proc views",
                  "each namespaces run's /proc/meminfo, stat, loadavg, uptime, vmstat and "
                  "pressure/* "
                  "show the run's own cgroup (a per-run FUSE server, libfuse " +
                      providers::proc_views_library_version() + "); podman runs get all but " +
                      providers::kPodmanUncoveredViews);
}

struct DoctorReport {
  std::vector<CheckSection> sections;
  Json facts;  // structured answers for machines: uname, cgroup layout, KVM verdict
};

DoctorReport run_checks(Globals& g) {
  HostPaths paths = g.paths();
  DoctorReport report;
  auto& sections = report.sections;

  // Which machine this is: a fleet merge (`sandgate report merge`) names a host by its
  // hostname and groups hosts of one kind by kernel and architecture.
  if (struct utsname u{}; ::uname(&u) == 0)
    report.facts["system"] = {
        {"hostname", u.nodename}, {"kernel_release", u.release}, {"machine", u.machine}};

  auto layout = controller::detect_cgroup_layout(paths.proc + "/self/mountinfo");
  const size_t cgroup_section = sections.size();
  sections.push_back({"cgroups", controller::layout_checks(layout)});
  if (layout.ok()) {
    report.facts["cgroup_layout"] = {{"kind", controller::to_string(layout->kind)},
                                     {"unified_mount", layout->unified_mount},
                                     {"v1_mounts", layout->v1_mounts},
                                     {"v2_controllers", layout->v2_controllers}};
  }

  // The probe child cgroups are recorded like any run's resources, so `sandgate gc` removes
  // them if doctor dies between mkdir and rmdir. Without a writable state dir (not root),
  // doctor still probes: the children live for microseconds.
  controller::CgroupFeatureProbe probe;
  std::vector<Check> state_note;
  if (layout.ok()) {
    auto state = RunState::create(paths, "doctor-" + std::to_string(::getpid()), "doctor");
    if (!state.ok()) {
      state_note.push_back(check_failed(
          "state record", state.error().message() + " (probe cgroups are not recorded for gc)"));
    }
    probe = controller::probe_cgroup_features(*layout, controller::doctor_probe_name(),
                                              state.ok() ? &*state : nullptr);
    // What placing a call costs here (the one step of a call's critical path the controller
    // cannot take off it) and whether the mounts favour it.
    if (auto text = read_file(paths.proc + "/self/mountinfo"); text.ok()) {
      for (auto& c : controller::attach_checks(*layout, *text, controller::doctor_probe_name(),
                                               state.ok() ? &*state : nullptr))
        sections[cgroup_section].checks.push_back(std::move(c));
    }
    if (state.ok()) (void)state->finish();
  }
  CheckSection psi{"pressure (PSI)", system_pressure_checks(paths)};
  CheckSection freeze{"freeze / kill", {}};
  if (layout.ok()) {
    for (auto& c : controller::pressure_checks(*layout, probe)) psi.checks.push_back(c);
    freeze.checks = controller::freeze_kill_checks(*layout, probe);
  } else {
    freeze.checks.push_back(check_failed("freeze", "cgroup layout unknown"));
  }
  for (auto& c : state_note) freeze.checks.push_back(c);
  sections.push_back(std::move(psi));
  sections.push_back(std::move(freeze));

  sections.push_back({"namespaces", {user_namespace_check(paths), proc_views_check(g, paths)}});
  {
    // Which Podman mode works here, and why the other does not (the podman provider).
    auto modes = providers::podman_modes(paths);
    auto check = [](const std::string& name, const Status& s, const std::string& ok_detail) {
      return Check{name, s.ok(), s.ok() ? ok_detail : s.error().message()};
    };
    auto options = g.provider_options();
    auto chosen = providers::resolve_podman_mode(options, "");
    std::string mode_word = providers::to_string(options.podman_mode);
    sections.push_back(
        {"podman",
         {check("rootful", modes.rootful,
                modes.podman + " with " + modes.runc +
                    " (--runtime runc --cgroup-manager cgroupfs) as root; the container's user "
                    "namespace is root's, so per-user kernel counts are shared between runs"),
          check("rootless", modes.rootless,
                "Podman as each run's own host id, in a user namespace that id owns (maps by "
                "sandgate, no /etc/subuid line), placed in the run's cgroup by sandgate"),
          Check{"mode", chosen.ok(),
                chosen.ok() ? providers::to_string(*chosen) + " (--podman-mode " + mode_word +
                                  (options.podman_mode == providers::PodmanMode::kAuto
                                       ? ": rootless where it works, rootful for --image)"
                                       : ")")
                            : chosen.error().message()}}});
    report.facts["podman"] = {
        {"podman", modes.podman},
        {"runc", modes.runc},
        {"rootful", modes.rootful.ok()},
        {"rootless", modes.rootless.ok()},
        {"rootful_why", modes.rootful.ok() ? "" : modes.rootful.error().message()},
        {"rootless_why", modes.rootless.ok() ? "" : modes.rootless.error().message()},
        {"mode", chosen.ok() ? providers::to_string(*chosen) : ""}};
  }
  sections.push_back({"seccomp", seccomp_checks(paths)});
  sections.push_back({"landlock", providers::landlock::doctor_checks(paths)});
  sections.push_back({"bpf",
                      {ebpf::btf_check(paths), ebpf::bpf_load_check(paths),
                       ebpf::tracefs_check(paths), ebpf::activity_tracer_check(),
                       ebpf::egress_guard_check(), ebpf::fentry_check(), ebpf::bpf_lsm_check()}});

  KvmCheckResult kvm = check_kvm(paths);
  report.facts["kvm"] = {{"usable", kvm.verdict == KvmVerdict::kUsable},
                         {"verdict", describe(kvm)},
                         {"backend", kvm.backend}};
  // The microvm provider: what it would boot with, and under which accelerator (its timings
  // are labelled with it).
  providers::MicrovmHost vm = providers::microvm_host(paths, &kvm);
  report.facts["microvm"] = {{"ready", vm.ready.ok()},
                             {"accel", vm.accel},
                             {"accel_why", vm.accel_why},
                             {"kernel", vm.kernel}};
  // What every process start costs here (each exec of a call, and sandgate's own supervisor
  // and views server): the figure the jail's and bubblewrap's timings are made of.
  auto start = measure_process_start();
  Check start_check = process_start_check(start);
  if (start.ok())
    report.facts["process_start"] = {{"exec_ms", start->exec_ms}, {"cpuid_us", start->cpuid_us}};
  sections.push_back(
      {"virtualization",
       {std::move(start_check),
        Check{"kvm", kvm.verdict == KvmVerdict::kUsable, describe(kvm) + ": " + kvm.detail},
        Check{"microvm", vm.ready.ok(),
              vm.ready.ok() ? "qemu " + vm.qemu + ", kernel " + vm.kernel + ", accel " + vm.accel +
                                  " (" + vm.accel_why + ")"
                            : vm.ready.error().message()}}});

  CheckSection tools{"tools", {}};
  const char* path_env = std::getenv("PATH");
  for (const auto& t : default_tools())
    tools.checks.push_back(tool_check(t, path_env ? path_env : ""));
  tools.checks.push_back(guest_kernel_check("/boot"));
  sections.push_back(std::move(tools));

  sections.push_back({"providers", provider_checks(g)});
  return report;
}

void print_table(const std::vector<CheckSection>& sections) {
  size_t width = 0;
  for (const auto& s : sections)
    for (const auto& c : s.checks) width = std::max(width, c.name.size());
  int ok = 0, total = 0;
  for (const auto& s : sections) {
    std::cout << s.name << "\n";
    for (const auto& c : s.checks) {
      ++total;
      ok += c.ok;
      std::cout << "  " << (c.ok ? "✓" : "✗") << " " << c.name
                << std::string(width - c.name.size() + 2, ' ') << c.detail << "\n";
    }
  }
  std::cout << "\n"
            << ok << " of " << total << " checks passed. ✗ marks what this host lacks; "
            << "the text says why and how to get it.\n";
}

Json to_json(const DoctorReport& report) {
  Json out = Json::array();
  for (const auto& s : report.sections) {
    Json checks = Json::array();
    for (const auto& c : s.checks)
      checks.push_back({{"name", c.name}, {"ok", c.ok}, {"detail", c.detail}});
    out.push_back({{"name", s.name}, {"checks", checks}});
  }
  Json j = {{"schema_version", kDoctorSchemaVersion}, {"sections", out}};
  for (const auto& [key, value] : report.facts.items()) j[key] = value;
  return j;
}

}  // namespace

Json doctor_report(Globals& g) { return to_json(run_checks(g)); }

void add_doctor_command(CLI::App& app, Globals& g) {
  auto json = std::make_shared<bool>(false);
  auto* sub = app.add_subcommand(
      "doctor",
      "Check what this host supports and say why not where it does not: the cgroup layout\n"
      "(v1 / hybrid / v2) and where each controller is mounted, whether the cgroup mounts have\n"
      "favordynmods and what moving a process into a cgroup costs here (measured: each call's\n"
      "first process is moved once before it execs), pressure stall information\n"
      "(system-wide and per cgroup), cgroup freeze and kill, user namespaces, seccomp,\n"
      "Landlock (its ABI, from a real landlock_create_ruleset call, and the active LSMs from\n"
      "/sys/kernel/security/lsm when securityfs is mounted), BPF (BTF, program load,\n"
      "tracefs), what starting a process costs (/bin/true spawned and reaped, and one CPUID,\n"
      "which a hypervisor traps and glibc runs tens of times in every process), KVM (by\n"
      "running a tiny guest with a 2s deadline: /dev/kvm existing is not enough), host tools\n"
      "and their versions, and which providers can run.\n"
      "Features are tried, not assumed: doctor briefly creates and removes a child cgroup\n"
      "named sandgate-doctor-<pid> (and two sandgate-doctor-<pid>-attach-a/b for the move),\n"
      "forks short-lived probe children, and loads and unloads a\n"
      "two-instruction BPF program. It mounts nothing and sends no network traffic.\n"
      "Run it as root to see what sandgate can do as root. The exit status is 0 whatever is\n"
      "missing; it is non-zero only when doctor itself cannot run.");
  sub->add_flag("--json", *json,
                "machine-readable output: {schema_version, sections: [{name, checks: [{name, ok, "
                "detail}]}], system: {hostname, kernel_release, machine}, cgroup_layout: {kind, "
                "unified_mount, v1_mounts, v2_controllers}, kvm: {usable, verdict, backend}, "
                "process_start: {exec_ms, cpuid_us}}");
  sub->callback([&g, json] {
    auto report = run_checks(g);
    if (*json) {
      std::cout << dump_json(to_json(report), 2) << "\n";
    } else {
      print_table(report.sections);
    }
    g.exit_code = std::cout.good() ? 0 : fail("doctor: could not write the report");
  });
}

}  // namespace sandgate::cli
