// Scope guards for kernel state that outlives a function unless undone: a mount, and the
// calling thread's network namespace.
#pragma once

#include <string>

#include "core/fd.h"
#include "core/result.h"

namespace sandgate {

// Owns a mount point: umount2(MNT_DETACH) on destruction.
class MountGuard {
 public:
  MountGuard() = default;
  explicit MountGuard(std::string target) : target_(std::move(target)) {}
  ~MountGuard() { release_mount(); }
  MountGuard(MountGuard&& o) noexcept : target_(std::exchange(o.target_, {})) {}
  MountGuard& operator=(MountGuard&& o) noexcept;
  MountGuard(const MountGuard&) = delete;
  MountGuard& operator=(const MountGuard&) = delete;

  // mount(2) and take ownership of the result.
  static Result<MountGuard> mount(const std::string& source, const std::string& target,
                                  const std::string& fstype, unsigned long flags,
                                  const std::string& data = {});
  const std::string& target() const { return target_; }
  // Unmounts now; returns the error instead of swallowing it.
  Status unmount();

 private:
  void release_mount();
  std::string target_;
};

// Moves the calling thread into another network namespace and back on destruction.
// Precondition: the thread is not sharing its fs struct in a way that forbids setns
// (any ordinary thread is fine); the namespace change affects this thread only.
class NetnsGuard {
 public:
  ~NetnsGuard();
  NetnsGuard(NetnsGuard&&) noexcept = default;
  NetnsGuard(const NetnsGuard&) = delete;
  NetnsGuard& operator=(const NetnsGuard&) = delete;
  NetnsGuard& operator=(NetnsGuard&&) = delete;

  // Enters the namespace behind `netns_fd` (e.g. an open /run/netns/<name>).
  static Result<NetnsGuard> enter(int netns_fd);

 private:
  explicit NetnsGuard(UniqueFd original) : original_(std::move(original)) {}
  UniqueFd original_;
};

}  // namespace sandgate
