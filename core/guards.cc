#include "core/guards.h"

#include <sched.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cstdlib>

#include "core/log.h"

namespace sandgate {

MountGuard& MountGuard::operator=(MountGuard&& o) noexcept {
  if (this != &o) {
    release_mount();
    target_ = std::exchange(o.target_, {});
  }
  return *this;
}

Result<MountGuard> MountGuard::mount(const std::string& source, const std::string& target,
                                     const std::string& fstype, unsigned long flags,
                                     const std::string& data) {
  if (::mount(source.c_str(), target.c_str(), fstype.empty() ? nullptr : fstype.c_str(), flags,
              data.empty() ? nullptr : data.c_str()) != 0)
    return sys_error("mount " + fstype, target);
  return MountGuard(target);
}

Status MountGuard::unmount() {
  if (target_.empty()) return {};
  if (::umount2(target_.c_str(), MNT_DETACH) != 0 && errno != EINVAL && errno != ENOENT)
    return sys_error("umount2", target_);
  target_.clear();
  return {};
}

void MountGuard::release_mount() {
  if (auto s = unmount(); !s.ok()) spdlog::warn("{}", s.error().message());
}

Result<NetnsGuard> NetnsGuard::enter(int netns_fd) {
  SG_ASSIGN_OR_RETURN(UniqueFd self, open_fd("/proc/thread-self/ns/net", O_RDONLY));
  if (::setns(netns_fd, CLONE_NEWNET) != 0) return sys_error("setns net");
  return NetnsGuard(std::move(self));
}

NetnsGuard::~NetnsGuard() {
  if (!original_.valid()) return;
  // Failing to return would leave this thread sending traffic from inside the lab (or the
  // lab's traffic from outside): never continue in an unknown namespace.
  if (::setns(original_.get(), CLONE_NEWNET) != 0) {
    spdlog::critical("cannot return to the original network namespace: {}",
                     sys_error("setns net").message());
    std::abort();
  }
}

}  // namespace sandgate
