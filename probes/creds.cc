// Credentials boundary: canary tokens in the environment, in other processes' environ and
// cmdline, canary credential files in the launching user's home, and the kernel keyrings.
// The suite puts the marker into every canary value, so finding the marker is finding a canary.
#include <linux/keyctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "probes/catalogue.h"
#include "probes/probe_util.h"

namespace sandgate::probes {
namespace {

using namespace util;

constexpr const char* kCredentialFiles[] = {".ssh/id_ed25519",     ".aws/credentials",
                                            ".docker/config.json", ".netrc",
                                            ".kube/config",        ".git-credentials"};

ProbeReport env_tokens(const Params& p) {
  auto names = p.list("token_names");
  if (names.empty())
    return missing_param("look for canary tokens in the environment", "token_names");
  std::string attempt = "getenv each canary token name in this process's environment";
  Json present = Json::object();
  Json absent = Json::array();
  for (const auto& name : names) {
    if (const char* v = std::getenv(name.c_str())) {
      present[name] = printable(v, 200);  // a canary: its value is the evidence
    } else {
      absent.push_back(name);
    }
  }
  Json ev = {{"present", present}, {"absent", absent}};
  if (!present.empty()) return reached(attempt, ev);
  return failed(attempt, ENOENT, ev, "none of the canary tokens is in the environment");
}

// The processes of this very invocation (the runner, this probe's child, sandgate-probe linger
// and crossrun holders) carry the marker in their argv by design: they are not canary holders.
// So does a sandbox's init that holds the call's own command line after its own options:
// bubblewrap's pid-1 reaper is "bwrap --args 12 -- /opt/sandgate-probe run ...".
bool is_probe_process(pid_t pid) {
  if (pid == ::getpid() || pid == ::getppid()) return true;
  std::string cmd = proc_file(pid, "cmdline", 4096);
  std::string argv0 = cmd.substr(0, cmd.find(' '));
  std::string base = argv0.substr(argv0.rfind('/') + 1);
  if (base == "sandgate-probe") return true;
  for (pid_t own : {::getpid(), ::getppid()}) {
    std::string mine = proc_file(own, "cmdline", 4096);
    if (mine.starts_with(argv0) || mine.find("sandgate-probe") == std::string::npos) continue;
    if (cmd.size() > mine.size() && cmd.ends_with(" -- " + mine)) return true;
  }
  return false;
}

// Scans /proc/*/<file> for the marker; each hit names the pid, its comm and the entry.
ProbeReport scan_proc(const Params& p, const char* file) {
  std::string attempt = std::string("read every /proc/*/") + file + " and look for canary values";
  auto m = marker(p);
  if (!m) return missing_param(attempt, "marker");
  size_t scanned = 0, readable = 0, skipped = 0;
  Json hits = Json::array();
  for (pid_t pid : proc_pids()) {
    ++scanned;
    if (is_probe_process(pid)) {
      ++skipped;
      continue;
    }
    FileRead r = read_prefix("/proc/" + std::to_string(pid) + "/" + file, 1 << 20);
    if (r.err != 0 || r.bytes == 0) continue;
    ++readable;
    size_t at = r.data.find(*m);
    if (at == std::string::npos) continue;
    // The NUL-separated entry holding the marker ("NAME=value" or one argument).
    size_t begin = r.data.rfind('\0', at);
    begin = begin == std::string::npos ? 0 : begin + 1;
    size_t end = r.data.find('\0', at);
    std::string entry =
        r.data.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
    hits.push_back({{"pid", pid},
                    {"comm", printable(first_line(proc_file(pid, "comm", 64)), 32)},
                    {"entry", printable(entry, 200)}});
    if (hits.size() >= 32) break;
  }
  Json ev = {{"pids_scanned", scanned},
             {"readable", readable},
             {"probe_processes_skipped", skipped},
             {"hits", hits}};
  if (!hits.empty()) return reached(attempt, ev);
  if (readable == 0) return failed(attempt, EACCES, ev, "no other process's file was readable");
  return failed(attempt, ENOENT, ev, "no readable process carries a canary value");
}

ProbeReport proc_environ(const Params& p) { return scan_proc(p, "environ"); }
ProbeReport proc_cmdline(const Params& p) { return scan_proc(p, "cmdline"); }

ProbeReport home_files(const Params& p) {
  auto home = p.get("home");
  if (!home) return missing_param("read canary credential files in the launcher's home", "home");
  auto m = marker(p);
  std::vector<int> errs;
  Json per = Json::object();
  for (const char* rel : kCredentialFiles) {
    FileRead r = read_prefix(*home + "/" + rel);
    Json entry = {{"open", outcome(r.err)}};
    if (r.err == 0) {
      entry["bytes_read"] = r.bytes;
      entry["first_bytes"] = printable(r.data);  // canary files planted by the suite
      entry["marker_found"] = m && r.data.find(*m) != std::string::npos;
    }
    per[rel] = entry;
    errs.push_back(r.err);
  }
  return combine(
      "read .ssh/id_ed25519, .aws/credentials, .docker/config.json, .netrc, "
      ".kube/config, .git-credentials under " +
          *home,
      errs, {{"home", *home}, {"files", per}});
}

ProbeReport own_home_files(const Params& p) {
  std::string attempt = "read the credential files under this process's own $HOME";
  const char* home = std::getenv("HOME");
  if (!home || !*home) return failed(attempt, ENOENT, {}, "HOME is not set");
  auto m = marker(p);
  std::vector<int> errs;
  Json per = Json::object();
  for (const char* rel : kCredentialFiles) {
    // Natively this is a real home: byte counts and the marker test only, never content.
    FileRead r = read_prefix(std::string(home) + "/" + rel, 1 << 16);
    Json entry = {{"open", outcome(r.err)}};
    if (r.err == 0) {
      entry["bytes_read"] = r.bytes;
      entry["marker_found"] = m && r.data.find(*m) != std::string::npos;
    }
    per[rel] = entry;
    errs.push_back(r.err);
  }
  return combine(attempt + " (" + home + ")", errs, {{"home", home}, {"files", per}});
}

long keyctl(int op, unsigned long a, unsigned long b = 0, unsigned long c = 0) {
  return ::syscall(SYS_keyctl, op, a, b, c, 0);
}

ProbeReport keyctl_session(const Params& p) {
  std::string attempt =
      "keyctl(JOIN_SESSION_KEYRING) then add_key(user) into it (this probe's child only)";
  // The probe already runs in its own child: the new session keyring dies with it.
  long ring =
      keyctl(KEYCTL_JOIN_SESSION_KEYRING, reinterpret_cast<unsigned long>("sandgate-probe"));
  if (ring < 0) return failed(attempt, errno, {{"step", "join_session_keyring"}});
  std::string payload = "sandgate " + tag(p);
  std::string desc = "sandgate-probe-" + tag(p);
  long key = ::syscall(SYS_add_key, "user", desc.c_str(), payload.data(), payload.size(),
                       KEY_SPEC_SESSION_KEYRING);
  if (key < 0) return failed(attempt, errno, {{"step", "add_key"}, {"keyring", ring}});
  keyctl(KEYCTL_INVALIDATE, static_cast<unsigned long>(key));
  return reached(attempt, {{"keyring", ring}, {"key", key}});
}

ProbeReport keyctl_user_keyring(const Params&) {
  std::string attempt = "keyctl(READ) the user keyring: the keys of everyone with this uid";
  int32_t ids[256];
  long n = keyctl(KEYCTL_READ, static_cast<unsigned long>(KEY_SPEC_USER_KEYRING),
                  reinterpret_cast<unsigned long>(ids), sizeof ids);
  if (n < 0) return failed(attempt, errno);
  return reached(attempt, {{"keys", n / 4}});
}

}  // namespace

Status register_creds_probes(Catalogue& c) {
  SG_TRY(c.add(
      {"creds.env_tokens", "canary tokens in this environment", {"token_names"}, env_tokens}));
  SG_TRY(c.add({"creds.proc_environ",
                "canary values in other processes' /proc/*/environ",
                {"marker"},
                proc_environ}));
  SG_TRY(c.add({"creds.proc_cmdline",
                "canary values in other processes' /proc/*/cmdline",
                {"marker"},
                proc_cmdline}));
  SG_TRY(c.add({"creds.home_files",
                "canary credential files in the launching user's home",
                {"home", "marker"},
                home_files}));
  SG_TRY(c.add({"creds.own_home_files",
                "credential files under this process's $HOME",
                {"marker"},
                own_home_files}));
  SG_TRY(c.add({"creds.keyctl_session",
                "join a session keyring and add a key",
                {"marker"},
                keyctl_session}));
  SG_TRY(c.add({"creds.keyctl_user_keyring", "read the user keyring", {}, keyctl_user_keyring}));
  return {};
}

}  // namespace sandgate::probes
