#include "core/progress.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/fd.h"
#include "core/strings.h"

namespace sandgate {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Everything written to the pipe so far (the write end closed by the caller first).
std::string drain(Pipe& p) {
  p.write.reset();
  auto all = read_all(p.read.get());
  EXPECT_TRUE(all.ok());
  return all.ok() ? *all : "";
}

TEST(Progress, NotATerminalGivesPlainLinesOncePerStep) {
  auto p = make_pipe();
  ASSERT_TRUE(p.ok());
  {
    Progress progress({.fd = p->write.get()});  // kAuto: a pipe is not a terminal
    EXPECT_FALSE(progress.terminal());
    progress.status("qualify: costs: create + exec + destroy", "round 1/9");
    progress.status("qualify: costs: create + exec + destroy", "round 2/9");  // same step
    progress.status("qualify: namespaces: probes: fs (1/7)");
    progress.status("qualify: namespaces: probes: fs (1/7)");  // unchanged: not repeated
    progress.line("qualify: namespaces: something went wrong");
    progress.status("qualify: namespaces: probes: net (2/7)");
  }
  std::string out = drain(*p);
  EXPECT_EQ(out,
            "qualify: costs: create + exec + destroy\n"
            "qualify: namespaces: probes: fs (1/7)\n"
            "qualify: namespaces: something went wrong\n"
            "qualify: namespaces: probes: net (2/7)\n");
  EXPECT_THAT(out, Not(HasSubstr("\r")));
  EXPECT_THAT(out, Not(HasSubstr("\x1b")));
}

TEST(Progress, NotATerminalPrintsTheSameStepAgainAfterClear) {
  auto p = make_pipe();
  ASSERT_TRUE(p.ok());
  {
    Progress progress({.fd = p->write.get(), .mode = Progress::Mode::kLines});
    progress.status("replay: default");
    progress.clear();
    progress.status("replay: default");
  }
  EXPECT_EQ(drain(*p), "replay: default\nreplay: default\n");
}

TEST(Progress, HostileStepNamesComeOutInert) {
  auto p = make_pipe();
  ASSERT_TRUE(p.ok());
  {
    Progress progress({.fd = p->write.get(), .mode = Progress::Mode::kLines});
    // A clear-screen, a carriage return and a fake second line, a bell, a C1 CSI (U+009B),
    // a stray byte that is not UTF-8, a right-to-left override.
    progress.status(
        "evil\x1b[2J\r\nqualify: all good\x07 \xc2\x9b"
        "31m \xff \u202e!");
    progress.line("finding\x1b]0;title\x07\nsecond line");
  }
  std::string out = drain(*p);
  EXPECT_EQ(out,
            "evil\\x1b[2J\\x0d\\nqualify: all good\\x07 \\x9b31m \\xff \\u{202E}!\n"
            "finding\\x1b]0;title\\x07\n"
            "second line\n");
  for (char c : out) EXPECT_TRUE(c == '\n' || static_cast<unsigned char>(c) >= 0x20) << int(c);
}

TEST(Progress, TerminalSafeKeepsValidTextAsIs) {
  EXPECT_EQ(terminal_safe("qualify: Podman (rootless) — probes: net ✓ 日本"),
            "qualify: Podman (rootless) — probes: net ✓ 日本");
  EXPECT_EQ(terminal_safe("a\tb"), "a b");
  EXPECT_EQ(terminal_safe("\xe0\x80\xaf"), "\\xe0\\x80\\xaf");  // overlong '/': not UTF-8
}

TEST(Progress, FitColumnsCutsAtTheWidthCountingWideCharactersTwice) {
  EXPECT_EQ(fit_columns("abcdef", 6), "abcdef");
  EXPECT_EQ(fit_columns("abcdefg", 6), "abcde…");
  EXPECT_EQ(fit_columns("日本語です", 6), "日本…");  // 2+2+1 columns
  EXPECT_EQ(fit_columns("ab\x1b[K", 6), "ab\\x1…");  // made safe first, then cut
}

// A forced terminal mode on a pipe: the bytes a terminal would get.
TEST(Progress, ForcedTerminalUpdatesOneLineInPlace) {
  auto p = make_pipe();
  ASSERT_TRUE(p.ok());
  {
    Progress progress({.fd = p->write.get(), .mode = Progress::Mode::kTerminal, .width = 41});
    EXPECT_TRUE(progress.terminal());
    progress.status("qualify: costs", "round 1/2");
    progress.status("qualify: costs", "round 1/2");  // unchanged: not drawn again
    progress.status("qualify: costs", "round 2/2");
    progress.status("qualify: podman: probes: net (2/7) and a long tail past the width");
  }  // the destructor erases the status line
  EXPECT_EQ(drain(*p),
            "\rqualify: costs round 1/2\x1b[K"
            "\rqualify: costs round 2/2\x1b[K"
            "\rqualify: podman: probes: net (2/7) and …\x1b[K"
            "\r\x1b[K");
}

// TERM set for one test, whatever the environment running the tests has.
class ScopedTerm {
 public:
  explicit ScopedTerm(const char* value) {
    if (const char* old = std::getenv("TERM")) old_ = old;
    ::setenv("TERM", value, 1);
  }
  ~ScopedTerm() {
    if (old_)
      ::setenv("TERM", old_->c_str(), 1);
    else
      ::unsetenv("TERM");
  }

 private:
  std::optional<std::string> old_;
};

TEST(Progress, ATerminalKeepsTheDetailInSightAndCutsTheStep) {
  auto p = make_pipe();
  ASSERT_TRUE(p.ok());
  {
    Progress progress({.fd = p->write.get(), .mode = Progress::Mode::kTerminal, .width = 41});
    progress.status("qualify: run costs: create + exec + destroy, 9 rounds", "(round 1/9)");
    progress.status("qualify: run costs: create + exec + destroy, 9 rounds", "(round 2/9)");
    // A detail too wide to leave the step any room: both cut, the step first.
    progress.status("qualify: podman", "[default] 3/40 calls; run-1 c3 (build) completed");
  }
  EXPECT_EQ(drain(*p),
            "\rqualify: run costs: create … (round 1/9)\x1b[K"  // 27 + "…" + " " + 11 = 40
            "\rqualify: run costs: create … (round 2/9)\x1b[K"
            "\rqualify: podman [default] 3/40 calls; r…\x1b[K"
            "\r\x1b[K");
}

// A real terminal: a pseudo-terminal whose size is set, read from its master side.
class PtyProgress : public ::testing::Test {
 protected:
  void SetUp() override {
    master_ = UniqueFd(::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC));
    ASSERT_TRUE(master_.valid()) << std::strerror(errno);
    ASSERT_EQ(::grantpt(master_.get()), 0);
    ASSERT_EQ(::unlockpt(master_.get()), 0);
    const char* name = ::ptsname(master_.get());
    ASSERT_NE(name, nullptr);
    slave_ = UniqueFd(::open(name, O_RDWR | O_NOCTTY | O_CLOEXEC));
    ASSERT_TRUE(slave_.valid()) << std::strerror(errno);
    // Raw: the bytes arrive as written ("\n" not turned into "\r\n").
    struct termios t {};
    ASSERT_EQ(::tcgetattr(slave_.get(), &t), 0);
    ::cfmakeraw(&t);
    ASSERT_EQ(::tcsetattr(slave_.get(), TCSANOW, &t), 0);
  }

  void set_columns(unsigned short cols) {
    struct winsize ws {};
    ws.ws_row = 24;
    ws.ws_col = cols;
    ASSERT_EQ(::ioctl(slave_.get(), TIOCSWINSZ, &ws), 0);
  }

  // What the terminal received, up to an end mark written after it (the pty hands bytes over
  // through a work queue: wait for the mark, not for a time).
  std::string received() {
    static const std::string kEnd = "#END#";
    EXPECT_TRUE(write_all(slave_.get(), kEnd).ok());
    std::string got;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (got.find(kEnd) == std::string::npos && std::chrono::steady_clock::now() < deadline) {
      struct pollfd pfd = {master_.get(), POLLIN, 0};
      if (::poll(&pfd, 1, 1000) <= 0) continue;
      char buf[4096];
      ssize_t n = ::read(master_.get(), buf, sizeof buf);
      if (n > 0) got.append(buf, static_cast<size_t>(n));
    }
    EXPECT_THAT(got, HasSubstr(kEnd));
    return got.substr(0, got.find(kEnd));
  }

  UniqueFd master_, slave_;
};

TEST_F(PtyProgress, ATerminalIsFoundAndTheLineIsCutToItsWidth) {
  set_columns(20);
  ScopedTerm term("xterm-256color");
  Progress progress({.fd = slave_.get()});  // kAuto
  ASSERT_TRUE(progress.terminal());
  progress.status("sandgate probe: namespaces: resource (7/7)");
  // 19 columns (one short of the width, so the cursor never sits in the last column).
  EXPECT_EQ(received(), "\rsandgate probe: na…\x1b[K");  // 18 characters and the "…"
  set_columns(30);                                       // a resized window is asked again
  progress.status("sandgate probe: namespaces: resource (7/7)", "now");
  // 29 columns: the step cut to 24 and the "…", then " now".
  EXPECT_EQ(received(), "\rsandgate probe: namespac… now\x1b[K");
}

TEST_F(PtyProgress, ADumbTerminalGetsPlainLines) {
  ScopedTerm term("dumb");  // Emacs shell buffers, some CI runners: no cursor control
  Progress progress({.fd = slave_.get()});
  EXPECT_FALSE(progress.terminal());
  progress.status("replay: policy default (per-call)");
  EXPECT_EQ(received(), "replay: policy default (per-call)\n");
}

TEST_F(PtyProgress, APermanentLineGoesAboveTheStatusLine) {
  set_columns(80);
  Progress progress({.fd = slave_.get(), .mode = Progress::Mode::kTerminal});
  progress.status("qualify: podman: probes: fs (1/7)");
  progress.line("qualify: podman: exposed: fs.host_root");
  progress.status("qualify: podman: probes: net (2/7)");
  progress.clear();
  EXPECT_EQ(received(),
            "\rqualify: podman: probes: fs (1/7)\x1b[K"
            // erase the status line, print the finding, draw the status line again below it
            "\r\x1b[Kqualify: podman: exposed: fs.host_root\n"
            "\rqualify: podman: probes: fs (1/7)\x1b[K"
            "\rqualify: podman: probes: net (2/7)\x1b[K"
            "\r\x1b[K");
}

TEST_F(PtyProgress, HostileTextCannotMoveTheCursorOrWrap) {
  set_columns(40);
  Progress progress({.fd = slave_.get(), .mode = Progress::Mode::kTerminal});
  progress.status("replay: run1 \x1b[1A\x1b[2K\ncall\r");
  std::string got = received();
  EXPECT_EQ(got, "\rreplay: run1 \\x1b[1A\\x1b[2K\\ncall\\x0d\x1b[K");
}

// Replay reports finished calls from its worker threads: every line stays whole.
TEST(Progress, LinesFromManyThreadsStayWhole) {
  auto p = make_pipe();
  ASSERT_TRUE(p.ok());
  constexpr int kThreads = 4, kEach = 200;
  // Read while they write: more than a pipe holds.
  std::string out;
  std::thread reader([&] {
    auto all = read_all(p->read.get());
    if (all.ok()) out = *all;
  });
  {
    Progress progress({.fd = p->write.get(), .mode = Progress::Mode::kLines});
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back([&, t] {
        for (int i = 0; i < kEach; ++i)
          progress.status("replay: [default] thread " + std::to_string(t) + " call " +
                          std::to_string(i) + std::string(100, 'x'));
      });
    for (auto& th : threads) th.join();
  }
  p->write.reset();
  reader.join();
  std::set<std::string> seen;
  for (auto line : split(out, '\n')) {
    if (line.empty()) continue;
    EXPECT_TRUE(line.starts_with("replay: [default] thread ") &&
                line.ends_with(std::string(100, 'x')))
        << line;
    seen.emplace(line);
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(kThreads * kEach));
}

}  // namespace
}  // namespace sandgate
