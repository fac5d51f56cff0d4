// sandgate policy: print the built-in policy (a file to copy and edit), check a policy file, or
// suggest one from traces. Wiring only: the format and its strict parser are
// controller/policy.h, the sizing replay/suggest.h.
#include <fmt/format.h>

#include <iostream>

#include "cli/common.h"
#include "controller/policy.h"
#include "core/table.h"
#include "core/units.h"
#include "replay/suggest.h"
#include "replay/trace.h"

namespace sandgate::cli {
namespace {

struct PolicyArgs {
  bool print_default = false;
  std::string check;
};

struct SuggestArgs {
  std::vector<std::string> traces;
  std::string quantile = "0.99";
  std::string headroom = "10%";
  std::string split = "all";
  size_t min_calls = 10;
  std::string policy;  // the base: "" = built-in
  std::string out;
  std::string evidence;
};

int run_policy(const PolicyArgs& a) {
  if (a.print_default) {
    std::cout << controller::builtin_policy_json();
    return 0;
  }
  auto p = controller::load_policy_file(a.check);
  if (!p.ok()) return fail(p.error());
  std::cout << dump_json(controller::to_json(*p), 2) << "\n";
  return 0;
}

// policy.json -> policy.evidence.json; anything else gets .evidence.json appended.
std::string evidence_beside(const std::string& out) {
  const std::string ext = ".json";
  if (out.size() > ext.size() && out.ends_with(ext))
    return out.substr(0, out.size() - ext.size()) + ".evidence.json";
  return out + ".evidence.json";
}

std::string cell(const std::optional<Bytes>& b) { return b ? format_bytes(*b) : "none"; }
std::string cell(const std::optional<double>& c) { return c ? fmt::format("{:g}", *c) : "none"; }
std::string cell(const std::optional<uint64_t>& n) { return n ? std::to_string(*n) : "none"; }

int run_suggest(const SuggestArgs& a) {
  auto quantile = replay::parse_quantile(a.quantile);
  if (!quantile.ok()) return fail(quantile.error());
  auto headroom = replay::parse_headroom(a.headroom);
  if (!headroom.ok()) return fail(headroom.error());
  auto split = replay::parse_trace_split(a.split);
  if (!split.ok()) return fail(split.error());
  auto base = load_policy_arg(a.policy);
  if (!base.ok()) return fail(base.error());
  auto all = replay::trace_files(a.traces);
  if (!all.ok()) return fail(all.error());
  std::vector<std::string> paths = replay::select_split(*all, *split);
  if (paths.empty())
    return fail(fmt::format("--split {}: no traces in that part of {} file(s)",
                            replay::to_string(*split), all->size()));
  std::vector<std::pair<std::string, replay::Trace>> traces;
  for (const auto& path : paths) {
    auto t = replay::read_trace(path);
    if (!t.ok()) return fail(t.error());
    traces.emplace_back(path, std::move(t).value());
  }
  replay::SuggestOptions o;
  o.quantile = *quantile;
  o.headroom = *headroom;
  o.min_calls = a.min_calls;
  auto s = replay::suggest_policy(traces, *base, o);
  if (!s.ok()) return fail(s.error());

  // What is written must load as every command loads a policy: parse it back first.
  Json policy_json = controller::to_json(s->policy);
  if (auto back = controller::parse_policy(policy_json, a.out); !back.ok())
    return fail(std::move(back).error().context_add("the suggested policy does not load back"));
  if (auto w = write_json_file_atomic(a.out, policy_json); !w.ok()) return fail(w.error());
  const std::string evidence = a.evidence.empty() ? evidence_beside(a.out) : a.evidence;
  Json ej = replay::to_json(*s);  // its traces are `paths`, as read
  ej["split"] = replay::to_string(*split);
  if (auto w = write_json_file_atomic(evidence, ej); !w.ok()) return fail(w.error());

  std::cout << fmt::format(
      "policy suggest: {} of {} trace(s) (--split {}), {} calls; grant = q{:g} of each call's "
      "peak above its run's baseline x (1 + {:g}%), rounded up (memory 16MiB, cpu 0.1, pids "
      "8); base policy '{}'\n",
      paths.size(), all->size(), replay::to_string(*split), s->calls, o.quantile, o.headroom * 100,
      s->base_name);
  constexpr auto kRight = TextTable::Align::kRight;
  TextTable t({{"intent"},
               {"calls", kRight},
               {"use p50", kRight},
               {"p90", kRight},
               {"p99", kRight},
               {"max", kRight},
               {"memory_max", kRight},
               {"cpu", kRight},
               {"pids_max", kRight},
               {"why"}});
  auto h = [](double b) { return human_bytes(Bytes{static_cast<uint64_t>(b)}); };
  for (const auto& e : s->intents) {
    std::string mem = cell(e.chosen.memory_max);
    if (e.chosen.memory_max != e.base.memory_max) mem = cell(e.base.memory_max) + " -> " + mem;
    std::string cpu = cell(e.chosen.cpu_cores);
    if (e.chosen.cpu_cores != e.base.cpu_cores) cpu = cell(e.base.cpu_cores) + " -> " + cpu;
    std::string pids = cell(e.chosen.pids_max);
    if (e.chosen.pids_max != e.base.pids_max) pids = cell(e.base.pids_max) + " -> " + pids;
    t.row({e.intent, std::to_string(e.calls), h(e.memory.p50), h(e.memory.p90), h(e.memory.p99),
           h(e.memory.max), mem, cpu, pids, e.why});
  }
  std::cout << t.render();
  for (const auto& n : s->notes) std::cout << "note: " << n << "\n";
  std::cout << "wrote " << a.out << " and the evidence " << evidence << "\n";
  return 0;
}

}  // namespace

void add_policy_command(CLI::App& app, Globals& g) {
  auto a = std::make_shared<PolicyArgs>();
  auto* sub = app.add_subcommand(
      "policy",
      "Print the built-in policy, check a policy file, or suggest one from traces.\n"
      "A policy gives each tool call the limits of its intent (compile, test, install, search,\n"
      "edit, run, default: declared, or inferred from the command line by the policy's rules),\n"
      "and sets the run's ceiling, tenants and when the ladder steps in. Without --policy,\n"
      "exec, serve, record, trace import and plan use the built-in one. To write your own,\n"
      "start from it:\n"
      "  sandgate policy --print-default > my-policy.json\n"
      "  $EDITOR my-policy.json          # sizes \"512MiB\", durations \"10m\", cpu in cores\n"
      "  sandgate policy --check my-policy.json\n"
      "  sandgate exec --policy my-policy.json --provider namespaces -- make -j2\n"
      "--check is as strict as every command that loads a policy: an unknown key, a wrong type\n"
      "or an out-of-range value is an error naming its path, e.g.\n"
      "  intents.compile.memory_max: expected a size like \"512MiB\", got 12\n"
      "and a valid file is printed back with every default filled in. Every key is described\n"
      "in the README, section \"Policy\". `sandgate policy suggest --help`: grants sized from\n"
      "traces.");
  auto* print = sub->add_flag("--print-default", a->print_default,
                              "print the built-in policy (controller/builtin_policy.json)");
  auto* check = sub->add_option("--check", a->check,
                                "parse FILE strictly; print the policy it gives, or the error")
                    ->type_name("FILE");
  print->excludes(check);

  auto sa = std::make_shared<SuggestArgs>();
  auto* suggest = sub->add_subcommand(
      "suggest",
      "Write a per-call policy whose grants are sized on traces, and the evidence beside it.\n"
      "Per intent: memory_max = the --quantile of the intent's calls' peak memory above their\n"
      "run's baseline (the median of the run's samples outside calls; quantiles are nearest\n"
      "rank), times (1 + --headroom), rounded up to 16MiB; cpu the same of their peak CPU,\n"
      "rounded up to 0.1 core; pids_max the same of their peak pids, rounded up to 8, when\n"
      "every trace measured pids. memory_high is dropped for a sized intent. An intent with\n"
      "fewer than --min-calls calls keeps the base policy's grant; calls of an intent the base\n"
      "does not define count under default. Everything else (timeouts, rlimits, inference,\n"
      "ladder) is the base policy's; a grant above the run ceiling raises the ceiling.\n"
      "--split even|odd takes every other trace (sorted by path), so a policy sized on one\n"
      "half can be replayed on the other (`sandgate replay --split`). The evidence (JSON: per\n"
      "intent the calls, p50/p90/p99/max, the grant chosen and why) goes to --evidence, by\n"
      "default beside -o (policy.json -> policy.evidence.json).\n"
      "Example: sandgate policy suggest --traces traces/ -o suggested.json\n"
      "Example: sandgate policy suggest --traces runs/ --split even --quantile 0.95 "
      "--headroom 20% -o p.json");
  suggest->add_option("--traces", sa->traces, "trace files, or directories of *.jsonl / *.trace")
      ->required();
  suggest->add_option("--quantile", sa->quantile, "quantile in (0, 1]: 0.99 or 99%")
      ->capture_default_str();
  suggest->add_option("--headroom", sa->headroom, "added on top: 10% or 0.1 (0 to 1000%)")
      ->capture_default_str();
  suggest->add_option("--split", sa->split, "all, even or odd: which traces (sorted by path)")
      ->capture_default_str();
  suggest
      ->add_option("--min-calls", sa->min_calls,
                   "fewer calls than this keep the base policy's grant")
      ->capture_default_str()
      ->check(CLI::Range(size_t{1}, size_t{1000000}));
  suggest->add_option(
      "--policy", sa->policy,
      "base policy: grants it keeps, and everything but grants (default: built-in)");
  suggest->add_option("-o,--out", sa->out, "the policy file to write")->required();
  suggest->add_option("--evidence", sa->evidence,
                      "the evidence file (default: beside --out, NAME.evidence.json)");
  suggest->callback([&g, sa] { g.exit_code = run_suggest(*sa); });

  sub->callback([&g, a, sub, suggest] {
    if (sub->got_subcommand(suggest)) return;
    if (!a->print_default && a->check.empty()) {
      g.exit_code = fail("policy needs --print-default, --check FILE or suggest (see --help)");
      return;
    }
    g.exit_code = run_policy(*a);
  });
}

}  // namespace sandgate::cli
