#include "core/id_ranges.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <csignal>
#include <filesystem>
#include <limits>

#include "core/fd.h"
#include "core/files.h"
#include "core/json.h"
#include "core/log.h"
#include "core/process.h"

namespace sandgate {

namespace {

bool parse_u64(std::string_view s, uint64_t& out) {
  if (s.empty() || s.size() > 19) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

// The run a lock names, or "" when it cannot be read.
std::string lock_run_id(const std::string& lock_path, Json* whole = nullptr) {
  auto j = read_json_file(lock_path);
  if (!j.ok() || !j->is_object()) return "";
  auto it = j->find("run_id");
  if (it == j->end() || !it->is_string()) return "";
  if (whole) *whole = *j;
  return it->get<std::string>();
}

// The state directory whose record owns a lock. Locks written before the lock directory was
// host-wide have none; they lay in <state_dir>/id-ranges, so their state directory is the lock
// directory's parent.
std::string lock_state_dir(const Json& lock, const std::string& lock_dir) {
  if (auto it = lock.find("state_dir"); it != lock.end() && it->is_string())
    return it->get<std::string>();
  auto slash = lock_dir.find_last_of('/');
  return slash == std::string::npos ? "." : lock_dir.substr(0, slash);
}

// A state directory as locks name it: absolute, so that a process in another working directory
// finds the record.
std::string absolute_dir(const std::string& dir) {
  std::error_code ec;
  auto abs = std::filesystem::absolute(dir, ec);
  return ec ? dir : abs.lexically_normal().string();
}

// The lock files of the lock directory (temporary files included), or an error appended.
std::vector<std::string> lock_names(const std::string& dir, std::vector<std::string>* errors) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (!d) {
    if (errno != ENOENT && errors) errors->push_back(sys_error("opendir", dir).message());
    return names;
  }
  while (struct dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(n);
  }
  ::closedir(d);
  return names;
}

}  // namespace

Result<IdPool> parse_id_pool(const std::string& text) {
  const std::string step = "id pool";
  auto colon = text.find(':');
  uint64_t first = 0, ranges = 0;
  if (colon == std::string::npos || !parse_u64(std::string_view(text).substr(0, colon), first) ||
      !parse_u64(std::string_view(text).substr(colon + 1), ranges))
    return logic_error(step,
                       "expected FIRST:RANGES (two decimal numbers, e.g. 2000000:1024), got '" +
                           text.substr(0, 64) + "'");
  if (first < kIdRangeSize)
    return logic_error(step, "FIRST must be at least 65536 (below are the host's own ids), got " +
                                 std::to_string(first));
  if (ranges == 0 || ranges > 65535)
    return logic_error(step, "RANGES must be from 1 to 65535, got " + std::to_string(ranges));
  if (first + ranges * kIdRangeSize > std::numeric_limits<uint32_t>::max())
    return logic_error(
        step, "the pool " + text.substr(0, 64) + " ends above 4294967294 ((uid_t)-1 is reserved)");
  return IdPool{static_cast<uid_t>(first), static_cast<uint32_t>(ranges)};
}

std::string to_string(const IdPool& pool) {
  return std::to_string(pool.first) + ":" + std::to_string(pool.ranges);
}

IdRangeLease& IdRangeLease::operator=(IdRangeLease&& o) noexcept {
  if (this != &o) {
    state_dir_ = std::move(o.state_dir_);
    lock_ = std::move(o.lock_);
    run_id_ = std::move(o.run_id_);
    first_ = o.first_;
    o.lock_.clear();
  }
  return *this;
}

IdRangeLease::~IdRangeLease() {
  if (lock_.empty()) return;
  // Once the run's record exists it names the lock (the record is written with it): the
  // record's release, or gc, removes it after the run's processes are gone.
  std::string record = state_dir_ + "/runs/" + run_id_ + ".json";
  if (::access(record.c_str(), F_OK) == 0) return;
  if (auto s = release_id_range(lock_, run_id_); !s.ok())
    spdlog::warn("releasing id range {}: {}", first_, s.error().message());
}

Result<IdRangeLease> acquire_id_range(const HostPaths& paths, const IdPool& pool,
                                      const std::string& run_id) {
  const std::string& dir = paths.id_range_dir;
  SG_TRY(make_dirs(dir, 0700));
  pid_t me = ::getpid();
  unsigned long long start = process_start_time(paths.proc, me).value_or(0);
  // The lock's whole content first, in a file of our own; then link(2) puts it in place only
  // if the name is free.
  std::string tmp = dir + "/.tmp-" + run_id + "-" + std::to_string(me);
  {
    UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (!fd.valid()) return sys_error("create id range lock", tmp);
    std::string text = Json{{"run_id", run_id},
                            {"state_dir", absolute_dir(paths.state_dir)},
                            {"owner_pid", me},
                            {"owner_start", start},
                            {"count", kIdRangeSize}}
                           .dump() +
                       "\n";
    if (::write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
      Error e = sys_error("write id range lock", tmp);
      ::unlink(tmp.c_str());
      return e;
    }
  }
  for (uint32_t i = 0; i < pool.ranges; ++i) {
    uid_t first = pool.first + i * kIdRangeSize;
    std::string lock = dir + "/" + std::to_string(first) + ".lock";
    if (::link(tmp.c_str(), lock.c_str()) == 0) {
      ::unlink(tmp.c_str());
      IdRangeLease lease;
      lease.state_dir_ = paths.state_dir;
      lease.lock_ = lock;
      lease.run_id_ = run_id;
      lease.first_ = first;
      return lease;
    }
    if (errno != EEXIST) {
      Error e = sys_error("link id range lock", lock);
      ::unlink(tmp.c_str());
      return e;
    }
  }
  ::unlink(tmp.c_str());
  return sys_error(
      EAGAIN, "take a host id range",
      "every range of the pool " + to_string(pool) + " is held (" + dir +
          "); `sandgate gc` reclaims those of dead runs, `--id-pool` names another pool");
}

Status release_id_range(const std::string& lock_path, const std::string& run_id) {
  struct stat st;
  if (::lstat(lock_path.c_str(), &st) != 0) {
    if (errno == ENOENT) return {};
    return sys_error("stat id range lock", lock_path);
  }
  std::string owner = lock_run_id(lock_path);
  // Another run's lock now (ours was removed, and the range taken again): not ours to remove.
  if (!owner.empty() && owner != run_id) return {};
  if (::unlink(lock_path.c_str()) != 0 && errno != ENOENT)
    return sys_error("remove id range lock", lock_path);
  return {};
}

int reclaim_orphan_id_ranges(const HostPaths& paths, std::vector<std::string>& errors) {
  const std::string& dir = paths.id_range_dir;
  int removed = 0;
  for (const auto& n : lock_names(dir, &errors)) {
    std::string path = dir + "/" + n;
    Json j;
    std::string run_id = lock_run_id(path, &j);
    if (run_id.empty() && n.starts_with(".tmp-")) {
      // A writer's own file before link(2) puts it in place (acquire_id_range), still empty
      // or half written: its writer was killed between open and write, or is writing now.
      // Its name ends with the writer's pid: gone, the file is removed; alive, left to it.
      pid_t writer = 0;
      const std::string tail = n.substr(n.rfind('-') + 1);
      std::from_chars(tail.data(), tail.data() + tail.size(), writer);
      if (writer > 0 && (::kill(writer, 0) == 0 || errno != ESRCH)) continue;
      if (::unlink(path.c_str()) != 0 && errno != ENOENT)
        errors.push_back(sys_error("remove id range lock", path).message());
      continue;
    }
    if (run_id.empty()) {
      // Released by its owner between the listing and the read (and perhaps taken again
      // since): nothing to reclaim, or a lock to read once more. Only a lock that is there
      // and unreadable twice is not one of ours.
      struct stat st;
      if (::lstat(path.c_str(), &st) != 0 && errno == ENOENT) continue;
      run_id = lock_run_id(path, &j);
      if (run_id.empty() && ::lstat(path.c_str(), &st) != 0 && errno == ENOENT) continue;
    }
    if (run_id.empty()) {
      errors.push_back(
          logic_error("read id range lock", "not a lock sandgate wrote", path).message());
      continue;
    }
    pid_t owner = j.value("owner_pid", 0);
    unsigned long long owner_start = j.value("owner_start", 0ULL);
    auto now = process_start_time(paths.proc, owner);
    if (owner > 0 && now && *now == owner_start) continue;  // its run is still being made
    // A record names it: gc's release of that record (in whichever state directory holds it)
    // removes it, after the run's processes.
    std::string record = lock_state_dir(j, dir) + "/runs/" + run_id + ".json";
    if (::access(record.c_str(), F_OK) == 0) continue;
    // A temporary file of a dead owner, or a lock it never recorded.
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      errors.push_back(sys_error("remove id range lock", path).message());
      continue;
    }
    if (!n.starts_with(".tmp-")) ++removed;
  }
  return removed;
}

std::vector<std::string> id_range_locks_of(const HostPaths& paths) {
  std::vector<std::string> held;
  for (const auto& n : lock_names(paths.id_range_dir, nullptr)) {
    std::string path = paths.id_range_dir + "/" + n;
    Json j;
    if (lock_run_id(path, &j).empty()) continue;
    if (absolute_dir(lock_state_dir(j, paths.id_range_dir)) == absolute_dir(paths.state_dir))
      held.push_back(path);
  }
  return held;
}

}  // namespace sandgate
