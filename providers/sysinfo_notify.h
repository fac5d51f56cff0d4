// sysinfo(2) answered by the run instead of the kernel (issue 16, disclosure). The /proc views
// (proc_views.h) show a call its own memory, load and uptime, but sysinfo(2) is answered by the
// kernel itself: `free`-like programs and glibc's sysconf(_SC_PHYS_PAGES) (Python's
// os.sysconf, the JVM's and Go's heap sizing) read the host's 24 GiB through it. In the jail
// (and in a podman run: runc's profile lets a call's child add a listener) each call runs under
// a third seccomp program (seccomp_policy.h) that hands sysinfo to a
// listener; the call's child sends its listener over the run's sysinfo channel to the run's
// views server, which answers each call with the numbers its /proc views show the same caller.
//
// Why the views server and not the supervisor: the server already holds the run's cgroup
// directories, the reader's-cgroup rule of /proc/meminfo (a call sees its grant), the run's
// load average and its start time, and lives as long as the run; so sysinfo(2) says what
// /proc/meminfo, /proc/loadavg and /proc/uptime say to the same process, from one place. The
// supervisor sees no cgroup file from inside the jail, and its loop should not wait on
// cgroupfs reads for its calls. And it sits in the host's pid namespace, so a notification's
// pid is a host pid (the kernel translates it for the receiver) that reader_dirs() reads as is.
//
// The channel: a SOCK_SEQPACKET pair made by begin_proc_views; the supervisor holds one end and
// each call's child inherits it, sends its listener (one byte and SCM_RIGHTS), and execs (the
// end is close-on-exec, so no call ever holds it).
#pragma once

#include <linux/seccomp.h>
#include <sys/sysinfo.h>
#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

#include "core/fd.h"
#include "core/result.h"

namespace sandgate::providers {

// The caller's side is a call's process (call_child.cc: restrict_call), which sends its
// listener with one byte, MSG_NOSIGNAL: a channel whose server is gone is EPIPE, not a SIGPIPE
// that kills the call's child without a word; and MSG_DONTWAIT: a channel full of listeners
// nobody takes (some 270 fit) fails the call with EAGAIN rather than holding it, and with it
// the supervisor when the call started as a vfork child.

// The server's side: the listeners of one message on `channel` (non-blocking), each checked to
// be a seccomp listener (anything else is closed). `closed` is set when the channel's every
// sender is gone (EOF).
std::vector<UniqueFd> receive_sysinfo_listeners(int channel, bool& closed);

// Whether `fd` is a seccomp notification listener ("anon_inode:seccomp notify").
bool is_seccomp_listener(int fd);

// Numbers for one caller, by its pid as `proc` sees it; an error answers the call EIO, never
// with the kernel's (the host's) numbers.
using SysinfoNumbers = std::function<Result<struct sysinfo>(pid_t)>;

// What answer_sysinfo_notification did with one notification.
enum class SysinfoAnswer {
  kAnswered,  // the caller got the numbers (return 0)
  kRefused,   // the caller got an error: EFAULT (bad buffer), EIO (no numbers), ENOSYS (not
              // sysinfo, or another ABI)
  kGone,      // the caller left before the answer (killed, or a signal restarted its call)
};

// Receives one notification from `listener` and answers it. For sysinfo: the caller's memory
// (<proc>/<pid>/mem) is opened, the notification checked to be still pending
// (SECCOMP_IOCTL_NOTIF_ID_VALID, so the pid is still the caller's and the open file its memory:
// seccomp_unotify(2), "Caveats regarding pids"), `numbers` written at the caller's buffer, the
// notification checked once more, then answered "return 0". Writes through /proc/<pid>/mem
// (FOLL_FORCE): a buffer in a read-only private mapping of the caller is written (a private
// copy of the caller's own) where the kernel would say EFAULT; an unmapped one is EFAULT.
// An Error only for a listener that cannot be read (not for a caller that left).
Result<SysinfoAnswer> answer_sysinfo_notification(int listener, const std::string& proc,
                                                  const SysinfoNumbers& numbers);

}  // namespace sandgate::providers
