// sandgate qualify: the main job. What the host supports (doctor), then each selected provider
// exercised for real (create + exec + destroy, timed), written as a JSON report.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <iostream>

#include "cli/common.h"
#include "core/files.h"
#include "core/units.h"

namespace sandgate::cli {
namespace {

struct QualifyArgs {
  std::string out = "reports/out";
  std::vector<std::string> providers;
  bool allow_unsafe_host = false;
  int cycles = 5;
};

// One create + exec(/bin/true) + destroy; the wall time in milliseconds.
Result<double> cycle(providers::Provider& p) {
  auto start = std::chrono::steady_clock::now();
  auto env = p.create({});
  if (!env.ok()) return std::move(env).error();
  providers::Call call;
  call.argv = {"true"};
  auto r = (*env)->exec(call, {});
  SG_TRY((*env)->destroy());
  if (!r.ok()) return std::move(r).error();
  if (r->status.shell_code() != 0)
    return logic_error("exec true", "exited with " + r->status.describe());
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

int run_qualify(Globals& g, const QualifyArgs& a) {
  providers::ProviderOptions options = g.provider_options();
  options.allow_unsafe_host = a.allow_unsafe_host;
  std::vector<std::string> names = a.providers;
  if (names.empty()) {
    // The default providers: every safe one. The unsafe bypass cable is never a default.
    for (const auto& e : g.registry.entries())
      if (!e.info.unsafe) names.push_back(e.info.name);
  }
  std::cerr << "qualify: checking the host (doctor)...\n";
  Json report = {{"schema_version", 1}, {"doctor", doctor_report(g)}, {"providers", Json::array()}};
  bool all_ok = true;
  for (const auto& name : names) {
    Json entry = {{"name", name}};
    auto p = g.registry.create(name, options);
    if (!p.ok()) {
      entry["ok"] = false;
      entry["error"] = p.error().message();
      report["providers"].push_back(entry);
      all_ok = false;
      continue;
    }
    entry["display_name"] = display_name((*p)->info());
    entry["unsafe"] = (*p)->info().unsafe;
    Json caps = Json::array();
    for (auto c : (*p)->capabilities()) caps.push_back(providers::to_string(c));
    entry["capabilities"] = caps;
    if (auto s = (*p)->available(); !s.ok()) {
      entry["ok"] = false;
      entry["error"] = s.error().message();
      report["providers"].push_back(entry);
      all_ok = false;
      continue;
    }
    std::vector<double> ms;
    std::string error;
    for (int i = 0; i < a.cycles && error.empty(); ++i) {
      std::cerr << "qualify: " << display_name((*p)->info()) << ": create + exec + destroy "
                << (i + 1) << "/" << a.cycles << "\r" << std::flush;
      auto t = cycle(**p);
      if (t.ok()) ms.push_back(*t);
      else error = t.error().message();
    }
    std::cerr << "\n";
    entry["cycles_ms"] = ms;
    if (!ms.empty()) {
      std::sort(ms.begin(), ms.end());
      entry["median_ms"] = ms[ms.size() / 2];
    }
    entry["ok"] = error.empty();
    if (!error.empty()) {
      entry["error"] = error;
      all_ok = false;
    }
    report["providers"].push_back(entry);
  }

  if (auto s = make_dirs(a.out, 0755); !s.ok()) return fail(s.error());
  std::string file = a.out + "/qualify.json";
  if (auto s = write_json_file_atomic(file, report); !s.ok()) return fail(s.error());
  for (const auto& e : report["providers"]) {
    std::cout << (e["ok"].get<bool>() ? "✓ " : "✗ ") << e.value("display_name", e["name"].get<std::string>());
    if (e.contains("median_ms"))
      std::cout << ": create + exec + destroy median " << e["median_ms"].get<double>() << " ms";
    if (e.contains("error")) std::cout << ": " << e["error"].get<std::string>();
    std::cout << "\n";
  }
  std::cout << "report: " << file << "\n";
  return all_ok ? 0 : 1;
}

}  // namespace

void add_qualify_command(CLI::App& app, Globals& g) {
  auto a = std::make_shared<QualifyArgs>();
  auto* sub = app.add_subcommand(
      "qualify",
      "The main job: check the host (as `doctor`), then exercise each provider for real\n"
      "(create an environment, run a command, destroy it; timed) and write DIR/qualify.json.\n"
      "Default providers: every safe one this build has. Exit status 1 if any selected provider\n"
      "is unavailable or fails.");
  sub->add_option("--out", a->out, "report directory")->capture_default_str();
  sub->add_option("--provider", a->providers, "qualify only these providers (repeatable)");
  sub->add_option("--cycles", a->cycles, "create + exec + destroy cycles per provider")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  sub->add_flag("--allow-unsafe-host", a->allow_unsafe_host, "permit --provider host_dir");
  sub->callback([&g, a] { g.exit_code = run_qualify(g, *a); });
}

}  // namespace sandgate::cli
