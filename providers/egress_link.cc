#include "providers/egress_link.h"

#include <fcntl.h>
#include <linux/nsfs.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/stat.h>

#include <cerrno>
#include <functional>

#include "core/files.h"
#include "core/log.h"
#include "core/netlink.h"

namespace sandgate::providers {
namespace {

constexpr int kSlotTries = 64;

std::string ipv4(uint32_t host_order) {
  return std::to_string(host_order >> 24) + "." + std::to_string((host_order >> 16) & 0xff) + "." +
         std::to_string((host_order >> 8) & 0xff) + "." + std::to_string(host_order & 0xff);
}

// Makes the pair and configures both ends: false when the upstream already has a link of that
// name (another sandgate, with another state directory, uses the slot there). On failure the
// caller's slot is released and the pair (if made) goes with the run's namespace.
Result<bool> wire(const EgressLink& link, int run_netns, int upstream_netns) {
  SG_ASSIGN_OR_RETURN(auto up, Netlink::open_in(upstream_netns));
  SG_ASSIGN_OR_RETURN(auto run, Netlink::open_in(run_netns));
  if (auto made = up.add_veth(link.upstream_link, "eth0", run_netns); !made.ok()) {
    if (made.error().err == EEXIST && up.link_index(link.upstream_link).ok()) return false;
    return std::move(made).error();
  }
  SG_ASSIGN_OR_RETURN(int up_index, up.link_index(link.upstream_link));
  SG_TRY(up.add_address(up_index, link.upstream_address, 30));
  SG_TRY(up.set_link_up(up_index));
  SG_ASSIGN_OR_RETURN(int run_index, run.link_index("eth0"));
  SG_TRY(run.add_address(run_index, link.run_address, 30));
  SG_TRY(run.set_link_up(run_index));
  SG_TRY(run.add_default_route(link.upstream_address));
  return true;
}

}  // namespace

EgressLink egress_link_for_slot(int slot) {
  const uint32_t base = (198u << 24) | (18u << 16);
  uint32_t net = base + static_cast<uint32_t>(slot) * 4;
  return {slot, "sge" + std::to_string(slot), ipv4(net + 1), ipv4(net + 2)};
}

Result<UniqueFd> open_upstream_netns(const std::string& path) {
  if (path.empty())
    return logic_error("open upstream network namespace", "no upstream named (--net-upstream)");
  SG_ASSIGN_OR_RETURN(auto fd, open_fd(path, O_RDONLY | O_CLOEXEC));
  int type = ::ioctl(fd.get(), NS_GET_NSTYPE);
  if (type < 0 || type != CLONE_NEWNET)
    return Error{EINVAL, "open upstream network namespace", path,
                 "not a network namespace (name an `ip netns` mount or /proc/PID/ns/net)"};
  return fd;
}

Result<EgressLink> wire_egress_link(const HostPaths& paths, RunState& state, pid_t pid,
                                    const std::string& upstream_netns, const std::string& run_id) {
  SG_ASSIGN_OR_RETURN(auto upstream, open_upstream_netns(upstream_netns));
  SG_ASSIGN_OR_RETURN(auto run_ns, open_fd(paths.proc + "/" + std::to_string(pid) + "/ns/net",
                                           O_RDONLY | O_CLOEXEC));
  const std::string slots = paths.state_dir + "/egress-slots";
  SG_TRY(make_dirs(slots, 0700));
  const int start = static_cast<int>(std::hash<std::string>{}(run_id) % kEgressSlots);
  for (int i = 0; i < kSlotTries; ++i) {
    EgressLink link = egress_link_for_slot((start + i) % kEgressSlots);
    Resource claim{Resource::Kind::kDirectory, slots + "/" + std::to_string(link.slot)};
    SG_TRY(state.record(claim));
    if (::mkdir(claim.path.c_str(), 0700) != 0) {
      int err = errno;
      SG_TRY(state.forget(claim));
      if (err == EEXIST) continue;  // another run's
      return sys_error("claim egress slot", claim.path);
    }
    auto wired = wire(link, run_ns.get(), upstream.get());
    if (wired.ok() && *wired) return link;
    (void)::rmdir(claim.path.c_str());
    (void)state.forget(claim);
    if (!wired.ok())
      return std::move(wired).error().context_add("wire the run to its upstream network");
  }
  return logic_error("claim egress slot",
                     "no free slot among " + std::to_string(kSlotTries) + " tried under " + slots);
}

}  // namespace sandgate::providers
