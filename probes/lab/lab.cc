#include "probes/lab/lab.h"

#include <fcntl.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <sched.h>
#include <sys/mount.h>
#include <unistd.h>

#include <algorithm>
#include <initializer_list>
#include <random>
#include <thread>

#include "core/files.h"
#include "core/log.h"
#include "probes/lab/decoys.h"
#include "probes/lab/lab_addresses.h"
#include "core/netlink.h"

namespace sandgate::probes::lab {
namespace {

// Addresses the lab must not be able to route to, asked of its routing table (a lookup, not a
// packet): TEST-NET-2 and the IPv6 documentation prefix, which no network here uses.
constexpr const char* kOutsideAddresses[] = {"198.51.100.1", "2001:db8::1"};

std::string random_token() {
  std::random_device rd;
  char hex[33];
  std::snprintf(hex, sizeof hex, "%08x%08x%08x%08x", rd(), rd(), rd(), rd());
  return std::string("sgcanary-") + hex;
}

// A fresh network namespace, bind-mounted at `path` (an empty file) so that it outlives the
// short-lived thread that made it; returns an fd on it. The calling thread stays where it is.
Result<UniqueFd> make_namespace(const std::string& path) {
  {
    SG_ASSIGN_OR_RETURN(UniqueFd file, open_fd(path, O_RDONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444));
  }
  Result<UniqueFd> out = logic_error("make the lab namespace", "thread did not run");
  std::thread t([&] {
    if (::unshare(CLONE_NEWNET) != 0) {
      out = sys_error("unshare CLONE_NEWNET");
      return;
    }
    if (::mount("/proc/thread-self/ns/net", path.c_str(), nullptr, MS_BIND, nullptr) != 0) {
      out = sys_error("bind-mount the lab namespace", path);
      return;
    }
    out = open_fd("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  });
  t.join();
  return out;
}

// No IPv6 on the lab's veth pair: with it, each end would make itself a link-local address and
// route (fe80::/64) and solicit routers across the pair. Written from a thread inside the lab,
// before the links come up: /proc/sys/net is the namespace of the task that opens it.
Status disable_ipv6(int netns_fd, std::initializer_list<const char*> links) {
  Status out;
  std::thread t([&] {
    auto guard = NetnsGuard::enter(netns_fd);
    if (!guard.ok()) {
      out = std::move(guard).error();
      return;
    }
    for (const char* link : links) {
      out = write_file(std::string("/proc/sys/net/ipv6/conf/") + link + "/disable_ipv6", "1");
      if (!out.ok()) return;
    }
  });
  t.join();
  return out;
}

// The veth pair, both ends in the lab (the peer is "moved" into the namespace it is made in),
// each up with its /32: a local address of the lab and nothing more, no prefix route.
Status add_lab_link(Netlink& nl, int netns_fd) {
  SG_TRY(nl.add_veth(kLabLink, kLabPeer, netns_fd));
  SG_TRY(disable_ipv6(netns_fd, {kLabLink, kLabPeer}));
  for (auto [name, address] :
       {std::pair{kLabLink, kLabLinkAddress}, std::pair{kLabPeer, kLabPeerAddress}}) {
    SG_ASSIGN_OR_RETURN(int index, nl.link_index(name));
    SG_TRY(nl.add_address(index, address, 32));
    SG_TRY(nl.set_link_up(index));
  }
  return {};
}

// Loopback up, every decoy address on it; the veth pair.
Status configure(int netns_fd) {
  SG_ASSIGN_OR_RETURN(Netlink nl, Netlink::open_in(netns_fd));
  SG_ASSIGN_OR_RETURN(auto links, nl.links());
  int lo = 0;
  for (const auto& l : links)
    if (l.name == "lo") lo = l.index;
  if (lo == 0) return logic_error("configure the lab", "no loopback link in the new namespace");
  SG_TRY(nl.set_link_up(lo));
  for (const char* v4 : {kMetadataV4, kProductionHost, kRegistryHost, kDnsServer})
    SG_TRY(nl.add_address(lo, v4, 32));
  SG_TRY(nl.add_address(lo, kMetadataV6, 128));
  SG_TRY(add_lab_link(nl, netns_fd));
  // Until then a connection to the address could take its prefix route instead of being local.
  for (const char* decoy : {kMetadataV4, kProductionHost, kRegistryHost, kDnsServer, kMetadataV6})
    SG_TRY(nl.await_local(decoy, std::chrono::seconds(2)));
  return {};
}

// The safety check before any decoy listens: the interfaces are loopback and the two ends of
// the lab's veth pair (made here, so both ends are in here), every route is without a gateway,
// a route on the pair is one of its own local addresses, there is no default route, and the
// routing table has no way to an outside address.
Status check_isolated(int netns_fd) {
  SG_ASSIGN_OR_RETURN(Netlink nl, Netlink::open_in(netns_fd));
  SG_ASSIGN_OR_RETURN(auto links, nl.links());
  int lo = 0;
  std::vector<int> pair;
  for (const auto& l : links) {
    if (l.name == "lo")
      lo = l.index;
    else if (l.name == kLabLink || l.name == kLabPeer)
      pair.push_back(l.index);
    else
      return logic_error("check the lab", "the lab has an interface it did not make", l.name);
  }
  if (lo == 0 || pair.size() != 2)
    return logic_error("check the lab", "the lab lacks loopback or an end of its veth pair");
  SG_ASSIGN_OR_RETURN(auto routes, nl.routes());
  for (const auto& r : routes) {
    bool on_pair = std::find(pair.begin(), pair.end(), r.oif) != pair.end();
    if (r.dst_len == 0 || !r.gateway.empty() || r.multipath ||
        (r.oif != 0 && r.oif != lo && !(on_pair && r.type == RTN_LOCAL)))
      return logic_error("check the lab", "a route could leave the lab", r.dst + "/" + std::to_string(r.dst_len));
  }
  for (const char* outside : kOutsideAddresses) {
    auto route = nl.route_get(outside);
    if (route.ok())
      return logic_error("check the lab", "the lab's routing table reaches an outside address", outside);
    if (route.error().err != ENETUNREACH && route.error().err != EHOSTUNREACH)
      return std::move(route).error();
  }
  return {};
}

}  // namespace

Result<std::unique_ptr<Lab>> Lab::create(const HostPaths& paths, LabOptions options) {
  std::unique_ptr<Lab> lab(new Lab());
  lab->paths_ = paths;
  lab->id_ = "lab-" + new_run_id();
  lab->netns_path_ = paths.state_dir + "/netns/" + lab->id_;
  lab->canary_token_ = options.canary_token.empty() ? random_token() : options.canary_token;
  // Recorded before it exists: after a crash `sandgate gc` unmounts and removes it.
  SG_ASSIGN_OR_RETURN(RunState state,
                      RunState::create(paths, lab->id_, "lab",
                                       {{Resource::Kind::kNetns, lab->netns_path_}}));
  lab->state_.emplace(std::move(state));
  auto fail = [&](Error e) -> Error {
    (void)lab->destroy();
    e.context.push_back("creating the network lab");
    return e;
  };
  if (auto s = make_dirs(paths.state_dir + "/netns", 0711); !s.ok()) return fail(std::move(s).error());
  auto ns = make_namespace(lab->netns_path_);
  if (!ns.ok()) return fail(std::move(ns).error());
  lab->netns_ = std::move(ns).value();
  if (auto s = configure(lab->netns_.get()); !s.ok()) return fail(std::move(s).error());
  if (auto s = check_isolated(lab->netns_.get()); !s.ok()) return fail(std::move(s).error());
  auto log = EventLog::open(options.events_file);
  if (!log.ok()) return fail(std::move(log).error());
  lab->log_ = std::move(log).value();
  auto decoys = DecoyServer::start(lab->netns_.get(), lab->canary_token_, *lab->log_);
  if (!decoys.ok()) return fail(std::move(decoys).error());
  lab->decoys_ = std::move(decoys).value();
  spdlog::debug("lab {} ready at {}", lab->id_, lab->netns_path_);
  return lab;
}

Lab::~Lab() {
  if (auto s = destroy(); !s.ok()) spdlog::error("destroying lab {}: {}", id_, s.error().message());
}

Result<NetnsGuard> Lab::enter() const {
  if (destroyed_) return logic_error("enter the lab", "the lab was destroyed", id_);
  return NetnsGuard::enter(netns_.get());
}

Status Lab::settle() const {
  if (!decoys_) return logic_error("settle the lab", "the lab's decoys are not running", id_);
  return decoys_->settle();
}

std::vector<LabEvent> Lab::events() const {
  return log_ ? log_->snapshot() : std::vector<LabEvent>{};
}

std::vector<LabEvent> Lab::events_since(std::chrono::system_clock::time_point t) const {
  auto all = events();
  std::erase_if(all, [&](const LabEvent& e) { return e.at < t; });
  return all;
}

std::vector<LabEvent> Lab::events_after(uint64_t seq) const {
  auto all = events();
  std::erase_if(all, [&](const LabEvent& e) { return e.seq <= seq; });
  return all;
}

Status Lab::destroy() {
  if (destroyed_) return {};
  destroyed_ = true;
  decoys_.reset();  // stops and joins the decoy thread, closing every lab socket it held
  netns_.reset();
  if (!state_) return {};
  // The bind mount and its file, as `sandgate gc` would remove them.
  SG_TRY(release_resources(paths_, state_->resources()));
  SG_TRY(state_->finish());
  state_.reset();
  return {};
}

}  // namespace sandgate::probes::lab
