// The network options of the commands that make runs (exec, probe): --net, --allow,
// --net-upstream and --dns-upstream, as parsed. What they become is cli/network.h's.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace sandgate::cli {

struct NetArgs {
  std::string mode = "none";       // --net none|allowlist
  std::vector<std::string> allow;  // --allow ENTRY (repeatable)
  std::string upstream;            // --net-upstream NETNS
  std::string dns_upstream;        // --dns-upstream ADDR[:PORT]
};

// Adds the four options to `sub`, with help that teaches the entry syntax.
void add_net_options(CLI::App* sub, NetArgs& a);

}  // namespace sandgate::cli
