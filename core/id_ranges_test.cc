#include "core/id_ranges.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <set>
#include <thread>

#include "core/fd.h"
#include "core/files.h"
#include "core/state.h"
#include "core/test_temp_dir.h"

namespace sandgate {
namespace {

using ::testing::HasSubstr;

bool exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

class IdRangesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    paths_.state_dir = tmp_ / "state";
    paths_.work_dir = tmp_ / "work";
    paths_.id_range_dir = tmp_ / "id-ranges";
  }
  // Takes a range in a child that then dies without releasing it (as after kill -9).
  uid_t acquire_in_dead_process(const std::string& run_id) {
    return acquire_in_dead_process(paths_, run_id);
  }
  uid_t acquire_in_dead_process(const HostPaths& paths, const std::string& run_id) {
    int fds[2];
    EXPECT_EQ(::pipe(fds), 0);
    pid_t pid = ::fork();
    if (pid == 0) {
      auto lease = acquire_id_range(paths, pool_, run_id);
      uid_t first = lease.ok() ? lease->first() : 0;
      (void)!::write(fds[1], &first, sizeof first);
      ::_exit(0);  // no destructor: the lock stays, its owner is gone
    }
    ::close(fds[1]);
    uid_t first = 0;
    EXPECT_EQ(::read(fds[0], &first, sizeof first), static_cast<ssize_t>(sizeof first));
    ::close(fds[0]);
    int status;
    ::waitpid(pid, &status, 0);
    return first;
  }
  // Records `run_id` as a run of `paths` whose owner has died (a crashed run's record).
  void record_dead_run(const HostPaths& paths, const std::string& run_id, uid_t first) {
    auto st = RunState::create(paths, run_id, "test",
                               {{Resource::Kind::kIdRange, lock(first), 0, 0, run_id}});
    ASSERT_TRUE(st.ok()) << st.error().message();
    std::string record = paths.state_dir + "/runs/" + run_id + ".json";
    auto j = read_json_file(record);
    ASSERT_TRUE(j.ok());
    (*j)["owner_pid"] = 0;
    ASSERT_TRUE(write_json_file_atomic(record, *j).ok());
  }
  std::string lock(uid_t first) const {
    return paths_.id_range_dir + "/" + std::to_string(first) + ".lock";
  }

  testing::TempDir tmp_;
  HostPaths paths_;
  IdPool pool_{3'000'000, 4};
};

TEST(IdPoolTest, ParsesFirstAndRanges) {
  auto p = parse_id_pool("2000000:1024");
  ASSERT_TRUE(p.ok()) << p.error().message();
  EXPECT_EQ(p->first, 2'000'000u);
  EXPECT_EQ(p->ranges, 1024u);
  EXPECT_EQ(to_string(*p), "2000000:1024");
}

TEST(IdPoolTest, RefusesWhatCannotBeAPool) {
  struct Case {
    const char* text;
    const char* says;
  } cases[] = {
      {"2000000", "expected FIRST:RANGES"},
      {"abc:4", "expected FIRST:RANGES"},
      {"2000000:-1", "expected FIRST:RANGES"},
      {"1000:4", "FIRST must be at least 65536"},
      {"2000000:0", "RANGES must be from 1 to 65535"},
      {"4294000000:20", "ends above 4294967294"},
  };
  for (const auto& c : cases) {
    auto p = parse_id_pool(c.text);
    ASSERT_FALSE(p.ok()) << c.text;
    EXPECT_THAT(p.error().message(), HasSubstr(c.says)) << c.text;
  }
}

TEST_F(IdRangesTest, EachRunGetsItsOwnRangeLowestFreeFirst) {
  auto a = acquire_id_range(paths_, pool_, "ra");
  auto b = acquire_id_range(paths_, pool_, "rb");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->first(), 3'000'000u);
  EXPECT_EQ(b->first(), 3'000'000u + kIdRangeSize);
  EXPECT_TRUE(exists(lock(a->first())));
  {
    // Released (no record names it): the lowest range is free again.
    auto moved = std::move(*a);
  }
  EXPECT_FALSE(exists(lock(3'000'000)));
  auto c = acquire_id_range(paths_, pool_, "rc");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->first(), 3'000'000u);
}

TEST_F(IdRangesTest, AFullPoolIsAClearError) {
  std::vector<IdRangeLease> held;
  for (int i = 0; i < 4; ++i) {
    auto l = acquire_id_range(paths_, pool_, "r" + std::to_string(i));
    ASSERT_TRUE(l.ok()) << l.error().message();
    held.push_back(std::move(*l));
  }
  auto full = acquire_id_range(paths_, pool_, "r5");
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.error().err, EAGAIN);
  EXPECT_THAT(full.error().message(), HasSubstr("every range of the pool 3000000:4 is held"));
}

TEST_F(IdRangesTest, ConcurrentProcessesNeverShareARange) {
  IdPool pool{3'000'000, 64};
  constexpr int kProcs = 12;
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  std::vector<pid_t> pids;
  for (int i = 0; i < kProcs; ++i) {
    pid_t pid = ::fork();
    if (pid == 0) {
      uid_t got[3] = {};
      std::vector<IdRangeLease> held;
      for (int k = 0; k < 3; ++k) {
        auto l = acquire_id_range(paths_, pool, "p" + std::to_string(i) + "-" + std::to_string(k));
        got[k] = l.ok() ? l->first() : 0;
        if (l.ok()) held.push_back(std::move(*l));
      }
      (void)!::write(fds[1], got, sizeof got);
      ::_exit(0);  // locks stay: every range handed out is still held when the parent counts
    }
    pids.push_back(pid);
  }
  ::close(fds[1]);
  std::set<uid_t> seen;
  int handed = 0;
  uid_t got[3];
  while (::read(fds[0], got, sizeof got) == static_cast<ssize_t>(sizeof got)) {
    for (uid_t g : got) {
      ASSERT_NE(g, 0u) << "an acquisition failed";
      ++handed;
      EXPECT_TRUE(seen.insert(g).second) << "range " << g << " handed out twice";
    }
  }
  ::close(fds[0]);
  for (pid_t p : pids) ::waitpid(p, nullptr, 0);
  EXPECT_EQ(handed, kProcs * 3);
}

TEST_F(IdRangesTest, ReleaseLeavesALockAnotherRunTookSince) {
  auto a = acquire_id_range(paths_, pool_, "ra");
  ASSERT_TRUE(a.ok());
  std::string path = a->lock_path();
  // The record of a run "rold" that held this slot earlier is released late (gc): the lock
  // now names "ra" and stays.
  EXPECT_TRUE(release_id_range(path, "rold").ok());
  EXPECT_TRUE(exists(path));
  EXPECT_TRUE(release_id_range(path, "ra").ok());
  EXPECT_FALSE(exists(path));
  EXPECT_TRUE(release_id_range(path, "ra").ok()) << "gone already is success";
}

TEST_F(IdRangesTest, ARecordedLeaseIsTheRecordsToRelease) {
  auto lease = acquire_id_range(paths_, pool_, "rrec");
  ASSERT_TRUE(lease.ok());
  std::string path = lease->lock_path();
  auto state =
      RunState::create(paths_, "rrec", "test", {{Resource::Kind::kIdRange, path, 0, 0, "rrec"}});
  ASSERT_TRUE(state.ok()) << state.error().message();
  { auto gone = std::move(*lease); }
  EXPECT_TRUE(exists(path)) << "the record owns the lock now";
  EXPECT_TRUE(release_resources(paths_, state->resources()).ok());
  EXPECT_FALSE(exists(path));
  EXPECT_TRUE(state->finish().ok());
}

TEST_F(IdRangesTest, GcReclaimsTheRangesOfDeadRunsOnly) {
  // A dead owner that never recorded its range: an orphan lock.
  uid_t orphan = acquire_in_dead_process("rorphan");
  ASSERT_NE(orphan, 0u);
  // A dead run whose record names its range (gc releases it with the record).
  uid_t recorded = acquire_in_dead_process("rdead");
  ASSERT_NE(recorded, 0u);
  record_dead_run(paths_, "rdead", recorded);
  // A live run's range (this process).
  auto live = acquire_id_range(paths_, pool_, "rlive");
  ASSERT_TRUE(live.ok());

  auto report = collect_garbage(paths_);
  EXPECT_TRUE(report.errors.empty()) << report.errors.front();
  EXPECT_EQ(report.runs_removed, 1);
  EXPECT_EQ(report.id_ranges_reclaimed, 1);
  EXPECT_FALSE(exists(lock(orphan)));
  EXPECT_FALSE(exists(lock(recorded)));
  EXPECT_TRUE(exists(live->lock_path()));
}

// A writer killed between creating its temporary lock file and writing it (a chaos kill of a
// serve whose other run was taking a range) leaves an empty `.tmp-RUN-PID`: gc removes it once
// that pid is gone, and leaves a live writer's alone, without an error for either.
TEST_F(IdRangesTest, GcRemovesAnEmptyTemporaryLockOfADeadWriterOnly) {
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(0);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);
  const std::string dead = paths_.id_range_dir + "/.tmp-rkilled-" + std::to_string(child);
  const std::string alive = paths_.id_range_dir + "/.tmp-rwriting-" + std::to_string(::getpid());
  ASSERT_TRUE(make_dirs(paths_.id_range_dir, 0700).ok());
  for (const auto& f : {dead, alive})
    ASSERT_TRUE(write_file(f, "", O_WRONLY | O_CREAT | O_TRUNC).ok());
  auto report = collect_garbage(paths_);
  EXPECT_TRUE(report.errors.empty()) << report.errors.front();
  EXPECT_EQ(report.id_ranges_reclaimed, 0) << "a temporary file is no range";
  EXPECT_FALSE(exists(dead)) << "the dead writer's file stayed";
  EXPECT_TRUE(exists(alive)) << "a live writer's file was removed under it";
  ::unlink(alive.c_str());
}

// A lock its owner releases while gc looks (listed, then gone before it is read) is no error:
// `sandgate gc` beside busy runs said "not a lock sandgate wrote" of such a lock (seen in the
// suite: ContractTest's gc beside another test's run).
TEST_F(IdRangesTest, GcPassesOverALockReleasedWhileItLooks) {
  std::atomic<bool> stop = false;
  std::atomic<int> churned = 0;
  std::thread churn([&] {
    while (!stop) {
      auto lease = acquire_id_range(paths_, pool_, "rchurn");  // released at once
      if (lease.ok()) ++churned;
    }
  });
  std::vector<std::string> errors;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  int looks = 0;
  while (std::chrono::steady_clock::now() < until && errors.empty()) {
    reclaim_orphan_id_ranges(paths_, errors);
    ++looks;
  }
  stop = true;
  churn.join();
  EXPECT_GT(churned.load(), 100) << "the range was hardly taken and released";
  EXPECT_TRUE(errors.empty()) << errors.front() << " (after " << looks << " looks)";
}

// The ids are the host's: two sandgate processes with state directories of their own (two test
// processes, two users) draw from one host-wide set of locks, or the kernel's per-user counts
// couple their runs.
TEST_F(IdRangesTest, TwoStateDirectoriesNeverShareARange) {
  HostPaths other = paths_;
  other.state_dir = tmp_ / "other-state";
  auto a = acquire_id_range(paths_, pool_, "ra");
  auto b = acquire_id_range(other, pool_, "rb");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->first(), b->first());
  EXPECT_EQ(id_range_locks_of(paths_), std::vector<std::string>{a->lock_path()});
  EXPECT_EQ(id_range_locks_of(other), std::vector<std::string>{b->lock_path()});
}

// gc in one state directory leaves a dead run's range that another state directory's record
// names (that directory's gc releases it with the record), and reclaims an unrecorded one
// whatever state directory its owner used.
TEST_F(IdRangesTest, GcLooksForTheRecordInTheLocksOwnStateDirectory) {
  HostPaths other = paths_;
  other.state_dir = tmp_ / "other-state";
  uid_t theirs = acquire_in_dead_process(other, "rtheirs");
  ASSERT_NE(theirs, 0u);
  record_dead_run(other, "rtheirs", theirs);
  uid_t orphan = acquire_in_dead_process(other, "rorphan");
  ASSERT_NE(orphan, 0u);

  auto mine = collect_garbage(paths_);
  EXPECT_TRUE(mine.errors.empty()) << mine.errors.front();
  EXPECT_EQ(mine.id_ranges_reclaimed, 1);
  EXPECT_TRUE(exists(lock(theirs))) << "the other directory's record owns it";
  EXPECT_FALSE(exists(lock(orphan)));

  auto theirs_gc = collect_garbage(other);
  EXPECT_TRUE(theirs_gc.errors.empty()) << theirs_gc.errors.front();
  EXPECT_EQ(theirs_gc.runs_removed, 1);
  EXPECT_FALSE(exists(lock(theirs)));
}

// A lock written before the lock directory was host-wide names no state directory; it lay in
// <state_dir>/id-ranges, so its record is looked for in the lock directory's parent.
TEST_F(IdRangesTest, ALockWithoutStateDirBelongsToTheLockDirectorysParent) {
  HostPaths legacy = paths_;
  legacy.id_range_dir = paths_.state_dir + "/id-ranges";
  ASSERT_TRUE(make_dirs(legacy.id_range_dir, 0700).ok());
  std::string path = legacy.id_range_dir + "/3000000.lock";
  ASSERT_TRUE(write_json_file_atomic(path, Json{{"run_id", "rold"}, {"owner_pid", 0}}).ok());
  ASSERT_TRUE(RunState::create(legacy, "rold", "test", {}).ok());
  EXPECT_EQ(id_range_locks_of(legacy), std::vector<std::string>{path});
  std::vector<std::string> errors;
  EXPECT_EQ(reclaim_orphan_id_ranges(legacy, errors), 0) << "its record is still there";
  EXPECT_TRUE(exists(path));
}

}  // namespace
}  // namespace sandgate
