// The compiled filter against the real kernel. Each case forks a child that sets
// no_new_privs, installs the program and makes raw system calls; the parent reads back what
// each call returned, or how the child died. The children run as root, so a refusal here is
// the filter's, never a missing capability.
#include "providers/seccomp_policy.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <seccomp.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/sysinfo.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/fd.h"
#include "core/result.h"
#include "providers/call_child.h"
#include "providers/sysinfo_notify.h"
#include "tests/support/privileged.h"

#ifndef AF_VSOCK
#define AF_VSOCK 40
#endif

namespace sandgate::providers {
namespace {

// x86_64 numbers of calls newer than some headers (arch/x86/entry/syscalls/syscall_64.tbl).
constexpr long kModifyLdt = 154;
constexpr long kMemfdSecret = 447;
constexpr long kStatmount = 457;
constexpr long kListmount = 458;
constexpr long kMseal = 462;
constexpr long kOpenTreeAttr = 467;
// arch/x86/include/uapi/asm/unistd.h: __X32_SYSCALL_BIT.
constexpr long kX32SyscallBit = 0x40000000;
// arch/x86/entry/syscalls/syscall_32.tbl: socket on i386.
constexpr long kI386Socket = 359;

constexpr unsigned long kHigh = 1UL << 32;  // a bit the kernel drops from an int argument

// What one raw call returned: the value, or -1 and errno.
struct Answer {
  long ret = 0;
  int err = 0;
};

// How a filtered child ended, and the answers it sent before it did.
struct ChildRun {
  bool exited = false;
  int code = -1;
  int signal = 0;
  std::vector<Answer> answers;
};

Answer answer(long ret) { return {ret, ret < 0 ? errno : 0}; }

// Forks; the child sets no_new_privs, installs `program` and runs body(report), where
// report(answer) sends one answer to the parent. The child then exits 0 (or body execs).
template <typename Body>
ChildRun under_filter(const SeccompProgram& program, Body body) {
  ChildRun run;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return run;
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    // As a call's process installs it (no_new_privs first).
    CallRestriction r = restriction_for(program, -1);
    r.no_new_privs = true;
    ChildError e;
    if (!restrict_call(r, e)) ::_exit(121);
    auto report = [&](Answer a) { (void)!::write(fds[1], &a, sizeof a); };
    body(report);
    ::_exit(0);
  }
  ::close(fds[1]);
  Answer a;
  while (::read(fds[0], &a, sizeof a) == static_cast<ssize_t>(sizeof a)) run.answers.push_back(a);
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  run.exited = WIFEXITED(status);
  run.code = run.exited ? WEXITSTATUS(status) : -1;
  run.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  return run;
}

std::string describe(const Answer& a) {
  return a.ret >= 0 ? "returned " + std::to_string(a.ret)
                    : std::string("failed with ") + errno_name(a.err);
}

// A raw socket call with an arbitrary 64-bit family, closed if it was made.
Answer raw_socket(unsigned long family, int type) {
  Answer a = answer(::syscall(SYS_socket, family, type | SOCK_CLOEXEC, 0));
  if (a.ret >= 0) ::close(static_cast<int>(a.ret));
  return a;
}

// A raw clone with arbitrary 64-bit flags and no new stack (fork-like); a child it made exits
// at once and is reaped.
Answer raw_clone(unsigned long flags) {
  long r = ::syscall(SYS_clone, flags, 0, nullptr, nullptr, 0);
  if (r == 0) ::syscall(SYS_exit_group, 0);
  Answer a = answer(r);
  if (r > 0) ::waitpid(static_cast<pid_t>(r), nullptr, __WALL);
  return a;
}

class SeccompFilterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto p = build_seccomp_program();
    ASSERT_TRUE(p.ok()) << p.error().message();
    program_ = std::move(p).value();
  }
  SeccompProgram program_;
};

TEST_F(SeccompFilterTest, VsockAndPacketSocketsAreRefusedWhateverTheHighBits) {
  SANDGATE_REQUIRE_ROOT();
  struct Family {
    const char* name;
    unsigned long family;
    int type;
  };
  const std::vector<Family> families = {
      {"AF_VSOCK", AF_VSOCK, SOCK_STREAM},
      {"AF_VSOCK | 1<<32", kHigh | AF_VSOCK, SOCK_STREAM},
      {"AF_VSOCK | 0xffffffff<<32", 0xffffffff00000000UL | AF_VSOCK, SOCK_STREAM},
      {"AF_PACKET", AF_PACKET, SOCK_RAW},
      {"AF_PACKET | 1<<32", kHigh | AF_PACKET, SOCK_RAW},
  };
  auto run = under_filter(program_, [&](auto report) {
    for (const auto& f : families) report(raw_socket(f.family, f.type));
    report(raw_socket(AF_UNIX, SOCK_STREAM));  // the positive twin
  });
  ASSERT_TRUE(run.exited) << "killed by signal " << run.signal;
  ASSERT_EQ(run.answers.size(), families.size() + 1);
  for (size_t i = 0; i < families.size(); ++i) {
    EXPECT_EQ(run.answers[i].ret, -1) << families[i].name << ": " << describe(run.answers[i]);
    EXPECT_EQ(run.answers[i].err, EPERM) << families[i].name << ": " << describe(run.answers[i]);
  }
  EXPECT_GE(run.answers.back().ret, 0) << "AF_UNIX: " << describe(run.answers.back());
}

TEST_F(SeccompFilterTest, TiocstiIsRefusedWhateverTheHighBits) {
  SANDGATE_REQUIRE_ROOT();
  // fd -1: the kernel would say EBADF; only the filter can say EPERM first.
  char c = 'x';
  auto run = under_filter(program_, [&](auto report) {
    report(answer(::syscall(SYS_ioctl, -1, static_cast<unsigned long>(TIOCSTI), &c)));
    report(answer(::syscall(SYS_ioctl, -1, kHigh | TIOCSTI, &c)));
    report(answer(::syscall(SYS_ioctl, -1, static_cast<unsigned long>(TIOCGWINSZ), &c)));
  });
  ASSERT_TRUE(run.exited) << "killed by signal " << run.signal;
  ASSERT_EQ(run.answers.size(), 3u);
  EXPECT_EQ(run.answers[0].err, EPERM) << "TIOCSTI: " << describe(run.answers[0]);
  EXPECT_EQ(run.answers[1].err, EPERM) << "TIOCSTI | 1<<32: " << describe(run.answers[1]);
  EXPECT_EQ(run.answers[2].err, EBADF)
      << "TIOCGWINSZ reaches the kernel: " << describe(run.answers[2]);
}

TEST_F(SeccompFilterTest, CloneWithANamespaceFlagIsRefusedWhateverTheHighBits) {
  SANDGATE_REQUIRE_ROOT();
  auto run = under_filter(program_, [&](auto report) {
    report(raw_clone(CLONE_NEWUSER | SIGCHLD));
    report(raw_clone(kHigh | CLONE_NEWUSER | SIGCHLD));
    report(raw_clone(kHigh | CLONE_NEWNET | SIGCHLD));
    // clone3 carries its flags in memory the filter cannot read: ENOSYS, whatever they are.
    struct clone_args args = {};
    args.flags = CLONE_NEWUSER;
    args.exit_signal = SIGCHLD;
    long r = ::syscall(SYS_clone3, &args, sizeof args);
    if (r == 0) ::syscall(SYS_exit_group, 0);
    report(answer(r));
  });
  ASSERT_TRUE(run.exited) << "killed by signal " << run.signal;
  ASSERT_EQ(run.answers.size(), 4u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(run.answers[i].ret, -1) << describe(run.answers[i]);
    EXPECT_EQ(run.answers[i].err, EPERM) << describe(run.answers[i]);
  }
  EXPECT_EQ(run.answers[3].err, ENOSYS) << "clone3: " << describe(run.answers[3]);
}

TEST_F(SeccompFilterTest, ASyscallAboveWhatTheLibraryKnowsAnswersEnosys) {
  SANDGATE_REQUIRE_ROOT();
  long nr = seccomp_highest_known_syscall() + 1;
  ASSERT_GT(nr, 400);
  // Every argument invalid (-1: a bad fd, pointer and flags), so a kernel that runs it fails.
  auto run = under_filter(
      program_, [&](auto report) { report(answer(::syscall(nr, -1L, -1L, -1L, -1L, -1L, -1L))); });
  ASSERT_TRUE(run.exited) << "killed by signal " << run.signal;
  ASSERT_EQ(run.answers.size(), 1u);
  EXPECT_EQ(run.answers[0].err, ENOSYS) << "syscall " << nr << ": " << describe(run.answers[0]);
}

TEST_F(SeccompFilterTest, NewerCallsNobodyNeedsAreRefused) {
  SANDGATE_REQUIRE_ROOT();
  // Harmless arguments: each fails in the kernel (bad fd, bad flags) if it gets that far;
  // modify_ldt(0, p, 0) reads zero bytes of the LDT.
  char buf[8];
  const std::vector<std::pair<const char*, std::vector<long>>> calls = {
      {"open_tree_attr", {kOpenTreeAttr, -1, reinterpret_cast<long>("x"), 0, 0, 0}},
      {"listmount", {kListmount, 0, 0, 0, -1}},
      {"statmount", {kStatmount, 0, 0, 0, -1}},
      {"mseal", {kMseal, 0, 0, -1}},
      {"memfd_secret", {kMemfdSecret, -1}},
      {"modify_ldt", {kModifyLdt, 0, reinterpret_cast<long>(buf), 0}},
  };
  auto run = under_filter(program_, [&](auto report) {
    for (const auto& [name, a] : calls) {
      std::vector<long> v = a;
      v.resize(6, 0);
      report(answer(::syscall(v[0], v[1], v[2], v[3], v[4], v[5])));
    }
  });
  ASSERT_TRUE(run.exited) << "killed by signal " << run.signal;
  ASSERT_EQ(run.answers.size(), calls.size());
  for (size_t i = 0; i < calls.size(); ++i) {
    const Answer& a = run.answers[i];
    EXPECT_EQ(a.ret, -1) << calls[i].first << ": " << describe(a);
    EXPECT_TRUE(a.err == ENOSYS || a.err == EPERM) << calls[i].first << ": " << describe(a);
  }
}

TEST_F(SeccompFilterTest, OrdinaryCallsWork) {
  SANDGATE_REQUIRE_ROOT();
  auto run = under_filter(program_, [&](auto report) {
    report(answer(::syscall(SYS_getpid)));
    long fd = ::syscall(SYS_openat, AT_FDCWD, "/proc/self/status", O_RDONLY | O_CLOEXEC);
    report(answer(fd));
    char buf[64];
    report(answer(::syscall(SYS_read, fd, buf, sizeof buf)));
    int p[2];
    report(answer(::syscall(SYS_pipe2, p, O_CLOEXEC)));
    report(answer(::syscall(SYS_write, p[1], "x", 1)));
    void* m = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    report(answer(m == MAP_FAILED ? -1 : 0));
    report(raw_clone(SIGCHLD));                                // a plain fork
    report(answer(::syscall(SYS_personality, 0xffffffffUL)));  // the query
  });
  ASSERT_TRUE(run.exited) << "killed by signal " << run.signal;
  ASSERT_EQ(run.answers.size(), 8u);
  const char* what[] = {"getpid", "openat", "read",           "pipe2",
                        "write",  "mmap",   "clone(SIGCHLD)", "personality(query)"};
  for (size_t i = 0; i < run.answers.size(); ++i)
    EXPECT_GE(run.answers[i].ret, 0) << what[i] << ": " << describe(run.answers[i]);
  EXPECT_GT(run.answers[2].ret, 0) << "read returned nothing";

  // execve of a dynamic binary: the loader and libc start-up run under the filter too.
  auto exec = under_filter(program_, [&](auto) {
    char* argv[] = {const_cast<char*>("/bin/true"), nullptr};
    char* envp[] = {nullptr};
    ::execve("/bin/true", argv, envp);
    ::_exit(99);
  });
  EXPECT_TRUE(exec.exited && exec.code == 0)
      << "/bin/true: exit " << exec.code << ", signal " << exec.signal;
}

// Classic BPF as the kernel runs a seccomp program (net/core/filter.c, the subset seccomp
// accepts: seccomp_check_filter), over one seccomp_data. Returns the program's verdict, or
// nullopt for an instruction outside that subset, a load outside seccomp_data or a jump off
// the end: the caller then fails, it never guesses.
std::optional<uint32_t> run_classic_bpf(const std::vector<struct sock_filter>& prog,
                                        const struct seccomp_data& data) {
  uint32_t a = 0, x = 0, mem[BPF_MEMWORDS] = {};
  for (size_t pc = 0; pc < prog.size(); ++pc) {
    const auto& in = prog[pc];
    const uint32_t src = BPF_SRC(in.code) == BPF_X ? x : in.k;
    switch (BPF_CLASS(in.code)) {
      case BPF_LD:
        if (in.code == (BPF_LD | BPF_W | BPF_ABS)) {
          if (in.k % 4 != 0 || in.k + 4 > sizeof data) return std::nullopt;
          std::memcpy(&a, reinterpret_cast<const char*>(&data) + in.k, 4);
        } else if (in.code == (BPF_LD | BPF_IMM)) {
          a = in.k;
        } else if (in.code == (BPF_LD | BPF_MEM) && in.k < BPF_MEMWORDS) {
          a = mem[in.k];
        } else {
          return std::nullopt;
        }
        break;
      case BPF_LDX:
        if (in.code == (BPF_LDX | BPF_IMM)) x = in.k;
        else if (in.code == (BPF_LDX | BPF_MEM) && in.k < BPF_MEMWORDS) x = mem[in.k];
        else return std::nullopt;
        break;
      case BPF_ST:
      case BPF_STX:
        if (in.k >= BPF_MEMWORDS) return std::nullopt;
        mem[in.k] = BPF_CLASS(in.code) == BPF_ST ? a : x;
        break;
      case BPF_ALU:
        switch (BPF_OP(in.code)) {
          case BPF_ADD: a += src; break;
          case BPF_SUB: a -= src; break;
          case BPF_MUL: a *= src; break;
          case BPF_DIV: if (src == 0) return 0u; a /= src; break;
          case BPF_MOD: if (src == 0) return 0u; a %= src; break;
          case BPF_OR: a |= src; break;
          case BPF_AND: a &= src; break;
          case BPF_XOR: a ^= src; break;
          case BPF_LSH: a = src < 32 ? a << src : 0; break;
          case BPF_RSH: a = src < 32 ? a >> src : 0; break;
          case BPF_NEG: a = 0u - a; break;
          default: return std::nullopt;
        }
        break;
      case BPF_JMP: {
        if (BPF_OP(in.code) == BPF_JA) {
          pc += in.k;
          break;
        }
        bool taken;
        switch (BPF_OP(in.code)) {
          case BPF_JEQ: taken = a == src; break;
          case BPF_JGT: taken = a > src; break;
          case BPF_JGE: taken = a >= src; break;
          case BPF_JSET: taken = (a & src) != 0; break;
          default: return std::nullopt;
        }
        pc += taken ? in.jt : in.jf;
        break;
      }
      case BPF_RET:
        return BPF_RVAL(in.code) == BPF_A ? a : in.k;
      case BPF_MISC:
        if (BPF_MISCOP(in.code) == BPF_TAX) x = a;
        else a = x;
        break;
      default:
        return std::nullopt;
    }
  }
  return std::nullopt;
}

// The verdict of every program of the filter together, as the kernel combines them
// (kernel/seccomp.c, seccomp_run_filters): the action of highest precedence wins, which is
// the lowest as a signed number (KILL_PROCESS is 0x80000000).
std::optional<uint32_t> filter_verdict(const SeccompProgram& p, const struct seccomp_data& d) {
  std::optional<uint32_t> verdict;
  for (const auto* prog : {&p.allow_list, &p.argument_rules, &p.sysinfo_notify}) {
    if (prog->empty()) continue;
    auto v = run_classic_bpf(*prog, d);
    if (!v) return std::nullopt;
    if (!verdict || static_cast<int32_t>(*v & SECCOMP_RET_ACTION_FULL) <
                        static_cast<int32_t>(*verdict & SECCOMP_RET_ACTION_FULL))
      verdict = *v;
  }
  return verdict;
}

struct seccomp_data syscall_data(uint32_t arch, int nr, std::initializer_list<uint64_t> args) {
  struct seccomp_data d{};
  d.nr = nr;
  d.arch = arch;
  size_t i = 0;
  for (uint64_t v : args) d.args[i++] = v;
  return d;
}

// Whether this kernel takes int $0x80 from a 64-bit process at all: i386 getpid in a child
// with no filter. Some do not (IA32 emulation off, or a paravirtual guest whose entry path
// has no i386 gate: the instruction faults with SIGSEGV before any syscall is made).
bool i386_gate_present() {
  pid_t pid = ::fork();
  if (pid == 0) {
    ::signal(SIGSEGV, SIG_DFL);  // not the sanitizer's handler: die of the fault
    long r;
    asm volatile("int $0x80" : "=a"(r) : "a"(20L) : "memory", "r8", "r9", "r10", "r11");
    ::_exit(r == ::getpid() ? 0 : 1);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// The evaluator agrees with the kernel where the kernel can be asked: an allowed call, a
// call the allow list answers ENOSYS, and socket's argument rules, on the native ABI.
TEST_F(SeccompFilterTest, TheUserspaceEvaluatorAgreesWithTheKernel) {
  SANDGATE_REQUIRE_ROOT();
  auto allowed = filter_verdict(program_, syscall_data(AUDIT_ARCH_X86_64, SYS_getpid, {}));
  ASSERT_TRUE(allowed.has_value()) << "an instruction the evaluator does not know";
  EXPECT_EQ(*allowed, SECCOMP_RET_ALLOW);
  auto absent = filter_verdict(program_, syscall_data(AUDIT_ARCH_X86_64, kModifyLdt, {}));
  ASSERT_TRUE(absent.has_value());
  EXPECT_EQ(*absent, SECCOMP_RET_ERRNO | ENOSYS);
  auto vsock = filter_verdict(
      program_, syscall_data(AUDIT_ARCH_X86_64, SYS_socket, {AF_VSOCK, SOCK_STREAM, 0}));
  ASSERT_TRUE(vsock.has_value());
  EXPECT_NE(*vsock & SECCOMP_RET_ACTION_FULL, SECCOMP_RET_ALLOW);
  // What the kernel did with the same three calls.
  auto run = under_filter(program_, [&](auto report) {
    report(answer(::syscall(SYS_getpid)));
    report(answer(::syscall(kModifyLdt, 0, nullptr, 0)));
    report(raw_socket(AF_VSOCK, SOCK_STREAM));
  });
  ASSERT_TRUE(run.exited) << "killed by signal " << run.signal;
  ASSERT_EQ(run.answers.size(), 3u);
  EXPECT_GE(run.answers[0].ret, 0);
  EXPECT_EQ(run.answers[1].err, ENOSYS);
  EXPECT_LT(run.answers[2].ret, 0);
  EXPECT_EQ(run.answers[2].err, static_cast<int>(*vsock & SECCOMP_RET_DATA));
}

// A 64-bit process may still enter the kernel through the i386 gate (int $0x80, with i386
// numbers) or with x32 numbers (nr | __X32_SYSCALL_BIT): neither matches a rule written for
// x86_64 numbers, so the filter must refuse the ABI as a whole, never fall through. The
// kernel is asked where it has the gate; the filter's own verdict for i386 is checked
// everywhere, with the evaluator above (some kernels here have no i386 gate to ask).
TEST_F(SeccompFilterTest, OtherAbisCannotBypassTheFilter) {
  SANDGATE_REQUIRE_ROOT();
  auto i386_verdict =
      filter_verdict(program_, syscall_data(AUDIT_ARCH_I386, kI386Socket, {AF_VSOCK, SOCK_STREAM, 0}));
  ASSERT_TRUE(i386_verdict.has_value());
  EXPECT_EQ(*i386_verdict, SECCOMP_RET_KILL_PROCESS) << "the filter's verdict on an i386 call";
  auto x32_verdict = filter_verdict(
      program_,
      syscall_data(AUDIT_ARCH_X86_64, kX32SyscallBit | SYS_socket, {AF_VSOCK, SOCK_STREAM, 0}));
  ASSERT_TRUE(x32_verdict.has_value());
  EXPECT_EQ(*x32_verdict, SECCOMP_RET_KILL_PROCESS) << "the filter's verdict on an x32 call";

  if (i386_gate_present()) {
    auto i386 = under_filter(program_, [&](auto report) {
      ::signal(SIGSEGV, SIG_DFL);
      long r;
      // i386 socket(AF_VSOCK, SOCK_STREAM, 0): a descriptor if nothing stopped it.
      asm volatile("int $0x80"
                   : "=a"(r)
                   : "a"(kI386Socket), "b"(AF_VSOCK), "c"(SOCK_STREAM), "d"(0)
                   : "memory", "r8", "r9", "r10", "r11");
      report({r, r < 0 ? static_cast<int>(-r) : 0});
    });
    EXPECT_FALSE(i386.exited) << "the i386 call returned: "
                              << (i386.answers.empty() ? "?" : describe(i386.answers[0]));
    EXPECT_EQ(i386.signal, SIGSYS);
  } else {
    std::cerr << "this kernel has no i386 gate for 64-bit processes (int $0x80 faults): the "
                 "i386 case is the filter's verdict above only\n";
  }

  auto x32 = under_filter(program_, [&](auto report) {
    report(answer(::syscall(kX32SyscallBit | SYS_socket, AF_VSOCK, SOCK_STREAM, 0)));
  });
  EXPECT_FALSE(x32.exited) << "the x32 call returned: "
                           << (x32.answers.empty() ? "?" : describe(x32.answers[0]));
  EXPECT_EQ(x32.signal, SIGSYS);
}

// The weakening the self-test must catch (weakening.h, seccomp_full_width_compare) does what
// it says: the plain calls are still refused, their high-bit twins are not.
TEST(SeccompWeakening, FullWidthCompareLetsTheHighBitVariantsThrough) {
  SANDGATE_REQUIRE_ROOT();
  auto weak = build_seccomp_program({.full_width_compare = true});
  ASSERT_TRUE(weak.ok()) << weak.error().message();
  char c = 'x';
  auto run = under_filter(*weak, [&](auto report) {
    report(raw_socket(AF_VSOCK, SOCK_STREAM));
    report(raw_socket(kHigh | AF_VSOCK, SOCK_STREAM));
    report(answer(::syscall(SYS_ioctl, -1, kHigh | TIOCSTI, &c)));
    report(raw_clone(kHigh | CLONE_NEWUSER | SIGCHLD));
  });
  ASSERT_TRUE(run.exited) << "killed by signal " << run.signal;
  ASSERT_EQ(run.answers.size(), 4u);
  EXPECT_EQ(run.answers[0].err, EPERM) << "AF_VSOCK: " << describe(run.answers[0]);
  EXPECT_GE(run.answers[1].ret, 0) << "AF_VSOCK | 1<<32: " << describe(run.answers[1]);
  EXPECT_EQ(run.answers[2].err, EBADF) << "TIOCSTI | 1<<32: " << describe(run.answers[2]);
  EXPECT_GT(run.answers[3].ret, 0) << "clone(CLONE_NEWUSER | 1<<32): " << describe(run.answers[3]);
}

// The lists are data a reader can check: no syscall is on two of them, and the three with
// argument rules are allowed by the allow list (their refusals live in the second program).
TEST(SeccompLists, EachSyscallHasOneDecision) {
  std::set<std::string> allowed(seccomp_allowed_syscalls().begin(),
                                seccomp_allowed_syscalls().end());
  EXPECT_EQ(allowed.size(), seccomp_allowed_syscalls().size()) << "a name is allowed twice";
  std::set<std::string> denied, absent;
  for (const auto& r : seccomp_denied_syscalls()) {
    EXPECT_TRUE(denied.insert(r.syscall).second) << r.syscall << " is denied twice";
    EXPECT_FALSE(r.why.empty()) << r.syscall;
  }
  for (const auto& r : seccomp_absent_syscalls()) {
    EXPECT_TRUE(absent.insert(r.syscall).second) << r.syscall << " is listed twice";
    EXPECT_FALSE(r.why.empty()) << r.syscall;
  }
  for (const char* conditional : {"socket", "ioctl", "clone"}) {
    EXPECT_TRUE(allowed.count(conditional)) << conditional;
    EXPECT_TRUE(denied.count(conditional)) << conditional;
    allowed.erase(conditional);
  }
  for (const auto& name : allowed) {
    EXPECT_FALSE(denied.count(name)) << name << " is both allowed and denied";
    EXPECT_FALSE(absent.count(name)) << name << " is both allowed and absent";
  }
  for (const auto& name : denied) EXPECT_FALSE(absent.count(name)) << name;
  EXPECT_FALSE(allowed.count("personality")) << "personality is allowed for listed values only";
  for (const char* name : {"modify_ldt", "memfd_secret", "mseal", "listmount", "statmount"})
    EXPECT_TRUE(absent.count(name)) << name;
  for (const char* name : {"landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self",
                           "pidfd_open", "pidfd_send_signal"})
    EXPECT_TRUE(allowed.count(name)) << name;
  for (const char* name : {"io_uring_setup", "open_tree_attr", "pidfd_getfd", "clone3"})
    EXPECT_TRUE(denied.count(name)) << name;
}

// A name this libseccomp cannot resolve is reported with the program, never silently dropped.
TEST(SeccompLists, NamesTheLibraryDoesNotKnowAreReported) {
  auto p = build_seccomp_program();
  ASSERT_TRUE(p.ok()) << p.error().message();
  std::set<std::string> reported(p->unknown_syscalls.begin(), p->unknown_syscalls.end());
  std::vector<std::string> names = seccomp_allowed_syscalls();
  for (const auto& r : seccomp_denied_syscalls()) names.push_back(r.syscall);
  for (const auto& name : names) {
    bool unknown = seccomp_syscall_resolve_name(name.c_str()) == __NR_SCMP_ERROR;
    EXPECT_EQ(reported.count(name) > 0, unknown) << name;
  }
  EXPECT_EQ(p->highest_known_syscall, seccomp_highest_known_syscall());
  EXPECT_GE(p->highest_known_syscall, 435) << "clone3 (435) is older than any libseccomp we use";
  EXPECT_GT(p->instruction_count(), 0u);
}

// The default program embedded at build time is the one libseccomp compiles now, instruction for
// instruction, with the same names it cannot resolve: the build and this process link the same
// libseccomp and lists, and a stale or mistaken embedding fails here.
TEST(SeccompProgramFd, TheProgramBuiltInAtBuildTimeIsTheOneCompiledNow) {
  auto built_in = built_in_seccomp_program();
  ASSERT_TRUE(built_in.ok()) << built_in.error().message();
  auto now = build_seccomp_program();
  ASSERT_TRUE(now.ok()) << now.error().message();
  EXPECT_EQ(serialize_seccomp_program(*built_in), serialize_seccomp_program(*now));
  EXPECT_EQ(built_in->unknown_syscalls, now->unknown_syscalls);
  EXPECT_EQ(built_in->highest_known_syscall, seccomp_highest_known_syscall());
  EXPECT_GT(built_in->instruction_count(), 0u);
}

// A program's bytes read back whole, and bytes that are not one are refused by name.
TEST(SeccompProgramFd, ProgramBytesReadBackWholeAndOthersAreRefused) {
  auto p = build_seccomp_program();
  ASSERT_TRUE(p.ok()) << p.error().message();
  const std::string bytes = serialize_seccomp_program(*p);
  auto back = parse_seccomp_program(bytes);
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(serialize_seccomp_program(*back), bytes);
  // A header that claims more instructions than follow (2^32 - 1 in the first program): refused
  // before anything is sized by it.
  std::string claims_more = bytes;
  claims_more.replace(4, 4, "\xff\xff\xff\xff");
  for (const std::string& bad : {bytes.substr(0, bytes.size() - 1), bytes + "x", bytes.substr(0, 3),
                                 "XXXX" + bytes.substr(4), std::string(), claims_more}) {
    auto r = parse_seccomp_program(bad);
    ASSERT_FALSE(r.ok()) << bad.size() << " bytes";
    EXPECT_NE(r.error().message().find("seccomp program"), std::string::npos)
        << r.error().message();
  }
}

// Made once per process and options, sealed: every run's supervisor reads the very program
// build_seccomp_program makes (the default one built in at build time), and nothing can change
// it on the way.
TEST(SeccompProgramFd, OneSealedProgramPerOptionsReadsBackWhole) {
  auto fd = compiled_seccomp_program_fd({});
  ASSERT_TRUE(fd.ok()) << fd.error().message();
  auto again = compiled_seccomp_program_fd({});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*fd, *again) << "compiled twice";
  auto weak = compiled_seccomp_program_fd({.full_width_compare = true});
  ASSERT_TRUE(weak.ok());
  EXPECT_NE(*fd, *weak);

  auto read = read_seccomp_program(*fd);
  ASSERT_TRUE(read.ok()) << read.error().message();
  auto built = build_seccomp_program();
  ASSERT_TRUE(built.ok());
  auto same = [](const std::vector<struct sock_filter>& a, const std::vector<struct sock_filter>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof a[0]) == 0;
  };
  EXPECT_TRUE(same(read->allow_list, built->allow_list));
  EXPECT_TRUE(same(read->argument_rules, built->argument_rules));
  EXPECT_TRUE(same(read->sysinfo_notify, built->sysinfo_notify));
  EXPECT_FALSE(read->sysinfo_notify.empty());
  EXPECT_EQ(read->highest_known_syscall, built->highest_known_syscall);
  auto read_weak = read_seccomp_program(*weak);
  ASSERT_TRUE(read_weak.ok());
  EXPECT_FALSE(same(read_weak->argument_rules, built->argument_rules)) << "the weakening is its own program";

  // Sealed: no write, no truncation, whoever holds the fd.
  EXPECT_LT(::pwrite(*fd, "x", 1, 0), 0);
  EXPECT_EQ(errno, EPERM);
  EXPECT_NE(::ftruncate(*fd, 0), 0);
  EXPECT_EQ(errno, EPERM);
  // Anything else is refused, not installed.
  UniqueFd other(::memfd_create("not-a-program", MFD_CLOEXEC));
  ASSERT_TRUE(write_all(other.get(), std::string(64, 'x')).ok());
  EXPECT_FALSE(read_seccomp_program(other.get()).ok());
}

// Program 3 (issue 16): sysinfo(2) goes to the holder of the listener, which answers it with
// numbers of its own; with the listener gone the call fails with ENOSYS instead of hanging.
// Each child installs only program 3 (as a call's child does after the two others), sends its
// listener back over a SOCK_SEQPACKET pair as the jail's children do, then calls sysinfo; the
// parent plays the run's views server. No root needed: no_new_privs is enough.
class SysinfoNotifyTest : public ::testing::Test {
 protected:
  // What the child saw of one sysinfo call.
  struct Seen {
    long ret = 0;
    int err = 0;
    unsigned long totalram = 0, freeram = 0;
    unsigned int mem_unit = 0;
    unsigned short procs = 0;
    unsigned long load1 = 0;
    long uptime = 0;
  };

  void SetUp() override {
    auto p = build_seccomp_program();
    ASSERT_TRUE(p.ok()) << p.error().message();
    program_ = std::move(p).value();
    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
    channel_ = UniqueFd(sv[0]);
    child_channel_ = UniqueFd(sv[1]);
    ASSERT_EQ(::pipe2(report_, O_CLOEXEC), 0);
    ASSERT_EQ(::pipe2(go_, O_CLOEXEC), 0);
  }
  void TearDown() override {
    for (int fd : {report_[0], report_[1], go_[0], go_[1]})
      if (fd >= 0) ::close(fd);
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }

  // In a child: as a call's process does, program 3 alone, installed and its listener sent
  // on the channel.
  bool restrict_to_program3(ChildError& e) {
    CallRestriction r = restriction_for(program_, child_channel_.get());
    r.program_count = 0;
    r.no_new_privs = true;
    return restrict_call(r, e);
  }

  // The child: program 3, its listener sent back, then (after a byte on go_ when `wait_for_go`)
  // one sysinfo into a buffer and one into an unmapped address, each reported.
  void start_child(bool wait_for_go) {
    pid_ = ::fork();
    ASSERT_GE(pid_, 0);
    if (pid_ == 0) {
      ChildError e;
      if (!restrict_to_program3(e)) ::_exit(121);
      char byte;
      if (wait_for_go && ::read(go_[0], &byte, 1) != 1) ::_exit(123);
      struct sysinfo si {};
      Seen s;
      s.ret = ::syscall(SYS_sysinfo, &si);
      s.err = s.ret < 0 ? errno : 0;
      s.totalram = si.totalram;
      s.freeram = si.freeram;
      s.mem_unit = si.mem_unit;
      s.procs = si.procs;
      s.load1 = si.loads[0];
      s.uptime = si.uptime;
      (void)!::write(report_[1], &s, sizeof s);
      Seen bad;
      bad.ret = ::syscall(SYS_sysinfo, reinterpret_cast<void*>(8));
      bad.err = bad.ret < 0 ? errno : 0;
      (void)!::write(report_[1], &bad, sizeof bad);
      ::_exit(0);
    }
    child_channel_.reset();
    ::close(report_[1]);
    report_[1] = -1;
    ::close(go_[0]);
    go_[0] = -1;
  }

  // The child's listener, as the server receives it (10 s at most).
  UniqueFd receive_listener() {
    struct pollfd p = {channel_.get(), POLLIN, 0};
    if (::poll(&p, 1, 10'000) != 1) return {};
    bool closed = false;
    auto got = receive_sysinfo_listeners(channel_.get(), closed);
    return got.size() == 1 ? std::move(got.front()) : UniqueFd();
  }

  // One report of the child (60 s at most: a call that hangs fails here, it does not hang).
  std::optional<Seen> next_report() {
    struct pollfd p = {report_[0], POLLIN, 0};
    if (::poll(&p, 1, 60'000) != 1) return std::nullopt;
    Seen s;
    if (::read(report_[0], &s, sizeof s) != static_cast<ssize_t>(sizeof s)) return std::nullopt;
    return s;
  }

  // Waits (10 s at most) for a notification on `listener`.
  static bool notified(int listener) {
    struct pollfd p = {listener, POLLIN, 0};
    return ::poll(&p, 1, 10'000) == 1 && (p.revents & POLLIN);
  }

  SeccompProgram program_;
  UniqueFd channel_, child_channel_;
  int report_[2] = {-1, -1};
  int go_[2] = {-1, -1};
  pid_t pid_ = -1;
};

TEST_F(SysinfoNotifyTest, TheListenersNumbersReachTheCaller) {
  start_child(false);
  UniqueFd listener = receive_listener();
  ASSERT_TRUE(listener.valid()) << "no listener came over the channel";
  EXPECT_TRUE(is_seccomp_listener(listener.get()));
  pid_t asked_for = 0;
  auto numbers = [&](pid_t pid) -> Result<struct sysinfo> {
    asked_for = pid;
    struct sysinfo si {};
    si.totalram = 256ul << 20;
    si.freeram = 200ul << 20;
    si.mem_unit = 1;
    si.procs = 7;
    si.loads[0] = 3 * 65536;
    si.uptime = 42;
    return si;
  };
  ASSERT_TRUE(notified(listener.get()));
  auto first = answer_sysinfo_notification(listener.get(), "/proc", numbers);
  ASSERT_TRUE(first.ok()) << first.error().message();
  EXPECT_EQ(*first, SysinfoAnswer::kAnswered);
  EXPECT_EQ(asked_for, pid_) << "the caller's pid, in our pid namespace";
  auto seen = next_report();
  ASSERT_TRUE(seen);
  EXPECT_EQ(seen->ret, 0) << errno_name(seen->err);
  EXPECT_EQ(seen->totalram, 256ul << 20);
  EXPECT_EQ(seen->freeram, 200ul << 20);
  EXPECT_EQ(seen->mem_unit, 1u);
  EXPECT_EQ(seen->procs, 7);
  EXPECT_EQ(seen->load1, 3ul * 65536);
  EXPECT_EQ(seen->uptime, 42);
  // Its negative twin: a buffer the caller does not have is EFAULT, as the kernel says.
  ASSERT_TRUE(notified(listener.get()));
  auto second = answer_sysinfo_notification(listener.get(), "/proc", numbers);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(*second, SysinfoAnswer::kRefused);
  auto bad = next_report();
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->ret, -1);
  EXPECT_EQ(bad->err, EFAULT) << errno_name(bad->err);
}

// Without numbers the caller gets an error, never the kernel's (the host's) answer.
TEST_F(SysinfoNotifyTest, NoNumbersIsAnErrorNotTheHostsAnswer) {
  start_child(false);
  UniqueFd listener = receive_listener();
  ASSERT_TRUE(listener.valid());
  auto none = [](pid_t) -> Result<struct sysinfo> { return sys_error(EIO, "no cgroup"); };
  ASSERT_TRUE(notified(listener.get()));
  auto a = answer_sysinfo_notification(listener.get(), "/proc", none);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(*a, SysinfoAnswer::kRefused);
  auto seen = next_report();
  ASSERT_TRUE(seen);
  EXPECT_EQ(seen->ret, -1);
  EXPECT_EQ(seen->err, EIO) << errno_name(seen->err);
  EXPECT_EQ(seen->totalram, 0u);
}

// The listener closed before the call: ENOSYS at once.
TEST_F(SysinfoNotifyTest, AClosedListenerIsEnosysNotAHang) {
  start_child(true);
  UniqueFd listener = receive_listener();
  ASSERT_TRUE(listener.valid());
  listener.reset();
  ASSERT_EQ(::write(go_[1], "g", 1), 1);
  auto seen = next_report();
  ASSERT_TRUE(seen) << "sysinfo did not return within 60 s";
  EXPECT_EQ(seen->ret, -1);
  EXPECT_EQ(seen->err, ENOSYS) << errno_name(seen->err);
}

// The listener closed while the call waits in it: the kernel ends the wait with ENOSYS.
TEST_F(SysinfoNotifyTest, AListenerClosedWhileTheCallWaitsIsEnosysNotAHang) {
  start_child(false);
  UniqueFd listener = receive_listener();
  ASSERT_TRUE(listener.valid());
  ASSERT_TRUE(notified(listener.get())) << "the call never reached the listener";
  listener.reset();
  auto seen = next_report();
  ASSERT_TRUE(seen) << "sysinfo did not return within 60 s";
  EXPECT_EQ(seen->ret, -1);
  EXPECT_EQ(seen->err, ENOSYS) << errno_name(seen->err);
}

// A channel the views server no longer reads, full: the call's process fails with EAGAIN
// instead of waiting (a call started as a vfork child holds the supervisor until it execs,
// call_child.h), and says which step failed.
TEST_F(SysinfoNotifyTest, AFullChannelFailsTheCallInsteadOfHoldingIt) {
  UniqueFd null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(null.valid());
  // Filled without waiting (the socket non-blocking for that), then blocking again: only the
  // call's own MSG_DONTWAIT may keep it from waiting.
  const int flags = ::fcntl(child_channel_.get(), F_GETFL);
  ASSERT_EQ(::fcntl(child_channel_.get(), F_SETFL, flags | O_NONBLOCK), 0);
  int queued = 0;
  for (;; ++queued) {
    Status sent = send_byte_with_fd(child_channel_.get(), 's', null.get());
    if (!sent.ok()) {
      ASSERT_EQ(sent.error().err, EAGAIN) << sent.error().message();
      break;
    }
    ASSERT_LT(queued, 1 << 20) << "the channel never filled";
  }
  ASSERT_EQ(::fcntl(child_channel_.get(), F_SETFL, flags), 0);
  ASSERT_GT(queued, 0);
  int result[2];
  ASSERT_EQ(::pipe2(result, O_CLOEXEC), 0);
  pid_ = ::fork();
  ASSERT_GE(pid_, 0);
  if (pid_ == 0) {
    ChildError e{};
    const bool ok = restrict_to_program3(e);
    (void)!::write(result[1], &e, sizeof e);
    ::_exit(ok ? 1 : 0);
  }
  ::close(result[1]);
  struct pollfd p = {result[0], POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 10'000), 1) << "the call's process waited on the full channel";
  ChildError e{};
  ASSERT_EQ(::read(result[0], &e, sizeof e), static_cast<ssize_t>(sizeof e));
  ::close(result[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(pid_, &status, 0), pid_);
  pid_ = -1;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the restriction succeeded";
  EXPECT_EQ(e.err, EAGAIN);
  EXPECT_STREQ(e.step, "send the sysinfo listener");
}

// What the channel takes in: a seccomp listener, nothing else.
TEST_F(SysinfoNotifyTest, TheChannelKeepsOnlyListeners) {
  UniqueFd not_listener(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(send_byte_with_fd(child_channel_.get(), 's', not_listener.get()).ok());
  bool closed = false;
  EXPECT_TRUE(receive_sysinfo_listeners(channel_.get(), closed).empty());
  EXPECT_FALSE(closed);
  child_channel_.reset();
  EXPECT_TRUE(receive_sysinfo_listeners(channel_.get(), closed).empty());
  EXPECT_TRUE(closed) << "every sender gone: EOF";
}

}  // namespace
}  // namespace sandgate::providers
