// Host side of the supervisor: start it (clone, map ids, exec), then drive calls.
#include "providers/supervisor.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <linux/sched.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "core/fd.h"
#include "core/files.h"
#include "core/json.h"
#include "core/log.h"
#include "core/strings.h"
#include "providers/base_root.h"
#include "providers/seccomp_policy.h"
#include "providers/supervisor_protocol.h"

extern char** environ;

namespace sandgate::providers {

// The config is an internal wire format between this binary and its own supervisor: the struct
// mapping writes every field, and reading requires every field (a supervisor binary from
// another build fails at once, naming the field, instead of running with defaults).
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(BindMount, source, target)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(JailConfig, root_dir, workspace_host, workspace, home,
                                   readonly_mounts, base_paths, secrets_host, secrets, uid, gid,
                                   hostname, seccomp, tcp_connect_ports, tcp_connect_any,
                                   resolv_conf_host, proc_views_host, readwrite_mounts, tmp_host,
                                   new_network, drop_privileges, seccomp_full_width_compare,
                                   landlock)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(SupervisorConfig, isolate, contained, guest, jail, base_env,
                                   default_cwd, id_map_base)

Json to_json(const SupervisorConfig& c) { return Json(c); }

Result<SupervisorConfig> supervisor_config_from_json(const Json& j) {
  try {
    return j.get<SupervisorConfig>();
  } catch (const Json::exception& e) {
    return logic_error("read supervisor config", e.what());
  }
}

std::vector<std::string> supervisor_env() {
  std::vector<std::string> env = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin"};
  for (const char* name : {"ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS", "SANDGATE_LOG"})
    if (const char* v = std::getenv(name)) env.push_back(std::string(name) + "=" + v);
  return env;
}

namespace {

// CLONE_NEWCGROUP is not among them: the supervisor unshares its cgroup namespace when its
// config arrives, after it has been placed (Supervisor::start), so that the namespace is rooted
// at the run's own cgroup, not at sandgate's.
// CLONE_NEWNS neither: the supervisor makes its mount namespace when its config arrives
// (assemble_jail), so that its exec overlaps with the start of the run's /proc views, whose
// mount the jail binds (SupervisorConfig::before_config). Made from inside the new user
// namespace, it is owned by it and the host's mounts in it are locked, as with CLONE_NEWNS
// here; until then the supervisor, which has no capability in the host's user namespace,
// cannot change a mount of the host's.
constexpr uint64_t kCloneNamespaces =
    CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS;

Status write_id_maps(pid_t pid, uid_t base) {
  std::string map = "0 " + std::to_string(base) + " 65536\n";
  std::string dir = "/proc/" + std::to_string(pid);
  SG_TRY(write_file(dir + "/uid_map", map));
  SG_TRY(write_file(dir + "/gid_map", map));
  return {};
}

// What the clone child says when a step before its exec fails: the one channel between parent
// and child (nsjail's), read by the parent when the child went away without a word.
struct StartError {
  int err;
  char step[44];
};

// Both clone children below (raw system calls only): a failed step writes {errno, step} on
// `error_fd` and exits.
// Not instrumented: the supervisor's child runs them on a stack the sanitizer does not know,
// sharing the launcher's memory (clone_supervisor).
#define SANDGATE_CLONE_CHILD __attribute__((no_sanitize("address", "undefined")))

SANDGATE_CLONE_CHILD [[noreturn]] void child_fail(int error_fd, const char* step) {
  StartError e = {static_cast<int>(errno), {}};
  for (size_t i = 0; step[i] && i + 1 < sizeof e.step; ++i) e.step[i] = step[i];
  syscall(SYS_write, error_fd, &e, sizeof e);
  syscall(SYS_exit_group, 1);
  __builtin_unreachable();
}

// Waits for the host's go. Our copy of the go pipe's write end is closed first, so that a host
// that dies before its go gives EOF here and the child ends, instead of waiting on itself.
SANDGATE_CLONE_CHILD void child_wait_for_go(int go_fd, int go_write_fd, int error_fd) {
  syscall(SYS_close, go_write_fd);
  char byte;
  if (syscall(SYS_read, go_fd, &byte, 1) != 1) child_fail(error_fd, "wait for the host's go");
}

// The clone child: everything here runs between clone and execve, so only raw system calls,
// on memory prepared by the parent (no allocation, no locks, no glibc setxid broadcast). A
// failed step writes {errno, step} on `error_fd` (close-on-exec: a successful exec closes it
// with nothing written) and exits.
SANDGATE_CLONE_CHILD [[noreturn]] void supervisor_child(int go_fd, int go_write_fd, int control_fd,
                                                        int exe_fd, int error_fd, bool isolate,
                                                        char* const* argv, char* const* envp) {
  auto fail = [error_fd](const char* step) { child_fail(error_fd, step); };
  child_wait_for_go(go_fd, go_write_fd, error_fd);
  if (isolate) {
    // Become uid/gid 0 of the new user namespace (host id_map_base): until now the child still
    // carries the host's root credentials, and files it made would belong to host root.
    if (syscall(SYS_setgroups, 0, nullptr) != 0) fail("setgroups in the new user namespace");
    if (syscall(SYS_setresgid, 0, 0, 0) != 0) fail("setresgid 0 in the new user namespace");
    if (syscall(SYS_setresuid, 0, 0, 0) != 0) fail("setresuid 0 in the new user namespace");
  }
  // After the credential change, which would clear it: if sandgate dies, so does the run.
  syscall(SYS_prctl, PR_SET_PDEATHSIG, SIGTERM, 0, 0, 0);
  if (control_fd == 3) {
    syscall(SYS_fcntl, 3, F_SETFD, 0);
  } else if (syscall(SYS_dup3, control_fd, 3, 0) != 3) {
    fail("dup the control socket to fd 3");
  }
  int null_fd = static_cast<int>(syscall(SYS_open, "/dev/null", O_RDWR));
  if (null_fd >= 0) {
    syscall(SYS_dup3, null_fd, 0, 0);
    syscall(SYS_dup3, null_fd, 1, 0);
  }
  // execveat on an fd opened before the credential change: the binary may live under a
  // directory (say /root) that the unprivileged id cannot traverse.
  syscall(SYS_execveat, exe_fd, "", argv, envp, AT_EMPTY_PATH);
  fail("execveat the supervisor binary");
  __builtin_unreachable();
}

// Makes this thread's effective ids `owner` until destroyed: a user namespace created
// meanwhile is owned by `owner` (credentials are per thread in the kernel; the raw system
// calls change this thread's only, unlike glibc's wrappers, which change every thread's). The
// real and saved ids stay 0, so the way back needs no privilege.
class EffectiveIds {
 public:
  explicit EffectiveIds(uid_t owner) {
    dumpable_ = static_cast<int>(syscall(SYS_prctl, PR_GET_DUMPABLE, 0, 0, 0, 0));
    if (syscall(SYS_setresgid, -1, owner, -1) != 0) {
      err_ = errno;
      return;
    }
    if (syscall(SYS_setresuid, -1, owner, -1) != 0) {
      err_ = errno;
      (void)syscall(SYS_setresgid, -1, 0, -1);
      return;
    }
    active_ = true;
  }
  ~EffectiveIds() {
    if (!active_) return;
    // uid first: back to euid 0 restores the effective capabilities that setresgid needs.
    if (syscall(SYS_setresuid, -1, 0, -1) != 0 || syscall(SYS_setresgid, -1, 0, -1) != 0)
      std::abort();  // this thread would go on with the wrong credentials
    // A change of effective ids made the process non-dumpable; put it back.
    if (dumpable_ > 0) (void)syscall(SYS_prctl, PR_SET_DUMPABLE, dumpable_, 0, 0, 0);
  }
  int error() const { return err_; }

 private:
  bool active_ = false;
  int err_ = 0;
  int dumpable_ = 1;
};

// The supervisor's child shares the launcher's memory (CLONE_VM) until it execs: a fork of a
// large, many-threaded launcher (serve's sandgate-main) copied and write-protected every page
// table of its heap and thread stacks, and each of the launcher's writes until the exec took a
// copy-on-write fault: ~1.3 ms of a run's start, on the create's path. So the child reads
// nothing of the launcher's: its stack, its arguments and every string it passes to execveat
// are in this mapping, one per launching thread, reused once its last child has exec'd or been
// reaped (Supervisor::start returns only then). What it writes is its own stack, and errno on a
// failed step (it then exits, saying which step).
struct ChildArena {
  static constexpr size_t kSize = 256 * 1024;
  char* base = nullptr;
  ChildArena() {
    void* m = ::mmap(nullptr, kSize, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    base = m == MAP_FAILED ? nullptr : static_cast<char*>(m);
  }
  ~ChildArena() {
    if (base) ::munmap(base, kSize);
  }
};

struct SupervisorChildArgs {
  int go_fd, go_write_fd, control_fd, exe_fd, error_fd;
  bool isolate;
  char** argv;
  char** envp;
};

SANDGATE_CLONE_CHILD int supervisor_child_entry(void* p) {
  const auto* a = static_cast<const SupervisorChildArgs*>(p);
  supervisor_child(a->go_fd, a->go_write_fd, a->control_fd, a->exe_fd, a->error_fd, a->isolate,
                   a->argv, a->envp);
}

// `args`, its argv and envp copied into the arena's low end (the stack grows down from its
// top, 192 KiB above); null when they do not fit.
SupervisorChildArgs* place_in_arena(ChildArena& arena, SupervisorChildArgs args, char* const* argv,
                                    char* const* envp) {
  constexpr size_t kDataSize = 64 * 1024;
  size_t used = 0;
  auto take = [&](size_t n, size_t align) -> char* {
    used = (used + align - 1) / align * align;
    if (used + n > kDataSize) return nullptr;
    char* p = arena.base + used;
    used += n;
    return p;
  };
  auto copy_vector = [&](char* const* v) -> char** {
    size_t n = 0;
    while (v[n]) ++n;
    auto** out = reinterpret_cast<char**>(take((n + 1) * sizeof(char*), alignof(char*)));
    if (!out) return nullptr;
    for (size_t i = 0; i < n; ++i) {
      size_t len = std::strlen(v[i]) + 1;
      char* s = take(len, 1);
      if (!s) return nullptr;
      std::memcpy(s, v[i], len);
      out[i] = s;
    }
    out[n] = nullptr;
    return out;
  };
  auto* placed =
      reinterpret_cast<SupervisorChildArgs*>(take(sizeof args, alignof(SupervisorChildArgs)));
  if (!placed) return nullptr;
  args.argv = copy_vector(argv);
  args.envp = copy_vector(envp);
  if (!args.argv || !args.envp) return nullptr;
  *placed = args;
  return placed;
}

// `userns_owner` (not 0): the new user namespace is created as that host uid, which then owns
// it (SupervisorConfig::run_owns_user_namespace).
Result<ChildProcess> clone_supervisor(uint64_t flags, int go_fd, int go_write_fd, int control_fd,
                                      int exe_fd, int error_fd, bool isolate, uid_t userns_owner,
                                      char* const* argv, char* const* envp) {
  thread_local ChildArena arena;
  if (!arena.base) return sys_error(ENOMEM, "map the supervisor child's stack");
  SupervisorChildArgs* args = place_in_arena(
      arena, {go_fd, go_write_fd, control_fd, exe_fd, error_fd, isolate, nullptr, nullptr}, argv,
      envp);
  // Its environment is PATH and the sanitizer and log settings (supervisor_env).
  if (!args)
    return logic_error("start the run's supervisor",
                       "its arguments and environment exceed 64 KiB (ASAN_OPTIONS, UBSAN_OPTIONS, "
                       "LSAN_OPTIONS or SANDGATE_LOG too long?)");
  int pidfd = -1;
  long pid;
  {
    std::optional<EffectiveIds> as_owner;
    if (userns_owner != 0) {
      as_owner.emplace(userns_owner);
      if (as_owner->error() != 0)
        return sys_error(as_owner->error(), "take the run's host ids to create its user namespace",
                         std::to_string(userns_owner));
    }
    pid = ::clone(supervisor_child_entry, arena.base + ChildArena::kSize,
                  static_cast<int>(flags) | CLONE_VM | CLONE_PIDFD | SIGCHLD, args, &pidfd);
  }
  if (pid < 0) return sys_error("clone", isolate ? "new user/pid/net/ipc/uts namespaces" : "");
  return ChildProcess(static_cast<pid_t>(pid), UniqueFd(pidfd));
}

// The runtime's child (ContainedLaunch with an owner, an environment or cgroups): between clone
// and execve, so raw system calls only, on memory the parent prepared. A failed step writes
// {errno, step} on `error_fd` (close-on-exec: a successful exec closes it with nothing written).
[[noreturn]] void runtime_child(int go_fd, int go_write_fd, int control_fd, int out_fd,
                                int error_fd, bool own_userns, bool new_session, const char* path,
                                char* const* argv, char* const* envp) {
  auto fail = [error_fd](const char* step) { child_fail(error_fd, step); };
  child_wait_for_go(go_fd, go_write_fd, error_fd);
  // A foreground runtime: the terminal's signals (^C to sandgate's group) are sandgate's to
  // handle, by destroying the run, not the runtime's.
  if (new_session && syscall(SYS_setsid) < 0) fail("setsid for the runtime");
  if (own_userns) {
    // uid/gid 0 of the new user namespace (the owner's host id): until now the child still
    // carries the host's real root ids, which are not mapped in it.
    if (syscall(SYS_setgroups, 0, nullptr) != 0) fail("setgroups in the runtime's namespace");
    if (syscall(SYS_setresgid, 0, 0, 0) != 0) fail("setresgid 0 in the runtime's namespace");
    if (syscall(SYS_setresuid, 0, 0, 0) != 0) fail("setresuid 0 in the runtime's namespace");
  }
  if (control_fd == 3) {
    syscall(SYS_fcntl, 3, F_SETFD, 0);
  } else if (syscall(SYS_dup3, control_fd, 3, 0) != 3) {
    fail("dup the control socket to fd 3");
  }
  int null_fd = static_cast<int>(syscall(SYS_open, "/dev/null", O_RDONLY));
  if (null_fd >= 0) syscall(SYS_dup3, null_fd, 0, 0);
  syscall(SYS_dup3, out_fd, 1, 0);
  syscall(SYS_dup3, out_fd, 2, 0);
  // Everything else goes, but the error channel (close-on-exec) stays until the exec.
  if (error_fd > 4) syscall(SYS_close_range, 4, error_fd - 1, 0);
  syscall(SYS_close_range, error_fd + 1, ~0U, 0);
  // The launcher's working directory may be one the owner cannot enter.
  if (syscall(SYS_chdir, "/") != 0) fail("chdir / before the runtime");
  syscall(SYS_execve, path, argv, envp);
  fail("execve the runtime");
  __builtin_unreachable();
}

// Starts the runtime's run command as ContainedLaunch asks: in a new user and mount namespace
// owned by launch.userns_owner (maps written here), in launch.cgroup_dirs, with launch.env.
// Returns its pid (our child); the caller reads its output and reaps it.
Result<pid_t> spawn_runtime(const ContainedLaunch& launch, std::vector<std::string>& argv_s,
                            int control_fd, int out_fd, int error_fd) {
  // The child keeps the error channel open past fds 0-3, which it rearranges.
  if (error_fd < 4) return logic_error("start the runtime", "the error pipe must be above fd 3");
  if (argv_s.empty() || argv_s[0].empty() || argv_s[0][0] != '/')
    return logic_error("start the runtime", "the runtime must be named by an absolute path",
                       argv_s.empty() ? "" : argv_s[0]);
  std::vector<std::string> env_s = launch.env;
  std::vector<char*> argv, envp;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  if (env_s.empty()) {
    for (char** e = environ; e && *e; ++e) envp.push_back(*e);
  } else {
    for (auto& e : env_s) envp.push_back(e.data());
  }
  envp.push_back(nullptr);
  SG_ASSIGN_OR_RETURN(Pipe go, make_pipe(O_CLOEXEC));
  const bool own_userns = launch.userns_owner != 0;
  struct clone_args args = {};
  args.flags = own_userns ? (CLONE_NEWUSER | CLONE_NEWNS) : 0;
  args.exit_signal = SIGCHLD;
  long pid;
  {
    // The namespace is owned by the effective uid that creates it.
    std::optional<EffectiveIds> as_owner;
    if (own_userns) {
      as_owner.emplace(launch.userns_owner);
      if (as_owner->error() != 0)
        return sys_error(as_owner->error(), "take the run's host ids to create its user namespace",
                         std::to_string(launch.userns_owner));
    }
    pid = syscall(SYS_clone3, &args, sizeof args);
    if (pid == 0)
      runtime_child(go.read.get(), go.write.get(), control_fd, out_fd, error_fd, own_userns,
                    !launch.foreground_output.empty(), argv[0], argv.data(), envp.data());
  }
  if (pid < 0) return sys_error("clone3", own_userns ? "new user and mount namespace" : "");
  go.read.reset();
  auto undo = [&](Error e) -> Error {
    ::kill(static_cast<pid_t>(pid), SIGKILL);
    while (::waitpid(static_cast<pid_t>(pid), nullptr, 0) < 0 && errno == EINTR) {
    }
    return e;
  };
  if (own_userns) {
    if (auto st = write_id_maps(static_cast<pid_t>(pid), launch.userns_owner); !st.ok())
      return undo(std::move(st).error().context_add("map the runtime's user namespace"));
  }
  for (const auto& dir : launch.cgroup_dirs) {
    if (auto st = write_file(dir + "/cgroup.procs", std::to_string(pid)); !st.ok())
      return undo(std::move(st).error().context_add("place the runtime in the run's cgroup"));
  }
  if (auto st = write_all(go.write.get(), "g"); !st.ok()) return undo(std::move(st).error());
  return static_cast<pid_t>(pid);
}

// Waits until the supervisor's child has exec'd: its end of the error pipe, close-on-exec,
// closes then (a hang-up with nothing to read). A word there means a step before the exec
// failed, and `went_away` reads it.
Status wait_for_exec(int error_fd, const std::function<Error(const Error&)>& went_away) {
  struct pollfd p = {error_fd, POLLIN, 0};
  int ready;
  while ((ready = ::poll(&p, 1, 10'000)) < 0 && errno == EINTR) {
  }
  if (ready < 0) return sys_error("poll the supervisor's start");
  if (ready == 0) return logic_error("start supervisor", "it had not exec'd after 10 s");
  int pending = 0;
  if (::ioctl(error_fd, FIONREAD, &pending) != 0) return sys_error("FIONREAD on the error pipe");
  if (pending > 0) return went_away(logic_error("start supervisor", "it failed before its exec"));
  return {};
}

}  // namespace

Result<Supervisor> Supervisor::start(const SupervisorConfig& config, const Placement& placement,
                                     RunState& state, const std::string& exe_path) {
  Supervisor s;
  s.isolate_ = config.isolate;
  StepClock clock("supervisor", "start");

  // Everything the child touches is prepared here, before clone.
  SG_ASSIGN_OR_RETURN(auto control, make_control_pair());
  SG_ASSIGN_OR_RETURN(Pipe go, make_pipe(O_CLOEXEC));
  SG_ASSIGN_OR_RETURN(Pipe start_error, make_pipe(O_CLOEXEC));
  SG_ASSIGN_OR_RETURN(UniqueFd exe,
                      open_fd(exe_path.empty() ? "/proc/self/exe" : exe_path, O_PATH));
  std::vector<std::string> argv_s = {"sandgate-supervisor", kSupervisorArg, "3"};
  std::vector<std::string> env_s = supervisor_env();
  std::vector<char*> argv, envp;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);

  uint64_t flags = 0;
  if (config.isolate) {
    flags = kCloneNamespaces;
    // share_host_network (test-only weakening): the run stays in the launcher's network.
    if (!config.jail.new_network) flags &= ~static_cast<uint64_t>(CLONE_NEWNET);
  }
  SG_ASSIGN_OR_RETURN(
      s.process_,
      clone_supervisor(flags, go.read.get(), go.write.get(), control.second.get(), exe.get(),
                       start_error.write.get(), config.isolate,
                       config.isolate && config.run_owns_user_namespace ? config.id_map_base : 0,
                       argv.data(), envp.data()));
  control.second.reset();
  go.read.reset();
  start_error.write.reset();
  s.control_ = std::move(control.first);
  clock.lap("clone");

  Resource proc{Resource::Kind::kProcess, "", s.process_.pid(),
                process_start_time("/proc", s.process_.pid()).value_or(0)};
  SG_TRY(std::move(state.record(proc)).context("record supervisor process"));
  clock.lap("record");
  if (config.isolate)
    SG_TRY(std::move(write_id_maps(s.process_.pid(), config.id_map_base)).context("map user ids"));
  clock.lap("id-maps");
  SG_TRY(write_all(go.write.get(), "g"));
  go.write.reset();

  // The child died before exec (it said which step on the error pipe) or after (the
  // supervisor itself failed before it could answer): either way the host learns why.
  auto went_away = [&](const Error& transport) -> Error {
    StartError e{};
    ssize_t n;
    while ((n = ::read(start_error.read.get(), &e, sizeof e)) < 0 && errno == EINTR) {
    }
    if (n == static_cast<ssize_t>(sizeof e)) {
      e.step[sizeof e.step - 1] = 0;
      return sys_error(e.err, e.step).context_add("starting the run's supervisor");
    }
    auto st = s.process_.wait_for(std::chrono::seconds(2));
    std::string why = st.ok() && st->has_value() ? (*st)->describe() : "no exit status";
    return logic_error("start supervisor", "the supervisor exited during start-up (" + why +
                                               ") after " + transport.message());
  };
  if (config.before_config) {
    // Meanwhile the supervisor execs. A failure here ends it (ChildProcess kills and reaps).
    SG_TRY(config.before_config(s.process_.pid()));
    clock.lap("before-config");
  }
  // A jail's set-up (its mounts, Landlock: ~1 ms) overlaps its placement, which on a hybrid
  // host without favordynmods waits for an RCU grace period (5-20 ms on a small VM): the
  // config goes first, and the supervisor makes its cgroup namespace, rooted where it then is,
  // only when told it is placed. What the set-up allocates until then (the root tmpfs's few
  // /etc files, the mounts) is charged to sandgate's own cgroup, not the run's.
  const bool placed_during_setup = config.isolate && !placement.cgroup_dirs.empty();
  // A set-up that failed meanwhile ends the supervisor, which fails its placement: what it
  // said (the "error" it sent before it exited, read as await_ready reads it) is the reason.
  // Nothing to read: `e`.
  auto said_or = [&](Error e) -> Error {
    struct pollfd p = {s.control_.get(), POLLIN, 0};
    if (!placed_during_setup || ::poll(&p, 1, 0) <= 0 || !(p.revents & POLLIN)) return e;
    Status said = await_ready(s, went_away, std::nullopt);
    return said.ok() ? e : std::move(said).error();
  };
  if (placed_during_setup) {
    SG_TRY(send_config(s, config, true, went_away));
    clock.lap("config");
  }
  // Placed only once it has exec'd: until then the child shares this process's memory, and
  // in the run's memory cgroups an OOM there (the run's, or its tenant's with other runs in
  // it) would score it by this process's size and take this process, a memory sharer, with
  // it.
  if (!placement.cgroup_dirs.empty()) {
    SG_TRY(wait_for_exec(start_error.read.get(), went_away));
    clock.lap("exec");
    for (const auto& dir : placement.cgroup_dirs) {
      auto placed = write_file(dir + "/cgroup.procs", std::to_string(s.process_.pid()));
      if (!placed.ok())
        return said_or(
            std::move(placed).error().context_add("place the run's supervisor in its cgroup"));
    }
    clock.lap("place");
  }
  if (placed_during_setup) {
    if (auto sent = send_message(s.control_.get(), {{"op", "placed"}}); !sent.ok())
      return said_or(went_away(sent.error()));
    SG_TRY(await_ready(s, went_away, std::nullopt));
  } else {
    SG_TRY(configure(s, config, went_away));
  }
  clock.lap("config-ready");
  return s;
}

Status Supervisor::configure(Supervisor& s, const SupervisorConfig& config,
                             const std::function<Error(const Error&)>& went_away,
                             std::optional<std::chrono::steady_clock::time_point> deadline) {
  SG_TRY(send_config(s, config, false, went_away));
  return await_ready(s, went_away, deadline);
}

Status Supervisor::send_config(Supervisor& s, const SupervisorConfig& config,
                               bool placed_during_setup,
                               const std::function<Error(const Error&)>& went_away) {
  StepClock clock("supervisor", "send config");
  // The fds, named in the message in the order they are attached.
  std::vector<int> fds;
  Json named = Json::array();
  if ((config.isolate || config.contained) && config.jail.seccomp) {
    SG_ASSIGN_OR_RETURN(int program,
                        compiled_seccomp_program_fd(
                            {.full_width_compare = config.jail.seccomp_full_width_compare}));
    fds.push_back(program);
    named.push_back("seccomp_program");
    // Only under the filter: the listener is made by its third program.
    if (config.sysinfo_channel && config.sysinfo_channel->valid()) {
      fds.push_back(config.sysinfo_channel->get());
      named.push_back("sysinfo_channel");
    }
    clock.lap("seccomp");
  }
  // The jail attaches a clone of it where it would copy the links (base_root.h); without it
  // (an older kernel), it copies them.
  std::shared_ptr<const UniqueFd> alternatives;
  if (config.isolate) {
    if (auto shared = shared_alternatives_mount(); shared.ok() && *shared) {
      alternatives = std::move(shared).value();
      fds.push_back(alternatives->get());
      named.push_back("alternatives");
    }
    clock.lap("alternatives");
  }
  Json message = {{"op", "config"}, {"config", to_json(config)}, {"fds", named}};
  if (placed_during_setup) message["placed_during_setup"] = true;
  if (auto sent = send_message(s.control_.get(), message, fds); !sent.ok())
    return went_away(sent.error());
  clock.lap("send");
  return {};
}

Status Supervisor::await_ready(Supervisor& s, const std::function<Error(const Error&)>& went_away,
                               std::optional<std::chrono::steady_clock::time_point> deadline) {
  StepClock clock("supervisor", "await ready");
  if (deadline) {
    while (true) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          *deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return sys_error(ETIMEDOUT, "wait for the supervisor's \"ready\"");
      struct pollfd fd = {s.control_.get(), POLLIN, 0};
      int r = ::poll(&fd, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
      if (r < 0 && errno != EINTR) return sys_error("poll", "the supervisor's control socket");
      if (r > 0) break;  // a message, or the socket's end: recv_message says which
    }
  }
  auto reply = recv_message(s.control_.get());
  clock.lap("ready");
  if (!reply.ok()) return went_away(reply.error());
  auto ev = read_supervisor_event(reply->body);
  if (!ev.ok()) return std::move(ev).error().context_add("start supervisor");
  if (ev->op == "error") {
    Error e = ev->error;
    e.context.push_back("assembling the sandbox");
    return e;
  }
  if (ev->op != "ready")
    return logic_error("start supervisor", "unexpected reply '" + excerpt(ev->op) + "'");
  // A contained supervisor is not our child: its host pid comes with "ready" (the kernel adds
  // the sender's credentials for a receiver with SO_PASSCRED, translated into our namespace).
  if (s.contained_) s.contained_pid_ = reply->sender_pid;
  s.landlock_abi_ = ev->landlock_abi;
  if (auto steps = reply->body.find("setup_ms");
      steps != reply->body.end() && steps->is_string() && spdlog::should_log(spdlog::level::debug))
    spdlog::debug("supervisor set-up (ms): {}", excerpt(steps->get<std::string>(), 1024));
  if (reply->body.contains("landlock_missing")) {
    // Said once per process: the jail still runs, with one promise fewer.
    static std::atomic<bool> said{false};
    if (!said.exchange(true))
      spdlog::warn(
          "no Landlock on this kernel ({}): calls run without that layer (no proc.landlock) "
          "and can lower the OOM priority they are given",
          excerpt(ev->landlock_missing));
  }
  return {};
}

namespace {

// A launcher's output until EOF, the first 16 KiB kept (the runtime's own error message when
// it refuses; the rest is drained so the launcher never blocks on a full pipe).
std::string read_launcher_output(int fd) {
  std::string output;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) != 0) {
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (output.size() < 16384) output.append(buf, static_cast<size_t>(n));
  }
  return output;
}

// The first `limit` bytes of a runtime's output file ("" when unreadable), without trailing
// newlines.
std::string read_runtime_output(const std::string& path, size_t limit = 16384) {
  auto text = read_file(path, limit);
  std::string out = text.ok() ? std::move(text).value() : std::string();
  if (out.size() > limit) out.resize(limit);
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// The processes of a stuck runtime, for the error that kills it: `root` and its descendants,
// and every process whose command line carries `marker` (the container's name: Podman's conmon
// and cleanup processes leave the runtime's tree when they daemonize) with its descendants (the
// OCI runtime, the container's processes). Each "pid comm state wchan" (wchan: where in the
// kernel it sleeps), so that a hang names the process and the wait it is in (a lock, a pipe, a
// cgroup write) instead of only a timeout.
std::string describe_process_tree(pid_t root, const std::string& marker) {
  std::map<pid_t, std::vector<pid_t>> children;
  std::vector<pid_t> todo = {root};
  if (DIR* d = ::opendir("/proc")) {
    while (struct dirent* e = ::readdir(d)) {
      pid_t pid = static_cast<pid_t>(std::strtol(e->d_name, nullptr, 10));
      if (pid <= 0) continue;
      auto stat = read_file("/proc/" + std::to_string(pid) + "/stat");
      if (!stat.ok()) continue;
      auto close = stat->rfind(')');
      if (close == std::string::npos) continue;
      // After ") ": state, then ppid.
      std::istringstream rest(stat->substr(close + 2));
      std::string state;
      pid_t ppid = 0;
      rest >> state >> ppid;
      children[ppid].push_back(pid);
      if (!marker.empty() && pid != root) {
        auto cmdline = read_file("/proc/" + std::to_string(pid) + "/cmdline", 64 << 10);
        if (cmdline.ok() && cmdline->find(marker) != std::string::npos) todo.push_back(pid);
      }
    }
    ::closedir(d);
  }
  std::string out;
  std::set<pid_t> seen;
  for (size_t i = 0; i < todo.size() && seen.size() < 64; ++i) {
    pid_t pid = todo[i];
    if (!seen.insert(pid).second) continue;
    std::string dir = "/proc/" + std::to_string(pid);
    auto stat = read_file(dir + "/stat");
    if (!stat.ok()) continue;
    auto open = stat->find('('), close = stat->rfind(')');
    std::string comm = open != std::string::npos && close != std::string::npos
                           ? stat->substr(open + 1, close - open - 1)
                           : "?";
    std::string state = close != std::string::npos ? stat->substr(close + 2, 1) : "?";
    auto wchan = read_file(dir + "/wchan");
    out += (out.empty() ? "" : "; ") + std::to_string(pid) + " " + comm + " " + state + " " +
           (wchan.ok() && !wchan->empty() ? *wchan : "-");
    for (pid_t c : children[pid]) todo.push_back(c);
  }
  return out.empty() ? "(gone)" : out;
}

}  // namespace

Result<CommandResult> run_contained_runtime(const ContainedLaunch& launch) {
  std::vector<std::string> argv = launch.argv;
  SG_ASSIGN_OR_RETURN(UniqueFd null_fd, open_fd("/dev/null", O_RDONLY | O_CLOEXEC));
  SG_ASSIGN_OR_RETURN(auto out, make_pipe(O_CLOEXEC));
  SG_ASSIGN_OR_RETURN(Pipe start_error, make_pipe(O_CLOEXEC));
  SG_ASSIGN_OR_RETURN(pid_t pid, spawn_runtime(launch, argv, null_fd.get(), out.write.get(),
                                               start_error.write.get()));
  out.write.reset();
  start_error.write.reset();
  CommandResult result;
  result.output = read_launcher_output(out.read.get());
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  result.status = ExitStatus::from_wait_status(status);
  StartError e{};
  if (::read(start_error.read.get(), &e, sizeof e) == static_cast<ssize_t>(sizeof e)) {
    e.step[sizeof e.step - 1] = 0;
    return sys_error(e.err, e.step, argv[0]);
  }
  return result;
}

Result<Supervisor> Supervisor::start_contained(const SupervisorConfig& config,
                                               const ContainedLaunch& launch) {
  const auto began = std::chrono::steady_clock::now();
  Supervisor s;
  s.contained_ = true;
  const bool foreground = !launch.foreground_output.empty();
  SG_ASSIGN_OR_RETURN(auto control, make_control_pair());
  // The runtime passes fd 3 into the container (--preserve-fds): the launcher gets our end's
  // twin there, and nothing else of ours (spawn() closes the rest at exec).
  std::vector<std::string> argv = launch.argv;
  for (const char* a : {kSupervisorArg, "3"}) argv.emplace_back(a);
  // Where the runtime's output goes: a pipe read to its end for a runtime that returns, a file
  // for one that stays (nobody reads while it runs).
  Pipe out;
  UniqueFd out_file;
  int out_fd = -1;
  if (foreground) {
    SG_ASSIGN_OR_RETURN(out_file,
                        open_fd(launch.foreground_output,
                                O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600));
    out_fd = out_file.get();
  } else {
    SG_ASSIGN_OR_RETURN(out, make_pipe(O_CLOEXEC));
    out_fd = out.write.get();
  }
  // The child's {errno, step} when a step before the runtime's exec fails.
  SG_ASSIGN_OR_RETURN(Pipe start_error, make_pipe(O_CLOEXEC));
  // Always through spawn_runtime: raw system calls between clone and exec, on memory prepared
  // before. A plain fork whose child built its argv (malloc) could hang for good in a process
  // with other threads: the controller's reaper making the run's first spare cgroup at that
  // moment held the (sanitizer's) allocator lock, and the child waited on it forever (a rootful
  // Podman test that timed out in CI).
  SG_ASSIGN_OR_RETURN(pid_t pid, spawn_runtime(launch, argv, control.second.get(), out_fd,
                                               start_error.write.get()));
  control.second.reset();
  out.write.reset();
  out_file.reset();
  start_error.write.reset();
  s.control_ = std::move(control.first);
  // Why the runtime failed: the child's own report of a step before exec, or the runtime's
  // status and output.
  auto runtime_failed = [&](const ExitStatus& st, const std::string& output) -> Error {
    StartError e{};
    ssize_t got;
    while ((got = ::read(start_error.read.get(), &e, sizeof e)) < 0 && errno == EINTR) {
    }
    if (got == static_cast<ssize_t>(sizeof e)) {
      e.step[sizeof e.step - 1] = 0;
      return sys_error(e.err, e.step, argv[0]).context_add("start the contained supervisor");
    }
    return logic_error("start the contained supervisor",
                       argv[0] + " (the runtime's run) failed (" + st.describe() + "): " + output);
  };
  if (foreground) {
    auto pidfd = pidfd_open(pid);
    s.runtime_ = ChildProcess(pid, pidfd.ok() ? std::move(pidfd).value() : UniqueFd());
    s.runtime_output_ = launch.foreground_output;
    s.runtime_grace_ = launch.stop_grace;
  } else {
    // The launcher's output, bounded: the runtime's own error message when it refuses.
    std::string output = read_launcher_output(out.read.get());
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    auto st = ExitStatus::from_wait_status(status);
    while (!output.empty() && output.back() == '\n') output.pop_back();
    if (!st.exited || st.code != 0) return runtime_failed(st, output);
  }
  if (launch.while_starting) {
    if (auto done = launch.while_starting(); !done.ok()) {
      if (s.runtime_.running()) ::kill(-s.runtime_.pid(), SIGKILL);
      s.runtime_.kill_and_reap();
      return std::move(done).error().context_add("start the contained supervisor");
    }
  }
  auto ran = std::chrono::steady_clock::now();
  auto went_away = [&](const Error& transport) -> Error {
    return logic_error(
        "start the contained supervisor",
        "the supervisor in the container went away during start-up: " + transport.message());
  };
  if (auto configured = configure(s, config, went_away, began + launch.start_timeout);
      !configured.ok()) {
    if (configured.error().err == ETIMEDOUT) {
      // Stuck (a lock, a hung storage): what each of its processes waits on is said first;
      // then the runtime's session goes (it leads it, and is our unreaped child, so the group
      // id is still its own); the container, if one was made, is removed by the provider from
      // the run's record.
      std::string name;  // the container's, which its daemonized helpers carry in argv
      for (size_t i = 0; i + 1 < launch.argv.size(); ++i)
        if (launch.argv[i] == "--name") name = launch.argv[i + 1];
      std::string stuck = s.runtime_.running() ? describe_process_tree(s.runtime_.pid(), name) : "";
      if (s.runtime_.running()) ::kill(-s.runtime_.pid(), SIGKILL);
      s.runtime_.kill_and_reap();
      auto seconds = std::chrono::duration<double>(launch.start_timeout).count();
      std::string output =
          foreground ? read_runtime_output(s.runtime_output_) : std::string("(not read)");
      return logic_error("start the contained supervisor",
                         fmt::format("{} (the runtime's run) did not start the container's "
                                     "supervisor within {:g} s; killed. Its processes (pid "
                                     "command state wait): {}. Its output: {}",
                                     argv[0], seconds, stuck.empty() ? "(none)" : stuck,
                                     output.empty() ? "(none)" : output));
    }
    if (!foreground) return std::move(configured).error();
    // The runtime holds its copy of the control socket until it exits: a supervisor that went
    // away means a runtime that is ending (or failed to start the container). Its status says
    // which, and its output why.
    s.control_.reset();
    auto st = s.runtime_.wait_for(launch.stop_grace);
    if (!st.ok() || !st->has_value()) {
      s.runtime_.kill_and_reap();
      return std::move(configured).error();
    }
    if (!(*st)->exited || (*st)->code != 0)
      return runtime_failed(**st, read_runtime_output(s.runtime_output_));
    return std::move(configured).error();
  }
  spdlog::debug(
      "contained supervisor: runtime {:.1f} ms, handshake {:.1f} ms",
      std::chrono::duration<double, std::milli>(ran - began).count(),
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - ran).count());
  return s;
}

Result<Supervisor> Supervisor::attach(const SupervisorConfig& config, UniqueFd control) {
  Supervisor s;
  s.contained_ = true;
  s.control_ = std::move(control);
  auto went_away = [&](const Error& transport) -> Error {
    return logic_error("start the guest's supervisor",
                       "the guest went away during start-up: " + transport.message());
  };
  SG_TRY(configure(s, config, went_away));
  return s;
}

Result<ExecResult> Supervisor::exec(const Call& call, const Placement& placement) {
  if (!running()) return logic_error("exec", "the run's supervisor is not running");
  if (call.argv.empty()) return logic_error("exec", "empty command");

  ExecResult result;
  StepClock clock("supervisor", "exec");  // SANDGATE_LOG=debug: a call's round trips
  // Only our read ends are non-blocking: the call writes to ordinary blocking pipes.
  SG_ASSIGN_OR_RETURN(Pipe out, make_pipe(O_CLOEXEC));
  SG_ASSIGN_OR_RETURN(Pipe err, make_pipe(O_CLOEXEC));
  for (int fd : {out.read.get(), err.read.get()})
    if (::fcntl(fd, F_SETFL, O_NONBLOCK) != 0) return sys_error("fcntl O_NONBLOCK");
  uint64_t id = next_call_++;
  // Parked before exec until placed in its cgroups, and until on_started has looked at it.
  // Also a call started in the parked process that is already in them: the host checks which
  // process started before it lets it go.
  bool wait_for_go = !placement.cgroup_dirs.empty() || static_cast<bool>(call.on_started);
  Json rlimits = Json::object();
  if (call.rlimits.open_files) rlimits["open_files"] = *call.rlimits.open_files;
  if (call.rlimits.file_size) rlimits["file_size"] = *call.rlimits.file_size;
  Json request = {{"op", "exec"},      {"id", id},        {"argv", call.argv},
                  {"env", call.env},   {"cwd", call.cwd}, {"wait_for_go", wait_for_go},
                  {"rlimits", rlimits}};
  // A microVM's guest agent takes it off before its supervisor sees the request.
  if (!call.guest_control.is_null()) request["guest_control"] = call.guest_control;
  if (call.resident) request["resident"] = true;
  // The parked process is this call's when the controller put it in the call's cgroups ahead
  // (a resident process, or a call that came before it was placed, starts as usual, and the
  // process stays parked). Used or gone, it is no longer parked.
  //
  // Such a call needs no "go" from the host when nothing waits to look at it (no on_started):
  // the supervisor releases it at once (go_if_parked), which takes a round trip off the call's
  // critical path. Its "started" is still checked below: a call released ahead anywhere but in
  // the placed process would run outside its cgroups, and is killed.
  bool go_if_parked = false;
  if (parked_ && placement.placed_pid > 0 && placement.placed_pid == parked_->host_pid) {
    request["parked"] = parked_->id;
    parked_.reset();
    go_if_parked = wait_for_go && !call.on_started;
    if (go_if_parked) request["go_if_parked"] = true;
  }
  std::optional<uint64_t> park_next;
  if (call.park_next && !parked_) {
    park_next = next_call_++;
    request["park_next"] = *park_next;
    late_park_.reset();
  }
  // The caller's stdin, if it gives one, travels as a third descriptor.
  std::vector<int> fds = {out.write.get(), err.write.get()};
  if (call.stdin_fd >= 0) {
    request["stdin"] = true;
    fds.push_back(call.stdin_fd);
  }
  SG_TRY(send_message(control_.get(), request, fds));
  out.write.reset();
  err.write.reset();
  clock.lap("send");

  auto start = std::chrono::steady_clock::now();
  auto deadline = std::chrono::steady_clock::time_point::max();
  if (call.timeout.count() > 0) deadline = start + call.timeout;

  // Up to output_limit bytes are kept, plus a few more as look-ahead so that the cut can be
  // moved back to a character boundary when the capture ends (finish_capture): a limit that
  // split a UTF-8 sequence would leave an invalid byte at the end of the text.
  constexpr size_t kLookahead = 3;
  auto take = [&](int fd, std::string& data, uint64_t& count, bool& truncated) {
    char buf[16384];
    for (;;) {
      ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return n == 0;  // true at EOF
      if (call.on_output)
        call.on_output(&data == &result.stdout_data ? 1 : 2,
                       std::string_view(buf, static_cast<size_t>(n)));
      count += static_cast<uint64_t>(n);
      size_t keep = call.output_limit + kLookahead;
      size_t room = keep > data.size() ? keep - data.size() : 0;
      data.append(buf, std::min(room, static_cast<size_t>(n)));
      if (count > call.output_limit) truncated = true;
    }
  };
  auto finish_capture = [&](std::string& data, bool truncated) {
    if (truncated) data.resize(utf8_safe_cut(data, call.output_limit));
  };
  auto kill_call = [&](int sig) {
    return send_message(control_.get(), {{"op", "kill"}, {"id", id}, {"signal", sig}});
  };

  bool out_open = true, err_open = true, exited = false;
  while (!exited) {
    struct pollfd fds[4] = {{control_.get(), POLLIN, 0},
                            {out_open ? out.read.get() : -1, POLLIN, 0},
                            {err_open ? err.read.get() : -1, POLLIN, 0},
                            {call.cancel_fd, POLLIN, 0}};
    int timeout_ms = -1;
    if (deadline != std::chrono::steady_clock::time_point::max() && !result.timed_out) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      timeout_ms = static_cast<int>(std::max<int64_t>(0, left.count() + 1));
    }
    int r = ::poll(fds, 4, timeout_ms);
    if (r < 0) {
      if (errno == EINTR) continue;
      return sys_error("poll");
    }
    if (r == 0 && !result.timed_out) {
      result.timed_out = true;
      SG_TRY(kill_call(SIGKILL));
      continue;
    }
    if (fds[1].revents)
      out_open =
          !take(out.read.get(), result.stdout_data, result.stdout_bytes, result.stdout_truncated);
    if (fds[2].revents)
      err_open =
          !take(err.read.get(), result.stderr_data, result.stderr_bytes, result.stderr_truncated);
    if (fds[3].revents && !result.cancelled) {
      result.cancelled = true;
      SG_TRY(kill_call(SIGKILL));
    }
    if (fds[0].revents) {
      auto msg = recv_message(control_.get());
      if (!msg.ok()) {
        (void)stop();
        return std::move(msg).error().context_add("the run's supervisor went away during a call");
      }
      // A message that cannot be read is the sandbox misbehaving: the call is killed and
      // the run's supervisor stopped, as when it goes away.
      auto ev = read_supervisor_event(msg->body);
      if (!ev.ok()) {
        (void)kill_call(SIGKILL);
        (void)stop();
        return std::move(ev).error().context_add("the run's supervisor during a call");
      }
      const std::string& op = ev->op;
      if (park_next && ev->id == *park_next) {
        // The next call's process, parked while this one runs; a failure to park only means
        // the next call forks as usual.
        if (op == "parked" && msg->sender_pid > 0) parked_ = Parked{*park_next, msg->sender_pid};
        continue;
      }
      if (late_park_ && ev->id == *late_park_) {
        // The late word of a park an earlier call asked for (take_late_parked was not asked).
        late_park_.reset();
        if (op == "parked" && msg->sender_pid > 0) parked_ = Parked{ev->id, msg->sender_pid};
        continue;
      }
      if (ev->id != id) continue;
      if (op == "started") {
        clock.lap("started");
        result.host_pid = msg->sender_pid;
        // A microVM's guest agent could not put the call in its cgroup there (or give it its
        // grant): the call was killed parked, as a host placement failure below.
        if (auto e = msg->body.find("guest_cgroup_error");
            e != msg->body.end() && e->is_string()) {
          (void)kill_call(SIGKILL);
          return logic_error("place call in its cgroup inside the guest",
                             e->get<std::string>().substr(0, 2000));
        }
        if (!wait_for_go) continue;
        // Already cancelled or timed out while starting: it was killed parked, never placed.
        if (result.cancelled || result.timed_out) continue;
        // Placement: the call is parked before exec until it is in every cgroup it belongs to;
        // the parked process the controller placed ahead is there already.
        const bool placed_ahead =
            ev->in_parked && placement.placed_pid > 0 && placement.placed_pid == result.host_pid;
        if (go_if_parked && ev->in_parked) {
          if (placed_ahead) continue;  // released by the supervisor already
          (void)kill_call(SIGKILL);
          return logic_error("place call in its cgroup",
                             "the run's supervisor released a call in a process that was not placed",
                             std::to_string(result.host_pid));
        }
        for (const auto& dir : placed_ahead ? std::vector<std::string>{} : placement.cgroup_dirs) {
          auto placed = write_file(dir + "/cgroup.procs", std::to_string(result.host_pid));
          if (!placed.ok()) {
            (void)kill_call(SIGKILL);
            return std::move(placed).error().context_add("place call in its cgroup");
          }
        }
        clock.lap("place");
        if (call.on_started) call.on_started(result.host_pid);
        SG_TRY(send_message(control_.get(), {{"op", "go"}, {"id", id}}));
        clock.lap("go");
      } else if (op == "exec_failed") {
        Error e = ev->error;
        if (!ev->in_child) {
          e.context.push_back("starting " + call.argv[0]);
          return e;
        }
        // The call's own failure to start (no such command, not executable, a step before
        // exec): an outcome with a shell's status, not an error of sandgate's. No "exited"
        // follows for it.
        result.start_failure = StartFailure{e.err, e.step};
        result.status = start_failure_status(*result.start_failure);
        exited = true;
      } else if (op == "exited") {
        result.status = ExitStatus::from_wait_status(ev->wait_status);
        exited = true;
      }
      if (exited) {
        // What the controller's part inside a microVM's guest saw of the call's cgroup.
        if (auto g = msg->body.find("guest_observation"); g != msg->body.end())
          result.guest_observation = std::move(*g);
        // And what the run held outside its calls there; a malformed one is not a figure.
        if (auto g = msg->body.find("guest_resident"); g != msg->body.end() && g->is_object()) {
          auto m = g->find("memory_bytes");
          auto k = g->find("oom_kills");
          if (m != g->end() && m->is_number_unsigned() && k != g->end() && k->is_number_unsigned())
            result.guest_resident = ResidentUsage{m->get<uint64_t>(), k->get<uint64_t>()};
        }
      }
    }
  }
  result.wall = std::chrono::steady_clock::now() - start;
  clock.lap("ended");
  // The process parked for the next call: made while this one ran, or one parked before that
  // this call did not start in (it was not yet placed), still waiting. A word still to come is
  // taken before the next call (take_late_parked), not waited for here.
  if (call.park_next && parked_) result.parked_next_pid = parked_->host_pid;
  if (park_next && !parked_) late_park_ = *park_next;
  // What the call wrote before it exited is in the pipes; a background process still holding
  // them must not keep the call open, so read what is there and stop.
  if (out_open)
    take(out.read.get(), result.stdout_data, result.stdout_bytes, result.stdout_truncated);
  if (err_open)
    take(err.read.get(), result.stderr_data, result.stderr_bytes, result.stderr_truncated);
  finish_capture(result.stdout_data, result.stdout_truncated);
  finish_capture(result.stderr_data, result.stderr_truncated);
  clock.lap("output");
  return result;
}

Result<pid_t> Supervisor::park() {
  if (!running()) return logic_error("park", "the run's supervisor is not running");
  if (parked_) return parked_->host_pid;
  uint64_t id = next_call_++;
  SG_TRY(send_message(control_.get(), {{"op", "park"}, {"id", id}}));
  late_park_.reset();  // replaced by this one
  // Between calls nothing else is said on the socket; a bound all the same (a fork, a message).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      return logic_error("park", "no answer from the run's supervisor in 10 s");
    struct pollfd fd = {control_.get(), POLLIN, 0};
    int r = ::poll(&fd, 1, static_cast<int>(left.count()));
    if (r < 0 && errno != EINTR) return sys_error("poll", "the run's supervisor");
    if (r <= 0) continue;
    auto msg = recv_message(control_.get());
    if (!msg.ok()) return std::move(msg).error().context_add("park the next call's process");
    auto ev = read_supervisor_event(msg->body);
    if (!ev.ok()) return std::move(ev).error().context_add("park the next call's process");
    if (ev->id != id) continue;  // a late word about an earlier call
    if (ev->op == "parked" && msg->sender_pid > 0) {
      parked_ = Parked{id, msg->sender_pid};
      return msg->sender_pid;
    }
    Error e = ev->error;
    e.context.push_back("park the next call's process");
    return e;
  }
}

pid_t Supervisor::take_late_parked() {
  while (late_park_ && control_.valid()) {
    struct pollfd fd = {control_.get(), POLLIN, 0};
    if (::poll(&fd, 1, 0) <= 0 || !(fd.revents & POLLIN)) return 0;
    // Between calls the supervisor says nothing else but late words about calls that ended; a
    // socket that fails here fails the next call's exchange too, which says why.
    auto msg = recv_message(control_.get());
    if (!msg.ok()) return 0;
    auto ev = read_supervisor_event(msg->body);
    if (!ev.ok()) {
      // The sandbox misbehaving, as during a call: the run's supervisor is stopped, and the
      // next call says so.
      spdlog::warn("the run's supervisor between calls: {}", ev.error().message());
      (void)stop();
      return 0;
    }
    if (ev->id != *late_park_) continue;
    late_park_.reset();
    if (ev->op != "parked" || msg->sender_pid <= 0) return 0;  // it could not park
    parked_ = Parked{ev->id, msg->sender_pid};
    return msg->sender_pid;
  }
  return 0;
}

Status Supervisor::reachable() const {
  if (!control_.valid()) return logic_error("supervisor", "the run's supervisor was stopped");
  struct pollfd fd = {control_.get(), POLLRDHUP, 0};
  if (::poll(&fd, 1, 0) < 0) return sys_error("poll", "the run's supervisor");
  if (fd.revents & (POLLHUP | POLLRDHUP | POLLERR))
    return logic_error("supervisor", fmt::format("the run's supervisor (pid {}) has gone away", pid()));
  return {};
}

Status Supervisor::stop() {
  if (contained_) {
    // pid 1 of the container's pid namespace: it exits at "shutdown" (or when the socket
    // closes), and the kernel kills the rest; the provider then removes the container.
    if (control_.valid()) (void)send_message(control_.get(), {{"op", "shutdown"}});
    control_.reset();
    if (runtime_.running()) {
      // A foreground runtime removes the container once pid 1 has gone, then exits.
      RuntimeExit exit;
      auto st = runtime_.wait_for(runtime_grace_);
      if (st.ok() && st->has_value()) {
        exit.status = **st;
      } else {
        spdlog::warn(
            "the container runtime ({}) did not end in time after the run's shutdown; "
            "killing it",
            runtime_.pid());
        runtime_.kill_and_reap();
        exit.killed = true;
      }
      exit.output = read_runtime_output(runtime_output_);
      runtime_exit_ = std::move(exit);
    }
    return {};
  }
  if (!process_.running()) return {};
  if (isolate_) {
    // pid 1 of the namespace: when it dies the kernel kills the rest, and waitpid returns only
    // after they are gone (zap_pid_ns_processes).
    process_.kill_and_reap();
    control_.reset();
    return {};
  }
  // On the host the supervisor must kill its own descendants: ask, then insist.
  (void)send_message(control_.get(), {{"op", "shutdown"}});
  auto st = process_.wait_for(std::chrono::seconds(5));
  if (!st.ok() || !st->has_value()) {
    spdlog::warn("supervisor {} did not shut down in time; killing it", process_.pid());
    process_.kill_and_reap();
  }
  control_.reset();
  return {};
}

}  // namespace sandgate::providers
