// Resident memory on demand: one anonymous reservation, populated and written to grow and
// released with MADV_DONTNEED to shrink, so the process's RSS (and its cgroup's charge) follows
// a target without malloc's caching in between.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/result.h"

namespace sandgate::workloads {

class MemoryHolder {
 public:
  // Reserves `max_bytes` of address space (MAP_NORESERVE: nothing is charged until touched),
  // in 4 KiB pages (MADV_NOHUGEPAGE) as the recorded programs mostly had: huge pages were
  // faster only when warm and ten times slower after an idle spell on a VM (memory.cc says why).
  static Result<MemoryHolder> reserve(uint64_t max_bytes);

  MemoryHolder() = default;
  ~MemoryHolder();
  MemoryHolder(MemoryHolder&& o) noexcept;
  MemoryHolder& operator=(MemoryHolder&& o) noexcept;
  MemoryHolder(const MemoryHolder&) = delete;
  MemoryHolder& operator=(const MemoryHolder&) = delete;

  uint64_t capacity() const { return size_; }
  uint64_t touched() const { return touched_; }

  // Makes at most `max_step` more bytes toward `goal` (clamped to the capacity) resident and
  // returns how many: populated by the kernel in one call (MADV_POPULATE_WRITE), or, where it
  // refuses, written page by page. Running out of memory arrives as the OOM killer (or
  // SIGBUS), not as a return value: it is the kernel's to deliver and is not hidden.
  uint64_t grow(uint64_t goal, uint64_t max_step);
  // Releases everything above `goal` (page-rounded down) with MADV_DONTNEED.
  Status shrink(uint64_t goal);

 private:
  char* base_ = nullptr;
  uint64_t size_ = 0;
  uint64_t touched_ = 0;
  uint64_t page_ = 4096;
};

// Resident set size of this process (/proc/self/statm field 2 × page size); 0 if unreadable.
uint64_t self_rss_bytes();

}  // namespace sandgate::workloads
