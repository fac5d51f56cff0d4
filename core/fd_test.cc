#include "core/fd.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/test_temp_dir.h"

namespace sandgate {
namespace {

using ::testing::HasSubstr;

// True when fd names an open file descriptor in this process.
bool is_open(int fd) { return ::fcntl(fd, F_GETFD) != -1 || errno != EBADF; }

int open_devnull() {
  int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  EXPECT_GE(fd, 0);
  return fd;
}

TEST(UniqueFd, DefaultIsInvalid) {
  UniqueFd fd;
  EXPECT_FALSE(fd.valid());
  EXPECT_FALSE(static_cast<bool>(fd));
  EXPECT_EQ(fd.get(), -1);
}

TEST(UniqueFd, ClosesOnDestruction) {
  int raw = open_devnull();
  {
    UniqueFd fd(raw);
    EXPECT_TRUE(fd.valid());
    EXPECT_TRUE(is_open(raw));
  }
  EXPECT_FALSE(is_open(raw));
}

TEST(UniqueFd, ResetClosesTheOldFdAndKeepsErrno) {
  int a = open_devnull();
  int b = open_devnull();
  UniqueFd fd(a);
  errno = EXDEV;
  fd.reset(b);
  EXPECT_EQ(errno, EXDEV);
  EXPECT_FALSE(is_open(a));
  EXPECT_TRUE(is_open(b));
  EXPECT_EQ(fd.get(), b);
  fd.reset();
  EXPECT_FALSE(is_open(b));
  EXPECT_FALSE(fd.valid());
}

TEST(UniqueFd, MoveConstructionTransfersOwnership) {
  int raw = open_devnull();
  UniqueFd a(raw);
  UniqueFd b(std::move(a));
  EXPECT_FALSE(a.valid());  // NOLINT(bugprone-use-after-move): checking the moved-from state
  EXPECT_EQ(b.get(), raw);
  EXPECT_TRUE(is_open(raw));
  b.reset();
  EXPECT_FALSE(is_open(raw));
}

TEST(UniqueFd, MoveAssignmentClosesTheTargetsOldFd) {
  int x = open_devnull();
  int y = open_devnull();
  UniqueFd a(x);
  UniqueFd b(y);
  b = std::move(a);
  EXPECT_FALSE(is_open(y));
  EXPECT_TRUE(is_open(x));
  EXPECT_EQ(b.get(), x);
  EXPECT_FALSE(a.valid());  // NOLINT(bugprone-use-after-move)
}

TEST(UniqueFd, SelfMoveAssignmentKeepsTheFd) {
  int x = open_devnull();
  UniqueFd a(x);
  UniqueFd& alias = a;
  a = std::move(alias);
  EXPECT_EQ(a.get(), x);
  EXPECT_TRUE(is_open(x));
}

TEST(UniqueFd, ReleaseGivesUpOwnership) {
  int raw = open_devnull();
  {
    UniqueFd fd(raw);
    EXPECT_EQ(fd.release(), raw);
    EXPECT_FALSE(fd.valid());
  }
  EXPECT_TRUE(is_open(raw));
  ::close(raw);
}

TEST(UniqueFd, CloseSignalSafe) {
  int raw = open_devnull();
  UniqueFd fd(raw);
  fd.close_signal_safe();
  EXPECT_FALSE(fd.valid());
  EXPECT_FALSE(is_open(raw));
  fd.close_signal_safe();  // twice is harmless
}

TEST(Pipe, CarriesDataAndIsCloexecByDefault) {
  auto p = make_pipe();
  ASSERT_TRUE(p.ok()) << p.error().message();
  EXPECT_NE(::fcntl(p->read.get(), F_GETFD) & FD_CLOEXEC, 0);
  EXPECT_NE(::fcntl(p->write.get(), F_GETFD) & FD_CLOEXEC, 0);
  ASSERT_TRUE(write_all(p->write.get(), "hello pipe").ok());
  p->write.reset();
  auto got = read_all(p->read.get());
  ASSERT_TRUE(got.ok()) << got.error().message();
  EXPECT_EQ(*got, "hello pipe");
}

TEST(Pipe, FlagsAreHonoured) {
  auto p = make_pipe(0);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(::fcntl(p->read.get(), F_GETFD) & FD_CLOEXEC, 0);
}

TEST(WriteAll, WritesMoreThanOnePipeBuffer) {
  auto p = make_pipe();
  ASSERT_TRUE(p.ok());
  std::string big(1 << 20, 'x');
  big[12345] = 'y';
  Result<std::string> got = std::string();
  std::thread reader([&] { got = read_all(p->read.get(), 2 << 20); });
  Status s = write_all(p->write.get(), big);
  p->write.reset();
  reader.join();
  ASSERT_TRUE(s.ok()) << s.error().message();
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, big);
}

TEST(WriteAll, ReportsEagainInsteadOfDroppingData) {
  auto p = make_pipe(O_CLOEXEC | O_NONBLOCK);
  ASSERT_TRUE(p.ok());
  std::string big(1 << 20, 'x');  // more than a pipe buffer holds
  Status s = write_all(p->write.get(), big);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().err, EAGAIN);
}

TEST(WriteAll, WriteToAClosedPipeIsEpipe) {
  auto p = make_pipe();
  ASSERT_TRUE(p.ok());
  p->read.reset();
  // SIGPIPE would kill the test binary: ignore it for this write.
  struct sigaction ign = {}, old = {};
  ign.sa_handler = SIG_IGN;
  ASSERT_EQ(::sigaction(SIGPIPE, &ign, &old), 0);
  Status s = write_all(p->write.get(), "x");
  ::sigaction(SIGPIPE, &old, nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().err, EPIPE);
}

class FileTest : public ::testing::Test {
 protected:
  testing::TempDir tmp_;
};

TEST_F(FileTest, WriteFileThenReadFile) {
  std::string path = tmp_ / "f";
  ASSERT_TRUE(write_file(path, "contents\n", O_WRONLY | O_CREAT | O_TRUNC, 0600).ok());
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  auto got = read_file(path);
  ASSERT_TRUE(got.ok()) << got.error().message();
  EXPECT_EQ(*got, "contents\n");
}

TEST_F(FileTest, ReadFileIsBoundedByMaxBytes) {
  std::string path = tmp_ / "big";
  std::string data(20000, 'a');
  data[9] = 'Z';
  ASSERT_TRUE(write_file(path, data, O_WRONLY | O_CREAT).ok());
  auto got = read_file(path, 10);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, "aaaaaaaaaZ");
  auto exact = read_file(path, 20000);
  ASSERT_TRUE(exact.ok());
  EXPECT_EQ(*exact, data);
  auto all = read_file(path);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 20000u);
}

TEST_F(FileTest, ReadMissingFileIsEnoentNamingThePath) {
  auto got = read_file(tmp_ / "missing");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.error().err, ENOENT);
  EXPECT_EQ(got.error().path, tmp_ / "missing");
}

TEST_F(FileTest, WriteFileWithoutCreateNeedsAnExistingFile) {
  Status s = write_file(tmp_ / "missing", "x");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().err, ENOENT);
}

TEST_F(FileTest, OpenFdIsAlwaysCloexec) {
  ASSERT_TRUE(write_file(tmp_ / "f", "x", O_WRONLY | O_CREAT).ok());
  auto fd = open_fd(tmp_ / "f", O_RDONLY);
  ASSERT_TRUE(fd.ok());
  EXPECT_NE(::fcntl(fd->get(), F_GETFD) & FD_CLOEXEC, 0);
}

TEST_F(FileTest, DirFdOpenReadWriteExists) {
  ASSERT_EQ(::mkdir((tmp_ / "sub").c_str(), 0755), 0);
  ASSERT_TRUE(write_file(tmp_ / "sub/memory.max", "max\n", O_WRONLY | O_CREAT).ok());

  auto dir = DirFd::open(tmp_.path());
  ASSERT_TRUE(dir.ok()) << dir.error().message();
  EXPECT_EQ(dir->path(), tmp_.path());
  EXPECT_TRUE(dir->exists("sub"));
  EXPECT_FALSE(dir->exists("nothing"));

  auto sub = dir->openat_dir("sub");
  ASSERT_TRUE(sub.ok()) << sub.error().message();
  EXPECT_EQ(sub->path(), tmp_ / "sub");
  EXPECT_EQ(sub->child("memory.max"), tmp_ / "sub/memory.max");
  EXPECT_TRUE(sub->exists("memory.max"));

  auto got = sub->read("memory.max");
  ASSERT_TRUE(got.ok()) << got.error().message();
  EXPECT_EQ(*got, "max\n");

  ASSERT_TRUE(sub->write("memory.max", "1048576").ok());
  // write() does not truncate (control files take one value per write); read the prefix.
  auto after = read_file(tmp_ / "sub/memory.max");
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->substr(0, 7), "1048576");

  auto bounded = sub->read("memory.max", 3);
  ASSERT_TRUE(bounded.ok());
  EXPECT_EQ(*bounded, "104");
}

TEST_F(FileTest, DirFdResolvesThroughTheOpenDirectoryNotThePath) {
  ASSERT_EQ(::mkdir((tmp_ / "a").c_str(), 0755), 0);
  ASSERT_TRUE(write_file(tmp_ / "a/f", "old", O_WRONLY | O_CREAT).ok());
  auto dir = DirFd::open(tmp_ / "a");
  ASSERT_TRUE(dir.ok());
  // Rename the directory away and put another one in its place: the fd still names the first.
  ASSERT_EQ(::rename((tmp_ / "a").c_str(), (tmp_ / "b").c_str()), 0);
  ASSERT_EQ(::mkdir((tmp_ / "a").c_str(), 0755), 0);
  auto got = dir->read("f");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, "old");
}

TEST_F(FileTest, DirFdErrorsNameTheChildPath) {
  auto dir = DirFd::open(tmp_.path());
  ASSERT_TRUE(dir.ok());
  auto r = dir->read("nope");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().err, ENOENT);
  EXPECT_THAT(r.error().message(), HasSubstr(tmp_ / "nope"));
  Status w = dir->write("nope", "1");
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.error().err, ENOENT);
  auto d = dir->openat_dir("nope");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.error().path, tmp_ / "nope");
}

TEST_F(FileTest, DirFdOpenOfAFileIsEnotdir) {
  ASSERT_TRUE(write_file(tmp_ / "f", "x", O_WRONLY | O_CREAT).ok());
  auto dir = DirFd::open(tmp_ / "f");
  ASSERT_FALSE(dir.ok());
  EXPECT_EQ(dir.error().err, ENOTDIR);
}

TEST_F(FileTest, DirFdExistsDoesNotFollowSymlinks) {
  ASSERT_EQ(::symlink("/nonexistent-target", (tmp_ / "dangling").c_str()), 0);
  auto dir = DirFd::open(tmp_.path());
  ASSERT_TRUE(dir.ok());
  EXPECT_TRUE(dir->exists("dangling"));
}

// One byte and a descriptor over a unix socket: the receiver gets the byte and its own
// close-on-exec descriptor of the same pipe; the end of the stream is 0 with nothing received.
TEST(FdPassing, AByteAndADescriptorArriveAsTheSendersOwn) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  UniqueFd a(sv[0]), b(sv[1]);
  auto pipe = make_pipe();
  ASSERT_TRUE(pipe.ok());
  ASSERT_TRUE(send_byte_with_fd(a.get(), 'g', pipe->write.get()).ok());
  char byte = 0;
  std::vector<UniqueFd> fds;
  ASSERT_EQ(receive_byte_with_fds(b.get(), byte, fds, 4), 1);
  EXPECT_EQ(byte, 'g');
  ASSERT_EQ(fds.size(), 1u);
  EXPECT_NE(fds[0].get(), pipe->write.get());
  EXPECT_TRUE(::fcntl(fds[0].get(), F_GETFD) & FD_CLOEXEC);
  pipe->write.reset();
  ASSERT_TRUE(write_all(fds[0].get(), "x").ok());
  fds.clear();  // the last write end: the reader sees x, then EOF
  auto got = read_all(pipe->read.get());
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, "x");
  a.reset();
  EXPECT_EQ(receive_byte_with_fds(b.get(), byte, fds, 4), 0);
  EXPECT_TRUE(fds.empty());
}

// A client that waits for the socket's path and connects at once is never refused: the path
// appears only once the socket listens (serve's clients wait for it this way). A spinning
// client on the other core found the bind-to-listen window of the old order.
TEST_F(FileTest, AUnixSocketsPathAppearsOnlyOnceItListens) {
  const std::string path = tmp_.path() + "/serve.sock";
  for (int i = 0; i < 200; ++i) {
    int refused = 0;
    std::thread client([&] {
      while (::access(path.c_str(), F_OK) != 0) {
      }
      UniqueFd c(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
      sockaddr_un addr = {};
      addr.sun_family = AF_UNIX;
      std::memcpy(addr.sun_path, path.c_str(), path.size());
      if (::connect(c.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
        refused = errno;
    });
    auto listening = listen_unix(path);
    client.join();
    ASSERT_TRUE(listening.ok()) << listening.error().message();
    ASSERT_EQ(refused, 0) << "attempt " << i << ": " << std::strerror(refused);
    struct stat st;
    ASSERT_EQ(::stat(path.c_str(), &st), 0);
    EXPECT_TRUE(S_ISSOCK(st.st_mode));
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    ASSERT_EQ(::unlink(path.c_str()), 0);
  }
  // Nothing but the socket was ever left in the directory: the temporary name is gone.
  auto listening = listen_unix(path);
  ASSERT_TRUE(listening.ok());
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(tmp_.path()))
    names.push_back(e.path().filename());
  EXPECT_THAT(names, ::testing::ElementsAre("serve.sock"));
}

// The race above is microseconds wide and an idle machine rarely shows it, so the order is
// also checked as the directory saw it: the path arrives by a rename of a socket already made
// and chmodded, and is never created or changed in place (listen comes before the rename).
TEST_F(FileTest, AUnixSocketsPathIsRenamedIntoPlaceAlreadyPrivate) {
  const std::string path = tmp_.path() + "/serve.sock";
  UniqueFd in(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
  ASSERT_TRUE(in.valid());
  ASSERT_GE(::inotify_add_watch(in.get(), tmp_.path().c_str(), IN_CREATE | IN_ATTRIB | IN_MOVED_TO),
            0);
  auto listening = listen_unix(path);
  ASSERT_TRUE(listening.ok()) << listening.error().message();
  alignas(inotify_event) char buf[4096];
  ssize_t n = ::read(in.get(), buf, sizeof buf);
  ASSERT_GT(n, 0);
  std::vector<std::string> on_path;  // what happened to the final name, in order
  for (char* p = buf; p < buf + n;) {
    auto* e = reinterpret_cast<inotify_event*>(p);
    if (e->len > 0 && std::string(e->name) == "serve.sock")
      on_path.push_back(e->mask & IN_CREATE   ? "create"
                        : e->mask & IN_ATTRIB ? "attrib"
                                              : "moved_to");
    p += sizeof(inotify_event) + e->len;
  }
  EXPECT_THAT(on_path, ::testing::ElementsAre("moved_to"));
}

// Threads of one process listening in one directory at once each get their own socket at their
// own path: the temporary names are per call, not per process (with one name per process, one
// thread unlinked or renamed another's socket, and its own rename then failed).
TEST_F(FileTest, UnixSocketsListenedAtOnceInOneDirectoryStayApart) {
  constexpr int kThreads = 4, kRounds = 50;
  std::vector<std::string> failures(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kRounds && failures[t].empty(); ++i) {
        const std::string path = tmp_.path() + "/s" + std::to_string(t) + ".sock";
        auto listening = listen_unix(path);
        if (!listening.ok()) {
          failures[t] = "round " + std::to_string(i) + ": " + listening.error().message();
          break;
        }
        // The socket at the path is the one returned: a client connected there is accepted
        // on it.
        UniqueFd c(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
        sockaddr_un addr = {};
        addr.sun_family = AF_UNIX;
        std::memcpy(addr.sun_path, path.c_str(), path.size());
        if (::connect(c.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
          failures[t] = "round " + std::to_string(i) + ": connect: " + std::strerror(errno);
          break;
        }
        // Non-blocking: a connection queued on some other thread's socket fails here at once.
        (void)::fcntl(listening->get(), F_SETFL, O_NONBLOCK);
        UniqueFd accepted(::accept4(listening->get(), nullptr, nullptr, SOCK_CLOEXEC));
        if (!accepted.valid()) {
          failures[t] = "round " + std::to_string(i) +
                        ": not accepted on the returned socket: " + std::strerror(errno);
          break;
        }
        ::unlink(path.c_str());
      }
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(failures[t], "") << "thread " << t;
  // No temporary name was left behind.
  std::vector<std::string> left;
  for (const auto& e : std::filesystem::directory_iterator(tmp_.path()))
    left.push_back(e.path().filename());
  EXPECT_THAT(left, ::testing::IsEmpty());
}

}  // namespace
}  // namespace sandgate
