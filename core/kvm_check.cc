#include "core/kvm_check.h"

#include <fcntl.h>
#include <linux/kvm.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "core/fd.h"
#include "core/probe_child.h"

namespace sandgate {
namespace {

// Steps of the probe, reported by the child as it passes them.
enum Step : uint8_t {
  kOpen,
  kApiVersion,
  kCreateVm,
  kGuestMemory,
  kCreateVcpu,
  kMapRun,
  kSetRegisters,
  kStarted,   // the guest wrote to port 0x11: it runs
  kLoopDone,  // the guest wrote 0x42 to port 0x10 after its loop
  kHalted,    // the guest reached hlt
  kStepCount,
};

constexpr const char* kStepNames[kStepCount] = {"open /dev/kvm",   "KVM_GET_API_VERSION",
                                                "KVM_CREATE_VM",   "KVM_SET_USER_MEMORY_REGION",
                                                "KVM_CREATE_VCPU", "map kvm_run",
                                                "set registers",   "guest start",
                                                "guest loop",      "guest hlt"};

struct Report {
  uint8_t step = 0;
  int32_t err = 0;           // errno of the failed step, 0 when it passed
  uint32_t exit_reason = 0;  // for an unexpected exit: kvm_run.exit_reason
};

constexpr uint64_t kGuestAddress = 0x1000;
// 16-bit real-mode guest (cs base 0, ip 0x1000):
//   out 0x11, al          ; started
//   mov bx, 0x40          ; 64 outer rounds
// outer: mov cx, 0xffff   ; of 65535 inner rounds: ~4.2M iterations, ~8.4M instructions
// inner: dec cx
//   jnz inner
//   dec bx
//   jnz outer
//   mov al, 0x42
//   out 0x10, al          ; done
//   hlt
// Hardware-assisted KVM runs this in milliseconds; an emulating KVM (this project's hosts run
// kvm_pvm nested, ~1M instructions/s in real mode) takes seconds, and a kernel boot forever.
constexpr uint8_t kGuestCode[] = {0xe6, 0x11, 0xbb, 0x40, 0x00, 0xb9, 0xff, 0xff, 0x49, 0x75,
                                  0xfd, 0x4b, 0x75, 0xf7, 0xb0, 0x42, 0xe6, 0x10, 0xf4};
constexpr uint16_t kStartPort = 0x11;
constexpr uint16_t kDonePort = 0x10;
constexpr uint8_t kDoneValue = 0x42;

// The child: only system calls and memcpy, no allocation (it runs after fork()).
int run_guest(const char* dev, int report_fd) {
  auto say = [report_fd](uint8_t step, int err = 0, uint32_t exit_reason = 0) {
    Report r{step, err, exit_reason};
    (void)!::write(report_fd, &r, sizeof r);
  };
  auto fail = [&](uint8_t step) {
    say(step, errno ? errno : EIO);
    return 1;
  };
  int kvm = ::open(dev, O_RDWR | O_CLOEXEC);
  if (kvm < 0) return fail(kOpen);
  say(kOpen);
  // KVM_API_VERSION has been 12 since Linux 2.6.22 (Documentation/virt/kvm/api.rst).
  if (::ioctl(kvm, KVM_GET_API_VERSION, 0) != KVM_API_VERSION) {
    errno = EPROTO;
    return fail(kApiVersion);
  }
  int vm = ::ioctl(kvm, KVM_CREATE_VM, 0);
  if (vm < 0) return fail(kCreateVm);
  void* mem = ::mmap(nullptr, 0x1000, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return fail(kGuestMemory);
  std::memcpy(mem, kGuestCode, sizeof kGuestCode);
  struct kvm_userspace_memory_region region = {};
  region.slot = 0;
  region.guest_phys_addr = kGuestAddress;
  region.memory_size = 0x1000;
  region.userspace_addr = reinterpret_cast<uint64_t>(mem);
  if (::ioctl(vm, KVM_SET_USER_MEMORY_REGION, &region) < 0) return fail(kGuestMemory);
  int vcpu = ::ioctl(vm, KVM_CREATE_VCPU, 0);
  if (vcpu < 0) return fail(kCreateVcpu);
  int run_size = ::ioctl(kvm, KVM_GET_VCPU_MMAP_SIZE, 0);
  if (run_size < static_cast<int>(sizeof(struct kvm_run))) return fail(kMapRun);
  auto* run = static_cast<struct kvm_run*>(
      ::mmap(nullptr, static_cast<size_t>(run_size), PROT_READ | PROT_WRITE, MAP_SHARED, vcpu, 0));
  if (run == MAP_FAILED) return fail(kMapRun);
  struct kvm_sregs sregs;
  if (::ioctl(vcpu, KVM_GET_SREGS, &sregs) < 0) return fail(kSetRegisters);
  sregs.cs.base = 0;
  sregs.cs.selector = 0;
  if (::ioctl(vcpu, KVM_SET_SREGS, &sregs) < 0) return fail(kSetRegisters);
  struct kvm_regs regs = {};
  regs.rip = kGuestAddress;
  regs.rflags = 0x2;  // bit 1 is reserved and must be set
  if (::ioctl(vcpu, KVM_SET_REGS, &regs) < 0) return fail(kSetRegisters);
  say(kSetRegisters);

  uint8_t expect = kStarted;
  for (;;) {
    if (::ioctl(vcpu, KVM_RUN, 0) < 0) {
      if (errno == EINTR) continue;
      return fail(expect);
    }
    if (run->exit_reason == KVM_EXIT_IO && run->io.direction == KVM_EXIT_IO_OUT &&
        run->io.size == 1) {
      uint8_t value = *(reinterpret_cast<uint8_t*>(run) + run->io.data_offset);
      if (expect == kStarted && run->io.port == kStartPort) {
        say(kStarted);
        expect = kLoopDone;
        continue;
      }
      if (expect == kLoopDone && run->io.port == kDonePort && value == kDoneValue) {
        say(kLoopDone);
        expect = kHalted;
        continue;
      }
    }
    if (expect == kHalted && run->exit_reason == KVM_EXIT_HLT) {
      say(kHalted);
      return 0;
    }
    say(expect, EPROTO, run->exit_reason);
    return 2;
  }
}

std::string kvm_backend(const std::string& sys_root) {
  for (const char* m : {"kvm_intel", "kvm_amd", "kvm_pvm"}) {
    struct stat st;
    if (::stat((sys_root + "/module/" + m).c_str(), &st) == 0) return m;
  }
  return {};
}

// "2s", "1.5s", "250ms": how people write a deadline.
std::string short_duration(Duration d) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
  if (ms < 1000 || ms % 100 != 0) return std::to_string(ms) + "ms";
  std::string s = std::to_string(ms / 1000);
  if (ms % 1000) s += "." + std::to_string((ms % 1000) / 100);
  return s + "s";
}

std::string millis(Duration d) {
  return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(d).count()) + " ms";
}

}  // namespace

KvmCheckResult check_kvm(const HostPaths& paths, Duration deadline) {
  KvmCheckResult r;
  r.deadline = deadline;
  r.backend = kvm_backend(paths.sys);
  std::string dev = paths.dev + "/kvm";
  struct stat st;
  if (::stat(dev.c_str(), &st) != 0) {
    r.verdict = errno == ENOENT ? KvmVerdict::kAbsent : KvmVerdict::kBroken;
    r.detail = sys_error("stat", dev).message();
    if (errno == ENOENT)
      r.detail = dev + " does not exist (no KVM module, or not passed to this machine)";
    return r;
  }
  auto pipe = make_pipe(O_CLOEXEC | O_NONBLOCK);
  if (!pipe.ok()) {
    r.verdict = KvmVerdict::kBroken;
    r.detail = pipe.error().message();
    return r;
  }
  int report_fd = pipe->write.get();
  const char* dev_c = dev.c_str();
  auto outcome = run_probe_child([=] { return run_guest(dev_c, report_fd); }, deadline);
  pipe->write.reset();
  if (!outcome.ok()) {
    r.verdict = KvmVerdict::kBroken;
    r.detail = outcome.error().message();
    return r;
  }
  r.child_pid = outcome->pid;
  r.child_unreaped = outcome->unreaped;
  r.elapsed = outcome->elapsed;

  // What the child got through, in order; the last report is where it stopped.
  Report last{kOpen, EIO, 0};
  bool any = false;
  Report rep;
  while (::read(pipe->read.get(), &rep, sizeof rep) == static_cast<ssize_t>(sizeof rep)) {
    last = rep;
    any = true;
  }
  std::string backend = r.backend.empty() ? "unknown backend" : "backend " + r.backend;
  if (outcome->timed_out) {
    r.verdict = KvmVerdict::kTimedOut;
    if (any && last.step >= kStarted) {
      r.detail = "the guest started but did not finish ~8.4M instructions within " +
                 short_duration(deadline) + ": far slower than hardware-assisted execution (" +
                 backend + ")";
    } else {
      r.detail = "the guest never started within " + short_duration(deadline) +
                 " (last step: " + (any ? kStepNames[last.step] : "fork") + ", " + backend + ")";
    }
    if (outcome->unreaped) r.detail += "; the killed probe child is stuck in the kernel";
    return r;
  }
  if (outcome->status->exited && outcome->status->code == 0 && any && last.step == kHalted) {
    r.verdict = KvmVerdict::kUsable;
    r.detail = "a real-mode guest ran ~8.4M instructions and halted in " + millis(r.elapsed) +
               " (" + backend + ")";
    return r;
  }
  r.verdict = KvmVerdict::kBroken;
  if (!any) {
    r.detail = "the probe child ended without a report: " + outcome->status->describe();
  } else if (last.exit_reason != 0) {
    r.detail = std::string("unexpected guest exit at ") + kStepNames[last.step] +
               ": kvm_run.exit_reason " + std::to_string(last.exit_reason);
  } else if (last.err != 0) {
    r.detail = sys_error(last.err, kStepNames[last.step], dev).message();
    if (last.err == EACCES) r.detail += " (add the user to group kvm)";
  } else {
    r.detail = std::string("the probe child stopped after ") + kStepNames[last.step] + ": " +
               outcome->status->describe();
  }
  return r;
}

std::string describe(const KvmCheckResult& r) {
  switch (r.verdict) {
    case KvmVerdict::kUsable:
      return "usable";
    case KvmVerdict::kTimedOut:
      return "present but a guest does not run (timed out after " + short_duration(r.deadline) +
             ") — TCG only";
    case KvmVerdict::kAbsent:
      return "absent";
    case KvmVerdict::kBroken:
      return "present but unusable — TCG only";
  }
  return "unknown";
}

}  // namespace sandgate
