#include "providers/provider.h"

#include <gtest/gtest.h>

#include "providers/host_dir.h"
#include "providers/microvm.h"
#include "providers/namespaces.h"
#include "providers/podman.h"
#include "providers/registry.h"
#include "providers/supervised_environment.h"

namespace sandgate::providers {
namespace {

TEST(CapabilityTest, NamesRoundTrip) {
  for (auto c : all_capabilities()) {
    auto back = capability_from_string(to_string(c));
    ASSERT_TRUE(back.ok()) << to_string(c);
    EXPECT_EQ(*back, c);
  }
  auto bad = capability_from_string("fs.isolatd");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message().find("unknown capability 'fs.isolatd'"), std::string::npos);
  EXPECT_NE(bad.error().message().find("fs.isolated"), std::string::npos) << "lists the known ones";
}

TEST(RequirementsTest, ProviderLackingCapabilitiesIsRefusedWithTheList) {
  ProviderOptions options;
  options.allow_unsafe_host = true;
  auto host = HostDirProvider::make(options);
  ASSERT_TRUE(host.ok());
  auto s = check_requirements(
      **host, {Capability::kFsIsolated, Capability::kNetNone, Capability::kFsIsolated});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message().find("disqualified: it lacks fs.isolated, net.none"),
            std::string::npos)
      << s.error().message();
  EXPECT_NE(s.error().message().find("UNSAFE"), std::string::npos);
}

TEST(RequirementsTest, NamespacesMeetsJailRequirements) {
  auto ns = NamespacesProvider::make({});
  ASSERT_TRUE(ns.ok());
  EXPECT_TRUE(check_requirements(**ns, {Capability::kFsIsolated, Capability::kProcSeccomp,
                                        Capability::kCredsScrubbedEnv})
                  .ok());
  auto s = check_requirements(**ns, {Capability::kKernelSeparate});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message().find("kernel.separate"), std::string::npos);
}

// Issue 13: Podman and the microVM do not enforce an egress allowlist (sandgate wires it only
// into the namespace jail), so they do not declare net.egress_policy: a policy that requires it
// disqualifies them by name, and asking either for `--net allowlist` is refused outright rather
// than run with no network or an open one.
TEST(RequirementsTest, PodmanAndMicrovmAreDisqualifiedForAnEgressPolicy) {
  auto podman = PodmanProvider::make({});
  auto microvm = MicrovmProvider::make({});
  ASSERT_TRUE(podman.ok());
  ASSERT_TRUE(microvm.ok());
  for (Provider* p : {podman->get(), microvm->get()}) {
    auto s = check_requirements(*p, {Capability::kNetEgressPolicy});
    ASSERT_FALSE(s.ok()) << p->name();
    EXPECT_NE(s.error().message().find(p->name() + " is disqualified: it lacks net.egress_policy"),
              std::string::npos)
        << s.error().message();
    EnvSpec spec;
    spec.network = NetworkMode::kAllowlist;
    auto env = p->create(spec);
    ASSERT_FALSE(env.ok()) << p->name() << " made an allowlisted environment it cannot enforce";
    EXPECT_EQ(env.error().err, ENOTSUP) << env.error().message();
    EXPECT_NE(env.error().message().find("--net allowlist is not supported"), std::string::npos);
  }
  auto ns = NamespacesProvider::make({});
  ASSERT_TRUE(ns.ok());
  EXPECT_TRUE(check_requirements(**ns, {Capability::kNetEgressPolicy}).ok());
}

TEST(RegistryTest, BuiltinsAreRegisteredExplicitly) {
  Registry r;
  EXPECT_TRUE(r.entries().empty());
  register_builtin_providers(r);
  ASSERT_NE(r.find("namespaces"), nullptr);
  ASSERT_NE(r.find("host_dir"), nullptr);
  EXPECT_TRUE(r.find("host_dir")->info.unsafe);
  EXPECT_FALSE(r.find("namespaces")->info.unsafe);
  EXPECT_TRUE(r.find("host_dir")->info.capabilities.empty());
  auto unknown = r.create("qemu", {});
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().message().find("known: host_dir, namespaces"), std::string::npos);
}

TEST(HostDirTest, RefusedWithoutTheUnsafeFlag) {
  Registry r;
  register_builtin_providers(r);
  auto refused = r.create("host_dir", {});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message().find("--allow-unsafe-host"), std::string::npos);
  ProviderOptions options;
  options.allow_unsafe_host = true;
  EXPECT_TRUE(r.create("host_dir", options).ok());
}

TEST(HostDirTest, DisplayNameIsMarkedUnsafe) {
  EXPECT_EQ(display_name(HostDirProvider::static_info()), "host_dir (UNSAFE: no isolation)");
  EXPECT_EQ(display_name(NamespacesProvider::static_info()), "namespaces");
}

TEST(EnvAllowlistTest, PassesOnlyWhatIsNamed) {
  char a[] = "HOME=/root", b[] = "SECRET=x", c[] = "TERM=xterm", d[] = "TERMINAL=no";
  char* host[] = {a, b, c, d, nullptr};
  auto env = resolve_env_allowlist({"TERM", "MISSING", "SET=1"}, host);
  ASSERT_TRUE(env.ok());
  EXPECT_EQ(*env, (std::vector<std::string>{"TERM=xterm", "SET=1"}));
  for (const char* bad : {"1X", "A-B", "", "=x"}) {
    auto e = resolve_env_allowlist({bad}, host);
    EXPECT_FALSE(e.ok()) << bad;
  }
}

TEST(EnvAllowlistTest, MergeOverridesByName) {
  auto merged = merge_env({"A=1", "B=2", "AB=3"}, {"A=9", "C=4"});
  EXPECT_EQ(merged, (std::vector<std::string>{"B=2", "AB=3", "A=9", "C=4"}));
}

}  // namespace
}  // namespace sandgate::providers
