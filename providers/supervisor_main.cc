// The supervisor process itself (see supervisor.h): set up, then fork and reap calls until the
// host says stop or goes away.
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "providers/call_child.h"
#include "providers/jail.h"
#include "providers/proc_views.h"
#include "providers/seccomp_policy.h"
#include "providers/supervisor.h"
#include "providers/supervisor_protocol.h"
#include "providers/sysinfo_notify.h"

namespace sandgate::providers {
namespace {

struct CallProcess {
  uint64_t id;
  UniqueFd go;     // write end: releases the held child (none: it never waited)
  UniqueFd error;  // read end of the child's CLOEXEC error pipe, until its start is known
  bool failed = false;
};

// The next call's process, made ahead ("park"): it waits for its call's exec message on a
// socket of its own, with its go and error pipes already made.
struct ParkedProcess {
  uint64_t id;  // the id it said "parked" with
  pid_t pid;
  UniqueFd sock;   // our end: the call's exec message and its stdout/stderr go here
  UniqueFd go;     // as CallProcess
  UniqueFd error;  // as CallProcess
  bool prepared = false;  // told to restrict itself ahead of its call (prepare_parked)
};

// An exec message carries stdout and stderr, and the call's stdin when it says "stdin".
size_t fds_of(const Json& exec) {
  auto in = exec.find("stdin");
  return in != exec.end() && in->is_boolean() && in->get<bool>() ? 3 : 2;
}

// The supervisor's own set-up, step by step ("root 0.05 base 0.21 ..." in ms): "ready" carries
// it to the host, which logs it with the run's other steps at debug level. The one part of a
// run's create the host cannot time from outside.
class SetupClock {
 public:
  void lap(const char* step) {
    auto now = std::chrono::steady_clock::now();
    char ms[32];
    std::snprintf(ms, sizeof ms, " %.2f",
                  std::chrono::duration<double, std::milli>(now - last_).count());
    steps_ += (steps_.empty() ? "" : " ") + std::string(step) + ms;
    last_ = now;
  }
  const std::string& steps() const { return steps_; }

 private:
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
  std::string steps_;
};

class SupervisorLoop {
 public:
  SupervisorLoop(int control, SupervisorConfig config, bool placed_during_setup,
                 UniqueFd seccomp_program, UniqueFd sysinfo_channel, UniqueFd alternatives)
      : control_(control),
        config_(std::move(config)),
        placed_during_setup_(placed_during_setup),
        seccomp_program_(std::move(seccomp_program)),
        sysinfo_channel_(std::move(sysinfo_channel)),
        alternatives_(std::move(alternatives)) {}

  int run();

 private:
  Status setup_landlock();
  void start_call(Message& msg);
  void park(uint64_t id);
  void prepare_parked();
  [[noreturn]] void parked_child(uint64_t id, int sock, int go, int error_fd);
  void release_call(uint64_t id);
  void collect_start(CallProcess& call);
  void kill_call(uint64_t id, int sig);
  void reap();
  [[noreturn]] void shutdown(int code);
  void prepare_restriction();
  std::unique_ptr<CallLaunch> make_launch(const Json& body, const std::vector<UniqueFd>& fds,
                                          int go, int error_fd, bool restricted) const;

  Status await_placement();

  int control_;
  SupervisorConfig config_;
  // The host places this process in the run's cgroups while it assembles the jail, and says
  // "placed" (Supervisor::start); false: it was placed before the config came.
  bool placed_during_setup_ = false;
  UniqueFd seccomp_program_;               // the host's compiled filter (seccomp_policy.h)
  std::optional<SeccompProgram> seccomp_;  // read once, installed in each call
  // The run's sysinfo channel (sysinfo_notify.h): each call's child sends its listener there.
  // Invalid: the calls' sysinfo(2) is the kernel's.
  UniqueFd sysinfo_channel_;
  UniqueFd alternatives_;  // the host's shared /etc/alternatives (base_root.h), until assembled
  UniqueFd landlock_;                      // the calls' ruleset (jail.h), built once
  int landlock_abi_ = 0;
  std::string landlock_missing_;          // why there is none (this kernel lacks Landlock)
  bool landlock_scope_in_calls_ = false;  // the scope could not be the run's (see below)
  CallRestriction restriction_;           // what each call gives up (prepare_restriction)
  ChildStack call_stack_;                 // lent to each vfork child (clone_call_child)
  std::map<pid_t, CallProcess> calls_;
  std::optional<ParkedProcess> parked_;
};

int SupervisorLoop::run() {
  sigset_t mask;
  sigemptyset(&mask);
  for (int sig : {SIGCHLD, SIGTERM, SIGINT, SIGHUP}) sigaddset(&mask, sig);
  sigprocmask(SIG_BLOCK, &mask, nullptr);
  UniqueFd sigfd(::signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK));
  if (!config_.isolate) ::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);

  SetupClock clock;
  if (config_.isolate || config_.contained) {
    // In a container the runtime assembled the root; the rest is the same for both.
    Status s;
    if (config_.isolate) {
      // The cgroup namespace is rooted where this process is when it is made: made once the
      // host has placed it in the run's cgroup (now, or after the jail: await_placement),
      // every call's process sees that cgroup as its root.
      if (!placed_during_setup_ && ::unshare(CLONE_NEWCGROUP) != 0)
        s = sys_error("unshare the cgroup namespace");
      else
        s = assemble_jail(config_.jail, alternatives_.get(),
                          [&](const char* step) { clock.lap(step); });
    }
    alternatives_.reset();  // attached (or copied): no call's process may hold it
    if (s.ok() && config_.jail.seccomp) {
      // Compiled once by the host for every run with these options, sealed, sent with the
      // config: reading it costs microseconds where compiling cost milliseconds.
      auto program =
          seccomp_program_.valid()
              ? read_seccomp_program(seccomp_program_.get())
              : Result<SeccompProgram>(logic_error("seccomp", "the host sent no program"));
      if (program.ok())
        seccomp_ = std::move(program).value();
      else
        s = std::move(program).error();
      seccomp_program_.reset();
      clock.lap("seccomp");
    }
    if (s.ok() && config_.jail.landlock) {
      s = setup_landlock();
      clock.lap("landlock");
    }
    if (s.ok() && config_.isolate && placed_during_setup_) {
      s = await_placement();
      clock.lap("placed");  // the wait for the host's placement that the set-up did not hide
    }
    if (!s.ok()) {
      Json j = error_to_json(s.error());
      j["op"] = "error";
      (void)send_message(control_, j);
      return 1;
    }
  }
  prepare_restriction();
  // The absence of Landlock travels to the host, which has a logger (this process has none,
  // and its calls must not inherit one).
  Json ready = {{"op", "ready"}, {"landlock_abi", landlock_.valid() ? landlock_abi_ : 0}};
  if (landlock_scope_in_calls_) ready["landlock_scope"] = "call";
  if (!landlock_missing_.empty()) ready["landlock_missing"] = landlock_missing_;
  if (!clock.steps().empty()) ready["setup_ms"] = clock.steps();
  if (!send_message(control_, ready).ok()) return 1;

  for (;;) {
    struct pollfd fds[2] = {{control_, POLLIN, 0}, {sigfd.get(), POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      shutdown(1);
    }
    if (fds[1].revents) {
      struct signalfd_siginfo si;
      while (::read(sigfd.get(), &si, sizeof si) == sizeof si) {
        if (si.ssi_signo == SIGCHLD) {
          reap();
        } else {
          shutdown(0);  // the host died (parent-death signal) or asked
        }
      }
    }
    if (fds[0].revents) {
      auto msg = recv_message(control_);
      if (!msg.ok()) shutdown(0);  // the host closed the socket: the run is over
      std::string op = msg->body.value("op", "");
      if (op == "exec")
        start_call(*msg);
      else if (op == "park")
        park(msg->body.value("id", uint64_t{0}));
      else if (op == "go")
        release_call(msg->body.value("id", uint64_t{0}));
      else if (op == "kill")
        kill_call(msg->body.value("id", uint64_t{0}), msg->body.value("signal", SIGKILL));
      else if (op == "shutdown")
        shutdown(0);
    }
  }
}

// The host's "placed": this process is in the run's cgroups now, and its cgroup namespace is
// made there. Nothing else may come first: a host that went away (EOF), or any other word, ends
// the set-up.
Status SupervisorLoop::await_placement() {
  auto msg = recv_message(control_);
  if (!msg.ok()) return std::move(msg).error().context_add("wait for the host's placement");
  const std::string op = msg->body.value("op", "");
  if (op != "placed")
    return logic_error("wait for the host's placement", "unexpected message '" + op + "'");
  if (::unshare(CLONE_NEWCGROUP) != 0) return sys_error("unshare the cgroup namespace");
  return {};
}

// The run's Landlock layer (landlock.h), best effort for this kernel's ABI: the calls' ruleset
// is built once here, and applied in each call's child; the scope (ABI 6) is applied to this
// process, so the run is one Landlock domain and its calls, each in its own nested domain, may
// still signal one another and reach one another's abstract sockets, and nothing outside the
// run. A kernel without Landlock is no error: the host hears why in "ready".
Status SupervisorLoop::setup_landlock() {
  auto abi = landlock::abi_version();
  if (!abi.ok()) {
    if (!landlock::means_unsupported(abi.error())) return std::move(abi).error();
    landlock_missing_ = abi.error().message();
    return {};
  }
  landlock_abi_ = *abi;
  auto rules = landlock::best_effort(call_landlock_rules(config_.jail), landlock_abi_);
  auto scope = landlock::best_effort(run_landlock_scope(), landlock_abi_);
  // landlock_restrict_self needs no_new_privs or CAP_SYS_ADMIN in the user namespace. In the
  // jail this process has the latter; in a container it has neither, and setting no_new_privs
  // on it would pass to every call, also where a weakening (root_with_caps) wants it absent,
  // and would hide from the host's read-back a container whose runtime dropped
  // no-new-privileges (PodmanTest.ReadBackRefusesADroppedSetting): there the scope goes into
  // each call's own ruleset (the call is then its own domain).
  bool scope_here = config_.isolate;
  if (scope.handled.scoped && scope_here) {
    SG_ASSIGN_OR_RETURN(UniqueFd run_scope, landlock::build(scope));
    SG_TRY(
        std::move(landlock::restrict_self(run_scope.get())).context("landlock scope of the run"));
  } else if (scope.handled.scoped) {
    rules.handled.scoped = scope.handled.scoped;
    landlock_scope_in_calls_ = true;
  }
  SG_ASSIGN_OR_RETURN(landlock_, landlock::build(rules));
  return {};
}

void SupervisorLoop::start_call(Message& msg) {
  uint64_t id = msg.body.value("id", uint64_t{0});
  auto fail = [&](const Error& e) {
    Json j = error_to_json(e);
    j["op"] = "exec_failed";
    j["id"] = id;
    (void)send_message(control_, j);
  };
  if (msg.fds.size() != fds_of(msg.body))
    return fail(logic_error("exec", "expected stdout and stderr fds (and stdin's if sent)"));
  // The next call's process, made while this one runs: after this call has started.
  std::optional<uint64_t> park_next;
  if (auto p = msg.body.find("park_next"); p != msg.body.end() && p->is_number_unsigned())
    park_next = p->get<uint64_t>();
  auto parked_id = msg.body.find("parked");
  if (parked_ && parked_id != msg.body.end() && parked_id->is_number_unsigned() &&
      parked_id->get<uint64_t>() == parked_->id) {
    // The call runs in the parked process: it gets the message and its two descriptors, and
    // from there is any call's child (call_child).
    ParkedProcess p = std::move(*parked_);
    parked_.reset();
    msg.body["in_parked"] = true;  // its "started" says so: the host skips no placement otherwise
    std::vector<int> fds;
    for (const auto& fd : msg.fds) fds.push_back(fd.get());
    if (auto sent = send_message(p.sock.get(), msg.body, fds); !sent.ok()) {
      ::kill(p.pid, SIGKILL);  // reaped as an orphan; the call starts the usual way below
    } else {
      calls_[p.pid] = CallProcess{id, std::move(p.go), std::move(p.error)};
      // go_if_parked: the host placed this very process ahead and has nothing to look at before
      // it execs, so it does not wait for a "go" of the host's.
      if (!msg.body.value("wait_for_go", false) || msg.body.value("go_if_parked", false))
        release_call(id);
      if (park_next) park(*park_next);
      return;
    }
  }
  auto error = make_pipe(O_CLOEXEC);
  if (!error.ok()) return fail(error.error());
  if (!msg.body.value("wait_for_go", false)) {
    // Nothing of the host's comes before its exec: a process that shares our memory until it
    // execs, while we wait (call_child.h): no copy of our page tables, no copy-on-write fault
    // for what it writes. By the time the clone returns it has exec'd or failed, and what we
    // prepared for it is ours again.
    pid_t pid;
    {
      auto launch = make_launch(msg.body, msg.fds, /*go=*/-1, error->write.get(),
                                /*restricted=*/false);
      pid = clone_call_child(*launch, call_stack_);
    }
    error->write.reset();
    if (pid < 0) return fail(sys_error(-pid, "clone the call's process"));
    auto& call = calls_[pid] = CallProcess{id, UniqueFd(), std::move(error->read)};
    collect_start(call);
    if (park_next) park(*park_next);
    return;
  }
  // Held for the host's go (its placement, or Call::on_started): a fork, which may wait
  // without holding us.
  auto go = make_pipe(O_CLOEXEC);
  if (!go.ok()) return fail(go.error());
  pid_t pid;
  {
    auto launch = make_launch(msg.body, msg.fds, go->read.get(), error->write.get(),
                              /*restricted=*/false);
    pid = ::fork();
    if (pid == 0) run_call_child(*launch);
  }
  if (pid < 0) return fail(sys_error("fork"));
  // Our copies of the child's ends: the error pipe must see EOF when the child execs.
  go->read.reset();
  error->write.reset();
  // The child says "started" itself; the host's go releases it (release_call).
  calls_[pid] = CallProcess{id, std::move(go->write), std::move(error->read)};
  if (park_next) park(*park_next);
}

// A process for the next call, forked now and parked until its call's exec message arrives.
// It says "parked" itself, with its own pid as SCM_CREDENTIALS (as "started"), so that the host
// learns its host pid and can place it in the next call's cgroups while nothing waits. One at
// a time: a new request replaces the one parked (which is killed and reaped as an orphan).
void SupervisorLoop::park(uint64_t id) {
  if (parked_) {
    ::kill(parked_->pid, SIGKILL);
    parked_.reset();
  }
  auto channel = make_control_pair();
  auto go = make_pipe(O_CLOEXEC);
  auto error = make_pipe(O_CLOEXEC);
  auto fail = [&](const Error& e) {
    Json j = error_to_json(e);
    j["op"] = "park_failed";
    j["id"] = id;
    (void)send_message(control_, j);
  };
  if (!channel.ok()) return fail(channel.error());
  if (!go.ok()) return fail(go.error());
  if (!error.ok()) return fail(error.error());
  pid_t pid = ::fork();
  if (pid < 0) return fail(sys_error("fork"));
  if (pid == 0) {
    channel->first.reset();
    parked_child(id, channel->second.get(), go->read.get(), error->write.get());
  }
  go->read.reset();
  error->write.reset();
  channel->second.reset();
  parked_ = ParkedProcess{id, pid, std::move(channel->first), std::move(go->write),
                          std::move(error->read)};
  prepare_parked();
}

void SupervisorLoop::parked_child(uint64_t id, int sock, int go, int error_fd) {
  // Parked, it must not outlive the supervisor (on the host there is no pid namespace to end
  // it); call_child clears this before the call runs.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  // A call's oom_score_adj from the start (a resident process never starts in a parked one): a
  // fresh fork counts the supervisor's resident pages as its own, so at the supervisor's value
  // it ranked with the supervisor and above the run's resident processes. Its fork can meet a
  // shared budget's OOM (the call that started it filling the budget); the kernel's next pick
  // is then this process, which holds nothing of the run's, not the supervisor or a resident
  // process (seen beside stress-ng: a parked process taken at the supervisor's value).
  if (int fd = ::open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC); fd >= 0) {
    (void)!::write(fd, kCallOomScoreAdj, sizeof kCallOomScoreAdj - 1);
    ::close(fd);
  }
  if (!send_message(control_, {{"op", "parked"}, {"id", id}}, {}, ::getpid()).ok()) ::_exit(127);
  bool restricted = false;
  for (;;) {
    auto msg = recv_message(sock);
    if (!msg.ok()) ::_exit(127);  // not used: the run ended or moved on
    if (msg->body.value("op", "") == "prepare") {
      // Restricted ahead, as its call would be after "started" (0.5-0.6 ms here, the seccomp
      // programs most of it). It waits for nothing but its message, which the restrictions
      // allow. On failure it ends: the next call forks and restricts itself, and says why.
      if (!restricted) {
        ChildError e;
        if (!restrict_call(restriction_, e)) ::_exit(127);
        // Changing credentials (the sandbox user) cleared the parent-death signal (prctl(2)).
        ::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
        restricted = true;
      }
      continue;
    }
    if (msg->fds.size() != fds_of(msg->body)) ::_exit(127);
    ::close(sock);
    // A fork, with memory of its own: the launch can live on its heap.
    run_call_child(*make_launch(msg->body, msg->fds, go, error_fd, restricted));
  }
}

// The parked process restricts itself ahead of its call, told so when no call of ours is
// running: made beside a call, the restriction's CPU time would be taken from that call on two
// cores (measured: restricting at once saved a tenth of what it cost), so it waits for the
// call's end (reap) or is told at once when parked between calls. A call that comes first
// finds it unrestricted and restricts on its own path, as a forked one does.
void SupervisorLoop::prepare_parked() {
  if (!parked_ || parked_->prepared || !calls_.empty()) return;
  parked_->prepared = true;
  (void)send_message(parked_->sock.get(), {{"op", "prepare"}});  // gone: the next call forks
}

void SupervisorLoop::release_call(uint64_t id) {
  for (auto& [pid, call] : calls_) {
    if (call.id != id || !call.go.valid()) continue;
    (void)write_all(call.go.get(), "g");
    call.go.reset();
    collect_start(call);
    return;
  }
}

// Waits for a released call's exec: its error pipe closes at a successful exec (CLOEXEC), or
// carries why the process failed. After its "started", the command could not be started: not
// the supervisor's failure but the call's (a shell's 127/126), told apart by "in_child"; before
// it, the supervisor's.
void SupervisorLoop::collect_start(CallProcess& call) {
  ChildError e;
  ssize_t n;
  while ((n = ::read(call.error.get(), &e, sizeof e)) < 0 && errno == EINTR) {
  }
  call.error.reset();
  if (n != sizeof e) return;
  call.failed = true;
  e.step[sizeof e.step - 1] = 0;
  Json j = error_to_json(sys_error(e.err, e.step));
  j["op"] = "exec_failed";
  j["id"] = call.id;
  if (e.started) j["in_child"] = true;
  (void)send_message(control_, j);
}

void SupervisorLoop::kill_call(uint64_t id, int sig) {
  for (auto& [pid, call] : calls_) {
    if (call.id != id) continue;
    // The call leads its own session and process group (setsid in the child).
    ::kill(-pid, sig);
    ::kill(pid, sig);
  }
}

void SupervisorLoop::reap() {
  for (;;) {
    int status;
    pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) return;
    if (parked_ && parked_->pid == pid) parked_.reset();  // died parked: the next call forks
    auto it = calls_.find(pid);
    if (it == calls_.end()) continue;  // an orphan re-parented to us
    CallProcess& call = it->second;
    // Not yet released: a step before its "started" failed (it said why on the error pipe,
    // whose writers are all gone now), or it died waiting.
    if (!call.failed && call.error.valid()) collect_start(call);
    if (!call.failed)
      (void)send_message(control_, {{"op", "exited"}, {"id", call.id}, {"wait_status", status}});
    calls_.erase(it);
    prepare_parked();
  }
}

void SupervisorLoop::shutdown(int code) {
  if (config_.isolate || config_.contained) {
    // pid 1 (of the jail's or the container's pid namespace): our exit makes the kernel kill
    // the rest of the namespace.
    ::_exit(code);
  }
  // On the host: kill direct children until none are left. Orphaned grandchildren re-parent to
  // us (child subreaper) as their parents die, and are killed in the next round. Each round
  // waits only for the pids it killed: a blanket wait would block on the re-parented ones.
  std::string path = "/proc/self/task/" + std::to_string(::getpid()) + "/children";
  for (int round = 0; round < 10000; ++round) {
    std::vector<pid_t> children;
    if (auto text = read_file(path, 1 << 20); text.ok()) {
      const char* p = text->c_str();
      char* end;
      for (long pid = std::strtol(p, &end, 10); end != p; pid = std::strtol(p, &end, 10)) {
        children.push_back(static_cast<pid_t>(pid));
        p = end;
      }
    }
    if (children.empty()) break;
    for (pid_t pid : children) ::kill(pid, SIGKILL);
    for (pid_t pid : children) {
      int status;
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
    }
  }
  ::_exit(code);
}

// What every call's process gives up before it execs (call_child.h), from the set-up's
// results: made once, read by each call's process. Nothing in it is the call's own: a process
// parked for the next call restricts itself while it waits (parked_child), a started one after
// its "started".
void SupervisorLoop::prepare_restriction() {
  CallRestriction& r = restriction_;
  if (seccomp_)
    r = restriction_for(*seccomp_, sysinfo_channel_.valid() ? sysinfo_channel_.get() : -1);
  // In a microVM's guest the supervisor is root of the guest: each call drops to the sandbox
  // user as in the jail.
  r.drop_privileges = (config_.isolate || config_.guest) && config_.jail.drop_privileges;
  r.uid = config_.jail.uid;
  r.gid = config_.jail.gid;
  // In a container the runtime already made us an unprivileged user with no capabilities (the
  // host read that back); no_new_privs is set again so that it holds whatever the runtime did,
  // and Landlock needs it.
  r.no_new_privs = config_.contained && config_.jail.drop_privileges;
  r.landlock = landlock_.valid() ? landlock_.get() : -1;
}

// A call's launch from its exec message: what its process does before the exec, prepared here
// (it may allocate nothing itself).
std::unique_ptr<CallLaunch> SupervisorLoop::make_launch(const Json& body,
                                                        const std::vector<UniqueFd>& fds, int go,
                                                        int error_fd, bool restricted) const {
  auto l = std::make_unique<CallLaunch>();
  l->out = fds[0].get();
  l->err = fds[1].get();
  l->in = fds.size() > 2 ? fds[2].get() : -1;
  l->go = go;
  l->error = error_fd;
  l->control = control_;
  l->oom_score_adj = !body.value("resident", false);
  const Json rlimits = body.value("rlimits", Json::object());
  for (auto [key, resource, name] : {std::tuple{"open_files", RLIMIT_NOFILE, "RLIMIT_NOFILE"},
                                     std::tuple{"file_size", RLIMIT_FSIZE, "RLIMIT_FSIZE"}}) {
    if (rlimits.is_object() && rlimits.contains(key) && rlimits[key].is_number_unsigned())
      l->limits[l->limit_count++] = {resource, rlimits[key].get<uint64_t>(), name};
  }
  Json started = {{"op", "started"}, {"id", body.value("id", uint64_t{0})}};
  if (body.value("in_parked", false)) started["in_parked"] = true;
  l->started = dump_json(started);
  l->cwd = body.value("cwd", "");
  if (l->cwd.empty()) l->cwd = config_.default_cwd;
  l->restricted = restricted;
  l->restriction = &restriction_;
  l->set_command(body.value("argv", std::vector<std::string>{}),
                 merge_env(config_.base_env, body.value("env", std::vector<std::string>{})));
  return l;
}

}  // namespace

std::optional<int> maybe_run_supervisor(int argc, char** argv,
                                        const GuestCallControlFactory& guest_control) {
  // A microVM's guest agent: the kernel runs it as /init with the arguments after "--".
  if (argc >= 2 && std::strcmp(argv[1], kGuestAgentArg) == 0)
    return run_guest_agent(argc, argv, guest_control);
  // A run's /proc views server (proc_views.h), started by the host side of the run.
  if (argc >= 2 && std::strcmp(argv[1], kProcViewsArg) == 0)
    return run_proc_views_server(argc, argv);
  if (argc < 3 || std::strcmp(argv[1], kSupervisorArg) != 0) return std::nullopt;
  int control = std::atoi(argv[2]);
  // Nothing the host process had open may reach the run.
  syscall(SYS_close_range, control + 1, ~0U, 0);
  return serve_supervisor(control);
}

int serve_supervisor(int control) {
  auto msg = recv_message(control);
  if (!msg.ok() || msg->body.value("op", "") != "config") return 2;
  auto config = supervisor_config_from_json(msg->body.value("config", Json::object()));
  if (!config.ok()) {
    Json j = error_to_json(config.error());
    j["op"] = "error";
    (void)send_message(control, j);
    return 2;
  }
  // The fds the host attached, by the names the message gives them in order (Supervisor::
  // configure): the compiled seccomp filter, when the jail installs one, the run's sysinfo
  // channel, and the shared /etc/alternatives mount for the jail to attach.
  UniqueFd program, sysinfo_channel, alternatives;
  const Json names = msg->body.value("fds", Json::array());
  for (size_t i = 0; i < msg->fds.size(); ++i) {
    std::string name = i < names.size() && names[i].is_string() ? names[i].get<std::string>()
                                                                : (i == 0 ? "seccomp_program" : "");
    if (name == "seccomp_program")
      program = std::move(msg->fds[i]);
    else if (name == "sysinfo_channel")
      sysinfo_channel = std::move(msg->fds[i]);
    else if (name == "alternatives")
      alternatives = std::move(msg->fds[i]);
  }
  SupervisorLoop loop(control, std::move(config).value(),
                      msg->body.value("placed_during_setup", false), std::move(program),
                      std::move(sysinfo_channel), std::move(alternatives));
  int rc = loop.run();
  ::_exit(rc);
}

}  // namespace sandgate::providers
