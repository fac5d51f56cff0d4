// An in-memory CgroupBackend for the controller unit tests (firecracker MockCgroupFs, one
// level up): cgroups are names in a set, never directories. It records every create,
// set_limits, freeze, kill, signal and remove, and answers read_usage from a scripted sequence
// per cgroup (the last sample repeats once the script runs out). Directories it reports are
// under a mount that does not exist, so the run record's cleanup (release_resources) finds
// nothing to touch. Thread-safe: the controller's monitor thread reads usage concurrently.
// Test-only.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "controller/cgroup.h"

namespace sandgate::controller::testing {

class FakeBackend : public CgroupBackend {
 public:
  // `mount` should not exist: the controller's run record names directories under it.
  explicit FakeBackend(CgroupFeatures features, std::string mount,
                       CgroupLayoutKind kind = CgroupLayoutKind::kV2)
      : features_(features), mount_(std::move(mount)), kind_(kind) {}

  // Every capability (a pure v2 host with cgroup.kill).
  static CgroupFeatures all_features() {
    CgroupFeatures f;
    f.memory_high = f.memory_peak = f.psi = f.psi_triggers = f.freeze = f.atomic_kill = true;
    f.io_limits = true;
    return f;
  }

  CgroupLayoutKind kind() const override { return kind_; }
  const CgroupFeatures& features() const override { return features_; }

  Result<Cgroup> create(const std::string& rel, RunState* state) override {
    std::lock_guard<std::mutex> lock(mu_);
    // Missing parents first, as the real backends make them.
    for (size_t pos = rel.find('/');; pos = rel.find('/', pos + 1)) {
      std::string part = pos == std::string::npos ? rel : rel.substr(0, pos);
      if (!existing_.contains(part)) {
        if (state)
          if (auto s = state->record({Resource::Kind::kCgroup, dir(part)}); !s.ok())
            return std::move(s).error();
        existing_.insert(part);
        created_.push_back(part);
      }
      if (pos == std::string::npos) break;
    }
    return cgroup(rel);
  }

  Status set_limits(const Cgroup& cg, const Limits& limits) override {
    std::lock_guard<std::mutex> lock(mu_);
    limit_calls_.emplace_back(cg.rel, limits);
    if (!existing_.contains(cg.rel)) return sys_error(ENOENT, "fake set_limits", cg.rel);
    // The contract: a field this layout cannot apply is an error naming it.
    if (limits.memory_high && !features_.memory_high)
      return logic_error("fake set_limits", "memory.high: this layout has none", cg.rel);
    if ((limits.io_read_bps || limits.io_write_bps) && !features_.io_limits)
      return logic_error("fake set_limits", "io_read_bps: this layout has no io limits", cg.rel);
    if ((limits.io_read_bps || limits.io_write_bps) && limits.io_device.empty())
      return logic_error("fake set_limits", "io_device: missing", cg.rel);
    return ok_status();
  }

  // A reader that answers as read_usage does; ops: "prepare REL" when it is prepared, and
  // "read REL prepared" or "read REL" for each read through it.
  std::unique_ptr<UsageReader> usage_reader(const Cgroup& cg) const override {
    struct Reader final : UsageReader {
      const FakeBackend* backend;
      Cgroup cg;
      bool prepared = false;
      Result<Usage> read(bool) override {
        {
          std::lock_guard lock(backend->mu_);
          backend->ops_.push_back("read " + cg.rel + (prepared ? " prepared" : ""));
        }
        return backend->read_usage(cg);
      }
      Status prepare() override {
        std::lock_guard lock(backend->mu_);
        backend->ops_.push_back("prepare " + cg.rel);
        prepared = true;
        return ok_status();
      }
    };
    auto r = std::make_unique<Reader>();
    r->backend = this;
    r->cg = cg;
    return r;
  }

  Result<Usage> read_usage(const Cgroup& cg) const override {
    if (read_hook_) read_hook_(cg.rel);  // outside the lock: the hook may call back in
    std::lock_guard<std::mutex> lock(mu_);
    ++reads_[cg.rel];
    if (!existing_.contains(cg.rel)) return sys_error(ENOENT, "fake read_usage", cg.rel);
    auto it = scripts_.find(cg.rel);
    if (it == scripts_.end() || it->second.empty()) {
      Usage u;
      add_cpu(cg.rel, u);
      return u;
    }
    Usage u = it->second.front();
    if (it->second.size() > 1) it->second.pop_front();
    add_cpu(cg.rel, u);
    return u;
  }

  Status freeze(const Cgroup& cg, bool frozen) override {
    std::lock_guard<std::mutex> lock(mu_);
    ops_.push_back(std::string(frozen ? "freeze " : "thaw ") + cg.rel);
    return ok_status();
  }
  Status kill(const Cgroup& cg) override {
    std::lock_guard<std::mutex> lock(mu_);
    ops_.push_back("kill " + cg.rel);
    return ok_status();
  }
  Status signal(const Cgroup& cg, int sig) override {
    std::lock_guard<std::mutex> lock(mu_);
    ops_.push_back("signal " + std::to_string(sig) + " " + cg.rel);
    return ok_status();
  }
  // None, unless set_procs said otherwise; remove() empties a cgroup. Recorded as "procs REL".
  Result<std::vector<pid_t>> procs(const Cgroup& cg) const override {
    std::lock_guard<std::mutex> lock(mu_);
    ops_.push_back("procs " + cg.rel);
    auto it = procs_.find(cg.rel);
    return it == procs_.end() ? std::vector<pid_t>{} : it->second;
  }

  // Removes `cg` and everything below it, as the real backends do (children first).
  Status remove(const Cgroup& cg) override {
    std::lock_guard<std::mutex> lock(mu_);
    removed_.push_back(cg.rel);
    procs_.erase(cg.rel);
    for (auto it = existing_.begin(); it != existing_.end();) {
      if (*it == cg.rel || it->starts_with(cg.rel + "/")) {
        it = existing_.erase(it);
      } else {
        ++it;
      }
    }
    return ok_status();
  }

  Placement placement(const Cgroup& cg) const override {
    Placement p;
    for (const auto& [h, d] : cg.dirs) p.cgroup_dirs.push_back(d);
    return p;
  }

  // Recorded as "attach <rel> <pid>"; set_attach_error makes it fail.
  Status attach(const Cgroup& cg, pid_t pid) override {
    if (attach_hook_) attach_hook_(cg.rel, pid);  // outside the lock, like read_hook_
    std::lock_guard lock(mu_);
    ops_.push_back("attach " + cg.rel + " " + std::to_string(pid));
    if (attach_fails_) return sys_error(ESRCH, "fake attach", cg.rel);
    return ok_status();
  }
  void set_attach_error(bool fails) {
    std::lock_guard lock(mu_);
    attach_fails_ = fails;
  }

  // What set_room scripted for `cg` (reclaimable only when asked for), else ENOENT as the real
  // backends' would be on the fake mount.
  Result<MemoryRoom> memory_room(const Cgroup& cg, bool with_reclaimable) const override {
    std::lock_guard<std::mutex> lock(mu_);
    ++room_reads_[{cg.rel, with_reclaimable}];
    auto it = rooms_.find(cg.rel);
    if (it == rooms_.end()) return sys_error(ENOENT, "fake memory_room", cg.rel);
    MemoryRoom r = it->second;
    if (!with_reclaimable) r.reclaimable = 0;
    return r;
  }

  // ENOTSUP, unless set_pressure_triggers(true): then a pipe's read end, readable once it
  // fires as a v1 pressure_level notification is (fire_trigger writes the 8 bytes the monitor
  // drains), and hung up as a trigger whose cgroup went away is (hang_up_trigger).
  Result<UniqueFd> memory_pressure_trigger(const Cgroup& cg, Duration, Duration) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!pressure_triggers_) return sys_error(ENOTSUP, "fake memory_pressure_trigger", cg.rel);
    int p[2];
    if (::pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0) return sys_error("fake memory_pressure_trigger");
    triggers_made_.push_back(cg.rel);
    UniqueFd read_end(p[0]);
    // A reader of its own too, so that fire_trigger after the monitor closed its end writes
    // (no EPIPE) into a pipe a stale registration would still see.
    trigger_fds_[cg.rel] = {UniqueFd(p[1]), UniqueFd(::dup(p[0]))};
    return read_end;
  }

  // Records what had been created when it was asked (primes()).
  Status prime_attach() override {
    std::lock_guard<std::mutex> lock(mu_);
    primes_.push_back(created_);
    return ok_status();
  }

  // --- scripting and inspection -----------------------------------------------------------

  // Each prime_attach, as the cgroups created by then.
  std::vector<std::vector<std::string>> primes() const {
    std::lock_guard lock(mu_);
    return primes_;
  }

  void set_pressure_triggers(bool on) {
    std::lock_guard lock(mu_);
    pressure_triggers_ = on;
  }
  // The cgroups memory_pressure_trigger made a trigger for, in order.
  std::vector<std::string> triggers_made() const {
    std::lock_guard lock(mu_);
    return triggers_made_;
  }
  // Fires the latest trigger made for `rel`; false if there is none.
  bool fire_trigger(const std::string& rel) {
    std::lock_guard lock(mu_);
    auto it = trigger_fds_.find(rel);
    uint64_t one = 1;
    return it != trigger_fds_.end() && ::write(it->second.first.get(), &one, sizeof one) == 8;
  }
  // Hangs up the latest trigger made for `rel` (for good); false if there is none.
  bool hang_up_trigger(const std::string& rel) {
    std::lock_guard lock(mu_);
    auto it = trigger_fds_.find(rel);
    if (it == trigger_fds_.end()) return false;
    it->second.first.reset();  // no writer left: the read ends report EPOLLHUP
    return true;
  }

  // Runs at the start of every read_usage, on the reading thread, before the scripted answer is
  // taken (a test stands in for what happens while a real read is under way). Set it before the
  // reads it is for start, and clear it only when no reader runs.
  void set_read_hook(std::function<void(const std::string& rel)> hook) { read_hook_ = std::move(hook); }
  // Runs at the start of every attach, on the attaching thread (a test stands in for the
  // kernel's slow attach). Same rules as set_read_hook.
  void set_attach_hook(std::function<void(const std::string& rel, pid_t pid)> hook) {
    attach_hook_ = std::move(hook);
  }
  // read_usage(rel) returns these in order, then repeats the last one.
  void script(const std::string& rel, std::vector<Usage> samples) {
    std::lock_guard<std::mutex> lock(mu_);
    scripts_[rel] = std::deque<Usage>(samples.begin(), samples.end());
  }
  // From now on read_usage(rel) reports cpu_usage_us growing at `cores` per second of real
  // time (on top of what the script says), as a busy cgroup's counter does, and
  // cpu_throttled_us growing at `throttled` seconds per second (its own cpu.max biting).
  void burn_cpu(const std::string& rel, double cores, double throttled = 0) {
    std::lock_guard<std::mutex> lock(mu_);
    burning_[rel] = {std::chrono::steady_clock::now(), cores, throttled};
  }
  // memory_room(rel) answers `room` from now on.
  void set_room(const std::string& rel, MemoryRoom room) {
    std::lock_guard<std::mutex> lock(mu_);
    rooms_[rel] = room;
  }
  // How often memory_room(rel, with_reclaimable) was asked.
  int room_reads(const std::string& rel, bool with_reclaimable) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = room_reads_.find({rel, with_reclaimable});
    return it == room_reads_.end() ? 0 : it->second;
  }
  // procs(rel) answers `pids` until rel is removed.
  void set_procs(const std::string& rel, std::vector<pid_t> pids) {
    std::lock_guard<std::mutex> lock(mu_);
    procs_[rel] = std::move(pids);
  }
  std::string dir(const std::string& rel) const { return mount_ + "/" + rel; }
  bool exists(const std::string& rel) const {
    std::lock_guard<std::mutex> lock(mu_);
    return existing_.contains(rel);
  }
  std::vector<std::string> created() const {
    std::lock_guard<std::mutex> lock(mu_);
    return created_;
  }
  std::vector<std::string> removed() const {
    std::lock_guard<std::mutex> lock(mu_);
    return removed_;
  }
  std::vector<std::string> ops() const {
    std::lock_guard<std::mutex> lock(mu_);
    return ops_;
  }
  std::vector<std::pair<std::string, Limits>> limit_calls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return limit_calls_;
  }
  // Every set_limits call on `rel`, oldest first.
  std::vector<Limits> limits_of(const std::string& rel) const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<Limits> out;
    for (const auto& [r, l] : limit_calls_)
      if (r == rel) out.push_back(l);
    return out;
  }
  int reads(const std::string& rel) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = reads_.find(rel);
    return it == reads_.end() ? 0 : it->second;
  }

 private:
  Cgroup cgroup(const std::string& rel) const { return Cgroup{rel, {{"unified", dir(rel)}}}; }
  void add_cpu(const std::string& rel, Usage& u) const {
    auto b = burning_.find(rel);
    if (b == burning_.end()) return;
    auto us = std::chrono::duration_cast<std::chrono::microseconds>(
                  std::chrono::steady_clock::now() - b->second.since)
                  .count();
    u.cpu_usage_us += static_cast<uint64_t>(static_cast<double>(us) * b->second.cores);
    u.cpu_throttled_us += static_cast<uint64_t>(static_cast<double>(us) * b->second.throttled);
  }

  CgroupFeatures features_;
  std::string mount_;
  CgroupLayoutKind kind_;
  mutable std::mutex mu_;
  std::set<std::string> existing_;
  std::vector<std::string> created_, removed_;
  mutable std::vector<std::string> ops_;  // usage_reader()'s readers log theirs too
  std::vector<std::pair<std::string, Limits>> limit_calls_;
  mutable std::map<std::string, std::deque<Usage>> scripts_;
  mutable std::map<std::string, int> reads_;
  std::map<std::string, MemoryRoom> rooms_;
  mutable std::map<std::pair<std::string, bool>, int> room_reads_;
  std::function<void(const std::string&)> read_hook_;
  std::function<void(const std::string&, pid_t)> attach_hook_;
  std::map<std::string, std::vector<pid_t>> procs_;
  bool attach_fails_ = false;
  bool pressure_triggers_ = false;
  std::vector<std::vector<std::string>> primes_;
  std::vector<std::string> triggers_made_;
  std::map<std::string, std::pair<UniqueFd, UniqueFd>> trigger_fds_;  // write end, a reader
  struct Burn {
    std::chrono::steady_clock::time_point since;
    double cores = 0, throttled = 0;
  };
  std::map<std::string, Burn> burning_;
};

}  // namespace sandgate::controller::testing
