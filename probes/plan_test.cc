// What each declared capability is tested by, and the contradiction report built on it.
#include "probes/plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

#include "probes/catalogue.h"

namespace sandgate::probes {
namespace {

TEST(Plan, EveryProbeTestingACapabilityExists) {
  Catalogue c;
  ASSERT_TRUE(register_builtin_probes(c).ok());
  std::set<std::string> ids;
  for (const auto& p : c.all()) ids.insert(p.id);
  for (Capability cap : all_capabilities())
    for (const auto& id : probes_testing(cap))
      EXPECT_TRUE(ids.count(id)) << to_string(cap) << ": " << id;
  // The declarations a jail makes are each tested by something.
  for (Capability cap : {Capability::kFsIsolated, Capability::kNetNone, Capability::kProcSeccomp,
                         Capability::kProcPidNs, Capability::kLimitsPerCall})
    EXPECT_FALSE(probes_testing(cap).empty()) << to_string(cap);
}

TEST(Plan, HoldersAreRealProbesAndLandlockOnesNeedTheCapability) {
  Catalogue c;
  ASSERT_TRUE(register_builtin_probes(c).ok());
  std::set<std::string> ids;
  for (const auto& p : c.all()) ids.insert(p.id);
  const CapabilitySet with = {Capability::kProcLandlock};
  for (auto w : providers::all_weakenings())
    for (const auto& h : probes_holding(w, with)) EXPECT_TRUE(ids.count(h.id)) << h.id;
  auto share = probes_holding(providers::Weakening::kShareHostNetwork, with);
  ASSERT_FALSE(share.empty());
  for (const auto& h : share) EXPECT_EQ(h.layer, Layer::kLandlock) << h.id;
  // Without Landlock nothing is expected to hold the shared network: those probes are then
  // simply exposed.
  EXPECT_TRUE(probes_holding(providers::Weakening::kShareHostNetwork, {}).empty());
  EXPECT_FALSE(probes_holding(providers::Weakening::kNoLandlock, {}).empty());
  EXPECT_EQ(probes_testing(Capability::kProcLandlock),
            probes_catching(providers::Weakening::kNoLandlock));
}

// A Landlock holder needs the ABI of its rule in the kernel the calls run under: TCP connect
// rules came with ABI 4, the abstract socket scope with 6. A microVM's guest on Debian 12's
// 6.1 kernel has ABI 2, and holds none of them once it has a network device.
TEST(Plan, LandlockHoldersNeedTheAbiOfTheirRule) {
  const CapabilitySet with = {Capability::kProcLandlock};
  auto ids = [&](int abi) {
    std::set<std::string> out;
    for (const auto& h : probes_holding(providers::Weakening::kShareHostNetwork, with, abi))
      out.insert(h.id);
    return out;
  };
  const std::set<std::string> tcp = {"net.metadata_v4_get", "net.production_tcp",
                                     "net.registry_other_port"};
  std::set<std::string> all = tcp;
  all.insert("crossrun.abstract_socket");
  EXPECT_EQ(ids(-1), all) << "unknown ABI: every holder expected";
  EXPECT_EQ(ids(7), all);
  EXPECT_EQ(ids(6), all);
  EXPECT_EQ(ids(5), tcp);
  EXPECT_EQ(ids(4), tcp);
  EXPECT_TRUE(ids(3).empty());
  EXPECT_TRUE(ids(2).empty());
  EXPECT_TRUE(ids(0).empty()) << "no Landlock at all";
  // The other layers' holders do not depend on it.
  EXPECT_EQ(probes_holding(providers::Weakening::kNoLandlock, with, 0).size(),
            probes_holding(providers::Weakening::kNoLandlock, with, 7).size());
  // And missing_holders applies it: with ABI 2 an exposed TCP probe is not a missing holder.
  Judgement exposed;
  exposed.id = "net.production_tcp";
  exposed.verdict = Verdict::kExposed;
  EXPECT_TRUE(missing_holders(providers::Weakening::kShareHostNetwork, with, {exposed}, 2).empty());
  EXPECT_FALSE(
      missing_holders(providers::Weakening::kShareHostNetwork, with, {exposed}, 7).empty());
}

Judgement judged(const std::string& id, Verdict v) {
  Judgement j;
  j.id = id;
  j.verdict = v;
  return j;
}

TEST(Plan, MissingHoldersNameWhatHappenedInstead) {
  auto held = [](const std::string& id, Layer layer) {
    Judgement j = judged(id, Verdict::kBlocked);
    j.layer = layer;
    return j;
  };
  const CapabilitySet with = {Capability::kProcLandlock};
  std::vector<Judgement> js = {held("net.metadata_v4_get", Layer::kLandlock),
                               held("net.production_tcp", Layer::kNamespace),
                               judged("net.registry_other_port", Verdict::kExposed),
                               held("crossrun.abstract_socket", Layer::kLandlock)};
  EXPECT_THAT(missing_holders(providers::Weakening::kShareHostNetwork, with, js),
              ::testing::ElementsAre(
                  "net.production_tcp: blocked by namespace, expected blocked by landlock",
                  "net.registry_other_port: exposed, expected blocked by landlock"));
  js.pop_back();
  EXPECT_EQ(missing_holders(providers::Weakening::kShareHostNetwork, with, js).back(),
            "crossrun.abstract_socket: did not run, expected blocked by landlock");
}

TEST(Plan, ContradictionsAreDeclaredCapabilitiesWithAnExposedProbe) {
  std::vector<Judgement> js = {judged("net.metadata_v4_get", Verdict::kExposed),
                               judged("net.dns_exfil", Verdict::kExposed),
                               judged("fs.read_host_canary", Verdict::kBlocked),
                               judged("proc.seccomp", Verdict::kExposed),  // not declared
                               judged("persist.find", Verdict::kInconclusive)};
  auto k = contradicted_capabilities(
      {Capability::kNetNone, Capability::kFsIsolated, Capability::kEphemeralWorkspace}, js);
  ASSERT_EQ(k.size(), 1u);
  EXPECT_EQ(k[0].capability, Capability::kNetNone);
  EXPECT_EQ(k[0].probes, (std::vector<std::string>{"net.metadata_v4_get", "net.dns_exfil"}));
  // Nothing declared, nothing contradicted: an exposure is then a plain exposure.
  EXPECT_TRUE(contradicted_capabilities({}, js).empty());
}

// A run that reads the host's boot id runs under the host's kernel: a provider declaring a
// kernel of its own (which names the layer its refusals get, judge.h) is contradicted by it.
TEST(Plan, AKernelOfItsOwnIsContradictedByTheHostsBootId) {
  EXPECT_EQ(probes_testing(Capability::kKernelSeparate),
            (std::vector<std::string>{"disclosure.boot_id"}));
  auto k = contradicted_capabilities({Capability::kKernelSeparate},
                                     {judged("disclosure.boot_id", Verdict::kExposed)});
  ASSERT_EQ(k.size(), 1u);
  EXPECT_EQ(k[0].capability, Capability::kKernelSeparate);
  EXPECT_TRUE(contradicted_capabilities({Capability::kKernelSeparate},
                                        {judged("disclosure.boot_id", Verdict::kBlocked)})
                  .empty());
}

}  // namespace
}  // namespace sandgate::probes
