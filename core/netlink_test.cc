// The rtnetlink client against the real kernel, in a throwaway network namespace of its own.
#include "core/netlink.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <sched.h>
#include <sys/socket.h>

#include <algorithm>
#include <thread>

#include "tests/support/privileged.h"

namespace sandgate {
namespace {

// A new network namespace held only by the returned fd (no mount, nothing to clean up).
UniqueFd throwaway_netns() {
  UniqueFd fd;
  std::thread t([&] {
    if (::unshare(CLONE_NEWNET) == 0)
      fd = UniqueFd(::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
  });
  t.join();
  return fd;
}

TEST(ParseAddress, FamiliesAndErrors) {
  auto v4 = parse_address("169.254.169.254");
  ASSERT_TRUE(v4.ok());
  EXPECT_EQ(v4->first, AF_INET);
  EXPECT_EQ(v4->second, std::string("\xa9\xfe\xa9\xfe", 4));
  auto v6 = parse_address("fd00:ec2::254");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->first, AF_INET6);
  EXPECT_EQ(v6->second.size(), 16u);
  EXPECT_FALSE(parse_address("metadata.google.internal").ok());
}

TEST(Netlink, ConfiguresAndReadsAFreshNamespace) {
  SANDGATE_REQUIRE_ROOT();
  UniqueFd ns = throwaway_netns();
  ASSERT_TRUE(ns.valid());
  auto nl = Netlink::open_in(ns.get());
  ASSERT_TRUE(nl.ok()) << nl.error().message();
  auto links = nl->links();
  ASSERT_TRUE(links.ok()) << links.error().message();
  ASSERT_EQ(links->size(), 1u);
  EXPECT_EQ((*links)[0].name, "lo");
  EXPECT_FALSE((*links)[0].flags & IFF_UP);
  int lo = (*links)[0].index;

  ASSERT_TRUE(nl->set_link_up(lo).ok());
  ASSERT_TRUE(nl->add_address(lo, "203.0.113.77", 32).ok());
  ASSERT_TRUE(nl->add_address(lo, "fd00:ec2::77", 128).ok());
  auto again = nl->add_address(lo, "203.0.113.77", 32);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().err, EEXIST);
  EXPECT_NE(again.error().message().find("add address 203.0.113.77/32"), std::string::npos);

  // IPv6 installs the local route a moment after the address.
  ASSERT_TRUE(nl->await_local("fd00:ec2::77", std::chrono::seconds(2)).ok());
  ASSERT_TRUE(nl->await_local("203.0.113.77", std::chrono::seconds(2)).ok());
  EXPECT_FALSE(nl->await_local("203.0.113.78", std::chrono::milliseconds(20)).ok());
  links = nl->links();
  ASSERT_TRUE(links.ok());
  EXPECT_TRUE((*links)[0].flags & IFF_UP);
  auto addrs = nl->addresses();
  ASSERT_TRUE(addrs.ok());
  auto has = [&](const std::string& a, int prefix) {
    return std::any_of(addrs->begin(), addrs->end(), [&](const AddressInfo& i) {
      return i.address == a && i.prefix_len == prefix && i.index == lo;
    });
  };
  EXPECT_TRUE(has("127.0.0.1", 8));
  EXPECT_TRUE(has("203.0.113.77", 32));
  EXPECT_TRUE(has("fd00:ec2::77", 128));

  // The address is local; nothing else is reachable (lookups only: nothing is sent).
  auto local = nl->route_get("203.0.113.77");
  ASSERT_TRUE(local.ok()) << local.error().message();
  EXPECT_EQ(local->type, RTN_LOCAL);
  EXPECT_EQ(local->oif, lo);
  auto local6 = nl->route_get("fd00:ec2::77");
  ASSERT_TRUE(local6.ok()) << local6.error().message();
  EXPECT_EQ(local6->type, RTN_LOCAL);
  for (const char* outside : {"198.51.100.1", "2001:db8::1"}) {
    auto r = nl->route_get(outside);
    ASSERT_FALSE(r.ok()) << outside;
    EXPECT_EQ(r.error().err, ENETUNREACH) << r.error().message();
  }
  auto routes = nl->routes();
  ASSERT_TRUE(routes.ok());
  EXPECT_TRUE(std::any_of(routes->begin(), routes->end(), [&](const RouteInfo& r) {
    return r.table == RT_TABLE_LOCAL && r.type == RTN_LOCAL && r.dst == "203.0.113.77" &&
           r.dst_len == 32;
  }));
  for (const auto& r : *routes) EXPECT_NE(r.dst_len, 0) << "a default route in a fresh namespace";
}

TEST(Netlink, TheHostHasADefaultRouteThisClientSees) {
  // The positive twin of the lab's "no default route" check: the reader does see one where
  // there is one (this machine's), so its absence in the lab means something.
  SANDGATE_REQUIRE_ROOT();
  auto nl = Netlink::open();
  ASSERT_TRUE(nl.ok());
  auto routes = nl->routes();
  ASSERT_TRUE(routes.ok());
  bool default_route = std::any_of(routes->begin(), routes->end(), [](const RouteInfo& r) {
    return r.dst_len == 0 && r.type == RTN_UNICAST && r.table == RT_TABLE_MAIN;
  });
  SANDGATE_REQUIRE(default_route, "this host has no default route to compare with");
  auto r = nl->route_get("198.51.100.1");
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->type, RTN_UNICAST);
}

TEST(Netlink, VethPairJoinsTwoNamespacesWithADefaultRoute) {
  SANDGATE_REQUIRE_ROOT();
  UniqueFd a = throwaway_netns(), b = throwaway_netns();
  ASSERT_TRUE(a.valid() && b.valid());
  auto nla = Netlink::open_in(a.get());
  auto nlb = Netlink::open_in(b.get());
  ASSERT_TRUE(nla.ok() && nlb.ok());
  ASSERT_TRUE(nla->add_veth("sgtest-up", "eth0", b.get()).ok());
  auto up = nla->link_index("sgtest-up");
  auto down = nlb->link_index("eth0");
  ASSERT_TRUE(up.ok()) << up.error().message();
  ASSERT_TRUE(down.ok()) << down.error().message() << ": the peer is not in the other namespace";
  EXPECT_EQ(nla->link_index("eth0").error().err, ENODEV);
  auto again = nla->add_veth("sgtest-up", "eth1", b.get());
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().err, EEXIST);

  ASSERT_TRUE(nla->add_address(*up, "198.18.0.1", 30).ok());
  ASSERT_TRUE(nla->set_link_up(*up).ok());
  ASSERT_TRUE(nlb->add_address(*down, "198.18.0.2", 30).ok());
  ASSERT_TRUE(nlb->set_link_up(*down).ok());
  // Before the route: only the /30 is reachable from b.
  EXPECT_EQ(nlb->route_get("203.0.113.20").error().err, ENETUNREACH);
  auto routed = nlb->add_default_route("198.18.0.1");
  ASSERT_TRUE(routed.ok()) << routed.error().message();
  auto r = nlb->route_get("203.0.113.20");
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->oif, *down);
  EXPECT_EQ(r->gateway, "198.18.0.1");
  EXPECT_FALSE(nlb->add_default_route("2001:db8::1").ok());
  EXPECT_FALSE(nla->add_veth("a-name-longer-than-15", "x", b.get()).ok());
}

}  // namespace
}  // namespace sandgate
