// The burst monitor (docs/DESIGN.md idea 5): one thread samples every active call's cgroup at a
// short interval (20 ms by default), and is woken early by each run's memory-pressure trigger
// (a PSI trigger on v2/unified, memory.pressure_level on v1) and each budget's threshold. Each
// sample is handed to the call's ladder together with the host's memory pressure. It waits in
// epoll_wait, each trigger registered once, so that a wake-up costs nothing per trigger.
//
// Each watched call has its own UsageReader (CgroupBackend::usage_reader), which keeps the
// cgroup's control files open: a sample is a few preads, no path lookup. Every
// kFullReadEvery-th sample of a call (and its first) is a full read; the others read only
// what the ladder acts on at every step.
//
// Run-queue delay (controller/runq.h): a call given a RunqMeter (set_runq_meter) has its
// run-queue delay read at every sample; with the rule on (runq_window > 0), each call's ladder
// gets, at each step, the worst rate among the other measured calls over the window and whether
// this call uses the most CPU of all the active ones (LadderInput::runq). A call its own CPU
// limit throttled within the window (its grant's cpu.max, or the ladder's squeeze) is not
// counted as waiting: a runnable task of a throttled cgroup waits for its quota, not for the
// others, and counting it would let a squeezed call get its squeezer squeezed in turn.
//
// Network bytes (controller/net_meter.h): a call given a NetMeter (set_net_meter) has its
// bytes out and in read at every sample; once the points span half of net_window, its ladder
// gets, at each step, its own rates over the window, out and in apart (the rule compares their
// sum), and its CPU use over the same window (LadderInput::net). They are read whenever a
// meter is set, the rule on or off: the outcome's peak network rate comes from them.
//
// Memory budgets: a call watched with a MemoryBudget (the controller's tenant budget or root
// limit, per-call mode) has its ladder told, at each step, how full the budget is (read once
// per sample for all its calls), whether this call is the largest of the budget's active calls
// and whether it grew since its previous sample (LadderInput::budget).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "controller/cgroup.h"
#include "controller/ladder.h"
#include "controller/net_meter.h"
#include "controller/runq.h"
#include "core/fd.h"
#include "core/host_paths.h"

namespace sandgate::controller {

// A cgroup with a memory limit that several calls count against (a tenant's budget, the
// controller root's): the budget rule's view (LadderSettings::freeze_budget_at).
struct MemoryBudget {
  Cgroup cg;
  uint64_t limit = 0;
  // Wake the monitor for a sample the moment the charge crosses this many bytes (the rule's
  // freeze threshold), rather than at the next interval, where the backend can
  // (CgroupBackend::memory_threshold_eventfd); 0: never.
  uint64_t wake_at = 0;
};

class Monitor {
 public:
  // A call's samples 0, N, 2N, ... are full reads (100 ms at the 20 ms default interval).
  static constexpr uint64_t kFullReadEvery = 5;

  // `runq_window`: the window of the run-queue rule's rates; 0: the rule is off and no meter
  // is read. `net_window`: the window of a call's network rates; 0: no network meter is read.
  Monitor(CgroupBackend& backend, HostPaths paths, Duration interval,
          Duration runq_window = Duration(0), Duration net_window = Duration(0));
  ~Monitor();
  Monitor(const Monitor&) = delete;
  Monitor& operator=(const Monitor&) = delete;

  // Starts watching a call. `ladder` must outlive unwatch(id).
  // `budget`: the memory budget the call counts against, read once per sample for all of its
  // calls (LadderInput::budget); none: the call's ladder gets no budget view.
  // `reader`: the call cgroup's reader when the caller has one (prepared ahead); none: the
  // monitor makes its own.
  // `trigger`: the key of its run's trigger (want_trigger), 0: none.
  void watch(uint64_t id, const Cgroup& cg, Ladder* ladder,
             std::chrono::steady_clock::time_point start,
             const std::optional<MemoryBudget>& budget = std::nullopt,
             std::unique_ptr<UsageReader> reader = nullptr, uint64_t trigger = 0);
  // Stops watching; after it returns the monitor no longer touches the ladder or the meter.
  // Gives back the call's reader, for the caller's last read (null if `id` was not watched).
  std::unique_ptr<UsageReader> unwatch(uint64_t id);
  // The call `id` (watched) is measured by `meter` from now on; owned until unwatch(id).
  void set_runq_meter(uint64_t id, std::unique_ptr<RunqMeter> meter);
  // The call `id` (watched) has its network bytes read through `meter` from now on; owned
  // until unwatch(id).
  void set_net_meter(uint64_t id, std::unique_ptr<NetMeter> meter);
  // A pressure trigger of a whole run (its calls' pressure shows there too), wanted under `key`:
  // it wakes the monitor to sample every call. One per run rather than one per call, and made
  // late, by the monitor thread, once a call watched under `key` has been active for `stall`
  // (CgroupBackend::memory_pressure_trigger on `cg`): tearing a PSI trigger down costs an RCU
  // grace period (5-16 ms on this project's VMs, kernel/sched/psi.c psi_trigger_destroy), which
  // a run whose calls are all shorter than that never pays at its end. Nothing is lost by the
  // wait: the trigger fires on `stall` of stall time within its window, which a call cannot
  // reach before it has run for `stall`, and until then the monitor samples at its interval.
  // A trigger the backend cannot make is logged (debug) and not tried again.
  void want_trigger(uint64_t key, const Cgroup& cg, Duration stall, Duration window);
  // Drops the run's trigger; its descriptor is closed outside the monitor's lock, so that the
  // grace period does not hold up the monitor's samples.
  void remove_trigger(uint64_t key);

  // The memory charged to the watched calls whose cgroups lie under `ancestor` (a cgroup's
  // rel), as of each call's latest sample (0 before its first).
  uint64_t calls_charge(const std::string& ancestor) const;

  // Samples taken, triggers made and trigger wake-ups so far (for benchmarks and tests).
  uint64_t samples() const { return samples_.load(); }
  uint64_t triggers_made() const { return triggers_made_.load(); }
  uint64_t trigger_wakeups() const { return wakeups_.load(); }
  // Samples taken early because a budget's charge crossed its wake_at.
  uint64_t budget_wakeups() const { return budget_wakeups_.load(); }
  // CPU time the monitor thread has used so far (its pthread CPU clock), for the benchmark
  // that holds the monitor to a share of one core; nullopt if the clock cannot be read.
  std::optional<std::chrono::nanoseconds> cpu_time() const;

 private:
  // One sample of a call for the run-queue rule's window.
  struct RunqPoint {
    std::chrono::steady_clock::time_point at;
    uint64_t cpu_us = 0;
    uint64_t cpu_throttled_us = 0;    // by the call's own cpu.max (grant or ladder squeeze)
    std::optional<uint64_t> runq_ns;  // nullopt: no meter, or it could not be read
  };
  // One sample of a metered call for its network window.
  struct NetPoint {
    std::chrono::steady_clock::time_point at;
    uint64_t cpu_us = 0;
    NetTotals net;
  };
  struct Watched {
    Cgroup cg;
    Ladder* ladder = nullptr;
    std::chrono::steady_clock::time_point start;
    std::unique_ptr<UsageReader> reader;  // owned; closed on unwatch
    uint64_t reads = 0;                   // reads attempted, to pace the full ones
    std::unique_ptr<RunqMeter> meter;     // null: run-queue delay not measured
    std::deque<RunqPoint> history;        // the last runq_window of samples (rule on only)
    // The last sample at which its ladder squeezed it: its run-queue delay until a window after
    // is its quota's, not other calls' doing.
    std::optional<std::chrono::steady_clock::time_point> squeezed_at;
    std::unique_ptr<NetMeter> net_meter;  // null: network bytes not measured
    std::deque<NetPoint> net_history;     // the last net_window of samples (metered calls)
    std::string budget;                   // key of budgets_, "" if none
    std::optional<uint64_t> last_memory;  // memory.current at the previous sample
    uint64_t trigger = 0;                 // key of triggers_, 0 if none
  };
  // A budget watched for as long as one of its calls is (refs).
  struct Budget {
    MemoryBudget budget;
    std::unique_ptr<UsageReader> reader;
    size_t refs = 0;
    UniqueFd wake;            // the threshold eventfd at budget.wake_at, once registered
    uint64_t wake_token = 0;  // its registration in epoll_, 0: none
    bool wake_tried = false;  // registered (or failed to) by the monitor thread
  };
  struct RunTrigger {
    Cgroup cg;
    Duration stall{}, window{};
    bool tried = false;  // made (or failed to be) by the monitor thread
    UniqueFd fd;
    uint64_t token = 0;  // its registration in epoll_, 0: none
  };
  // What an epoll event's token stands for: a run's trigger (key) or a budget's threshold
  // eventfd (budget). A token outlives nothing: an event whose token is gone is ignored, so a
  // descriptor number reused after a close is never mistaken for the old one.
  struct Source {
    std::optional<uint64_t> run_trigger;  // key of triggers_
    std::string budget;                   // key of budgets_, or ""
  };
  // Registers `fd` in epoll_ for `events` (under mu_); 0 if epoll_ctl failed (then the source
  // is only sampled at each interval).
  uint64_t add_source(int fd, uint32_t events, Source source);
  // Unregisters it (under mu_), before its descriptor is closed.
  void drop_source(int fd, uint64_t& token);
  // One epoll event of a source (under mu_): sets `triggered` or `budget_crossed`. A trigger
  // that hung up is moved to `hung_up`, for the caller to close after releasing mu_ (closing
  // a PSI trigger waits for a grace period).
  void on_event(uint64_t token, uint32_t events, bool& triggered, bool& budget_crossed,
                std::vector<UniqueFd>& hung_up);
  void register_budget_wakes();
  // Makes each wanted trigger one of whose calls has been active for its stall (under mu_);
  // returns when the next one not yet made falls due, if any.
  std::optional<std::chrono::steady_clock::time_point> make_due_triggers(
      std::chrono::steady_clock::time_point now);
  // The call's network view over the window (after adding this sample's point), or nullopt.
  std::optional<NetSignal> net_signal(Watched& w, const Usage& u,
                                      std::chrono::steady_clock::time_point now);
  void loop();
  void sample_all();
  // host_memory_pressure through an fd kept open and re-read with pread (the monitor thread
  // only); opened again while it is missing or fails.
  std::optional<double> read_host_psi();

  CgroupBackend& backend_;
  HostPaths paths_;
  Duration interval_;
  Duration runq_window_;
  Duration net_window_;
  mutable std::mutex mu_;
  std::map<uint64_t, Watched> watched_;
  std::map<std::string, Budget> budgets_;  // by the budget cgroup's rel
  UniqueFd host_psi_;                      // <proc>/pressure/memory
  UniqueFd wake_;   // eventfd: the set of watched calls changed, or stop (token 0)
  UniqueFd epoll_;  // wake_, the run triggers, the budgets' threshold eventfds
  uint32_t trigger_events_;
  std::map<uint64_t, RunTrigger> triggers_;  // run triggers, under mu_
  std::map<uint64_t, Source> sources_;       // by token, under mu_
  uint64_t next_token_ = 1;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> samples_{0}, wakeups_{0}, budget_wakeups_{0}, triggers_made_{0};
  std::thread thread_;
};

// Rates over a window of cumulative samples (the run-queue rule): the change between the oldest
// and newest point per second of wall time between them, once the points span at least half
// the window; nullopt before that. Pure, for the unit tests.
std::optional<double> rate_per_second(std::chrono::steady_clock::time_point from,
                                      uint64_t from_value, std::chrono::steady_clock::time_point to,
                                      uint64_t to_value, Duration window);

// Host memory pressure, some avg10 (%), from <proc>/pressure/memory; nullopt without PSI.
std::optional<double> host_memory_pressure(const HostPaths& paths);

}  // namespace sandgate::controller
