#include "core/netlink.h"

#include <arpa/inet.h>
#include <libmnl/libmnl.h>
#include <linux/if_addr.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>
#include <net/if.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <thread>

namespace sandgate {
namespace {

std::string address_text(int family, const void* data, size_t len) {
  char text[INET6_ADDRSTRLEN] = {};
  if ((family == AF_INET && len == 4) || (family == AF_INET6 && len == 16))
    if (::inet_ntop(family, data, text, sizeof text)) return text;
  return {};
}

// The fixed header (ifinfomsg, ifaddrmsg, rtmsg) after a reply's netlink header.
template <typename T>
T fixed_header(const Netlink::Reply& reply) {
  T t = {};
  const auto* nlh = reinterpret_cast<const struct nlmsghdr*>(reply.second.data());
  std::memcpy(&t, mnl_nlmsg_get_payload(nlh), std::min(sizeof t, mnl_nlmsg_get_payload_len(nlh)));
  return t;
}

// Calls f(type, data, len) for each attribute after a fixed header of `fixed` bytes.
template <typename F>
void for_each_attribute(const Netlink::Reply& reply, size_t fixed, F&& f) {
  const auto* nlh = reinterpret_cast<const struct nlmsghdr*>(reply.second.data());
  if (mnl_nlmsg_get_payload_len(nlh) < fixed) return;
  // mnl_attr_for_each spelled out: the macro's void* conversions are C, not C++.
  auto* attr = static_cast<const struct nlattr*>(mnl_nlmsg_get_payload_offset(nlh, fixed));
  auto* tail = static_cast<const char*>(mnl_nlmsg_get_payload_tail(nlh));
  while (mnl_attr_ok(attr, static_cast<int>(tail - reinterpret_cast<const char*>(attr)))) {
    f(mnl_attr_get_type(attr), mnl_attr_get_payload(attr), mnl_attr_get_payload_len(attr));
    attr = mnl_attr_next(attr);
  }
}

RouteInfo parse_route(const Netlink::Reply& reply) {
  auto rtm = fixed_header<struct rtmsg>(reply);
  RouteInfo r;
  r.family = rtm.rtm_family;
  r.table = rtm.rtm_table;
  r.type = rtm.rtm_type;
  r.dst_len = rtm.rtm_dst_len;
  for_each_attribute(reply, sizeof(struct rtmsg), [&](int type, const void* data, size_t len) {
    if (type == RTA_DST)
      r.dst = address_text(r.family, data, len);
    else if (type == RTA_GATEWAY)
      r.gateway = address_text(r.family, data, len);
    else if (type == RTA_OIF && len >= sizeof(int))
      std::memcpy(&r.oif, data, sizeof(int));
    else if (type == RTA_TABLE && len >= sizeof(uint32_t))
      std::memcpy(&r.table, data, sizeof(uint32_t));
    else if (type == RTA_MULTIPATH)
      r.multipath = true;
  });
  return r;
}

// A request in `buf`: the netlink header and its fixed body (zeroed), for the caller to fill.
template <typename Body>
std::pair<struct nlmsghdr*, Body*> request(char* buf, uint16_t type, uint16_t flags) {
  struct nlmsghdr* nlh = mnl_nlmsg_put_header(buf);
  nlh->nlmsg_type = type;
  nlh->nlmsg_flags = flags;
  auto* body = static_cast<Body*>(mnl_nlmsg_put_extra_header(nlh, sizeof(Body)));
  return {nlh, body};
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
    if (fd < 0)
      out = sys_error("socket");
    else
      out = UniqueFd(fd);
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

Result<Netlink> Netlink::from_fd(UniqueFd fd) {
  struct mnl_socket* nl = mnl_socket_fdopen(fd.get());
  if (!nl) return sys_error("mnl_socket_fdopen");
  fd.release();  // the mnl socket owns it now
  Netlink out(nl);
  if (mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID) < 0) return sys_error("bind netlink socket");
  return out;
}

Result<Netlink> Netlink::open() {
  int fd = ::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
  if (fd < 0) return sys_error("socket NETLINK_ROUTE");
  return from_fd(UniqueFd(fd));
}

Result<Netlink> Netlink::open_in(int netns_fd) {
  SG_ASSIGN_OR_RETURN(UniqueFd fd, socket_in_netns(netns_fd, AF_NETLINK, SOCK_RAW, NETLINK_ROUTE));
  return from_fd(std::move(fd));
}

Netlink::Netlink(Netlink&& o) noexcept : nl_(o.nl_), seq_(o.seq_) { o.nl_ = nullptr; }

Netlink& Netlink::operator=(Netlink&& o) noexcept {
  if (this != &o) {
    if (nl_) mnl_socket_close(nl_);
    nl_ = o.nl_;
    seq_ = o.seq_;
    o.nl_ = nullptr;
  }
  return *this;
}

Netlink::~Netlink() {
  if (nl_) mnl_socket_close(nl_);
}

Result<std::vector<Netlink::Reply>> Netlink::transact(struct nlmsghdr* request,
                                                      const std::string& step) {
  request->nlmsg_seq = ++seq_;
  const bool dump = (request->nlmsg_flags & NLM_F_DUMP) == NLM_F_DUMP;
  const bool ack = request->nlmsg_flags & NLM_F_ACK;
  if (mnl_socket_sendto(nl_, request, request->nlmsg_len) < 0)
    return sys_error("send netlink request", step);

  // mnl_cb_run checks the sequence number and port id, stops at NLMSG_DONE and turns a
  // negative ack into -1 with errno set; a positive ack (error 0) ends it too.
  std::vector<Reply> replies;
  auto collect = [](const struct nlmsghdr* nlh, void* data) -> int {
    auto* out = static_cast<std::vector<Reply>*>(data);
    out->emplace_back(nlh->nlmsg_type,
                      std::string(reinterpret_cast<const char*>(nlh), nlh->nlmsg_len));
    return MNL_CB_OK;
  };
  std::string buf(MNL_SOCKET_BUFFER_SIZE, '\0');
  const unsigned port = mnl_socket_get_portid(nl_);
  for (;;) {
    ssize_t n = mnl_socket_recvfrom(nl_, buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return sys_error("receive netlink reply", step);
    }
    size_t before = replies.size();
    int r = mnl_cb_run(buf.data(), static_cast<size_t>(n), seq_, port, collect, &replies);
    if (r < 0) return sys_error(errno, step);
    if (r == MNL_CB_STOP) return replies;                          // the end of a dump, or the ack
    if (!dump && !ack && replies.size() > before) return replies;  // a lookup: one answer
  }
}

Result<std::vector<LinkInfo>> Netlink::links() {
  char buf[MNL_SOCKET_BUFFER_SIZE];
  auto [nlh, body] = request<struct ifinfomsg>(buf, RTM_GETLINK, NLM_F_REQUEST | NLM_F_DUMP);
  (void)body;
  SG_ASSIGN_OR_RETURN(auto replies, transact(nlh, "list links"));
  std::vector<LinkInfo> out;
  for (const auto& reply : replies) {
    if (reply.first != RTM_NEWLINK) continue;
    auto ifi = fixed_header<struct ifinfomsg>(reply);
    LinkInfo l{ifi.ifi_index, "", ifi.ifi_flags};
    for_each_attribute(reply, sizeof(struct ifinfomsg), [&](int t, const void* data, size_t len) {
      if (t == IFLA_IFNAME)
        l.name.assign(static_cast<const char*>(data), strnlen(static_cast<const char*>(data), len));
    });
    out.push_back(std::move(l));
  }
  return out;
}

Result<std::vector<AddressInfo>> Netlink::addresses() {
  char buf[MNL_SOCKET_BUFFER_SIZE];
  auto [nlh, body] = request<struct ifaddrmsg>(buf, RTM_GETADDR, NLM_F_REQUEST | NLM_F_DUMP);
  (void)body;
  SG_ASSIGN_OR_RETURN(auto replies, transact(nlh, "list addresses"));
  std::vector<AddressInfo> out;
  for (const auto& reply : replies) {
    if (reply.first != RTM_NEWADDR) continue;
    auto ifa = fixed_header<struct ifaddrmsg>(reply);
    AddressInfo a{ifa.ifa_family, static_cast<int>(ifa.ifa_index), "", ifa.ifa_prefixlen};
    std::string local, address;
    for_each_attribute(reply, sizeof(struct ifaddrmsg), [&](int t, const void* data, size_t len) {
      if (t == IFA_LOCAL)
        local = address_text(a.family, data, len);
      else if (t == IFA_ADDRESS)
        address = address_text(a.family, data, len);
    });
    // IFA_LOCAL is the interface's own address; IFA_ADDRESS is the peer's on point-to-point links.
    a.address = local.empty() ? address : local;
    out.push_back(std::move(a));
  }
  return out;
}

Result<std::vector<RouteInfo>> Netlink::routes() {
  char buf[MNL_SOCKET_BUFFER_SIZE];
  auto [nlh, body] = request<struct rtmsg>(buf, RTM_GETROUTE, NLM_F_REQUEST | NLM_F_DUMP);
  body->rtm_family = AF_UNSPEC;
  SG_ASSIGN_OR_RETURN(auto replies, transact(nlh, "list routes"));
  std::vector<RouteInfo> out;
  for (const auto& reply : replies) {
    if (reply.first != RTM_NEWROUTE) continue;
    RouteInfo r = parse_route(reply);
    if (r.family == AF_INET || r.family == AF_INET6) out.push_back(std::move(r));
  }
  return out;
}

Result<RouteInfo> Netlink::route_get(const std::string& address) {
  SG_ASSIGN_OR_RETURN(auto parsed, parse_address(address));
  char buf[MNL_SOCKET_BUFFER_SIZE];
  auto [nlh, body] = request<struct rtmsg>(buf, RTM_GETROUTE, NLM_F_REQUEST);
  body->rtm_family = static_cast<unsigned char>(parsed.first);
  body->rtm_dst_len = static_cast<unsigned char>(parsed.second.size() * 8);
  mnl_attr_put(nlh, RTA_DST, parsed.second.size(), parsed.second.data());
  SG_ASSIGN_OR_RETURN(auto replies, transact(nlh, "route lookup " + address));
  for (const auto& reply : replies) {
    if (reply.first != RTM_NEWROUTE) continue;
    RouteInfo r = parse_route(reply);
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
      return logic_error(
          "wait for a local route",
          "the kernel does not route it as local after " + std::to_string(timeout.count()) + " ms",
          address);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

Status Netlink::set_link_up(int index) {
  char buf[MNL_SOCKET_BUFFER_SIZE];
  auto [nlh, body] = request<struct ifinfomsg>(buf, RTM_NEWLINK, NLM_F_REQUEST | NLM_F_ACK);
  body->ifi_family = AF_UNSPEC;
  body->ifi_index = index;
  body->ifi_flags = IFF_UP;
  body->ifi_change = IFF_UP;
  SG_TRY(transact(nlh, "bring up link " + std::to_string(index)));
  return {};
}

Status Netlink::add_address(int index, const std::string& address, int prefix_len) {
  SG_ASSIGN_OR_RETURN(auto parsed, parse_address(address));
  char buf[MNL_SOCKET_BUFFER_SIZE];
  auto [nlh, body] = request<struct ifaddrmsg>(
      buf, RTM_NEWADDR, NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL);
  body->ifa_family = static_cast<unsigned char>(parsed.first);
  body->ifa_prefixlen = static_cast<unsigned char>(prefix_len);
  body->ifa_flags = parsed.first == AF_INET6 ? IFA_F_NODAD : 0;
  body->ifa_scope = RT_SCOPE_UNIVERSE;
  body->ifa_index = static_cast<unsigned>(index);
  mnl_attr_put(nlh, IFA_LOCAL, parsed.second.size(), parsed.second.data());
  mnl_attr_put(nlh, IFA_ADDRESS, parsed.second.size(), parsed.second.data());
  SG_TRY(transact(nlh, "add address " + address + "/" + std::to_string(prefix_len)));
  return {};
}

Result<int> Netlink::link_index(const std::string& name) {
  SG_ASSIGN_OR_RETURN(auto all, links());
  for (const auto& l : all)
    if (l.name == name) return l.index;
  return Error{ENODEV, "find link", name, "no such link in the namespace"};
}

Status Netlink::add_veth(const std::string& name, const std::string& peer, int peer_netns_fd) {
  if (name.empty() || name.size() >= IFNAMSIZ || peer.empty() || peer.size() >= IFNAMSIZ)
    return logic_error("add veth", "link names are 1-15 characters", name + "/" + peer);
  char buf[MNL_SOCKET_BUFFER_SIZE];
  auto [nlh, body] = request<struct ifinfomsg>(
      buf, RTM_NEWLINK, NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL);
  body->ifi_family = AF_UNSPEC;
  mnl_attr_put_strz(nlh, IFLA_IFNAME, name.c_str());
  struct nlattr* linkinfo = mnl_attr_nest_start(nlh, IFLA_LINKINFO);
  mnl_attr_put_strz(nlh, IFLA_INFO_KIND, "veth");
  struct nlattr* data = mnl_attr_nest_start(nlh, IFLA_INFO_DATA);
  // VETH_INFO_PEER carries a whole ifinfomsg, then the peer's own attributes.
  struct nlattr* peer_attr = mnl_attr_nest_start(nlh, VETH_INFO_PEER);
  auto* peer_info =
      static_cast<struct ifinfomsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(struct ifinfomsg)));
  peer_info->ifi_family = AF_UNSPEC;
  mnl_attr_put_strz(nlh, IFLA_IFNAME, peer.c_str());
  mnl_attr_put_u32(nlh, IFLA_NET_NS_FD, static_cast<uint32_t>(peer_netns_fd));
  mnl_attr_nest_end(nlh, peer_attr);
  mnl_attr_nest_end(nlh, data);
  mnl_attr_nest_end(nlh, linkinfo);
  SG_TRY(transact(nlh, "add veth " + name + " <-> " + peer));
  return {};
}

Status Netlink::add_default_route(const std::string& gateway) {
  SG_ASSIGN_OR_RETURN(auto gw, parse_address(gateway));
  if (gw.first != AF_INET) return logic_error("add default route", "IPv4 gateways only", gateway);
  char buf[MNL_SOCKET_BUFFER_SIZE];
  auto [nlh, body] = request<struct rtmsg>(buf, RTM_NEWROUTE,
                                           NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL);
  body->rtm_family = AF_INET;
  body->rtm_dst_len = 0;
  body->rtm_table = RT_TABLE_MAIN;
  body->rtm_protocol = RTPROT_STATIC;
  body->rtm_scope = RT_SCOPE_UNIVERSE;
  body->rtm_type = RTN_UNICAST;
  mnl_attr_put(nlh, RTA_GATEWAY, gw.second.size(), gw.second.data());
  SG_TRY(transact(nlh, "add default route via " + gateway));
  return {};
}

}  // namespace sandgate
