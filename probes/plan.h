// What the host knows about each probe, in one place: the witness that confirms it, the intent
// and grant it runs under, the parameters it is given (in the sandbox and natively), the
// terminations that mean a limit held, and the self-test weakenings it must catch. The
// catalogue (catalogue.h) is the other half: what the probe does, inside the sandbox.
//
// A probe without an entry is a self-witnessed probe run under the "probe" intent.
#pragma once

#include <string>
#include <vector>

#include "controller/policy.h"
#include "probes/judge.h"
#include "providers/weakening.h"

namespace sandgate::probes {

struct ProbePlan {
  std::string id;
  Witness witness = Witness::kSelf;
  // The intent the probe's call declares; its grant is `grant` (probe_policy() defines it).
  std::string intent = "probe";
  controller::Grant grant;
  // Extra parameters in the sandbox, and natively (the baseline) when they differ there.
  std::vector<std::string> params;
  std::vector<std::string> native_params;
  bool native_params_differ = false;
  // Resource probes: the terminations that mean the limit held.
  std::vector<std::string> expected_terminations;
  // A probe held by an rlimit: the grant field that sets it ("open_files", "file_size"), the
  // report field that counts against it and the errno of the limit.
  std::string rlimit;
  std::string rlimit_count_key;
  std::string rlimit_errno;
  // The test-only weakenings (providers/weakening.h) this probe must flag as exposed: the
  // self-test and its test hold each weakening to exactly these.
  std::vector<providers::Weakening> catches;
  // What alone hides what this probe finds, when no setting of a shared-kernel provider can
  // ("a separate kernel (a microVM)"): an exposed verdict of a provider that does not declare
  // kernel.separate carries it as Judgement::known_limit.
  std::string only_hidden_by;
  // What hides what this probe finds when the run used the provider's default read-only base
  // (the host's whole /usr): an exposed verdict of a jailed run on the default base carries
  // "only <this> hides it" as Judgement::known_limit; on a narrowed base it counts in full.
  std::string default_base_hidden_by;
};

// Every probe with something to say beyond the defaults.
const std::vector<ProbePlan>& probe_plans();
// The plan of `id` (the defaults when it has none).
const ProbePlan& plan_for(const std::string& id);
// The probes that must catch `w`.
std::vector<std::string> probes_catching(providers::Weakening w);

// A probe that must still be blocked, by `layer`, while a weakening takes another layer away:
// each layer alone holds its probes (defence in depth, not only mutation testing).
struct Holder {
  std::string id;
  Layer layer;
};
// The holders of `w` for a provider that declares `declared` (a holder by a layer the provider
// does not declare, such as landlock on a kernel without it, is not expected), whose calls'
// kernel has Landlock ABI `landlock_abi` (-1: unknown, every Landlock holder expected): a
// Landlock holder needs the ABI of its rule (TCP connect: 4, the abstract socket scope: 6).
std::vector<Holder> probes_holding(providers::Weakening w, const CapabilitySet& declared,
                                   int landlock_abi = -1);
// The holders of `w` in `judgements` that were not blocked by their layer, each with what
// happened instead ("net.metadata_v4_get: blocked by namespace, expected landlock").
std::vector<std::string> missing_holders(providers::Weakening w, const CapabilitySet& declared,
                                         const std::vector<Judgement>& judgements,
                                         int landlock_abi = -1);

// What to change when `id` is exposed (or warned about), in a sentence or two: the probe's own
// advice when it has one, else its boundary's, else general advice. Shown as the SARIF rule's
// help and beside exposed probes in every report.
std::string remediation(const std::string& id);
// A declared capability is a claim, and these are the probes that test it (docs/DESIGN.md idea
// 2: declared capabilities are not trusted): a provider that declares `c` and is exposed on
// one of them did not deliver `c`. Empty for what no probe can test from inside
// (kernel.separate, net.egress_policy).
std::vector<std::string> probes_testing(Capability c);

struct Contradiction {
  Capability capability;
  std::vector<std::string> probes;  // the exposed probes that test it
};
// The capabilities in `declared` that `judgements` contradict, in capability order.
std::vector<Contradiction> contradicted_capabilities(const CapabilitySet& declared,
                                                     const std::vector<Judgement>& judgements);

// The built-in policy plus the intents the plans declare, each with its plan's grant: the
// policy every probe run uses.
controller::Policy probe_policy();

}  // namespace sandgate::probes
