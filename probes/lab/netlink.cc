#include "probes/lab/netlink.h"

#include <arpa/inet.h>
#include <linux/if_addr.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <thread>

namespace sandgate::probes::lab {
namespace {

// One netlink request: header, fixed body, attributes, each padded as the kernel expects
// (NLMSG_ALIGN / RTA_ALIGN, netlink(7), rtnetlink(7)).
class Request {
 public:
  template <typename Body>
  Request(uint16_t type, uint16_t flags, const Body& body) {
    struct nlmsghdr h = {};
    h.nlmsg_type = type;
    h.nlmsg_flags = flags;
    append(&h, sizeof h, NLMSG_HDRLEN);
    append(&body, sizeof body, NLMSG_ALIGN(sizeof body));
  }
  void attribute(uint16_t type, const void* data, size_t len) {
    struct rtattr a = {};
    a.rta_type = type;
    a.rta_len = static_cast<unsigned short>(RTA_LENGTH(len));
    append(&a, sizeof a, RTA_LENGTH(0));
    append(data, len, RTA_ALIGN(len));
  }
  std::string take() && {
    auto* h = reinterpret_cast<struct nlmsghdr*>(buf_.data());
    h->nlmsg_len = static_cast<uint32_t>(buf_.size());
    return std::move(buf_);
  }

 private:
  void append(const void* data, size_t len, size_t padded) {
    buf_.append(static_cast<const char*>(data), len);
    buf_.append(padded - len, '\0');
  }
  std::string buf_;
};

// Attributes following a fixed header of `fixed` bytes in a message payload.
template <typename F>
void for_each_attribute(const std::string& payload, size_t fixed, F&& f) {
  if (payload.size() < NLMSG_ALIGN(fixed)) return;
  auto* rta = reinterpret_cast<const struct rtattr*>(payload.data() + NLMSG_ALIGN(fixed));
  int len = static_cast<int>(payload.size() - NLMSG_ALIGN(fixed));
  for (; RTA_OK(rta, len); rta = RTA_NEXT(rta, len))
    f(rta->rta_type, RTA_DATA(rta), RTA_PAYLOAD(rta));
}

std::string address_text(int family, const void* data, size_t len) {
  char text[INET6_ADDRSTRLEN] = {};
  if ((family == AF_INET && len == 4) || (family == AF_INET6 && len == 16))
    if (::inet_ntop(family, data, text, sizeof text)) return text;
  return {};
}

template <typename T>
T fixed_header(const std::string& payload) {
  T t = {};
  std::memcpy(&t, payload.data(), std::min(sizeof t, payload.size()));
  return t;
}

RouteInfo parse_route(const std::string& payload) {
  auto rtm = fixed_header<struct rtmsg>(payload);
  RouteInfo r;
  r.family = rtm.rtm_family;
  r.table = rtm.rtm_table;
  r.type = rtm.rtm_type;
  r.dst_len = rtm.rtm_dst_len;
  for_each_attribute(payload, sizeof(struct rtmsg), [&](int type, const void* data, size_t len) {
    if (type == RTA_DST) r.dst = address_text(r.family, data, len);
    else if (type == RTA_GATEWAY) r.gateway = address_text(r.family, data, len);
    else if (type == RTA_OIF && len >= sizeof(int)) std::memcpy(&r.oif, data, sizeof(int));
    else if (type == RTA_TABLE && len >= sizeof(uint32_t)) std::memcpy(&r.table, data, sizeof(uint32_t));
    else if (type == RTA_MULTIPATH) r.multipath = true;
  });
  return r;
}

}  // namespace

Result<UniqueFd> socket_in_netns(int netns_fd, int domain, int type, int protocol) {
  Result<UniqueFd> out = logic_error("socket in namespace", "thread did not run");
  // The thread ends right after: its namespace change dies with it.
  std::thread t([&] {
    if (::setns(netns_fd, CLONE_NEWNET) != 0) {
      out = sys_error("setns net");
      return;
    }
    int fd = ::socket(domain, type | SOCK_CLOEXEC, protocol);
    if (fd < 0) out = sys_error("socket");
    else out = UniqueFd(fd);
  });
  t.join();
  return out;
}

Result<std::pair<int, std::string>> parse_address(const std::string& text) {
  unsigned char buf[16];
  if (::inet_pton(AF_INET, text.c_str(), buf) == 1)
    return std::make_pair(AF_INET, std::string(reinterpret_cast<char*>(buf), 4));
  if (::inet_pton(AF_INET6, text.c_str(), buf) == 1)
    return std::make_pair(AF_INET6, std::string(reinterpret_cast<char*>(buf), 16));
  return logic_error("parse address", "not an IPv4 or IPv6 address", text);
}

Result<Netlink> Netlink::from_socket(UniqueFd fd) {
  struct sockaddr_nl local = {};
  local.nl_family = AF_NETLINK;
  if (::bind(fd.get(), reinterpret_cast<struct sockaddr*>(&local), sizeof local) != 0)
    return sys_error("bind netlink socket");
  return Netlink(std::move(fd));
}

Result<Netlink> Netlink::open() {
  int fd = ::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
  if (fd < 0) return sys_error("socket NETLINK_ROUTE");
  return from_socket(UniqueFd(fd));
}

Result<Netlink> Netlink::open_in(int netns_fd) {
  SG_ASSIGN_OR_RETURN(UniqueFd fd, socket_in_netns(netns_fd, AF_NETLINK, SOCK_RAW, NETLINK_ROUTE));
  return from_socket(std::move(fd));
}

Result<std::vector<std::pair<int, std::string>>> Netlink::transact(std::string request,
                                                                   const std::string& step) {
  auto* h = reinterpret_cast<struct nlmsghdr*>(request.data());
  h->nlmsg_seq = ++seq_;
  const bool dump = (h->nlmsg_flags & NLM_F_DUMP) == NLM_F_DUMP;
  const bool ack = h->nlmsg_flags & NLM_F_ACK;
  struct sockaddr_nl kernel = {};
  kernel.nl_family = AF_NETLINK;
  if (::sendto(fd_.get(), request.data(), request.size(), 0,
               reinterpret_cast<struct sockaddr*>(&kernel), sizeof kernel) < 0)
    return sys_error("send netlink request", step);

  std::vector<std::pair<int, std::string>> replies;
  std::string buf(1 << 16, '\0');
  for (;;) {
    ssize_t n = ::recv(fd_.get(), buf.data(), buf.size(), 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return sys_error("receive netlink reply", step);
    }
    int len = static_cast<int>(n);
    for (auto* m = reinterpret_cast<struct nlmsghdr*>(buf.data()); NLMSG_OK(m, len); m = NLMSG_NEXT(m, len)) {
      if (m->nlmsg_seq != seq_) continue;  // a late answer to an earlier request
      if (m->nlmsg_type == NLMSG_ERROR) {
        auto* e = static_cast<struct nlmsgerr*>(NLMSG_DATA(m));
        if (e->error != 0) return sys_error(-e->error, step);
        return replies;  // the ack
      }
      if (m->nlmsg_type == NLMSG_DONE) return replies;
      replies.emplace_back(m->nlmsg_type,
                           std::string(static_cast<char*>(NLMSG_DATA(m)), m->nlmsg_len - NLMSG_HDRLEN));
      if (!dump && !ack) return replies;  // a lookup: one answer
    }
  }
}

Result<std::vector<LinkInfo>> Netlink::links() {
  struct ifinfomsg body = {};
  SG_ASSIGN_OR_RETURN(auto replies, transact(Request(RTM_GETLINK, NLM_F_REQUEST | NLM_F_DUMP, body).take() ,
                                             "list links"));
  std::vector<LinkInfo> out;
  for (const auto& [type, payload] : replies) {
    if (type != RTM_NEWLINK) continue;
    auto ifi = fixed_header<struct ifinfomsg>(payload);
    LinkInfo l{ifi.ifi_index, "", ifi.ifi_flags};
    for_each_attribute(payload, sizeof(struct ifinfomsg), [&](int t, const void* data, size_t len) {
      if (t == IFLA_IFNAME) l.name.assign(static_cast<const char*>(data), strnlen(static_cast<const char*>(data), len));
    });
    out.push_back(std::move(l));
  }
  return out;
}

Result<std::vector<AddressInfo>> Netlink::addresses() {
  struct ifaddrmsg body = {};
  SG_ASSIGN_OR_RETURN(auto replies, transact(Request(RTM_GETADDR, NLM_F_REQUEST | NLM_F_DUMP, body).take(),
                                             "list addresses"));
  std::vector<AddressInfo> out;
  for (const auto& [type, payload] : replies) {
    if (type != RTM_NEWADDR) continue;
    auto ifa = fixed_header<struct ifaddrmsg>(payload);
    AddressInfo a{ifa.ifa_family, static_cast<int>(ifa.ifa_index), "", ifa.ifa_prefixlen};
    std::string local, address;
    for_each_attribute(payload, sizeof(struct ifaddrmsg), [&](int t, const void* data, size_t len) {
      if (t == IFA_LOCAL) local = address_text(a.family, data, len);
      else if (t == IFA_ADDRESS) address = address_text(a.family, data, len);
    });
    // IFA_LOCAL is the interface's own address; IFA_ADDRESS is the peer's on point-to-point links.
    a.address = local.empty() ? address : local;
    out.push_back(std::move(a));
  }
  return out;
}

Result<std::vector<RouteInfo>> Netlink::routes() {
  struct rtmsg body = {};
  body.rtm_family = AF_UNSPEC;
  SG_ASSIGN_OR_RETURN(auto replies, transact(Request(RTM_GETROUTE, NLM_F_REQUEST | NLM_F_DUMP, body).take(),
                                             "list routes"));
  std::vector<RouteInfo> out;
  for (const auto& [type, payload] : replies) {
    if (type != RTM_NEWROUTE) continue;
    RouteInfo r = parse_route(payload);
    if (r.family == AF_INET || r.family == AF_INET6) out.push_back(std::move(r));
  }
  return out;
}

Result<RouteInfo> Netlink::route_get(const std::string& address) {
  SG_ASSIGN_OR_RETURN(auto parsed, parse_address(address));
  struct rtmsg body = {};
  body.rtm_family = static_cast<unsigned char>(parsed.first);
  body.rtm_dst_len = static_cast<unsigned char>(parsed.second.size() * 8);
  Request req(RTM_GETROUTE, NLM_F_REQUEST, body);
  req.attribute(RTA_DST, parsed.second.data(), parsed.second.size());
  SG_ASSIGN_OR_RETURN(auto replies, transact(std::move(req).take(), "route lookup " + address));
  for (const auto& [type, payload] : replies) {
    if (type != RTM_NEWROUTE) continue;
    RouteInfo r = parse_route(payload);
    // IPv6 answers a miss with its null entry rather than an error.
    if (r.type == RTN_UNREACHABLE || r.type == RTN_BLACKHOLE || r.type == RTN_PROHIBIT)
      return sys_error(ENETUNREACH, "route lookup " + address);
    return r;
  }
  return logic_error("route lookup", "the kernel sent no route", address);
}

Status Netlink::await_local(const std::string& address, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto r = route_get(address);
    if (r.ok() && r->type == RTN_LOCAL) return {};
    if (std::chrono::steady_clock::now() >= deadline)
      return logic_error("wait for a local route", "the kernel does not route it as local after " +
                                                      std::to_string(timeout.count()) + " ms", address);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

Status Netlink::set_link_up(int index) {
  struct ifinfomsg body = {};
  body.ifi_family = AF_UNSPEC;
  body.ifi_index = index;
  body.ifi_flags = IFF_UP;
  body.ifi_change = IFF_UP;
  SG_TRY(transact(Request(RTM_NEWLINK, NLM_F_REQUEST | NLM_F_ACK, body).take(),
                  "bring up link " + std::to_string(index)));
  return {};
}

Status Netlink::add_address(int index, const std::string& address, int prefix_len) {
  SG_ASSIGN_OR_RETURN(auto parsed, parse_address(address));
  struct ifaddrmsg body = {};
  body.ifa_family = static_cast<unsigned char>(parsed.first);
  body.ifa_prefixlen = static_cast<unsigned char>(prefix_len);
  body.ifa_flags = parsed.first == AF_INET6 ? IFA_F_NODAD : 0;
  body.ifa_scope = RT_SCOPE_UNIVERSE;
  body.ifa_index = static_cast<unsigned>(index);
  Request req(RTM_NEWADDR, NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL, body);
  req.attribute(IFA_LOCAL, parsed.second.data(), parsed.second.size());
  req.attribute(IFA_ADDRESS, parsed.second.data(), parsed.second.size());
  SG_TRY(transact(std::move(req).take(), "add address " + address + "/" + std::to_string(prefix_len)));
  return {};
}

}  // namespace sandgate::probes::lab
