// One answer to "does this host support X, and if not, why": what `sandgate doctor` prints.
// Each library that knows a kind of host feature (cgroups, BPF, namespaces, KVM) returns its
// answers as Checks; the doctor command only groups and prints them.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace sandgate {

struct Check {
  std::string name;  // "user namespaces", "cgroup.kill"
  bool ok = false;
  std::string detail;  // on success what was found, otherwise why not and what to do
};

struct CheckSection {
  std::string name;  // "cgroups", "bpf"
  std::vector<Check> checks;
};

inline Check check_ok(std::string name, std::string detail) {
  return {std::move(name), true, std::move(detail)};
}
inline Check check_failed(std::string name, std::string detail) {
  return {std::move(name), false, std::move(detail)};
}

}  // namespace sandgate
