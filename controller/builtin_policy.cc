// The built-in policy, used when no --policy is given.
#include <utility>

#include "controller/policy.h"

namespace sandgate::controller {

namespace {

Grant make_grant(Bytes max, Bytes high, double cpu, uint64_t pids, Duration timeout,
                 uint64_t open_files, Bytes file_size) {
  Grant g;
  g.memory_max = max;
  g.memory_high = high;
  g.cpu_cores = cpu;
  g.pids_max = pids;
  g.open_files = open_files;
  g.file_size = file_size;
  g.timeout = timeout;
  return g;
}

InferenceRule rule(std::string pattern, std::string intent) {
  InferenceRule r;
  r.regex = std::regex(pattern, std::regex::ECMAScript);  // built-ins: tested to compile
  r.pattern = std::move(pattern);
  r.intent = std::move(intent);
  return r;
}

Policy build_default_policy() {
  using std::chrono::minutes;
  using std::chrono::seconds;
  Policy p;
  p.name = "default";
  p.mode = PolicyMode::kPerCall;
  p.tenants["default"] = TenantPolicy{};  // weight 100, no budget: one agent, whole ceiling

  // The run ceiling, sized for a small host (2 cores, ~8GiB): half the memory and both cores
  // for the agent's sandbox, so the host (the agent itself, its model client, the controller)
  // keeps room. memory_high at 3.5GiB makes the kernel reclaim and throttle before the OOM
  // killer acts at memory_max. pids_max 1024 bounds a fork bomb (pids.max counts threads).
  // No run timeout: a run lives as long as the agent session; each call has its own.
  //
  // open_files and file_size are rlimits, per process: 1024 descriptors is the soft limit
  // most distributions give a login shell, so nothing an agent runs expects more, and a leak
  // or fd bomb stops there (EMFILE) instead of at the host's nr_open. file_size bounds one
  // file (EFBIG), not the workspace (a quota would need project quotas or a loop-mounted
  // filesystem): 1GiB where calls legitimately write big files (object files, static
  // archives, debug binaries, downloaded wheels and tarballs), 256MiB where a large file
  // would be a runaway (edit, search), 512MiB elsewhere. The run's values apply to calls in
  // static mode, where no intent grants anything of its own.
  p.run = make_grant(GiB(4), MiB(3584), 2.0, 1024, Duration(0), 1024, GiB(1));

  // compile: a C++ translation unit with heavy templates reaches ~1GiB in cc1plus, and make
  // -j2 runs two; the linker peaks at the end. 2GiB max with reclaim from 1.5GiB, both cores,
  // 512 tasks for parallel make/ninja/cargo/go (their worker threads count too), 10 minutes.
  p.intents["compile"] = make_grant(GiB(2), MiB(1536), 2.0, 512, minutes(10), 1024, GiB(1));
  // test: test runners fork workers (pytest-xdist, jest, ctest -j) but each is smaller than a
  // compiler; 1.5GiB / 1GiB high, both cores, 512 tasks, 10 minutes.
  p.intents["test"] = make_grant(MiB(1536), GiB(1), 2.0, 512, minutes(10), 1024, MiB(512));
  // install: package managers are network- and disk-bound; resolvers (pip, npm) reach a few
  // hundred MiB and the odd wheel build more: 1GiB / 768MiB high, 1 core, 10 minutes.
  p.intents["install"] = make_grant(GiB(1), MiB(768), 1.0, 256, minutes(10), 1024, GiB(1));
  // search: grep/rg/find stream; rg's mmap'd files count as page cache the kernel can reclaim.
  // 256MiB, 1 core (rg's threads share it), 64 tasks, 2 minutes.
  p.intents["search"] = make_grant(MiB(256), MiB(192), 1.0, 64, minutes(2), 1024, MiB(256));
  // edit: sed -i, patch, git apply, cat > file: tiny. Half a core keeps a runaway loop cheap.
  p.intents["edit"] = make_grant(MiB(256), MiB(192), 0.5, 32, minutes(1), 1024, MiB(256));
  // run: the agent's own scripts (python, node, ./prog): unknown, so middling, 1 core.
  p.intents["run"] = make_grant(GiB(1), MiB(768), 1.0, 256, minutes(10), 1024, MiB(512));
  // default: nothing recognised it; modest, so an unrecognised heavy call is throttled early
  // (the agent can declare an intent to get more).
  p.intents["default"] = make_grant(MiB(512), MiB(384), 1.0, 128, minutes(5), 1024, MiB(512));

  // Inference: first match wins, so the specific rules come first: "make test" is a test
  // before "make" is a compile, "cat > f" an edit before "cat f" a search, "python -m pytest"
  // a test before "python" a run. Patterns end words with (\s|$) rather than \b because \b
  // does not end "g++" and does end "make" in "make-foo".
  p.inference = {
      // test
      rule(R"(^(pytest|py\.test|tox|nox|ctest|jest|vitest|mocha)(\s|$))", "test"),
      rule(R"(^python[0-9.]*\s+-m\s+(pytest|unittest|tox)(\s|$))", "test"),
      rule(R"(^(go|cargo)\s+test(\s|$))", "test"),
      rule(R"(^(npm|yarn|pnpm)\s+(run\s+)?test(\s|$))", "test"),
      rule(R"(^npx\s+(jest|vitest|mocha)(\s|$))", "test"),
      rule(R"(^(make|ninja)\s+(.*\s)?(test|check)(\s|$))", "test"),
      rule(R"(^(mvn|gradle|\./gradlew)\s+(.*\s)?test(\s|$))", "test"),
      // install
      rule(R"(^(pip[0-9.]*|uv\s+pip|pipx|pipenv|poetry|gem|conda)\s+install(\s|$))", "install"),
      rule(R"(^python[0-9.]*\s+-m\s+pip\s+install(\s|$))", "install"),
      rule(R"(^(npm|pnpm)\s+(install|i|ci|add)(\s|$))", "install"),
      rule(R"(^yarn(\s+(install|add)(\s|$)|$))", "install"),
      rule(R"(^(apt-get|apt)\s+(.*\s)?(install|update)(\s|$))", "install"),
      rule(R"(^(cargo\s+fetch|go\s+mod\s+download|go\s+get|bundle\s+install|uv\s+sync)(\s|$))",
           "install"),
      // edit
      rule(R"(^(sed|perl)\s+(.*\s)?-[a-zA-Z]*i)", "edit"),
      rule(R"(^(cat|echo|printf)\s.*>)", "edit"),
      rule(R"(^(patch|tee|touch|mkdir|mv|cp|rm|ln)(\s|$))", "edit"),
      rule(R"(^git\s+(apply|am|add|commit|checkout|restore|stash|mv|rm)(\s|$))", "edit"),
      // compile
      rule(R"(^(make|cmake|ninja|meson|bazel|scons)(\s|$))", "compile"),
      rule(R"(^(gcc|g\+\+|cc|c\+\+|clang|clang\+\+)(-[0-9]+)?(\s|$))", "compile"),
      rule(R"(^(cargo|go)\s+(build|check|install|rustc)(\s|$))", "compile"),
      rule(R"(^(javac|rustc|tsc)(\s|$))", "compile"),
      rule(R"(^(mvn|gradle|\./gradlew)\s+(.*\s)?(compile|package|build|install)(\s|$))", "compile"),
      rule(R"(^(npm|yarn|pnpm)\s+run\s+build(\s|$))", "compile"),
      rule(R"(^npx\s+tsc(\s|$))", "compile"),
      // search
      rule(R"(^(grep|egrep|fgrep|rg|ag|ack|find|fd|fdfind|ls|tree|locate)(\s|$))", "search"),
      rule(R"(^git\s+(grep|log|show|diff|status|blame|ls-files)(\s|$))", "search"),
      rule(R"(^(cat|head|tail|less|wc|file|stat|du)(\s|$))", "search"),
      // run: after everything above, so "python -m pytest" and `sh -c 'make'` are not runs.
      rule(R"(^(python[0-9.]*|node|deno|bun|ruby|perl|php|java)(\s|$))", "run"),
      rule(R"(^\./)", "run"),
      rule(R"(^(ba|da|z|k)?sh(\s|$))", "run"),
  };
  // LadderSettings' defaults; no required capabilities, so every provider (host_dir too)
  // can run the built-in policy. A deployment that needs isolation says so in its file.
  return p;
}

}  // namespace

const Policy& default_policy() {
  static const Policy kDefault = build_default_policy();
  return kDefault;
}

}  // namespace sandgate::controller
