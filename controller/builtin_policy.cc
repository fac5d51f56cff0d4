// The built-in policy: controller/builtin_policy.json, compiled in (builtin_policy_json(), in the
// source controller/CMakeLists.txt generates from it), parsed once with the same strict parser
// as a --policy file. Why each value is what it is: README.md, "Built-in policy".
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

#include "controller/policy.h"

namespace sandgate::controller {

namespace {

Policy parse_builtin_policy() {
  const std::string source = "controller/builtin_policy.json (built in)";
  Result<Json> j = parse_json(builtin_policy_json(), source);
  Result<Policy> p = j.ok() ? parse_policy(*j, source) : Result<Policy>(std::move(j).error());
  if (!p.ok()) {
    // Unreachable in a build whose tests passed: policy_test parses this same text. Nothing
    // sensible can run without it, so say what broke and stop.
    std::fprintf(stderr, "sandgate: the built-in policy does not parse: %s\n",
                 p.error().message().c_str());
    std::abort();
  }
  return std::move(p).value();
}

}  // namespace

const Policy& default_policy() {
  static const Policy kDefault = parse_builtin_policy();
  return kDefault;
}

}  // namespace sandgate::controller
