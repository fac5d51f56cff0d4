// What the full sandgate and its static front (cli/front_main.cc) share: the exit code of a
// failure, the one way errors are printed, and options more than one command has.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "core/result.h"

namespace sandgate::cli {

// Exit code of sandgate itself when it fails; exec passes the command's own status through,
// and 128+N when sandgate was interrupted by signal N (the run is torn down first).
inline constexpr int kExitError = 2;  // bad input, or sandgate could not do what was asked

// "sandgate: error: <message>" on stderr; returns kExitError.
int fail(const Error& e);
int fail(const std::string& message);

// The --base-path option (repeatable) with its help, the same for every command that has it.
void add_base_path_option(CLI::App* sub, std::vector<std::string>& paths);

// Each option of `app` and its subcommands takes one value per occurrence (see basics.cc).
void one_value_per_occurrence(CLI::App& app);

// Before any thread exists, in either binary's main: SIGINT, SIGTERM and SIGHUP blocked (a
// command takes them through a signalfd, cli/signals.h), SIGPIPE a handler that does nothing
// (basics.cc says why).
void set_up_signals();

}  // namespace sandgate::cli
