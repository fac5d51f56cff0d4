#include "providers/sysinfo_notify.h"

#include <fcntl.h>
#include <linux/audit.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace sandgate::providers {
namespace {

// The listeners one message may carry: a child sends one; more is a sender we do not know.
constexpr size_t kMaxListenersPerMessage = 4;

#if defined(__x86_64__)
constexpr uint32_t kNativeArch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
constexpr uint32_t kNativeArch = AUDIT_ARCH_AARCH64;
#endif

// Still pending: the caller is still waiting in this very notification.
bool still_pending(int listener, uint64_t id) {
  return ::ioctl(listener, SECCOMP_IOCTL_NOTIF_ID_VALID, &id) == 0;
}

}  // namespace

bool is_seccomp_listener(int fd) {
  char link[64] = {};
  std::string path = "/proc/self/fd/" + std::to_string(fd);
  ssize_t n = ::readlink(path.c_str(), link, sizeof link - 1);
  return n > 0 && std::string(link, static_cast<size_t>(n)) == "anon_inode:seccomp notify";
}

std::vector<UniqueFd> receive_sysinfo_listeners(int channel, bool& closed) {
  std::vector<UniqueFd> out, received;
  char byte;
  ssize_t n = receive_byte_with_fds(channel, byte, received, kMaxListenersPerMessage, MSG_DONTWAIT);
  if (n == 0) closed = true;
  // Anything but a listener is closed here (its UniqueFd goes with `received`).
  for (auto& fd : received)
    if (is_seccomp_listener(fd.get())) out.push_back(std::move(fd));
  return out;
}

Result<SysinfoAnswer> answer_sysinfo_notification(int listener, const std::string& proc,
                                                  const SysinfoNumbers& numbers) {
  struct seccomp_notif req;
  std::memset(&req, 0, sizeof req);  // the kernel refuses a buffer that is not zeroed
  if (::ioctl(listener, SECCOMP_IOCTL_NOTIF_RECV, &req) != 0) {
    // ENOENT: the caller left between poll and here (a signal, a kill).
    if (errno == ENOENT || errno == EINTR) return SysinfoAnswer::kGone;
    return sys_error("receive a seccomp notification");
  }
  struct seccomp_notif_resp resp;
  std::memset(&resp, 0, sizeof resp);
  resp.id = req.id;
  auto respond = [&](int err) -> SysinfoAnswer {
    resp.error = -err;
    resp.val = 0;
    if (!still_pending(listener, req.id)) return SysinfoAnswer::kGone;
    if (::ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, &resp) != 0) return SysinfoAnswer::kGone;
    return err == 0 ? SysinfoAnswer::kAnswered : SysinfoAnswer::kRefused;
  };
  // Only sysinfo is ever sent here (program 3); anything else is what the allow list would
  // have answered for an unknown call.
  if (req.data.nr != __NR_sysinfo || req.data.arch != kNativeArch) return respond(ENOSYS);

  // The caller's memory, opened before the check that the caller is still the one waiting: if
  // it is, the pid was its own when opened, and the file stays its memory.
  std::string mem_path = proc + "/" + std::to_string(req.pid) + "/mem";
  UniqueFd mem(::open(mem_path.c_str(), O_RDWR | O_CLOEXEC));
  if (!still_pending(listener, req.id)) return SysinfoAnswer::kGone;
  if (!mem.valid()) return respond(EIO);
  auto si = numbers(req.pid);
  if (!si.ok()) return respond(EIO);
  struct sysinfo value = *si;
  ssize_t n = ::pwrite(mem.get(), &value, sizeof value, static_cast<off_t>(req.data.args[0]));
  // An unmapped (or unwritable shared) buffer: EIO from /proc/<pid>/mem, EFAULT from the kernel.
  if (n != static_cast<ssize_t>(sizeof value)) return respond(EFAULT);
  return respond(0);
}

}  // namespace sandgate::providers
