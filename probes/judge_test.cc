// The judge's rules, one test (or more) each, written so that removing a rule fails one:
// fabricated probe reports and fabricated host evidence, no kernel.
#include "probes/judge.h"

#include <gtest/gtest.h>

#include "providers/namespaces.h"

namespace sandgate::probes {
namespace {

constexpr char kMarker[] = "sg-test-7f3a";

ProbeReport report(const std::string& id, ProbeResult result, const std::string& err = "",
                   const std::string& attempt = "") {
  ProbeReport r;
  r.id = id;
  r.boundary = id.substr(0, id.find('.'));
  r.attempt = attempt.empty() ? id : attempt;
  r.result = result;
  r.errno_name = err;
  return r;
}

ProbeReport reached(const std::string& id) { return report(id, ProbeResult::kReached); }

ProviderFacts namespaces_facts() {
  return ProviderFacts::of(providers::NamespacesProvider::static_info());
}
ProviderFacts bare_facts() { return {}; }  // host_dir: declares nothing

Judgement judge(const ProbeReport& sandbox, Witness w, const HostEvidence& host = {},
                const ProviderFacts& facts = namespaces_facts()) {
  return judge_probe(reached(sandbox.id), sandbox, w, host, facts, kMarker);
}

// --- Rule 1: host evidence wins, whatever the probe says (the two-witness override) ---

TEST(JudgeRule1, DeniedButDecoySawItIsExposed) {
  HostEvidence host;
  host.decoy_events = {"tcp 169.254.169.254:80 GET /latest/meta-data/?sandgate=sg-test-7f3a"};
  auto j = judge(report("net.metadata_v4", ProbeResult::kDenied, "ECONNREFUSED"), Witness::kDecoy, host);
  EXPECT_EQ(j.verdict, Verdict::kExposed);
  EXPECT_NE(j.why.find("probe said denied ECONNREFUSED"), std::string::npos) << j.why;
  EXPECT_NE(j.why.find("169.254.169.254"), std::string::npos) << j.why;
}
TEST(JudgeRule1, DeniedWithoutDecoyEventIsBlocked) {  // the negative twin of the above
  auto j = judge(report("net.metadata_v4", ProbeResult::kDenied, "ENETUNREACH"), Witness::kDecoy);
  EXPECT_EQ(j.verdict, Verdict::kBlocked);
  EXPECT_EQ(j.layer, Layer::kNamespace);
}
// --- The third witness: the kernel saw a network action the probe called denied succeed ---

TracedActivity saw_connect(const std::string& address, uint16_t port, int err, const std::string& family = "inet") {
  TracedActivity a;
  TracedConnect c;
  c.pid = 7;
  c.syscall = "connect";
  c.family = family;
  c.address = address;
  c.port = port;
  c.protocol = "tcp";
  c.err = err;
  a.connects.push_back(c);
  return a;
}

TEST(KernelWitness, DeniedButTheKernelLetTheConnectThroughIsExposed) {
  auto r = report("net.production_tcp", ProbeResult::kDenied, "ECONNREFUSED");
  HostEvidence host;
  host.kernel = kernel_crossings(r, saw_connect("203.0.113.30", 443, 0));
  ASSERT_EQ(host.kernel.size(), 1u);
  EXPECT_EQ(host.kernel[0], "connect tcp 203.0.113.30:443 allowed (pid 7)");
  auto j = judge(r, Witness::kDecoy, host);
  EXPECT_EQ(j.verdict, Verdict::kExposed);
  EXPECT_NE(j.why.find("the kernel let it through: connect tcp 203.0.113.30:443"), std::string::npos) << j.why;
  EXPECT_EQ(j.to_json()["host"]["kernel"][0], "connect tcp 203.0.113.30:443 allowed (pid 7)");
}

// A netlink message (a sendto with no address on a raw socket, family 0) and a unix socket's
// are not crossings of the network boundary: only IP leaves a network namespace.
TEST(KernelWitness, OnlyIpCountsAsACrossing) {
  auto r = report("net.production_tcp", ProbeResult::kDenied, "ENETUNREACH");
  TracedActivity netlink = saw_connect("", 0, 0, "af0");
  netlink.connects[0].syscall = "sendto";
  netlink.connects[0].protocol = "raw";
  EXPECT_TRUE(kernel_crossings(r, netlink).empty());
  EXPECT_TRUE(kernel_crossings(r, saw_connect("@sandgate-abstract", 0, 0, "unix")).empty());
  EXPECT_EQ(kernel_crossings(r, saw_connect("2001:db8::1", 443, 0, "inet6")).size(), 1u);
  EXPECT_EQ(judge(r, Witness::kDecoy, HostEvidence{}).verdict, Verdict::kBlocked);
}

// The run's resolver answering REFUSED was reached on purpose: the datagram to it is its
// answer, not a crossing; a datagram anywhere else still is.
TEST(KernelWitness, AResolverThatRefusedWasReachedOnPurpose) {
  auto r = report("net.dns_exfil_resolver", ProbeResult::kDenied, "ECONNREFUSED");
  r.evidence = {{"peer", "198.18.0.1:53"}, {"reply", {{"rcode", 5}}}};
  EXPECT_TRUE(kernel_crossings(r, saw_connect("198.18.0.1", 53, 0)).empty());
  EXPECT_EQ(kernel_crossings(r, saw_connect("203.0.113.53", 53, 0)).size(), 1u);
  r.evidence["reply"]["rcode"] = 0;  // an answer other than REFUSED: the datagram counts
  EXPECT_EQ(kernel_crossings(r, saw_connect("198.18.0.1", 53, 0)).size(), 1u);
}

TEST(KernelWitness, TheKernelAgreeingWithADenialIsNoEvidence) {  // the negative twins
  auto r = report("net.production_tcp", ProbeResult::kDenied, "ENETUNREACH");
  EXPECT_TRUE(kernel_crossings(r, saw_connect("203.0.113.30", 443, ENETUNREACH)).empty());
  EXPECT_TRUE(kernel_crossings(r, saw_connect("203.0.113.30", 443, EPERM)).empty());
  // Loopback is the sandbox's own network.
  EXPECT_TRUE(kernel_crossings(r, saw_connect("127.0.0.1", 8080, 0)).empty());
  EXPECT_TRUE(kernel_crossings(r, saw_connect("::1", 8080, 0, "inet6")).empty());
  // A probe that reached is not contradicted, and a non-network probe is not judged this way.
  EXPECT_TRUE(kernel_crossings(reached("net.production_tcp"), saw_connect("203.0.113.30", 443, 0)).empty());
  EXPECT_TRUE(kernel_crossings(report("fs.host_root_write", ProbeResult::kDenied, "EROFS"),
                               saw_connect("203.0.113.30", 443, 0))
                  .empty());
  auto j = judge(r, Witness::kDecoy, HostEvidence{});
  EXPECT_EQ(j.verdict, Verdict::kBlocked);
}

TEST(KernelWitness, ANonBlockingConnectOnItsWayCounts) {
  auto r = report("net.production_tcp", ProbeResult::kDenied, "ETIMEDOUT");
  EXPECT_EQ(kernel_crossings(r, saw_connect("203.0.113.30", 443, EINPROGRESS)).size(), 1u);
}

TEST(JudgeRule1, ErrorButFileAppearedIsExposed) {
  HostEvidence host;
  host.files_appeared = {"/var/tmp/x/sandgate-probe-sg"};
  auto j = judge(report("fs.write_host_dir", ProbeResult::kError), Witness::kHostFile, host);
  EXPECT_EQ(j.verdict, Verdict::kExposed);
}
TEST(JudgeRule1, NotFoundButSentinelSignalledIsExposed) {
  HostEvidence host;
  host.sentinel_signals = {"SIGWINCH from pid 4242"};
  auto j = judge(report("proc.kill_sentinel", ProbeResult::kNotFound, "ESRCH"), Witness::kSentinel, host);
  EXPECT_EQ(j.verdict, Verdict::kExposed);
}
TEST(JudgeRule1, LeftoverProcessIsExposedEvenWithoutBaseline) {
  HostEvidence host;
  host.leftover_processes = {"4242 sandgate-probe linger sg-test-7f3a 60"};
  auto j = judge_probe(std::nullopt, report("persist.plant", ProbeResult::kReached), Witness::kSelf,
                       host, namespaces_facts(), kMarker);
  EXPECT_EQ(j.verdict, Verdict::kExposed);
  EXPECT_NE(j.why.find("alive after destroy"), std::string::npos) << j.why;
}
TEST(JudgeRule1, AnotherRunsHolderSawItIsExposed) {
  HostEvidence host;
  host.other_run = {"1 signal(s), the last from pid 4242"};
  auto j = judge(report("crossrun.signal_process", ProbeResult::kDenied, "ESRCH"), Witness::kSelf, host);
  EXPECT_EQ(j.verdict, Verdict::kExposed);
  EXPECT_NE(j.why.find("run A saw"), std::string::npos) << j.why;
}
TEST(JudgeRule1, NotesAloneAreNotEvidence) {
  HostEvidence host;
  host.notes = {"decoy log had 3 unrelated events"};
  auto j = judge(report("net.metadata_v4", ProbeResult::kDenied, "ENETUNREACH"), Witness::kDecoy, host);
  EXPECT_EQ(j.verdict, Verdict::kBlocked);
}

// --- Rule 2: reached needs the witness that fits the probe ---

TEST(JudgeRule2, ReachedConfirmedByDecoyIsExposed) {
  HostEvidence host;
  host.decoy_events = {"tcp 169.254.169.254:80 GET /"};
  auto j = judge(reached("net.metadata_v4"), Witness::kDecoy, host);
  EXPECT_EQ(j.verdict, Verdict::kExposed);
}
TEST(JudgeRule2, ReachedWithoutDecoyEventIsInconclusive) {
  auto j = judge(reached("net.metadata_v4"), Witness::kDecoy);
  EXPECT_EQ(j.verdict, Verdict::kInconclusive);
  EXPECT_NE(j.why.find("no decoy"), std::string::npos) << j.why;
}
TEST(JudgeRule2, ReachedWithoutHostFileIsInconclusive) {
  auto j = judge(reached("fs.write_host_dir"), Witness::kHostFile);
  EXPECT_EQ(j.verdict, Verdict::kInconclusive);
}
TEST(JudgeRule2, ReachedWithoutSentinelSignalIsInconclusive) {
  auto j = judge(reached("proc.kill_sentinel"), Witness::kSentinel);
  EXPECT_EQ(j.verdict, Verdict::kInconclusive);
}
TEST(JudgeRule2, CanaryBytesCarryingTheMarkerAreExposed) {
  auto r = reached("fs.read_host_canary");
  r.evidence = {{"bytes", std::string("canary ") + kMarker + "\n"}};
  auto j = judge(r, Witness::kCanary);
  EXPECT_EQ(j.verdict, Verdict::kExposed);
  EXPECT_NE(j.why.find(kMarker), std::string::npos) << j.why;
}
TEST(JudgeRule2, CanaryReadWithoutTheMarkerIsInconclusive) {
  auto r = reached("fs.read_host_canary");
  r.evidence = {{"bytes", "some other file with the same name"}};
  EXPECT_EQ(judge(r, Witness::kCanary).verdict, Verdict::kInconclusive);
  // No marker configured: nothing can be matched, so nothing is claimed.
  EXPECT_EQ(judge_probe(reached(r.id), r, Witness::kCanary, {}, namespaces_facts(), "").verdict,
            Verdict::kInconclusive);
}
TEST(JudgeRule2, ReachedSyscallIsExposedOnItsOwnWord) {
  auto r = reached("proc.bpf");
  r.evidence = {{"fd", 5}};
  auto j = judge(r, Witness::kSelf);
  EXPECT_EQ(j.verdict, Verdict::kExposed);
  EXPECT_NE(j.why.find("kernel allowed"), std::string::npos) << j.why;
}
TEST(JudgeRule2, ReachedSyscallWithoutPreconditionsIsInconclusive) {
  auto r = reached("proc.bpf");
  r.preconditions = false;
  EXPECT_EQ(judge(r, Witness::kSelf).verdict, Verdict::kInconclusive);
}
TEST(JudgeRule2, ResourceProbesAreNotJudgedHere) {
  EXPECT_EQ(judge(reached("resource.memory"), Witness::kResource).verdict, Verdict::kInconclusive);
}

// --- Rule 3: what proves nothing is inconclusive, never blocked ---

TEST(JudgeRule3, ProbeErrorIsInconclusive) {
  auto j = judge(report("fs.open_by_handle", ProbeResult::kError, "EBADF"), Witness::kSelf);
  EXPECT_EQ(j.verdict, Verdict::kInconclusive);
  EXPECT_NE(j.why.find("probe error"), std::string::npos) << j.why;
}
TEST(JudgeRule3, PreconditionsFalseIsInconclusive) {
  auto r = report("crossrun.find", ProbeResult::kNotFound, "ENOENT");
  r.preconditions = false;
  r.detail = "no other_workspace";
  auto j = judge(r, Witness::kCanary);
  EXPECT_EQ(j.verdict, Verdict::kInconclusive);
  EXPECT_NE(j.why.find("no other_workspace"), std::string::npos) << j.why;
}
TEST(JudgeRule3, BaselineThatDidNotReachIsInconclusive) {
  auto base = report("proc.kvm", ProbeResult::kNotFound, "ENOENT");
  auto j = judge_probe(base, report("proc.kvm", ProbeResult::kNotFound, "ENOENT"), Witness::kSelf,
                       {}, namespaces_facts(), kMarker);
  EXPECT_EQ(j.verdict, Verdict::kInconclusive);
  EXPECT_NE(j.why.find("baseline did not reach"), std::string::npos) << j.why;
}
TEST(JudgeRule3, BaselineWithoutPreconditionsIsInconclusive) {
  auto base = reached("proc.kvm");
  base.preconditions = false;
  auto j = judge_probe(base, report("proc.kvm", ProbeResult::kDenied, "EPERM"), Witness::kSelf, {},
                       namespaces_facts(), kMarker);
  EXPECT_EQ(j.verdict, Verdict::kInconclusive);
}
TEST(JudgeRule3, NoBaselineIsInconclusive) {
  auto j = judge_probe(std::nullopt, report("proc.bpf", ProbeResult::kDenied, "EPERM"),
                       Witness::kSelf, {}, namespaces_facts(), kMarker);
  EXPECT_EQ(j.verdict, Verdict::kInconclusive);
}

// --- Rule 4: blocked, and by which layer ---

TEST(JudgeLayers, EpermOnAFilteredSyscallIsSeccomp) {
  auto r = report("proc.bpf", ProbeResult::kDenied, "EPERM", "bpf(BPF_PROG_LOAD)");
  auto j = judge(r, Witness::kSelf);
  EXPECT_EQ(j.verdict, Verdict::kBlocked);
  EXPECT_EQ(j.layer, Layer::kSeccomp);
  EXPECT_NE(j.why.find("seccomp"), std::string::npos);
}
TEST(JudgeLayers, SyscallFromEvidenceWinsOverAttempt) {
  auto r = report("proc.mount", ProbeResult::kDenied, "EPERM", "mount a tmpfs on /mnt");
  EXPECT_EQ(blocking_layer(r, namespaces_facts()), Layer::kPermissions);
  r.evidence = {{"syscall", "mount"}};
  EXPECT_EQ(blocking_layer(r, namespaces_facts()), Layer::kSeccomp);
}
TEST(JudgeLayers, EpermWithoutADeclaredFilterIsPermissions) {
  auto r = report("proc.bpf", ProbeResult::kDenied, "EPERM", "bpf(BPF_PROG_LOAD)");
  EXPECT_EQ(blocking_layer(r, bare_facts()), Layer::kPermissions);
}
TEST(JudgeLayers, EpermOnAnUnfilteredSyscallIsPermissions) {
  auto r = report("proc.kill_sentinel", ProbeResult::kDenied, "EPERM", "kill(4242, SIGWINCH)");
  EXPECT_EQ(blocking_layer(r, namespaces_facts()), Layer::kPermissions);
}
TEST(JudgeLayers, ErofsIsMount) {
  auto r = report("fs.readonly_base", ProbeResult::kDenied, "EROFS", "open(/usr/x, O_CREAT)");
  EXPECT_EQ(blocking_layer(r, namespaces_facts()), Layer::kMount);
}
TEST(JudgeLayers, EaccesIsPermissions) {
  auto r = report("fs.core_pattern", ProbeResult::kDenied, "EACCES", "open(/proc/sys/kernel/core_pattern)");
  EXPECT_EQ(blocking_layer(r, namespaces_facts()), Layer::kPermissions);
}
TEST(JudgeLayers, EnoentForAHostPathIsMount) {
  auto r = report("fs.read_host_canary", ProbeResult::kNotFound, "ENOENT", "open(/var/tmp/c)");
  EXPECT_EQ(blocking_layer(r, namespaces_facts()), Layer::kMount);
}
TEST(JudgeLayers, NotFoundWithoutAPathIsNamespace) {
  auto r = report("crossrun.signal", ProbeResult::kNotFound, "", "signal run A's processes");
  EXPECT_EQ(blocking_layer(r, namespaces_facts()), Layer::kNamespace);
  EXPECT_EQ(blocking_layer(report("proc.kill", ProbeResult::kDenied, "ESRCH"), namespaces_facts()),
            Layer::kNamespace);
}
TEST(JudgeLayers, UnreachableNetworkIsNamespaceWithNetNoneAndEgressWithAPolicy) {
  auto r = report("net.production", ProbeResult::kDenied, "ENETUNREACH");
  EXPECT_EQ(blocking_layer(r, namespaces_facts()), Layer::kNamespace);
  ProviderFacts egress;
  egress.capabilities = {Capability::kNetEgressPolicy};
  EXPECT_EQ(blocking_layer(r, egress), Layer::kEgress);
}
// --net allowlist: the guard's EPERM on a connect or send is layer egress; an EPERM elsewhere
// keeps its own layer; the allowed endpoint reached is a warning, not a crossing.
TEST(JudgeLayers, EpermOnAConnectUnderAnAllowlistIsEgress) {
  ProviderFacts f = namespaces_facts();
  auto rules = parse_egress_rules({"tcp:203.0.113.20:443"});
  ASSERT_TRUE(rules.ok());
  auto connect = report("net.production_tcp", ProbeResult::kDenied, "EPERM");
  connect.evidence = {{"syscall", "connect"}, {"peer", "203.0.113.10:443"}};
  auto send = report("net.udp_exfil", ProbeResult::kDenied, "EPERM");
  send.evidence = {{"peer", "203.0.113.10:514"}};
  auto ring = report("net.io_uring_socket", ProbeResult::kDenied, "EPERM");
  ring.evidence = {{"step", "io_uring_setup"}};
  EXPECT_EQ(blocking_layer(connect, f), Layer::kPermissions) << "no allowlist: not the guard's";
  f.egress_allow = *rules;
  EXPECT_EQ(blocking_layer(connect, f), Layer::kEgress);
  EXPECT_EQ(blocking_layer(send, f), Layer::kEgress);
  EXPECT_EQ(blocking_layer(ring, f), Layer::kPermissions);
}
// The run's resolver answering REFUSED (rcode 5 in the reply) is the allowlist's DNS side:
// egress; the same errno without a REFUSED reply, or without an allowlist, keeps its layer.
TEST(JudgeLayers, ResolverRefusedUnderAnAllowlistIsEgress) {
  ProviderFacts f = namespaces_facts();
  auto refused = report("net.dns_exfil_resolver", ProbeResult::kDenied, "ECONNREFUSED");
  refused.evidence = {{"peer", "198.18.0.1:53"}, {"reply", {{"rcode", 5}, {"answers", 0}}}};
  EXPECT_EQ(blocking_layer(refused, f), Layer::kNamespace) << "no allowlist";
  f.egress_allow = *parse_egress_rules({"tcp:registry.sandgate.test:443"});
  EXPECT_EQ(blocking_layer(refused, f), Layer::kEgress);
  auto no_reply = report("net.dns_exfil_resolver", ProbeResult::kDenied, "ECONNREFUSED");
  no_reply.evidence = {{"peer", "198.18.0.1:53"}};
  EXPECT_EQ(blocking_layer(no_reply, f), Layer::kNamespace);
}
TEST(JudgeRule2, AllowlistedDecoyReachedIsAWarningNotExposure) {
  ProviderFacts f = namespaces_facts();
  f.egress_allow = *parse_egress_rules({"tcp:203.0.113.20:443"});
  HostEvidence allowed;
  allowed.allowlisted = {"registry tcp_connect 203.0.113.20:443 from 198.18.0.2"};
  auto j = judge(reached("net.registry_allowed"), Witness::kDecoy, allowed, f);
  EXPECT_EQ(j.verdict, Verdict::kWarning) << j.why;
  EXPECT_NE(j.why.find("egress allowlist permits"), std::string::npos) << j.why;
  // A decoy the list does not allow is a crossing, allowlist or not.
  HostEvidence crossed = allowed;
  crossed.decoy_events = {"production tcp_connect 203.0.113.10:443 from 198.18.0.2"};
  EXPECT_EQ(judge(reached("net.production_tcp"), Witness::kDecoy, crossed, f).verdict, Verdict::kExposed);
  // Without the decoy's word, the probe's own claim proves nothing.
  EXPECT_EQ(judge(reached("net.registry_allowed"), Witness::kDecoy, {}, f).verdict, Verdict::kInconclusive);
  // The wired interface is by design only under an allowlist.
  auto ifs = reached("net.interfaces");
  ifs.preconditions = true;
  EXPECT_EQ(judge(ifs, Witness::kSelf, {}, f).verdict, Verdict::kWarning);
  EXPECT_EQ(judge(ifs, Witness::kSelf, {}, namespaces_facts()).verdict, Verdict::kExposed);
}
TEST(JudgeLayers, ExhaustionIsLimit) {
  EXPECT_EQ(blocking_layer(report("proc.x", ProbeResult::kDenied, "EMFILE"), namespaces_facts()),
            Layer::kLimit);
  EXPECT_EQ(blocking_layer(report("resource.x", ProbeResult::kDenied, "EPERM"), namespaces_facts()),
            Layer::kLimit);
}
TEST(JudgeLayers, AbsentTokenIsEnvironment) {
  auto r = report("creds.env_tokens", ProbeResult::kNotFound, "", "getenv(GITHUB_TOKEN,...)");
  EXPECT_EQ(blocking_layer(r, namespaces_facts()), Layer::kEnvironment);
  EXPECT_EQ(blocking_layer(report("creds.env_tokens", ProbeResult::kNotFound, "ENOENT", "getenv"),
                           namespaces_facts()),
            Layer::kEnvironment);
  auto file = report("creds.home_files", ProbeResult::kNotFound, "", "read ~/.ssh/id_ed25519");
  file.evidence = {{"path", "/var/tmp/home/.ssh/id_ed25519"}};
  EXPECT_EQ(blocking_layer(file, namespaces_facts()), Layer::kMount);
}
// A run with a kernel of its own (a microVM declares kernel.separate): what a jail's namespace
// hides is not in the run's kernel at all, and the layer and the reason say so. Other layers
// stay what they are (a path's absence is the mount's, a refusal of the filter the filter's).
TEST(JudgeLayers, WithAKernelOfItsOwnTheNamespacesPartIsTheKernels) {
  ProviderFacts vm;
  vm.capabilities = {Capability::kKernelSeparate, Capability::kNetNone, Capability::kProcPidNs};
  auto gone = report("crossrun.see_processes", ProbeResult::kNotFound, "ESRCH");
  EXPECT_EQ(blocking_layer(gone, namespaces_facts()), Layer::kNamespace);
  EXPECT_EQ(blocking_layer(gone, vm), Layer::kKernel);
  auto j = judge(gone, Witness::kSelf, {}, vm);
  EXPECT_EQ(j.verdict, Verdict::kBlocked) << j.why;
  EXPECT_EQ(to_string(j.layer), "kernel");
  EXPECT_NE(j.why.find("not in the run's own kernel"), std::string::npos) << j.why;
  EXPECT_EQ(j.why.find("not by the sandbox"), std::string::npos) << j.why;
  auto unreachable = report("net.metadata_v4_get", ProbeResult::kDenied, "ENETUNREACH");
  EXPECT_EQ(blocking_layer(unreachable, namespaces_facts()), Layer::kNamespace);
  EXPECT_EQ(blocking_layer(unreachable, vm), Layer::kKernel);
  auto file = report("fs.read_host_canary", ProbeResult::kNotFound, "ENOENT", "read /var/tmp/x");
  EXPECT_EQ(blocking_layer(file, vm), Layer::kMount);
  EXPECT_EQ(blocking_layer(report("proc.x", ProbeResult::kDenied, "EACCES"), vm),
            Layer::kPermissions);
}
// TIOCSTI under dev.tty.legacy_tiocsti = 0: the kernel answers EIO to every caller without
// CAP_SYS_ADMIN, so the refusal is the kernel's, not the sandbox's, and the reason says so. The
// same probe refused by the filter first (EPERM) is the filter's, whatever the setting.
TEST(JudgeLayers, KernelSettingRefusalIsTheKernelsNotTheSandboxs) {
  auto r = report("proc.tiocsti", ProbeResult::kDenied, "EIO");
  r.evidence = {{"syscall", "ioctl"}, {"plain", "EIO"}, {"high_bits", "EIO"},
                {"legacy_tiocsti", "0"}, {"cap_sys_admin", false},
                {"kernel_refuses", "dev.tty.legacy_tiocsti = 0: the kernel refuses TIOCSTI"}};
  auto j = judge(r, Witness::kSelf);
  EXPECT_EQ(j.verdict, Verdict::kBlocked) << j.why;
  EXPECT_EQ(j.layer, Layer::kKernel) << j.why;
  EXPECT_EQ(to_string(j.layer), "kernel");
  EXPECT_NE(j.why.find("refused by the kernel itself, not by the sandbox"), std::string::npos)
      << j.why;
  EXPECT_NE(j.why.find("legacy_tiocsti = 0"), std::string::npos) << j.why;
  auto filtered = report("proc.tiocsti", ProbeResult::kDenied, "EPERM");
  filtered.evidence = {{"syscall", "ioctl"}, {"legacy_tiocsti", "0"}, {"cap_sys_admin", false}};
  EXPECT_EQ(blocking_layer(filtered, namespaces_facts()), Layer::kSeccomp);
  EXPECT_EQ(kernel_refusal(filtered), "");
}
TEST(JudgeLayers, UnofferedFamilyIsNamespace) {
  auto r = report("net.vsock", ProbeResult::kDenied, "EAFNOSUPPORT", "socket(AF_VSOCK)");
  EXPECT_EQ(blocking_layer(r, namespaces_facts()), Layer::kNamespace);
}
TEST(JudgeLayers, BoundaryDefaultsWithoutErrno) {
  EXPECT_EQ(blocking_layer(report("proc.caps", ProbeResult::kDenied), namespaces_facts()),
            Layer::kPermissions);
  EXPECT_EQ(blocking_layer(report("persist.find", ProbeResult::kNotFound, "", "look for markers"),
                           namespaces_facts()),
            Layer::kMount);
  EXPECT_EQ(blocking_layer(report("crossrun.find", ProbeResult::kDenied), namespaces_facts()),
            Layer::kNamespace);
}
TEST(JudgeLayers, SyscallName) {
  EXPECT_EQ(probe_syscall(report("a.b", ProbeResult::kDenied, "", "bpf(BPF_PROG_LOAD)")), "bpf");
  EXPECT_EQ(probe_syscall(report("a.b", ProbeResult::kDenied, "", "read the canary (/x)")), "");
  EXPECT_EQ(probe_syscall(report("a.b", ProbeResult::kDenied, "", "no parens")), "");
}
// Rule 4's Landlock clause: the errno and the probe's own evidence, for a provider that
// declares proc.landlock; each with its negative twin.
ProviderFacts landlock_facts() {
  auto f = namespaces_facts();
  f.capabilities.insert(Capability::kProcLandlock);
  return f;
}
TEST(JudgeLayers, EaccesOnAPathAccessCallsWritableIsLandlock) {
  auto r = report("proc.lower_oom_priority", ProbeResult::kDenied, "EACCES",
                  "write /proc/self/oom_score_adj: lower this process's OOM priority");
  r.evidence = {{"access_w", "ok"}};
  EXPECT_EQ(blocking_layer(r, landlock_facts()), Layer::kLandlock);
  EXPECT_NE(blocking_reason(r, Layer::kLandlock).find("the mount and file modes allow it"),
            std::string::npos);
  // The same refusal where access(2) refused too: the file modes' (or the mount's).
  r.evidence = {{"access_w", "EACCES"}};
  EXPECT_EQ(blocking_layer(r, landlock_facts()), Layer::kPermissions);
  // And from a provider that declares no Landlock: some other LSM, not credited to it.
  r.evidence = {{"access_w", "ok"}};
  EXPECT_EQ(blocking_layer(r, namespaces_facts()), Layer::kPermissions);
}
TEST(JudgeLayers, EaccesFromATcpConnectIsLandlock) {
  auto r = report("net.metadata_v4_get", ProbeResult::kDenied, "EACCES",
                  "GET http://169.254.169.254:80/latest/meta-data/");
  r.evidence = {{"peer", "169.254.169.254:80"}, {"connected", false}, {"syscall", "connect"}};
  EXPECT_EQ(blocking_layer(r, landlock_facts()), Layer::kLandlock);
  EXPECT_NE(blocking_reason(r, Layer::kLandlock).find("TCP port"), std::string::npos);
  // The namespace's own answer stays the namespace's, Landlock or not.
  r.errno_name = "ENETUNREACH";
  EXPECT_EQ(blocking_layer(r, landlock_facts()), Layer::kNamespace);
}
TEST(JudgeLayers, EpermFromAnAbstractSocketConnectIsLandlocksScope) {
  auto r = report("crossrun.abstract_socket", ProbeResult::kDenied, "EPERM",
                  "connect to run A's abstract unix socket @x");
  r.evidence = {{"name", "x"}, {"syscall", "connect"}, {"abstract", true}};
  EXPECT_EQ(blocking_layer(r, landlock_facts()), Layer::kLandlock);
  EXPECT_NE(blocking_reason(r, Layer::kLandlock).find("scope"), std::string::npos);
  r.evidence["abstract"] = false;  // a path socket's EPERM is its file modes'
  EXPECT_EQ(blocking_layer(r, landlock_facts()), Layer::kPermissions);
  EXPECT_EQ(to_string(Layer::kLandlock), "landlock");
}
// Rule 4's evidence clause: a refusal of a syscall the kernel runs natively, by a probe that
// saw its own seccomp filter, is the filter's, whatever the provider declares.
ProbeReport new_syscall(ProbeResult result, const std::string& err, int seccomp_mode) {
  auto r = report("proc.open_tree_attr", result, err, "open_tree_attr(-1, \"x\", 0, NULL, 0)");
  r.evidence = {{"syscall", "open_tree_attr"}, {"nr", 467}, {"seccomp_mode", seccomp_mode}};
  return r;
}
TEST(JudgeLayers, EnosysOfAnImplementedSyscallUnderAFilterIsSeccomp) {
  auto base = new_syscall(ProbeResult::kReached, "EBADF", 0);  // the kernel ran it natively
  auto j = judge_probe(base, new_syscall(ProbeResult::kDenied, "ENOSYS", 2), Witness::kSelf, {},
                       bare_facts(), kMarker);
  EXPECT_EQ(j.verdict, Verdict::kBlocked);
  EXPECT_EQ(j.layer, Layer::kSeccomp) << j.why;
  EXPECT_NE(j.why.find("natively the kernel ran it: reached EBADF"), std::string::npos) << j.why;
  // EPERM too, though open_tree_attr is on no list the provider declares.
  auto eperm = new_syscall(ProbeResult::kDenied, "EPERM", 2);
  EXPECT_EQ(blocking_layer(eperm, bare_facts(), base), Layer::kSeccomp);
}
TEST(JudgeLayers, EnosysWithoutTheFilterEvidenceStaysNamespace) {  // the negative twins
  auto base = new_syscall(ProbeResult::kReached, "EBADF", 0);
  // No filter seen by the probe: whatever answered ENOSYS, it was not a seccomp filter.
  EXPECT_EQ(
      blocking_layer(new_syscall(ProbeResult::kDenied, "ENOSYS", 0), namespaces_facts(), base),
      Layer::kNamespace);
  // A probe that does not report the mode is judged as before.
  auto silent = report("proc.x", ProbeResult::kDenied, "ENOSYS", "frobnicate()");
  EXPECT_EQ(blocking_layer(silent, namespaces_facts(), base), Layer::kNamespace);
  // No baseline, or a kernel that lacks the syscall: the ENOSYS may be the kernel's own.
  auto filtered = new_syscall(ProbeResult::kDenied, "ENOSYS", 2);
  EXPECT_EQ(blocking_layer(filtered, namespaces_facts()), Layer::kNamespace);
  auto lacking = new_syscall(ProbeResult::kDenied, "ENOSYS", 0);
  EXPECT_FALSE(refused_by_seccomp_filter(filtered, lacking));
  auto j = judge_probe(lacking, filtered, Witness::kSelf, {}, namespaces_facts(), kMarker);
  EXPECT_EQ(j.verdict, Verdict::kInconclusive) << "the baseline did not reach: rule 3";
  // Other errnos are the kernel's own answer, filter or not.
  EXPECT_FALSE(refused_by_seccomp_filter(new_syscall(ProbeResult::kDenied, "EACCES", 2), base));
}
TEST(JudgeLayers, NamespacesFactsCarryTheSeccompList) {
  auto f = namespaces_facts();
  EXPECT_TRUE(f.seccomp_denied.count("bpf"));
  EXPECT_TRUE(f.seccomp_denied.count("mount"));
  EXPECT_TRUE(bare_facts().seccomp_denied.empty());
}

// --- Resource probes: the controller's outcome and the limits read back ---

ResourceEvidence ended(const std::string& termination) {
  ResourceEvidence e;
  e.termination = termination;
  e.expected = {"memory_limit"};
  return e;
}

TEST(JudgeResource, DroppedLimitIsExposedEvenWhenTheCallEndedAsExpected) {
  auto e = ended("memory_limit");
  e.limit_mismatches = {"memory.limit_in_bytes: granted 64MiB, host has 9223372036854771712"};
  auto j = judge_resource(reached("resource.memory"), std::nullopt, "resource.memory", e);
  EXPECT_EQ(j.verdict, Verdict::kExposed);
  EXPECT_NE(j.why.find("limit not applied"), std::string::npos) << j.why;
}
TEST(JudgeResource, ExpectedTerminationIsBlockedByLimit) {
  auto j = judge_resource(reached("resource.memory"), std::nullopt, "resource.memory", ended("memory_limit"));
  EXPECT_EQ(j.verdict, Verdict::kBlocked);
  EXPECT_EQ(j.layer, Layer::kLimit);
  EXPECT_EQ(j.id, "resource.memory");
}
TEST(JudgeResource, PastTheGrantAndExitedIsExposed) {
  auto j = judge_resource(reached("resource.memory"), reached("resource.memory"), "resource.memory",
                          ended("exited"));
  EXPECT_EQ(j.verdict, Verdict::kExposed);
}
TEST(JudgeResource, KilledWithoutReportAndUnexpectedEndingIsInconclusive) {
  auto j = judge_resource(reached("resource.memory"), std::nullopt, "resource.memory", ended("killed"));
  EXPECT_EQ(j.verdict, Verdict::kInconclusive);
}
TEST(JudgeResource, RefusalWithAnErrnoIsBlockedByLimit) {
  auto e = ended("exited");
  e.expected = {"pids_limit"};
  auto j = judge_resource(reached("resource.fd_exhaust"),
                          report("resource.fd_exhaust", ProbeResult::kDenied, "EMFILE"),
                          "resource.fd_exhaust", e);
  EXPECT_EQ(j.verdict, Verdict::kBlocked);
  EXPECT_EQ(j.layer, Layer::kLimit);
}
TEST(JudgeResource, ThrottlingThatHeldIsBlocked) {
  auto e = ended("exited");
  e.expected = {};
  auto j = judge_resource(reached("resource.cpu_spin"), reached("resource.cpu_spin"), "resource.cpu_spin", e);
  EXPECT_EQ(j.verdict, Verdict::kExposed);  // the twin: nothing held it
  e.held_by = "throttled 420ms at 0.25 cores";
  j = judge_resource(reached("resource.cpu_spin"), reached("resource.cpu_spin"), "resource.cpu_spin", e);
  EXPECT_EQ(j.verdict, Verdict::kBlocked);
  EXPECT_EQ(j.layer, Layer::kLimit);
}
TEST(JudgeResource, ReachingTheCapWithNoDeclaredLimitIsInconclusive) {
  auto e = ended("exited");
  e.limit_declared = false;
  auto j = judge_resource(reached("resource.disk_fill"), reached("resource.disk_fill"), "resource.disk_fill", e);
  EXPECT_EQ(j.verdict, Verdict::kInconclusive);
  EXPECT_NE(j.why.find("no limit is declared"), std::string::npos) << j.why;
}
// fd_exhaust and disk_fill against an rlimit grant: the probe's count against the grant.
ResourceEvidence rlimit(uint64_t granted, const char* key, const char* err, std::optional<uint64_t> host) {
  auto e = ended("exited");
  e.expected = {};
  e.rlimit_granted = granted;
  e.rlimit_count_key = key;
  e.rlimit_errno = err;
  e.rlimit_host = host;
  return e;
}
ProbeReport stopped(const std::string& id, const std::string& err, const char* key, uint64_t count) {
  // As the probe binary reports it: EMFILE / EFBIG are an error result, not a refusal.
  ProbeReport r = report(id, ProbeResult::kError, err);
  r.evidence = {{key, count}};
  return r;
}

TEST(JudgeResource, FdsStoppedAtEmfileWithinTheGrantAreBlockedByLimit) {
  auto j = judge_resource(reached("resource.fd_exhaust"),
                          stopped("resource.fd_exhaust", "EMFILE", "fds_opened", 253),
                          "resource.fd_exhaust", rlimit(256, "fds_opened", "EMFILE", 256));
  EXPECT_EQ(j.verdict, Verdict::kBlocked) << j.why;
  EXPECT_EQ(j.layer, Layer::kLimit);
  EXPECT_NE(j.why.find("within the grant of 256"), std::string::npos) << j.why;
}
TEST(JudgeResource, FdsPastTheGrantAreExposed) {
  // The negative twin: more descriptors than granted (the rlimit was not what held it).
  auto j = judge_resource(reached("resource.fd_exhaust"),
                          stopped("resource.fd_exhaust", "EMFILE", "fds_opened", 1021),
                          "resource.fd_exhaust", rlimit(256, "fds_opened", "EMFILE", 256));
  EXPECT_EQ(j.verdict, Verdict::kExposed) << j.why;
  EXPECT_NE(j.why.find("past the grant of 256"), std::string::npos) << j.why;
  // Reaching its own cap is past the grant too.
  ProbeReport all = reached("resource.fd_exhaust");
  all.evidence = {{"fds_opened", 4096}};
  j = judge_resource(reached("resource.fd_exhaust"), all, "resource.fd_exhaust",
                     rlimit(256, "fds_opened", "EMFILE", 256));
  EXPECT_EQ(j.verdict, Verdict::kExposed) << j.why;
}
TEST(JudgeResource, FileWithinItsSizeGrantIsBlockedAndPastItExposed) {
  auto e = rlimit(8 << 20, "bytes_written", "EFBIG", 8 << 20);
  auto j = judge_resource(reached("resource.disk_fill"),
                          stopped("resource.disk_fill", "EFBIG", "bytes_written", 8 << 20),
                          "resource.disk_fill", e);
  EXPECT_EQ(j.verdict, Verdict::kBlocked) << j.why;
  EXPECT_EQ(j.layer, Layer::kLimit);
  ProbeReport past = reached("resource.disk_fill");
  past.evidence = {{"bytes_written", 32 << 20}};
  j = judge_resource(reached("resource.disk_fill"), past, "resource.disk_fill", e);
  EXPECT_EQ(j.verdict, Verdict::kExposed) << j.why;
}
TEST(JudgeResource, RlimitThatWasNotReadBackOrAnotherErrnoIsInconclusive) {
  auto j = judge_resource(reached("resource.fd_exhaust"),
                          stopped("resource.fd_exhaust", "EMFILE", "fds_opened", 253),
                          "resource.fd_exhaust", rlimit(256, "fds_opened", "EMFILE", std::nullopt));
  EXPECT_EQ(j.verdict, Verdict::kInconclusive) << j.why;
  j = judge_resource(reached("resource.disk_fill"),
                     stopped("resource.disk_fill", "ENOSPC", "bytes_written", 1 << 20),
                     "resource.disk_fill", rlimit(8 << 20, "bytes_written", "EFBIG", 8 << 20));
  EXPECT_EQ(j.verdict, Verdict::kInconclusive) << j.why;
  j = judge_resource(reached("resource.disk_fill"), report("resource.disk_fill", ProbeResult::kError, "EFBIG"),
                     "resource.disk_fill", rlimit(8 << 20, "bytes_written", "EFBIG", 8 << 20));
  EXPECT_EQ(j.verdict, Verdict::kInconclusive) << j.why;  // no count to compare
}
TEST(JudgeResource, RlimitReadBackThatDiffersIsExposed) {
  auto e = rlimit(256, "fds_opened", "EMFILE", 1024);
  e.limit_mismatches = {"open_files (/proc/1/limits): granted 256, host has 1024 / 1024"};
  auto j = judge_resource(reached("resource.fd_exhaust"),
                          stopped("resource.fd_exhaust", "EMFILE", "fds_opened", 253),
                          "resource.fd_exhaust", e);
  EXPECT_EQ(j.verdict, Verdict::kExposed) << j.why;
}

// --- persist.git_hooks: a vector inside the workspace is a warning ---

ProbeReport plant(const std::string& hook, const std::string& config) {
  ProbeReport r = reached("persist.plant");
  r.evidence = {{"planted",
                 {{"git_hook", {{"path", "/workspace/.git/hooks/post-checkout"}, {"write", hook}}},
                  {"git_config", {{"path", "/workspace/.git/config"}, {"write", config}}},
                  {"workspace", {{"path", "/workspace/.sandgate-persist-x"}, {"write", "ok"}}}}}};
  return r;
}

TEST(JudgeGitPersistence, WrittenHooksAreAWarningNamingTheFiles) {
  auto j = judge_git_persistence(plant("ok", "ok"), "");
  EXPECT_EQ(j.id, "persist.git_hooks");
  EXPECT_EQ(j.verdict, Verdict::kWarning);
  EXPECT_NE(j.why.find(".git/hooks/post-checkout"), std::string::npos) << j.why;
  EXPECT_NE(j.why.find(".git/config"), std::string::npos) << j.why;
  EXPECT_EQ(j.to_json()["verdict"], "warning");
  // One of the two is enough.
  EXPECT_EQ(judge_git_persistence(plant("EACCES", "ok"), "").verdict, Verdict::kWarning);
  // Not exposed: it neither fails the run nor counts as one.
  auto t = tally({j});
  EXPECT_EQ(t.warning, 1);
  EXPECT_EQ(t.exposed, 0);
}
TEST(JudgeGitPersistence, BothRefusedIsBlockedAndNoReportInconclusive) {
  auto j = judge_git_persistence(plant("EROFS", "EROFS"), "");
  EXPECT_EQ(j.verdict, Verdict::kBlocked);
  EXPECT_EQ(j.layer, Layer::kMount);
  EXPECT_EQ(judge_git_persistence(plant("EACCES", "EACCES"), "").layer, Layer::kPermissions);
  EXPECT_EQ(judge_git_persistence(std::nullopt, "killed").verdict, Verdict::kInconclusive);
  ProbeReport empty = reached("persist.plant");
  EXPECT_EQ(judge_git_persistence(empty, "").verdict, Verdict::kInconclusive);
}

TEST(JudgeResource, BaselineThatDidNotReachIsInconclusive) {
  auto j = judge_resource(report("resource.memory", ProbeResult::kError), std::nullopt,
                          "resource.memory", ended("memory_limit"));
  EXPECT_EQ(j.verdict, Verdict::kInconclusive);
}

// --- Host-only checks, serialisation, tally ---

TEST(JudgeHostCheck, LeftoversAreExposedAndNoneIsBlocked) {
  HostEvidence host;
  host.leftover_cgroups = {"/sys/fs/cgroup/memory/sg/default/r1"};
  auto bad = judge_host_check("persist.after_destroy", "persist", "look on the host", host,
                              Layer::kNamespace, "nothing left");
  EXPECT_EQ(bad.verdict, Verdict::kExposed);
  auto good = judge_host_check("persist.after_destroy", "persist", "look on the host", {},
                               Layer::kNamespace, "nothing left");
  EXPECT_EQ(good.verdict, Verdict::kBlocked);
  EXPECT_EQ(good.layer, Layer::kNamespace);
}
TEST(JudgeJson, LayerOnlyWhenBlockedAndReportsIncluded) {
  auto blocked = judge(report("proc.bpf", ProbeResult::kDenied, "EPERM", "bpf(x)"), Witness::kSelf);
  auto j = blocked.to_json();
  EXPECT_EQ(j["verdict"], "blocked");
  EXPECT_EQ(j["layer"], "seccomp");
  EXPECT_EQ(j["sandbox"]["errno"], "EPERM");
  EXPECT_EQ(j["baseline"]["result"], "reached");
  auto exposed = judge(reached("proc.bpf"), Witness::kSelf).to_json();
  EXPECT_FALSE(exposed.contains("layer"));
}
TEST(JudgeTally, Counts) {
  std::vector<Judgement> js = {judge(reached("proc.bpf"), Witness::kSelf),
                               judge(report("proc.bpf", ProbeResult::kDenied, "EPERM"), Witness::kSelf),
                               judge(report("proc.bpf", ProbeResult::kError), Witness::kSelf)};
  auto t = tally(js);
  EXPECT_EQ(t.exposed, 1);
  EXPECT_EQ(t.blocked, 1);
  EXPECT_EQ(t.inconclusive, 1);
}

// --- Disclosure (Witness::kHostView): the host's own copy decides ---

TEST(JudgeHostView, TheHostsOwnBytesAreExposed) {
  HostEvidence host;
  host.disclosed = {"/proc/cmdline (the same bytes: digest 0123)"};
  auto j = judge(reached("disclosure.proc_cmdline"), Witness::kHostView, host);
  EXPECT_EQ(j.verdict, Verdict::kExposed);
  EXPECT_NE(j.why.find("the host's own /proc/cmdline"), std::string::npos) << j.why;
}
TEST(JudgeHostView, AViewOfItsOwnIsBlockedByTheMount) {  // the negative twin
  auto j = judge(reached("disclosure.boot_id"), Witness::kHostView);
  EXPECT_EQ(j.verdict, Verdict::kBlocked);
  EXPECT_EQ(j.layer, Layer::kMount);
  EXPECT_NE(j.why.find("a view of its own"), std::string::npos) << j.why;
  auto masked = judge(report("disclosure.proc_cmdline", ProbeResult::kNotFound, "ENOENT"),
                      Witness::kHostView);
  EXPECT_EQ(masked.verdict, Verdict::kBlocked);
  EXPECT_EQ(masked.layer, Layer::kMount);
}
// With a kernel of its own the run read that kernel's boot id, sysinfo and files: the kernel's
// doing, not a mount's or the filter's. The host's own bytes are exposed all the same.
TEST(JudgeHostView, AKernelOfItsOwnReadsItsOwnKernels) {
  ProviderFacts vm;
  vm.capabilities = {Capability::kKernelSeparate};
  for (const char* id : {"disclosure.boot_id", "disclosure.sysinfo"}) {
    auto j = judge(reached(id), Witness::kHostView, {}, vm);
    EXPECT_EQ(j.verdict, Verdict::kBlocked) << id;
    EXPECT_EQ(j.layer, Layer::kKernel) << id;
    EXPECT_NE(j.why.find("its own kernel's, not the host's"), std::string::npos) << j.why;
  }
  HostEvidence host;
  host.disclosed = {"/proc/sys/kernel/random/boot_id (the same bytes: digest 0123)"};
  EXPECT_EQ(judge(reached("disclosure.boot_id"), Witness::kHostView, host, vm).verdict,
            Verdict::kExposed);
}

// sysinfo(2)'s own answer comes from the filter's listener, not a mount (issue 16); the host's
// total seen inside is exposed as any disclosure is.
TEST(JudgeHostView, SysinfosOwnAnswerIsBlockedByTheFilter) {
  auto own = judge(reached("disclosure.sysinfo"), Witness::kHostView);
  EXPECT_EQ(own.verdict, Verdict::kBlocked);
  EXPECT_EQ(own.layer, Layer::kSeccomp);
  HostEvidence host;
  host.disclosed = {"sysinfo(2) totalram 24576000 kB: the host's MemTotal, not the run's grant"};
  auto hosts = judge(reached("disclosure.sysinfo"), Witness::kHostView, host);
  EXPECT_EQ(hosts.verdict, Verdict::kExposed);
  EXPECT_NE(hosts.why.find("the host's MemTotal"), std::string::npos) << hosts.why;
}

}  // namespace
}  // namespace sandgate::probes
