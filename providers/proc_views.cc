#include "providers/proc_views.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "core/fd.h"
#include "core/files.h"
#include "core/log.h"
#include "core/proc_cgroup.h"
#include "core/process.h"
#include "core/strings.h"
#include "providers/supervisor.h"
#include "providers/supervisor_protocol.h"

namespace sandgate::providers {
namespace {

// cgroup v1 writes "no limit" as the largest page-aligned long (PAGE_COUNTER_MAX pages): any
// value from 2^62 up is no limit.
constexpr uint64_t kNoLimit = 1ULL << 62;

std::optional<uint64_t> read_number(const std::string& path) {
  auto text = read_file(path, 4096);
  if (!text.ok()) return std::nullopt;
  std::string t = *text;
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
  if (t == "max") return kNoLimit;
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(t.c_str(), &end, 10);
  if (errno != 0 || end == t.c_str()) return std::nullopt;
  return v;
}

// "key value" lines (memory.stat, cpuacct.stat, cpu.stat).
std::map<std::string, uint64_t> read_flat_keyed(const std::string& path) {
  std::map<std::string, uint64_t> out;
  auto text = read_file(path, 1 << 16);
  if (!text.ok()) return out;
  for (std::string_view piece : split(*text, '\n')) {
    std::string line(piece);
    auto sp = line.find(' ');
    if (sp == std::string::npos) continue;
    out[line.substr(0, sp)] = std::strtoull(line.c_str() + sp + 1, nullptr, 10);
  }
  return out;
}

bool exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

std::string parent_of(const std::string& dir) {
  auto slash = dir.rfind('/');
  return slash == std::string::npos || slash == 0 ? "" : dir.substr(0, slash);
}

void line_kb(std::string& out, const char* key, uint64_t kb) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "%-16s%8llu kB\n", key, static_cast<unsigned long long>(kb));
  out += buf;
}

// The events memory.stat counts that /proc/vmstat counts too, by vmstat's name: v2's memory.stat
// uses the same names (Documentation/admin-guide/cgroup-v2.rst, "memory.stat"); v1's has
// pgfault, pgmajfault and workingset_refault_* as "total_<name>" (the hierarchy's total), and
// none of the rest. pgpgin/pgpgout are left out on purpose: v1's count charge events, vmstat's
// count kilobytes read from and written to disk.
constexpr const char* kVmstatEvents[] = {
    // Faults, and the pages the cgroup's reclaim looked at, took back and moved between lists.
    "pgfault", "pgmajfault", "pgrefill", "pgactivate", "pgdeactivate", "pglazyfree", "pglazyfreed",
    "pgscan_kswapd", "pgscan_direct", "pgscan_khugepaged", "pgsteal_kswapd", "pgsteal_direct",
    "pgsteal_khugepaged",
    // Pages that came back soon after they were reclaimed.
    "workingset_refault_anon", "workingset_refault_file", "workingset_activate_anon",
    "workingset_activate_file", "workingset_restore_anon", "workingset_restore_file",
    "workingset_nodereclaim",
    // Huge pages, swap and zswap.
    "thp_fault_alloc", "thp_collapse_alloc", "pswpin", "pswpout", "zswpin", "zswpout"};

// MemTotal and MemFree of the view, in kB: the limit (the host's total where nothing limits,
// and never above it), less what the cgroup uses.
struct TotalFree {
  uint64_t total = 0, free = 0;
};
TotalFree total_and_free(const MemoryNumbers& m, uint64_t host_total_kb) {
  uint64_t total = m.limit == 0 || m.limit >= kNoLimit ? host_total_kb : m.limit / 1024;
  if (host_total_kb > 0) total = std::min(total, host_total_kb);
  const uint64_t used = std::min(m.usage / 1024, total);
  return {total, total - used};
}

}  // namespace

std::string render_meminfo(const MemoryNumbers& m, uint64_t host_total_kb) {
  const auto [total, free] = total_and_free(m, host_total_kb);
  // Page cache the cgroup could give back: what the kernel's MemAvailable also counts in.
  const uint64_t available = std::min(total, free + (m.active_file + m.inactive_file) / 1024);
  const uint64_t swap_total = m.swap_limit >= kNoLimit ? 0 : m.swap_limit / 1024;
  const uint64_t swap_free = swap_total - std::min(swap_total, m.swap_usage / 1024);
  std::string out;
  line_kb(out, "MemTotal:", total);
  line_kb(out, "MemFree:", free);
  line_kb(out, "MemAvailable:", available);
  line_kb(out, "Buffers:", 0);
  line_kb(out, "Cached:", m.file / 1024);
  line_kb(out, "SwapCached:", 0);
  line_kb(out, "Active:", (m.active_anon + m.active_file) / 1024);
  line_kb(out, "Inactive:", (m.inactive_anon + m.inactive_file) / 1024);
  line_kb(out, "Active(anon):", m.active_anon / 1024);
  line_kb(out, "Inactive(anon):", m.inactive_anon / 1024);
  line_kb(out, "Active(file):", m.active_file / 1024);
  line_kb(out, "Inactive(file):", m.inactive_file / 1024);
  line_kb(out, "Unevictable:", m.unevictable / 1024);
  line_kb(out, "Mlocked:", 0);
  line_kb(out, "SwapTotal:", swap_total);
  line_kb(out, "SwapFree:", swap_free);
  line_kb(out, "Dirty:", m.dirty / 1024);
  line_kb(out, "Writeback:", m.writeback / 1024);
  line_kb(out, "AnonPages:", m.anon / 1024);
  line_kb(out, "Mapped:", m.mapped / 1024);
  line_kb(out, "Shmem:", m.shmem / 1024);
  line_kb(out, "Slab:", 0);
  line_kb(out, "SReclaimable:", 0);
  line_kb(out, "SUnreclaim:", 0);
  return out;
}

struct sysinfo make_sysinfo(const MemoryNumbers& m, uint64_t host_total_kb, const LoadAverage& load,
                            const TaskCounts& tasks, double age_s) {
  const auto [total, free] = total_and_free(m, host_total_kb);
  const uint64_t swap_total = m.swap_limit >= kNoLimit ? 0 : m.swap_limit / 1024;
  const uint64_t swap_free = swap_total - std::min(swap_total, m.swap_usage / 1024);
  struct sysinfo si {};
  si.uptime = static_cast<long>(std::ceil(std::max(0.0, age_s)));
  for (int i = 0; i < 3; ++i)
    si.loads[i] =
        static_cast<unsigned long>(std::llround(std::max(0.0, load.avg[i]) * (1 << SI_LOAD_SHIFT)));
  si.totalram = total * 1024;
  si.freeram = free * 1024;
  si.sharedram = m.shmem;
  si.bufferram = 0;  // meminfo's Buffers: the cgroup does not count them apart
  si.totalswap = swap_total * 1024;
  si.freeswap = swap_free * 1024;
  si.procs = static_cast<unsigned short>(std::clamp(tasks.threads, 0, 65535));
  si.mem_unit = 1;
  return si;
}

Result<SysinfoSample> SysinfoCache::get(const std::string& key,
                                        const std::function<Result<SysinfoSample>()>& read) {
  const auto now = now_();
  std::erase_if(entries_,
                [&](const auto& e) { return now - e.second.read_at >= kSysinfoCacheWindow; });
  if (auto it = entries_.find(key); it != entries_.end()) return it->second.sample;
  auto sample = read();
  if (sample.ok()) entries_[key] = Entry{now, *sample};
  return sample;
}

std::string render_vmstat(const MemoryNumbers& m, uint64_t host_total_kb,
                          const std::vector<std::string>& kernel_keys, uint64_t page_size) {
  const uint64_t page = page_size > 0 ? page_size : 4096;
  // A transparent huge page is one PMD's worth: a page table page of 8-byte entries, each
  // mapping a page (2 MiB with 4 KiB pages). vmstat prints the *_hugepages counts in those
  // units (mm/vmstat.c, vmstat_item_print_in_thp).
  const uint64_t huge = page * (page / 8);
  const uint64_t free_pages = total_and_free(m, host_total_kb).free * 1024 / page;
  // In the kernel's order (mm/vmstat.c, vmstat_text), for a reader without the kernel's keys.
  std::vector<std::pair<std::string, uint64_t>> own = {
      {"nr_free_pages", free_pages},
      {"nr_zone_inactive_anon", m.inactive_anon / page},
      {"nr_zone_active_anon", m.active_anon / page},
      {"nr_zone_inactive_file", m.inactive_file / page},
      {"nr_zone_active_file", m.active_file / page},
      {"nr_zone_unevictable", m.unevictable / page},
      {"nr_zone_write_pending", (m.dirty + m.writeback) / page},
      {"nr_inactive_anon", m.inactive_anon / page},
      {"nr_active_anon", m.active_anon / page},
      {"nr_inactive_file", m.inactive_file / page},
      {"nr_active_file", m.active_file / page},
      {"nr_unevictable", m.unevictable / page},
      {"nr_slab_reclaimable", m.slab_reclaimable / page},
      {"nr_slab_unreclaimable", m.slab_unreclaimable / page},
      {"nr_anon_pages", m.anon / page},
      {"nr_mapped", m.mapped / page},
      {"nr_file_pages", m.file / page},
      {"nr_dirty", m.dirty / page},
      {"nr_writeback", m.writeback / page},
      {"nr_shmem", m.shmem / page},
      {"nr_shmem_hugepages", m.shmem_thp / huge},
      {"nr_file_hugepages", m.file_thp / huge},
      {"nr_anon_transparent_hugepages", m.anon_thp / huge},
      {"nr_kernel_stack", m.kernel_stack / 1024},  // NR_KERNEL_STACK_KB: in kB
      {"nr_page_table_pages", m.pagetables / page},
      {"nr_swapcached", m.swapcached / page},
  };
  for (const char* e : kVmstatEvents)
    if (auto it = m.events.find(e); it != m.events.end()) own.emplace_back(e, it->second);
  std::string out;
  auto line = [&](const std::string& key, uint64_t v) {
    out += key + " " + std::to_string(v) + "\n";
  };
  if (kernel_keys.empty()) {
    for (const auto& [key, v] : own) line(key, v);
    return out;
  }
  std::map<std::string, uint64_t> by_key(own.begin(), own.end());
  for (const auto& key : kernel_keys) {
    auto it = by_key.find(key);
    line(key, it == by_key.end() ? 0 : it->second);
  }
  return out;
}

std::vector<std::string> vmstat_keys(std::string_view text) {
  std::vector<std::string> keys;
  for (std::string_view line : split(text, '\n')) {
    auto sp = line.find(' ');
    if (sp != 0 && !line.empty()) keys.emplace_back(line.substr(0, sp));
  }
  return keys;
}

std::string render_stat(const CpuNumbers& cpu, const TaskCounts& tasks, double age_s,
                        long long btime) {
  const int n = std::max(1, cpu.cpus);
  const double hz = static_cast<double>(::sysconf(_SC_CLK_TCK) > 0 ? ::sysconf(_SC_CLK_TCK) : 100);
  const uint64_t capacity = static_cast<uint64_t>(std::max(0.0, age_s) * hz) * n;
  const uint64_t busy = cpu.user_ticks + cpu.system_ticks;
  const uint64_t idle = capacity > busy ? capacity - busy : 0;
  auto cpu_line = [](const std::string& name, uint64_t user, uint64_t system, uint64_t idle) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "%s %llu 0 %llu %llu 0 0 0 0 0 0\n", name.c_str(),
                  static_cast<unsigned long long>(user), static_cast<unsigned long long>(system),
                  static_cast<unsigned long long>(idle));
    return std::string(buf);
  };
  std::string out = cpu_line("cpu ", cpu.user_ticks, cpu.system_ticks, idle);
  // Split evenly: which CPU ran what is the scheduler's, and not the run's to learn.
  for (int i = 0; i < n; ++i) {
    auto share = [&](uint64_t v) { return v / n + (static_cast<uint64_t>(i) < v % n ? 1 : 0); };
    out += cpu_line("cpu" + std::to_string(i), share(cpu.user_ticks), share(cpu.system_ticks),
                    share(idle));
  }
  out += "intr 0\nctxt 0\nbtime " + std::to_string(btime) + "\nprocesses " +
         std::to_string(tasks.threads) + "\nprocs_running " + std::to_string(tasks.running) +
         "\nprocs_blocked " + std::to_string(tasks.blocked) + "\nsoftirq 0 0 0 0 0 0 0 0 0 0 0\n";
  return out;
}

std::string render_uptime(const CpuNumbers& cpu, double age_s) {
  const double hz = static_cast<double>(::sysconf(_SC_CLK_TCK) > 0 ? ::sysconf(_SC_CLK_TCK) : 100);
  const double busy = static_cast<double>(cpu.user_ticks + cpu.system_ticks) / hz;
  const double idle = std::max(0.0, std::max(0.0, age_s) * std::max(1, cpu.cpus) - busy);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f %.2f\n", std::max(0.0, age_s), idle);
  return buf;
}

void LoadAverage::update(double active, double elapsed_s) {
  if (elapsed_s <= 0) return;
  // kernel/sched/loadavg.c: EXP_1 = 1884/2048 = e^(-5/60) per 5 s tick, and so on.
  static const double kPeriods[3] = {60.0, 300.0, 900.0};
  for (int i = 0; i < 3; ++i) {
    double decay = std::exp(-elapsed_s / kPeriods[i]);
    avg[i] = avg[i] * decay + active * (1.0 - decay);
  }
}

std::string render_loadavg(const LoadAverage& load, const TaskCounts& tasks) {
  char buf[128];
  std::snprintf(buf, sizeof buf, "%.2f %.2f %.2f %d/%d 0\n", load.avg[0], load.avg[1], load.avg[2],
                tasks.running, tasks.threads);
  return buf;
}

Result<MemoryNumbers> read_memory(const std::string& dir) {
  MemoryNumbers m;
  const bool v1 = exists(dir + "/memory.limit_in_bytes");
  const std::string limit_file = v1 ? "memory.limit_in_bytes" : "memory.max";
  if (!v1 && !exists(dir + "/memory.current"))
    return logic_error("read the run's memory",
                       "not a memory cgroup (no memory.limit_in_bytes, "
                       "no memory.current)",
                       dir);
  auto usage = read_number(dir + (v1 ? "/memory.usage_in_bytes" : "/memory.current"));
  if (!usage) return sys_error(ENOENT, "read the run's memory usage", dir);
  m.usage = *usage;
  // The lowest limit on the way up: a call's grant under the run's ceiling under the tenant's.
  uint64_t limit = kNoLimit;
  for (std::string d = dir; !d.empty() && exists(d + "/" + limit_file); d = parent_of(d))
    if (auto l = read_number(d + "/" + limit_file)) limit = std::min(limit, *l);
  m.limit = limit >= kNoLimit ? 0 : limit;
  if (v1) {
    // memsw counts memory and swap together (only with swap accounting on).
    auto memsw = read_number(dir + "/memory.memsw.limit_in_bytes");
    auto memsw_usage = read_number(dir + "/memory.memsw.usage_in_bytes");
    if (memsw && *memsw < kNoLimit && m.limit && *memsw > m.limit) m.swap_limit = *memsw - m.limit;
    if (memsw_usage && *memsw_usage > m.usage) m.swap_usage = *memsw_usage - m.usage;
  } else {
    auto swap = read_number(dir + "/memory.swap.max");
    if (swap && *swap < kNoLimit) m.swap_limit = *swap;
    if (auto su = read_number(dir + "/memory.swap.current")) m.swap_usage = *su;
  }
  auto stat = read_flat_keyed(dir + "/memory.stat");
  // v1's hierarchical totals carry a "total_" prefix; v2's memory.stat is hierarchical as is.
  auto get = [&](const char* v1_key, const char* v2_key) {
    auto it = stat.find(v1 ? v1_key : v2_key);
    return it == stat.end() ? 0 : it->second;
  };
  m.file = get("total_cache", "file");
  m.anon = get("total_rss", "anon");
  m.shmem = get("total_shmem", "shmem");
  m.mapped = get("total_mapped_file", "file_mapped");
  m.dirty = get("total_dirty", "file_dirty");
  m.writeback = get("total_writeback", "file_writeback");
  m.active_anon = get("total_active_anon", "active_anon");
  m.inactive_anon = get("total_inactive_anon", "inactive_anon");
  m.active_file = get("total_active_file", "active_file");
  m.inactive_file = get("total_inactive_file", "inactive_file");
  m.unevictable = get("total_unevictable", "unevictable");
  // v1 has no slab, kernel stack or page table counts (0 in the views).
  m.slab_reclaimable = get("", "slab_reclaimable");
  m.slab_unreclaimable = get("", "slab_unreclaimable");
  m.kernel_stack = get("", "kernel_stack");
  m.pagetables = get("", "pagetables");
  m.swapcached = get("total_swapcached", "swapcached");
  m.anon_thp = get("total_rss_huge", "anon_thp");
  m.file_thp = get("", "file_thp");
  m.shmem_thp = get("", "shmem_thp");
  for (const char* e : kVmstatEvents) {
    auto it = stat.find(v1 ? std::string("total_") + e : std::string(e));
    if (it != stat.end()) m.events[e] = it->second;
  }
  return m;
}

Result<CpuNumbers> read_cpu(const std::vector<std::string>& dirs, int host_cpus) {
  CpuNumbers c;
  c.cpus = std::max(1, host_cpus);
  bool found = false;
  const long hz = ::sysconf(_SC_CLK_TCK) > 0 ? ::sysconf(_SC_CLK_TCK) : 100;
  for (const auto& d : dirs) {
    if (!found && exists(d + "/cpuacct.stat")) {
      auto s = read_flat_keyed(d + "/cpuacct.stat");  // already in USER_HZ
      c.user_ticks = s["user"];
      c.system_ticks = s["system"];
      found = true;
    } else if (!found && exists(d + "/cpu.stat")) {
      auto s = read_flat_keyed(d + "/cpu.stat");
      if (s.count("user_usec")) {
        c.user_ticks = s["user_usec"] * hz / 1'000'000;
        c.system_ticks = s["system_usec"] * hz / 1'000'000;
        found = true;
      }
    }
    // A quota caps how many CPUs' worth the run can use at once.
    std::optional<uint64_t> quota, period;
    if (exists(d + "/cpu.cfs_quota_us")) {
      auto q = read_file(d + "/cpu.cfs_quota_us", 64);
      if (q.ok() && !q->empty() && (*q)[0] != '-') quota = std::strtoull(q->c_str(), nullptr, 10);
      period = read_number(d + "/cpu.cfs_period_us");
    } else if (auto max = read_file(d + "/cpu.max", 64); max.ok() && max->rfind("max", 0) != 0) {
      char* end = nullptr;
      quota = std::strtoull(max->c_str(), &end, 10);
      period = std::strtoull(end, nullptr, 10);
    }
    if (quota && period && *quota > 0 && *period > 0)
      c.cpus = std::clamp(static_cast<int>((*quota + *period - 1) / *period), 1, c.cpus);
  }
  if (!found)
    return logic_error("read the run's CPU time", "no cpuacct.stat or cpu.stat in its cgroups");
  return c;
}

Result<TaskCounts> count_tasks(const std::vector<std::string>& dirs, const std::string& proc) {
  std::string root, list;
  for (const auto& d : dirs) {
    if (exists(d + "/tasks")) {
      root = d;
      list = "tasks";
      break;
    }
    if (exists(d + "/cgroup.threads")) {
      root = d;
      list = "cgroup.threads";
      break;
    }
  }
  if (root.empty()) return logic_error("count the run's tasks", "no tasks or cgroup.threads");
  TaskCounts t;
  std::vector<std::string> todo = {root};
  while (!todo.empty()) {
    std::string dir = std::move(todo.back());
    todo.pop_back();
    // A cgroup removed while it is walked (a call that just ended) is skipped.
    auto tids = read_file(dir + "/" + list, 1 << 20);
    if (tids.ok()) {
      for (std::string_view piece : split(*tids, '\n')) {
        std::string tid(piece);
        if (tid.empty()) continue;
        auto stat = read_file(proc + "/" + tid + "/stat", 1024);
        if (!stat.ok()) continue;  // exited meanwhile
        ++t.threads;
        auto close = stat->rfind(')');
        if (close == std::string::npos || close + 2 >= stat->size()) continue;
        char state = (*stat)[close + 2];
        if (state == 'R') ++t.running;
        if (state == 'D') ++t.blocked;
      }
    }
    DIR* d = ::opendir(dir.c_str());
    if (!d) continue;
    while (struct dirent* e = ::readdir(d)) {
      if (e->d_type != DT_DIR || e->d_name[0] == '.') continue;
      todo.push_back(dir + "/" + e->d_name);
    }
    ::closedir(d);
  }
  return t;
}

Result<std::string> read_pressure(const std::vector<std::string>& dirs, const std::string& name) {
  for (const auto& d : dirs)
    if (exists(d + "/" + name)) return read_file(d + "/" + name, 4096);
  return sys_error(EOPNOTSUPP, "read the run's pressure", name);
}

std::string reader_cgroup_dir(const std::string& run_dir, std::string_view proc_cgroup,
                              std::string_view controller) {
  // The reader's path in the hierarchy ("" for v2: its "0::" line).
  const std::string path = cgroup_path_in(proc_cgroup, controller);
  if (path.empty() || path[0] != '/') return "";
  // run_dir is <mount><R>: find the R that the reader's path starts with (the longest: the
  // mount is the shortest prefix that leaves one).
  for (size_t i = run_dir.find('/'); i != std::string::npos; i = run_dir.find('/', i + 1)) {
    std::string r = run_dir.substr(i);
    if (path == r ||
        (path.size() > r.size() && path.compare(0, r.size(), r) == 0 && path[r.size()] == '/'))
      return run_dir.substr(0, i) + path;
  }
  return "";
}

bool proc_views_enabled_by_environment() {
  const char* v = std::getenv("SANDGATE_PROC_VIEWS");
  if (!v) return true;
  std::string s = v;
  return !(s == "0" || s == "no" || s == "off" || s == "false");
}

Status proc_views_supported(const HostPaths& paths) {
  auto fs = read_file(paths.proc + "/filesystems", 1 << 16);
  if (!fs.ok() || fs->find("\tfuse\n") == std::string::npos)
    return logic_error("proc views", "the kernel has no fuse filesystem (modprobe fuse)");
  UniqueFd dev(::open("/dev/fuse", O_RDWR | O_CLOEXEC));
  if (!dev) return sys_error("proc views: open", "/dev/fuse");
  return {};
}

namespace {

// A server spawned that waits for its go (proc_views_server.cc): no mount, no run yet, so
// nothing to record; it exits when `control` is closed.
struct WaitingServer {
  pid_t pid = -1;
  UniqueFd control;  // ours: the go goes out here, the answer comes back
  std::string exe;
};

void discard(WaitingServer& server) {
  server.control.reset();
  ::kill(server.pid, SIGKILL);
  ::waitpid(server.pid, nullptr, 0);
}

// `env`: supervisor_env(), read by the caller (a thread that starts the spare must not read the
// environment while another sets it).
Result<WaitingServer> start_server(const std::string& exe, std::vector<std::string> env) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
    return sys_error("socketpair for proc views");
  UniqueFd ours(sv[0]), theirs(sv[1]);
  SpawnOptions options;
  // Not the host's environment: the server may wait for a run long after the variables of the
  // run that started it (and it parses what the run's code sends it).
  options.env = std::move(env);
  // Its own session: a terminal's ^C is for sandgate, which then tears the run down.
  options.new_session = true;
  options.pass_fd = theirs.get();
  auto child = spawn({exe, kProcViewsArg, "3"}, options);
  if (!child.ok()) return sys_error(child.error().err, "start proc views: exec the server", exe);
  return WaitingServer{child->release(), std::move(ours), exe};
}

// The spare (start_proc_views_spare). Never destroyed: at the process's exit the kernel closes
// our end, and the spare exits. Started by a thread of its own (`starting` while it spawns), so
// the spawn (the exec of the server binary, 1-5 ms on a 2-core VM) is off the destroy that asks
// for it; whoever needs the spare waits for a start under way instead of racing it.
struct Spare {
  std::mutex mutex;
  std::condition_variable started;  // `starting` went false
  bool starting = false;
  std::optional<WaitingServer> server;
  std::string failure;  // why the last start failed, said (and cleared) by the next taker
  int mounted = 0;      // servers of this process that mounted
  // Waits, under `lock`, for a start under way.
  void settle(std::unique_lock<std::mutex>& lock) {
    started.wait(lock, [this] { return !starting; });
    if (!failure.empty()) {
      spdlog::debug("proc views: no spare server: {}", failure);
      failure.clear();
    }
  }
};
Spare& spare() {
  static Spare* s = new Spare;
  return *s;
}

// Still waiting for its go: nothing to read and no hang-up (a spare never writes first).
bool still_waiting(const WaitingServer& server) {
  struct pollfd p = {server.control.get(), POLLIN, 0};
  return ::poll(&p, 1, 0) == 0;
}

// A server for `exe`: the spare when it is one and still waits, otherwise a fresh one.
Result<WaitingServer> take_server(const std::string& exe) {
  Spare& s = spare();
  std::optional<WaitingServer> taken;
  {
    std::unique_lock lock(s.mutex);
    s.settle(lock);
    taken.swap(s.server);
  }
  if (taken && taken->exe == exe && still_waiting(*taken)) return std::move(*taken);
  if (taken) discard(*taken);
  return start_server(exe, supervisor_env());
}

void count_mounted() {
  Spare& s = spare();
  std::lock_guard lock(s.mutex);
  ++s.mounted;
}

}  // namespace

void start_proc_views_spare(const std::string& exe_in) {
  const std::string exe = exe_in.empty() ? "/proc/self/exe" : exe_in;
  Spare& s = spare();
  std::lock_guard lock(s.mutex);
  if (s.mounted < 2 || s.server || s.starting) return;
  s.starting = true;
  // Detached: it touches only the Spare (never destroyed) and logs nothing (the logger may be
  // gone if the process exits meanwhile); a failure is said by the next taker (settle).
  std::thread([exe, env = supervisor_env(), &s]() mutable {
    auto started = start_server(exe, std::move(env));
    std::lock_guard lock(s.mutex);
    if (started.ok())
      s.server = std::move(started).value();
    else
      s.failure = started.error().message();
    s.starting = false;
    s.started.notify_all();
  }).detach();
}

void drop_proc_views_spare() {
  std::optional<WaitingServer> dropped;
  {
    Spare& s = spare();
    std::unique_lock lock(s.mutex);
    s.settle(lock);
    dropped.swap(s.server);
  }
  if (dropped) discard(*dropped);
}

pid_t proc_views_spare_pid() {
  Spare& s = spare();
  std::unique_lock lock(s.mutex);
  s.settle(lock);
  return s.server ? s.server->pid : -1;
}

Result<StartingProcViews> begin_proc_views(const HostPaths& paths, const std::string& exe_in,
                                           const std::string& mount_point,
                                           const std::vector<std::string>& cgroup_dirs,
                                           RunState& state) {
  StepClock clock("proc views", "begin");
  SG_TRY(proc_views_supported(paths));
  clock.lap("check");
  const std::string exe = exe_in.empty() ? "/proc/self/exe" : exe_in;
  if (::mkdir(mount_point.c_str(), 0755) != 0 && errno != EEXIST)
    return sys_error("mkdir proc views", mount_point);
  // The run's sysinfo channel (sysinfo_notify.h): the server's end goes with the go.
  int channel[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, channel) != 0)
    return sys_error("socketpair for the sysinfo channel");
  UniqueFd channel_ours(channel[0]), channel_theirs(channel[1]);
  SG_ASSIGN_OR_RETURN(WaitingServer server, take_server(exe));
  const pid_t pid = server.pid;
  clock.lap("server");
  // The server and the mount it will make, recorded in one write before it mounts anything: it
  // mounts only once it has its go (and exits at EOF instead).
  auto start = process_start_time(paths.proc, pid);
  // Named by its mount point: a reader of the record tells it from the run's supervisor.
  Status recorded =
      state.record_all({{Resource::Kind::kMount, mount_point},
                        {Resource::Kind::kProcess, mount_point, pid, start.value_or(0)}});
  if (!recorded.ok()) {
    discard(server);
    return std::move(recorded).error();
  }
  clock.lap("record");
  Json go = {{"op", "go"}, {"mount_point", mount_point}, {"cgroup_dirs", cgroup_dirs}};
  if (auto s = send_message(server.control.get(), go, {channel_theirs.get()}); !s.ok()) {
    discard(server);
    return std::move(s).error().context_add("start proc views server");
  }
  clock.lap("go");
  StartingProcViews starting;
  starting.pid_ = pid;
  starting.answer_ = std::move(server.control);
  starting.channel_ = std::move(channel_ours);
  starting.mount_point_ = mount_point;
  return starting;
}

Status StartingProcViews::wait_mounted() {
  if (!answer_) return logic_error("start proc views", "already waited for", mount_point_);
  UniqueFd answer_fd = std::move(answer_);
  // A server that failed is ours to reap (its record then names a process that is gone).
  auto failed = [&](Error e) -> Error {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    return e;
  };
  // Its answer: "ok", or the error that stopped it.
  struct pollfd p = {answer_fd.get(), POLLIN, 0};
  int ready;
  while ((ready = ::poll(&p, 1, 10'000)) < 0 && errno == EINTR) {
  }
  if (ready <= 0)
    return failed(logic_error("start proc views", "the server did not answer in 10 s"));
  char buf[512];
  ssize_t n = ::read(answer_fd.get(), buf, sizeof buf - 1);
  std::string answer = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
  if (answer.rfind("ok", 0) != 0)
    return failed(logic_error("start proc views",
                              answer.empty() ? "the server exited before mounting" : answer,
                              mount_point_));
  count_mounted();
  // Each file looked up here, where the wait overlaps the supervisor's exec: the server
  // answers each first lookup (a FUSE round trip, 0.1 ms), and its answer is cached for the
  // mount's life (entry_timeout), so the jail's binds of these files (jail.cc,
  // step_proc_views) find them without asking. The supervisor's set-up step that binds them
  // took 0.83 ms with the lookups, 0.17 ms without (jail_bench, median of 1400 runs). A file
  // this kernel lacks (no PSI) answers ENOENT, cached as well; a server that died answers
  // ENOTCONN, which the binds will report.
  for (const char* name : kProcViewFiles) {
    struct stat st;
    (void)::stat((mount_point_ + "/" + name).c_str(), &st);
  }
  return {};
}

void stop_proc_views_servers(const HostPaths& paths, const std::vector<Resource>& resources) {
  std::set<std::string> mounts;
  for (const auto& r : resources)
    if (r.kind == Resource::Kind::kMount) mounts.insert(r.path);
  for (const auto& r : resources)
    if (r.kind == Resource::Kind::kProcess && !r.path.empty() && mounts.count(r.path))
      signal_recorded_process(paths, r, SIGTERM);
}

std::vector<std::string> run_cgroup_dirs(const std::vector<std::string>& placement_dirs) {
  std::vector<std::string> out;
  for (const auto& dir : placement_dirs) {
    auto slash = dir.rfind('/');
    out.push_back(
        slash != std::string::npos && dir.substr(slash + 1) == "main" ? dir.substr(0, slash) : dir);
  }
  return out;
}

namespace {

// Said when a run's views cannot be had, wherever that is found out.
Error without_views_hint(Error e) {
  return std::move(e).context_add(
      "the run's /proc views (--no-proc-views or SANDGATE_PROC_VIEWS=0 runs without "
      "them, and calls then read the host's /proc/meminfo, stat, loadavg, vmstat and "
      "pressure)");
}

}  // namespace

Result<BeginRunProcViews> begin_run_proc_views(const HostPaths& paths, const std::string& exe,
                                               const std::string& run_dir,
                                               const std::vector<std::string>& cgroup_dirs,
                                               RunState& state) {
  std::string dir = run_dir + "/proc-views";
  auto begun = begin_proc_views(paths, exe, dir, cgroup_dirs, state);
  if (!begun.ok()) return without_views_hint(std::move(begun).error());
  auto starting = std::make_shared<StartingProcViews>(std::move(begun).value());
  BeginRunProcViews out;
  out.views = {dir, std::make_shared<UniqueFd>(starting->take_sysinfo_channel())};
  out.wait_mounted = [starting]() -> Status {
    if (auto s = starting->wait_mounted(); !s.ok()) return without_views_hint(std::move(s).error());
    return {};
  };
  return out;
}

}  // namespace sandgate::providers
