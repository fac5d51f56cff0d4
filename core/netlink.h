// A small rtnetlink client: what the lab needs to configure its namespace (bring loopback up,
// put the decoy addresses on it), what a run with an egress allowlist needs to be wired to its
// upstream (a veth pair, addresses, a default route), and to prove what a namespace can reach,
// by reading links,
// addresses and routes and asking the kernel's routing table (RTM_GETROUTE, `ip route get`),
// which sends no packet. Real kernel mechanisms, no dependency on the `ip` tool; message
// building, attribute parsing and the receive loop are libmnl's (netfilter.org, in Debian).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "core/fd.h"
#include "core/result.h"

struct mnl_socket;
struct nlmsghdr;

namespace sandgate {

struct LinkInfo {
  int index = 0;
  std::string name;
  unsigned flags = 0;  // IFF_*
};

struct AddressInfo {
  int family = 0;  // AF_INET, AF_INET6
  int index = 0;   // the link carrying it
  std::string address;
  int prefix_len = 0;
};

struct RouteInfo {
  int family = 0;
  unsigned table = 0;  // RT_TABLE_MAIN, RT_TABLE_LOCAL, ...
  int type = 0;        // RTN_UNICAST, RTN_LOCAL, RTN_BROADCAST, RTN_UNREACHABLE, ...
  std::string dst;     // empty with dst_len 0: the default route
  int dst_len = 0;
  int oif = 0;          // output link; 0 when none (or a multipath route)
  std::string gateway;  // empty when directly connected
  bool multipath = false;
};

// socket(2) in the network namespace behind `netns_fd`, made on a short-lived thread that
// entered it: the calling thread never changes namespace. A socket belongs to the namespace
// it was made in for its whole life.
Result<UniqueFd> socket_in_netns(int netns_fd, int domain, int type, int protocol);

// The IPv4/IPv6 address in `text` as bytes (4 or 16) and its family.
Result<std::pair<int, std::string>> parse_address(const std::string& text);

class Netlink {
 public:
  // A NETLINK_ROUTE socket in the calling thread's network namespace.
  static Result<Netlink> open();
  // One in the namespace behind netns_fd (socket_in_netns).
  static Result<Netlink> open_in(int netns_fd);
  Netlink(Netlink&& o) noexcept;
  Netlink& operator=(Netlink&& o) noexcept;
  ~Netlink();

  Result<std::vector<LinkInfo>> links();
  Result<std::vector<AddressInfo>> addresses();
  // Every route of every table, IPv4 and IPv6.
  Result<std::vector<RouteInfo>> routes();
  // The route the kernel would use for `address` (a FIB lookup; nothing is sent). No route is
  // an Error with err == ENETUNREACH (or EHOSTUNREACH).
  Result<RouteInfo> route_get(const std::string& address);

  // Waits (polling route_get) until the kernel routes `address` as local. IPv6 installs an
  // address's local route from a work item after the address itself is added, so right after
  // add_address a lookup may still take the prefix route instead.
  Status await_local(const std::string& address, std::chrono::milliseconds timeout);

  Status set_link_up(int index);
  // Adds address/prefix_len to link `index` (IPv6: no duplicate address detection).
  Status add_address(int index, const std::string& address, int prefix_len);
  // The index of the link called `name`; ENODEV when there is none.
  Result<int> link_index(const std::string& name);
  // A veth pair: `name` in this socket's namespace, `peer` moved at once into the namespace
  // behind peer_netns_fd (the pair exists in both from the start; when either namespace goes,
  // the kernel deletes both ends). Both down.
  Status add_veth(const std::string& name, const std::string& peer, int peer_netns_fd);
  // The default IPv4 route via `gateway` (which must be on a connected network of a link).
  Status add_default_route(const std::string& gateway);

  // One reply message of a request: its type and the whole message.
  using Reply = std::pair<int, std::string>;

 private:
  explicit Netlink(struct mnl_socket* nl) : nl_(nl) {}
  static Result<Netlink> from_fd(UniqueFd fd);
  // Sends the request in `buf` and collects every reply message until the ack, the end of a
  // dump, or the answer to a lookup; a negative ack becomes the Error.
  Result<std::vector<Reply>> transact(struct nlmsghdr* request, const std::string& step);
  struct mnl_socket* nl_ = nullptr;
  uint32_t seq_ = 0;
};

}  // namespace sandgate
