#include "probes/canaries.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "core/fd.h"
#include "core/files.h"
#include "core/log.h"
#include "providers/base_root.h"

namespace sandgate::probes {
namespace {

constexpr const char* kTokenNames[] = {"AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN",
                                       "ACTIONS_ID_TOKEN_REQUEST_TOKEN", "SANDGATE_TOKEN"};

// Each credential file in the shape its tool expects, with the marker where the secret goes.
std::string credential_content(const std::string& rel, const std::string& marker) {
  if (rel == ".ssh/id_ed25519")
    return "-----BEGIN OPENSSH PRIVATE KEY-----\nsandgate-canary-" + marker +
           "\n-----END OPENSSH PRIVATE KEY-----\n";
  if (rel == ".aws/credentials")
    return "[default]\naws_access_key_id = AKIASANDGATECANARY\naws_secret_access_key = " + marker +
           "\n";
  if (rel == ".docker/config.json")
    return "{\"auths\":{\"registry.sandgate.test\":{\"auth\":\"" + marker + "\"}}}\n";
  if (rel == ".netrc")
    return "machine registry.sandgate.test login canary password " + marker + "\n";
  if (rel == ".kube/config")
    return "apiVersion: v1\nkind: Config\nusers:\n- name: canary\n  user:\n    token: " + marker +
           "\n";
  return "https://canary:" + marker + "@git.sandgate.test\n";  // .git-credentials
}

Status write_new(const std::string& path, const std::string& data, mode_t mode = 0644) {
  SG_TRY(write_file(path, data, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode));
  // The umask may have taken bits the canary needs (see the header: world-readable on purpose).
  if (::chmod(path.c_str(), mode) != 0) return sys_error("chmod", path);
  return {};
}

Status mkdir_mode(const std::string& path, mode_t mode) {
  if (::mkdir(path.c_str(), mode) != 0) return sys_error("mkdir", path);
  if (::chmod(path.c_str(), mode) != 0) return sys_error("chmod", path);
  return {};
}

// The sentinel: a shell whose argv carries the marker (the probes check it is the sentinel, not
// a recycled pid) and which traps every signal a probe might send, appending its name to the
// log. It waits in `read` on a pipe nobody writes to (a trapped signal interrupts the read and
// runs the trap), so it leaves no child behind; PR_SET_PDEATHSIG ends it with sandgate.
constexpr char kSentinelScript[] =
    "for s in HUP INT QUIT ABRT USR1 USR2 ALRM TERM CHLD CONT TSTP TTIN TTOU URG WINCH IO PWR SYS; "
    "do "
    "trap \"echo $s >> \\\"\\$1\\\"\" $s; done; echo r >&3; exec 3>&-; "
    "while :; do read x <&4; done";

}  // namespace

const std::vector<std::string>& Canaries::credential_files() {
  static const std::vector<std::string> kFiles = {".ssh/id_ed25519",     ".aws/credentials",
                                                  ".docker/config.json", ".netrc",
                                                  ".kube/config",        ".git-credentials"};
  return kFiles;
}

std::vector<std::string> Canaries::base_canary_sites() {
  std::vector<std::string> sites = providers::default_base_dirs();
  // Where hosts keep world-readable configuration and data under the base (npm's
  // /usr/local/etc/npmrc, an SDK's properties under /usr/lib), and the one /etc directory the
  // base shows (its links are copied; a file there must not be).
  // None inside the preset "minimal" (base_root.h): a narrowed base shows what it holds.
  for (const char* dir : {"/usr/local/etc", "/usr/local/share", "/usr/local", "/usr/share",
                          "/usr/lib", "/etc/alternatives"}) {
    struct stat st;
    if (::lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) continue;
    if (std::find(sites.begin(), sites.end(), dir) == sites.end()) sites.emplace_back(dir);
  }
  return sites;
}

Status Canaries::plant_base_canaries(const std::vector<std::string>& dirs) {
  if (dirs.empty()) return {};
  std::vector<std::string> paths;
  std::vector<Resource> rs;
  for (const auto& dir : dirs) {
    paths.push_back(dir + "/sandgate-base-canary-" + marker_);
    rs.push_back({Resource::Kind::kMarkedFile, paths.back(), 0, 0, marker_});
  }
  // Recorded before any exists: gc removes each one that carries the marker, and only those.
  SG_TRY(state_->record_all(std::move(rs)));
  const std::string content = "sandgate base canary " + marker_ + "\n";
  for (const auto& path : paths) {
    UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
    if (!fd) {
      if (errno == EROFS) {  // a read-only /usr: nothing can be planted, nor leak, there
        spdlog::info("no base canary in {}: read-only filesystem", path);
        continue;
      }
      return sys_error("create base canary", path);
    }
    base_canaries_.push_back(path);
    // World-readable on purpose (see the header), whatever the umask took.
    if (::fchmod(fd.get(), 0644) != 0) return sys_error("fchmod", path);
    if (::write(fd.get(), content.data(), content.size()) != static_cast<ssize_t>(content.size()))
      return sys_error("write base canary", path);
  }
  return {};
}

Result<std::unique_ptr<Canaries>> Canaries::plant(const CanaryOptions& options) {
  std::unique_ptr<Canaries> c(new Canaries());
  c->paths_ = options.paths;
  c->marker_ = options.marker.empty() ? "sgp-" + new_run_id() : options.marker;
  c->dir_ = options.parent_dir + "/sandgate-canary-" + c->marker_;
  // Recorded before anything exists, like a run (core/state.h).
  SG_ASSIGN_OR_RETURN(auto state, RunState::create(options.paths, "canaries-" + c->marker_, "probe",
                                                   {{Resource::Kind::kDirectory, c->dir_}}));
  c->state_.emplace(std::move(state));
  if (auto s = c->plant_files(options); !s.ok()) {
    (void)c->remove();
    return std::move(s).error().context_add("planting canaries in " + c->dir_);
  }
  if (auto s = c->plant_base_canaries(options.base_canary_dirs); !s.ok()) {
    (void)c->remove();
    return std::move(s).error().context_add("planting the base canaries");
  }
  for (const char* name : kTokenNames)
    c->tokens_.emplace_back(name, std::string("sgcanary-") + name + "-" + c->marker_);
  if (auto s = c->start_sentinel(); !s.ok()) {
    (void)c->remove();
    return std::move(s).error().context_add("starting the sentinel");
  }
  if (options.set_environment) c->set_environment();
  return c;
}

Status Canaries::plant_files(const CanaryOptions& options) {
  SG_TRY(mkdir_mode(dir_, 0755));
  SG_TRY(write_new(host_canary(), "sandgate host canary " + marker_ + "\n"));
  // Writable by anyone: what stops a write from a sandbox must be its isolation.
  SG_TRY(mkdir_mode(host_write_dir(), 0777));

  SG_TRY(mkdir_mode(home(), 0755));
  for (const auto& rel : credential_files()) {
    std::string path = home() + "/" + rel;
    auto slash = rel.rfind('/');
    if (slash != std::string::npos) {
      std::string sub = home() + "/" + rel.substr(0, slash);
      if (::access(sub.c_str(), F_OK) != 0) SG_TRY(mkdir_mode(sub, 0755));
    }
    SG_TRY(write_new(path, credential_content(rel, marker_)));
  }

  // A workspace recipe that looks like a repository: persistence probes plant in .git/hooks and
  // .git/config, and a fresh run from the same recipe must not find what they planted.
  SG_TRY(mkdir_mode(recipe(), 0755));
  SG_TRY(write_new(recipe() + "/README", "sandgate probe workspace\n"));
  SG_TRY(mkdir_mode(recipe() + "/.git", 0755));
  SG_TRY(mkdir_mode(recipe() + "/.git/hooks", 0755));
  SG_TRY(write_new(recipe() + "/.git/HEAD", "ref: refs/heads/main\n"));
  SG_TRY(write_new(recipe() + "/.git/config",
                   "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n"));
  SG_TRY(write_new(recipe() + "/.git/hooks/pre-commit.sample", "#!/bin/sh\nexit 0\n", 0755));

  // Decoy sockets: listening, never accepted (a connect succeeds on the backlog). Anyone may
  // connect, as with every canary: what keeps a sandbox out must be its isolation.
  SG_TRY(mkdir_mode(dir_ + "/run", 0755));
  for (auto [fd, path] :
       {std::pair{&agent_, agent_socket()}, std::pair{&runtime_, runtime_socket()}}) {
    SG_ASSIGN_OR_RETURN(*fd, listen_unix(path, 64));
    if (::chmod(path.c_str(), 0666) != 0) return sys_error("chmod", path);
  }

  if (!options.probe_binary.empty()) {
    // A setuid-root program a sandbox can run: it must not raise the caller's privilege.
    std::string helper = dir_ + "/setuid-probe";
    SG_ASSIGN_OR_RETURN(auto bytes, read_file(options.probe_binary, 64 << 20));
    SG_TRY(write_new(helper, bytes, 0755));
    if (::chown(helper.c_str(), 0, 0) != 0) return sys_error("chown", helper);
    if (::chmod(helper.c_str(), 04755) != 0) return sys_error("chmod setuid", helper);
    setuid_helper_ = helper;
  }
  return {};
}

Status Canaries::start_sentinel() {
  std::string log = dir_ + "/sentinel.log";
  SG_TRY(write_new(log, ""));
  SG_ASSIGN_OR_RETURN(auto ready, make_pipe());
  SG_ASSIGN_OR_RETURN(auto block, make_pipe());
  std::string name = "sandgate-sentinel-" + marker_;
  // A host process launched with the tokens, as launchers are: in its environment and one on its
  // command line. The creds probes look for them in /proc/*/environ and /proc/*/cmdline.
  std::string token_arg = "--token=" + tokens_.front().second;
  std::vector<char*> argv = {const_cast<char*>("/bin/sh"),
                             const_cast<char*>("-c"),
                             const_cast<char*>(kSentinelScript),
                             name.data(),
                             log.data(),
                             token_arg.data(),
                             nullptr};
  std::vector<std::string> env_strings = {"PATH=/usr/bin:/bin"};
  for (const auto& [k, v] : tokens_) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) return sys_error("fork sentinel");
  if (pid == 0) {
    // Only async-signal-safe calls between fork and exec.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(1);  // the parent died before PDEATHSIG was set
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    if (::dup2(ready.write.get(), 3) < 0 || ::dup2(block.read.get(), 4) < 0) ::_exit(1);
    ::execve("/bin/sh", argv.data(), envp.data());
    ::_exit(127);
  }
  SG_ASSIGN_OR_RETURN(auto pidfd, pidfd_open(pid));
  sentinel_ = ChildProcess(pid, std::move(pidfd));
  block_ = std::move(block.write);  // held open: the sentinel's read never ends
  ready.write.reset();
  char byte;
  if (::read(ready.read.get(), &byte, 1) != 1)
    return logic_error("start sentinel", "the shell did not start", log);
  Resource r{Resource::Kind::kProcess, "", pid, process_start_time(paths_.proc, pid).value_or(0)};
  return state_->record(r);
}

std::vector<std::string> Canaries::sentinel_signals(size_t from) const {
  std::vector<std::string> out;
  auto text = read_file(dir_ + "/sentinel.log");
  if (!text.ok()) return out;
  std::istringstream in(*text);
  std::string line;
  for (size_t n = 0; std::getline(in, line); ++n) {
    if (n < from) continue;
    if (!line.empty()) out.push_back("SIG" + line + " received");
  }
  return out;
}

std::string Canaries::token_names() const {
  std::string names;
  for (const auto& [name, value] : tokens_) names += (names.empty() ? "" : ",") + name;
  return names;
}

void Canaries::set_environment() {
  auto save_and_set = [&](const std::string& name, const std::string& value) {
    const char* old = std::getenv(name.c_str());
    saved_env_.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
    ::setenv(name.c_str(), value.c_str(), 1);
  };
  for (const auto& [name, value] : tokens_) save_and_set(name, value);
  save_and_set("HOME", home());
  save_and_set("SSH_AUTH_SOCK", agent_socket());
}

void Canaries::restore_environment() {
  for (auto it = saved_env_.rbegin(); it != saved_env_.rend(); ++it) {
    if (it->second)
      ::setenv(it->first.c_str(), it->second->c_str(), 1);
    else
      ::unsetenv(it->first.c_str());
  }
  saved_env_.clear();
}

Status Canaries::remove() {
  if (removed_) return {};
  removed_ = true;
  restore_environment();
  sentinel_.kill_and_reap();
  block_.reset();
  agent_.reset();
  runtime_.reset();
  Status first;
  if (!dir_.empty()) first = remove_tree(dir_);
  // Every recorded one, planted or not (a kill between record and plant leaves the same).
  if (state_)
    for (const auto& r : state_->resources())
      if (r.kind == Resource::Kind::kMarkedFile)
        if (auto s = remove_marked_file(r.path, r.owner); !s.ok() && first.ok()) first = s;
  if (state_) {
    if (first.ok()) first = state_->finish();
    state_.reset();
  }
  return first;
}

Canaries::~Canaries() {
  if (auto s = remove(); !s.ok()) spdlog::error("removing canaries: {}", s.error().message());
}

}  // namespace sandgate::probes
