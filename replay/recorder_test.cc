// The recorder against a scripted fake backend (its arithmetic and call bookkeeping), and the
// io counter parsers against kernel text. The real recording through `sandgate record` is in
// tests/replay_test.cc.
#include "replay/recorder.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "controller/fake_backend.h"

namespace sandgate::replay {
namespace {

using namespace std::chrono_literals;

TEST(IoBytes, ParsesV2IoStatAcrossDevices) {
  EXPECT_EQ(parse_io_stat_v2("8:16 rbytes=1459200 wbytes=314773504 rios=192 wios=353 dbytes=0 dios=0\n"
                             "8:0 rbytes=100 wbytes=23 rios=1 wios=1 dbytes=7 dios=1\n"),
            1459200u + 314773504u + 100u + 23u);
  EXPECT_EQ(parse_io_stat_v2(""), 0u);  // no io yet: no lines
  EXPECT_EQ(parse_io_stat_v2("8:0 rbytes=x wbytes=1\n"), std::nullopt);
}

TEST(IoBytes, ParsesV1ServiceBytesReadPlusWrite) {
  EXPECT_EQ(parse_blkio_service_bytes("254:0 Read 4096\n254:0 Write 8192\n254:0 Sync 12288\n"
                                      "254:0 Async 0\n254:0 Discard 100\n254:0 Total 12388\n"
                                      "Total 12388\n"),
            12288u);
  EXPECT_EQ(parse_blkio_service_bytes("Total 0\n"), 0u);
  EXPECT_EQ(parse_blkio_service_bytes("garbage"), std::nullopt);
}

TEST(CpuMillicores, IsUsageOverWall) {
  EXPECT_EQ(cpu_millicores(50'000, 50ms), 1000u);  // one core busy
  EXPECT_EQ(cpu_millicores(25'000, 100ms), 250u);
  EXPECT_EQ(cpu_millicores(200'000, 100ms), 2000u);
  EXPECT_EQ(cpu_millicores(10, 0ms), 0u);
}

TEST(JoinCommand, QuotesOnlyWhatAShellWouldSplit) {
  EXPECT_EQ(join_command({"make", "-j2"}), "make -j2");
  EXPECT_EQ(join_command({"sh", "-c", "grep -rn 'x y' ."}), "sh -c 'grep -rn '\\''x y'\\'' .'");
  EXPECT_EQ(join_command({"echo", ""}), "echo ''");
}

TEST(Recorder, SamplesCarryTheOpenCallAndCpuComesFromDeltas) {
  controller::testing::FakeBackend backend(controller::testing::FakeBackend::all_features(),
                                           "/nonexistent-sgtest-mount");
  auto cg = backend.create("sgrec/run", nullptr);
  ASSERT_TRUE(cg.ok());
  // cpu_usage_us grows by 1 s per read: far above any real interval, so every sample's
  // millicores is large and positive, which shows the delta (not the total) is used.
  std::vector<controller::Usage> script;
  for (int i = 0; i < 400; ++i) {
    controller::Usage u;
    u.memory_current = 100'000'000 + static_cast<uint64_t>(i) * 1000;
    u.pids_current = 3;
    u.cpu_usage_us = static_cast<uint64_t>(i) * 1'000'000;
    script.push_back(u);
  }
  backend.script("sgrec/run", script);

  RecorderOptions o;
  o.interval = 10ms;
  o.header.source = "synthetic (recorder_test)";
  Recorder rec(backend, *cg, o);
  std::this_thread::sleep_for(40ms);
  std::string id = rec.begin_call("compile", "exec", "make -j2");
  EXPECT_EQ(id, "c1");
  std::this_thread::sleep_for(80ms);
  rec.end_call(id);
  std::this_thread::sleep_for(40ms);
  std::string id2 = rec.begin_call("search", "exec", "grep -rn x");
  EXPECT_EQ(id2, "c2");
  Trace t = rec.finish();  // c2 still open: it ends now

  ASSERT_EQ(t.calls.size(), 2u);
  EXPECT_EQ(t.calls[0].intent, "compile");
  EXPECT_EQ(t.calls[0].command, "make -j2");
  EXPECT_GE(t.calls[0].end_ms - t.calls[0].start_ms, 80);
  EXPECT_GE(t.calls[1].end_ms, t.calls[1].start_ms);
  EXPECT_EQ(t.header.interval_ms, 10);

  ASSERT_GE(t.samples.size(), 8u);
  size_t in_c1 = 0, outside = 0;
  for (size_t i = 0; i < t.samples.size(); ++i) {
    const Sample& s = t.samples[i];
    if (i > 0) {
      EXPECT_GT(s.t_ms, t.samples[i - 1].t_ms);
    }
    EXPECT_EQ(s.pids, 3u);
    EXPECT_GE(s.mem_bytes, 100'000'000u);
    EXPECT_GT(s.cpu_millicores, 1000u);
    bool inside = s.t_ms >= t.calls[0].start_ms && s.t_ms <= t.calls[0].end_ms;
    if (s.call == "c1") {
      ++in_c1;
      EXPECT_TRUE(inside) << "sample at " << s.t_ms << " names c1";
    } else if (!s.call) {
      ++outside;
      EXPECT_FALSE(s.t_ms > t.calls[0].start_ms && s.t_ms < t.calls[0].end_ms);
    }
  }
  EXPECT_GE(in_c1, 3u);  // 80 ms at 10 ms
  EXPECT_GE(outside, 2u);
  // What the recorder made is a trace the reader accepts.
  auto back = parse_trace(format_trace(t), "recorded");
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(back->calls, t.calls);
  EXPECT_EQ(back->samples.size(), t.samples.size());
}

// A busy host can stall the sampling thread between its read and its bookkeeping; a call that
// ends in that gap still owns the sample (CI once saw a burst's 83 MB "between calls").
TEST(Recorder, ASampleReadWhileACallEndsBelongsToThatCall) {
  controller::testing::FakeBackend backend(controller::testing::FakeBackend::all_features(),
                                           "/nonexistent-sgtest-mount");
  auto cg = backend.create("sgrec/run", nullptr);
  ASSERT_TRUE(cg.ok());
  controller::Usage small, big;
  small.memory_current = 1'000'000;
  big.memory_current = 250'000'000;
  backend.script("sgrec/run", {small});
  std::atomic<Recorder*> rec_ptr{nullptr};
  std::atomic<bool> armed{false}, fired{false};
  // The read under way when the call ends: the call ends, then the read answers with the
  // call's peak.
  backend.set_read_hook([&](const std::string& rel) {
    if (!armed.exchange(false)) return;
    rec_ptr.load()->end_call("c1");
    backend.script(rel, {big, small});
    fired = true;
  });

  RecorderOptions o;
  o.interval = 10ms;
  Recorder rec(backend, *cg, o);
  rec_ptr = &rec;
  ASSERT_EQ(rec.begin_call("compile", "exec", "make"), "c1");
  armed = true;
  for (int i = 0; i < 500 && !fired; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_TRUE(fired) << "the sampling thread never read";
  std::this_thread::sleep_for(40ms);
  Trace t = rec.finish();
  backend.set_read_hook(nullptr);

  ASSERT_EQ(t.calls.size(), 1u);
  size_t peaks = 0;
  for (const Sample& s : t.samples) {
    if (s.mem_bytes != big.memory_current) continue;
    ++peaks;
    EXPECT_EQ(s.call, "c1") << "the peak read while c1 ended is c1's";
    EXPECT_GE(s.t_ms, t.calls[0].start_ms);
    EXPECT_LE(s.t_ms, t.calls[0].end_ms);
  }
  EXPECT_EQ(peaks, 1u);
}

}  // namespace
}  // namespace sandgate::replay
