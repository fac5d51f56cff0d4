// sandgate gc: remove what crashed runs left behind (processes, mounts, cgroups, workspaces).
#include <iostream>

#include "cli/common.h"
#include "core/state.h"

namespace sandgate::cli {

void add_gc_command(CLI::App& app, Globals& g) {
  auto* sub = app.add_subcommand(
      "gc",
      "Remove everything recorded by runs whose sandgate process is gone (after kill -9, a\n"
      "crash or a power cut). Runs still in progress are left alone.");
  sub->callback([&g] {
    auto report = collect_garbage(g.paths());
    std::cout << "gc: " << report.runs_seen << " run record(s), " << report.runs_removed
              << " removed, " << report.runs_live << " still running, "
              << report.orphans_removed << " orphaned run director"
              << (report.orphans_removed == 1 ? "y" : "ies") << " removed, "
              << report.id_ranges_reclaimed << " unrecorded id range(s) reclaimed\n";
    for (const auto& e : report.errors) std::cerr << "sandgate: gc: " << e << "\n";
    g.exit_code = report.errors.empty() ? 0 : kExitError;
  });
}

}  // namespace sandgate::cli
