#include "workloads/memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <utility>

namespace sandgate::workloads {

Result<MemoryHolder> MemoryHolder::reserve(uint64_t max_bytes) {
  MemoryHolder h;
  h.page_ = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  if (max_bytes == 0) return h;
  uint64_t size = (max_bytes + h.page_ - 1) / h.page_ * h.page_;
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return sys_error("mmap", std::to_string(size) + " bytes");
  // 4 KiB pages, even where the system gives huge ones to all (THP "always"). The programs a
  // trace recorded rarely ask for huge pages, and on a VM with free page reporting a huge page
  // comes from a 2 MiB block the guest has handed back to the host, so each one faults on the
  // host too (measured on such a VM, 300 MiB: 4 KiB pages 0.11-0.13 s every time; huge pages
  // 0.04 s when recycled but 0.9-1.5 s after a few idle seconds, which left a replayed burst
  // short of its peak). And grow() leaves its pages zero-filled, which a huge page's
  // underused-page shrinker would take back. EINVAL without THP in the kernel: nothing to do.
  (void)::madvise(p, size, MADV_NOHUGEPAGE);
  h.base_ = static_cast<char*>(p);
  h.size_ = size;
  return h;
}

MemoryHolder::~MemoryHolder() {
  if (base_) ::munmap(base_, size_);
}

MemoryHolder::MemoryHolder(MemoryHolder&& o) noexcept
    : base_(std::exchange(o.base_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      touched_(std::exchange(o.touched_, 0)),
      page_(o.page_) {}

MemoryHolder& MemoryHolder::operator=(MemoryHolder&& o) noexcept {
  if (this != &o) {
    if (base_) ::munmap(base_, size_);
    base_ = std::exchange(o.base_, nullptr);
    size_ = std::exchange(o.size_, 0);
    touched_ = std::exchange(o.touched_, 0);
    page_ = o.page_;
  }
  return *this;
}

uint64_t MemoryHolder::grow(uint64_t goal, uint64_t max_step) {
  goal = std::min(goal, size_);
  if (goal <= touched_) return 0;
  uint64_t end = std::min(goal, touched_ + max_step);
  end = std::min((end + page_ - 1) / page_ * page_, size_);
  // The kernel makes the pages present and writable in one call (Linux 5.14): resident and
  // charged like written ones, and left alone by any THP shrinker since the reservation has no
  // huge pages. A write per page instead costs a trap each, and on a VM the first write to a
  // page can cost an exit besides (measured here, 320 MiB: 1.0 s page by page, 0.04 s
  // populated, 0.43 s more if then written); beside busy CPUs the page-by-page rise outlasted
  // the burst it replayed. Should the kernel refuse (older than 5.14, or interrupted), a
  // volatile store per page faults the rest in, which the compiler may not drop or merge.
  // Running out of memory arrives as the OOM killer either way.
  if (::madvise(base_ + touched_, end - touched_, MADV_POPULATE_WRITE) != 0) {
    volatile char* p = base_;
    for (uint64_t off = touched_; off < end; off += page_) p[off] = 1;
  }
  uint64_t grown = end - touched_;
  touched_ = end;
  return grown;
}

Status MemoryHolder::shrink(uint64_t goal) {
  uint64_t keep = goal / page_ * page_;
  if (keep >= touched_) return ok_status();
  if (::madvise(base_ + keep, touched_ - keep, MADV_DONTNEED) != 0)
    return sys_error("madvise MADV_DONTNEED");
  touched_ = keep;
  return ok_status();
}

uint64_t self_rss_bytes() {
  // Kept open and re-read with pread. A fresh open allocates kernel memory (a struct file, the
  // seq_file) charged to the caller's memory cgroup: a holder sampling itself every 20 ms in a
  // full budget then invokes the OOM killer itself, and the kernel, once the call that filled
  // the budget is dead, takes the holder (SessionTest.UnderASharedBudget... caught it, 2 runs
  // in 16). Per thread, so no lock is held across a fork; reopened in a forked child, since
  // /proc/self was resolved at open and the inherited fd reads the parent.
  struct Statm {
    int fd = -1;
    pid_t owner = 0;
    ~Statm() {
      if (fd >= 0) ::close(fd);
    }
  };
  thread_local Statm statm;
  const pid_t pid = ::getpid();
  if (statm.fd >= 0 && statm.owner != pid) {
    ::close(statm.fd);  // the parent's, inherited: closing it here leaves the parent's alone
    statm.fd = -1;
  }
  if (statm.fd < 0) {
    statm.fd = ::open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    if (statm.fd < 0) return 0;
    statm.owner = pid;
  }
  char buf[128];
  ssize_t n = ::pread(statm.fd, buf, sizeof(buf) - 1, 0);
  if (n <= 0) return 0;
  buf[n] = '\0';
  unsigned long long size = 0, resident = 0;
  if (std::sscanf(buf, "%llu %llu", &size, &resident) != 2) return 0;
  return resident * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

}  // namespace sandgate::workloads
