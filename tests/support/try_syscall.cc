// sandgate-try: attempts one action with a raw system call and prints "<action> ok" or
// "<action> <ERRNO>" (bubblewrap try-syscall.c). Built static and without sanitizers so it runs
// in any root filesystem and under any seccomp filter; tests run it natively (the action must
// work) and inside providers (it must fail, for the right reason).
#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <linux/perf_event.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/sysinfo.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>

#include <string>

#ifndef AF_VSOCK
#define AF_VSOCK 40
#endif

namespace {

long attempt(const std::string& action) {
  if (action == "mount") return mount("none", "/tmp", "tmpfs", 0, nullptr);
  if (action == "ptrace") {
    long r = ptrace(PTRACE_TRACEME, 0, nullptr, nullptr);
    return r;
  }
  if (action == "unshare-user") return unshare(CLONE_NEWUSER);
  if (action == "unshare-net") return unshare(CLONE_NEWNET);
  if (action == "bpf") {
    union bpf_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.map_type = BPF_MAP_TYPE_ARRAY;
    attr.key_size = 4;
    attr.value_size = 4;
    attr.max_entries = 1;
    long fd = syscall(SYS_bpf, BPF_MAP_CREATE, &attr, sizeof attr);
    if (fd >= 0) close(static_cast<int>(fd));
    return fd < 0 ? -1 : 0;
  }
  if (action == "keyctl") return syscall(SYS_keyctl, 0 /* KEYCTL_GET_KEYRING_ID */, -3 /* session */, 0);
  if (action == "vsock") {
    int fd = socket(AF_VSOCK, SOCK_STREAM, 0);
    if (fd >= 0) close(fd);
    return fd < 0 ? -1 : 0;
  }
  if (action == "tiocsti") {
    // Needs a terminal to succeed natively; the filter answers before the tty layer does.
    char c = 'x';
    return ioctl(0, TIOCSTI, &c);
  }
  if (action == "write-file") {  // write-file PATH: create it (used for writes outside)
    return -2;
  }
  errno = EINVAL;
  return -3;
}

}  // namespace

// Resource actions for controller tests (until sandgate-load exists): they do the thing and
// report what they managed, so the test can tell "limited" from "never tried".
int resource_action(const std::string& action, long arg) {
  if (action == "alloc") {  // alloc MIB: touch MIB mebibytes, 1 MiB at a time, then hold 1 s
    long done = 0;
    for (; done < arg; ++done) {
      char* p = static_cast<char*>(mmap(nullptr, 1 << 20, PROT_READ | PROT_WRITE,
                                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
      if (p == MAP_FAILED) break;
      memset(p, 1, 1 << 20);
      if (done % 16 == 0) {
        printf("alloc %ld\n", done);
        fflush(stdout);
      }
    }
    printf("alloc done %ld\n", done);
    fflush(stdout);
    usleep(1000000);
    return 0;
  }
  if (action == "spin") {  // spin MS: burn CPU for MS milliseconds of wall time
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    volatile unsigned long x = 0;
    do {
      for (int i = 0; i < 100000; ++i) x = x + i;
      clock_gettime(CLOCK_MONOTONIC, &now);
    } while ((now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000 < arg);
    printf("spin done\n");
    return 0;
  }
  if (action == "forkbomb") {  // forkbomb MS: fork children that sleep, retrying refusals
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    long made = 0, refused = 0;
    do {
      pid_t pid = fork();
      if (pid == 0) {
        pause();
        _exit(0);
      }
      if (pid > 0) ++made;
      else ++refused;
      clock_gettime(CLOCK_MONOTONIC, &now);
    } while ((now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000 < arg);
    printf("forkbomb made %ld refused %ld\n", made, refused);
    return 0;
  }
  if (action == "fds") {  // fds N: open /dev/null until N are open or the kernel refuses
    long opened = 0;
    int err = 0;
    for (; opened < arg; ++opened) {
      if (open("/dev/null", O_RDONLY) < 0) {
        err = errno;
        break;
      }
    }
    printf("fds opened %ld %s\n", opened, err ? strerrorname_np(err) : "ok");
    return 0;
  }
  if (action == "fsize") {  // fsize KIB: write KIB KiB to ./sandgate-try-fsize, then remove it
    signal(SIGXFSZ, SIG_IGN);  // a file size limit then shows as EFBIG
    int fd = open("sandgate-try-fsize", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
      printf("fsize open %s\n", strerrorname_np(errno));
      return 0;
    }
    static char chunk[1024];
    long written = 0;
    int err = 0;
    for (long i = 0; i < arg; ++i) {
      ssize_t n = write(fd, chunk, sizeof chunk);
      if (n < 0) {
        err = errno;
        break;
      }
      written += n;
    }
    close(fd);
    unlink("sandgate-try-fsize");
    printf("fsize wrote %ld %s\n", written, err ? strerrorname_np(err) : "ok");
    return 0;
  }
  return -1;
}

// resolve NAME: one DNS A query, built here, to the first nameserver of /etc/resolv.conf;
// prints "resolve <server> <RCODE> [A.B.C.D]" or "resolve <server> <ERRNO>" (no answer: ETIMEDOUT).
static int resolve_action(const char* name) {
  FILE* f = fopen("/etc/resolv.conf", "r");
  if (!f) {
    printf("resolve - %s\n", strerrorname_np(errno));
    return 0;
  }
  char line[256], server[64] = "";
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "nameserver %63s", server) == 1) break;
  fclose(f);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(53);
  if (inet_pton(AF_INET, server, &to.sin_addr) != 1) {
    printf("resolve - no IPv4 nameserver\n");
    return 0;
  }
  std::string q("\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00", 12);
  for (const char* p = name; *p;) {
    const char* dot = strchr(p, '.');
    size_t len = dot ? static_cast<size_t>(dot - p) : strlen(p);
    q += static_cast<char>(len);
    q.append(p, len);
    p += len + (dot ? 1 : 0);
  }
  q += std::string("\x00\x00\x01\x00\x01", 5);
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  struct timeval tv = {3, 0};
  setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (sendto(s, q.data(), q.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof to) < 0) {
    printf("resolve %s %s\n", server, strerrorname_np(errno));
    return 0;
  }
  unsigned char r[1500];
  ssize_t n = recv(s, r, sizeof r, 0);
  if (n < 12) {
    printf("resolve %s %s\n", server, n < 0 ? strerrorname_np(errno) : "short");
    return 0;
  }
  static const char* const kRcodes[] = {"NOERROR",  "FORMERR", "SERVFAIL",
                                        "NXDOMAIN", "NOTIMP",  "REFUSED"};
  int rcode = r[3] & 0xf;
  printf("resolve %s %s", server, rcode < 6 ? kRcodes[rcode] : "RCODE?");
  // The first A record: skip the question (as sent), then each answer's name (a pointer here).
  size_t i = q.size();
  for (int a = 0; a < (r[6] << 8 | r[7]) && i + 12 <= static_cast<size_t>(n); ++a) {
    while (i < static_cast<size_t>(n) && r[i] != 0 && (r[i] & 0xc0) != 0xc0) i += 1 + r[i];
    i += (i < static_cast<size_t>(n) && r[i] == 0) ? 1 : 2;
    if (i + 10 > static_cast<size_t>(n)) break;
    int type = r[i] << 8 | r[i + 1], rdlen = r[i + 8] << 8 | r[i + 9];
    i += 10;
    if (type == 1 && rdlen == 4 && i + 4 <= static_cast<size_t>(n)) {
      printf(" %d.%d.%d.%d", r[i], r[i + 1], r[i + 2], r[i + 3]);
      break;
    }
    i += static_cast<size_t>(rdlen);
  }
  printf("\n");
  close(s);
  return 0;
}

static long long monotonic_ns() {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void sleep_until_ns(long long deadline) {
  struct timespec t = {static_cast<time_t>(deadline / 1000000000LL), static_cast<long>(deadline % 1000000000LL)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, nullptr) == EINTR) {
  }
}

// ramp STEP_MIB INTERVAL_MS COUNT [HOLD_MS [DELAY_MS]]: a memory burst for the controller
// benchmark. After DELAY_MS, touches STEP_MIB more every INTERVAL_MS (a step that takes longer
// starts the next one at once), COUNT times, then holds it all for HOLD_MS. Each step prints
// "ramp <total MiB> <begin ns> <end ns>" in CLOCK_MONOTONIC, which is the host's clock too: the
// jail makes no time namespace.
static int ramp_action(long step_mib, long interval_ms, long count, long hold_ms, long delay_ms) {
  if (step_mib <= 0 || interval_ms < 0 || count <= 0) return 2;
  if (delay_ms > 0) usleep(static_cast<useconds_t>(delay_ms) * 1000);
  const size_t step = static_cast<size_t>(step_mib) << 20;
  long long start = monotonic_ns();
  long total = 0;
  for (long i = 1; i <= count; ++i) {
    long long begin = monotonic_ns();
    char* p = static_cast<char*>(mmap(nullptr, step, PROT_READ | PROT_WRITE,
                                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (p == MAP_FAILED) {
      printf("ramp failed %ld %s\n", total, strerrorname_np(errno));
      return 1;
    }
    memset(p, 1, step);
    long long end = monotonic_ns();
    total += step_mib;
    printf("ramp %ld %lld %lld\n", total, begin, end);
    fflush(stdout);
    sleep_until_ns(start + i * interval_ms * 1000000LL);
  }
  if (hold_ms > 0) usleep(static_cast<useconds_t>(hold_ms) * 1000);
  printf("ramp done %ld\n", total);
  return 0;
}

// udpflood IPV4 PORT KIB_PER_S MS: a network burst for the ladder's network rule. Sends 1 KiB
// datagrams on one connected UDP socket (one connect for the egress guard to decide, not a
// decision per datagram) for MS milliseconds of wall time, paced to KIB_PER_S by a token bucket
// holding at most 20 ms of sending (a sender descheduled for a while does not catch up in one
// burst); 0: as fast as it can. Datagrams the stack drops on the way (ENOBUFS, a full queue) are
// not counted. Prints "udpflood sent <bytes>" and, if a send failed otherwise, its errno.
static int udpflood_action(const char* address, int port, long kib_per_s, long ms) {
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, address, &to.sin_addr) != 1 || kib_per_s < 0 || ms <= 0) return 2;
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0 || connect(s, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) {
    printf("udpflood connect %s\n", strerrorname_np(errno));
    return 0;
  }
  static char datagram[1024];
  const double rate = static_cast<double>(kib_per_s) * 1024;  // bytes per second
  const double bucket_max = rate * 0.02 > sizeof datagram ? rate * 0.02 : sizeof datagram;
  double tokens = sizeof datagram;
  long long start = monotonic_ns(), last = start, end = start + ms * 1000000LL;
  unsigned long long sent = 0;
  int err = 0;
  for (long long now = start; now < end; now = monotonic_ns()) {
    if (rate > 0) {
      tokens += rate * static_cast<double>(now - last) / 1e9;
      if (tokens > bucket_max) tokens = bucket_max;
      last = now;
      if (tokens < sizeof datagram) {
        long long wait = static_cast<long long>((sizeof datagram - tokens) / rate * 1e9);
        sleep_until_ns(now + (wait < 1000000LL ? 1000000LL : wait));
        continue;
      }
      tokens -= sizeof datagram;
    }
    if (send(s, datagram, sizeof datagram, 0) == static_cast<ssize_t>(sizeof datagram)) {
      sent += sizeof datagram;
    } else if (errno != ENOBUFS && errno != EAGAIN && errno != ECONNREFUSED) {
      err = errno;
      break;
    }
  }
  close(s);
  printf("udpflood sent %llu%s%s\n", sent, err ? " " : "", err ? strerrorname_np(err) : "");
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: sandgate-try ACTION [PATH|N] (ramp STEP_MIB INTERVAL_MS COUNT [HOLD_MS "
                    "[DELAY_MS]]; udpflood IPV4 PORT KIB_PER_S MS)\n");
    return 2;
  }
  std::string action = argv[1];
  if (action == "ramp") {
    if (argc < 5) return 2;
    return ramp_action(atol(argv[2]), atol(argv[3]), atol(argv[4]), argc > 5 ? atol(argv[5]) : 0,
                       argc > 6 ? atol(argv[6]) : 0);
  }
  if (action == "alloc" || action == "spin" || action == "forkbomb" || action == "fds" ||
      action == "fsize") {
    if (argc < 3) return 2;
    return resource_action(action, atol(argv[2]));
  }
  if (action == "sysinfo") {
    // sysinfo [PATH]: once PATH exists (60 s at most), one sysinfo(2), its numbers in bytes
    if (argc > 2)
      for (int i = 0; i < 3000 && access(argv[2], F_OK) != 0; ++i) usleep(20000);
    struct sysinfo si {};
    if (syscall(SYS_sysinfo, &si) != 0) {
      printf("sysinfo %s\n", strerrorname_np(errno));
      return 1;
    }
    printf("sysinfo ok totalram=%llu freeram=%llu uptime=%ld procs=%u load1=%lu\n",
           static_cast<unsigned long long>(si.totalram) * si.mem_unit,
           static_cast<unsigned long long>(si.freeram) * si.mem_unit, si.uptime, si.procs,
           si.loads[0]);
    return 0;
  }
  if (action == "resolve") {
    if (argc < 3) return 2;
    return resolve_action(argv[2]);
  }
  if (action == "udpflood") {
    if (argc < 6) return 2;
    return udpflood_action(argv[2], atoi(argv[3]), atol(argv[4]), atol(argv[5]));
  }
  long r;
  if (action == "connect" || action == "sendto") {
    // connect IPV4 PORT: a TCP connect, e.g. to a lab decoy; sendto IPV4 PORT: one UDP
    // datagram ("sandgate-try") to it, unconnected
    if (argc < 4) return 2;
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(static_cast<uint16_t>(atoi(argv[3])));
    if (inet_pton(AF_INET, argv[2], &to.sin_addr) != 1) return 2;
    const bool tcp = action == "connect";
    int s = socket(AF_INET, (tcp ? SOCK_STREAM : SOCK_DGRAM) | SOCK_CLOEXEC, 0);
    if (s < 0) r = -1;
    else if (tcp) r = connect(s, reinterpret_cast<sockaddr*>(&to), sizeof to);
    else r = sendto(s, "sandgate-try", 12, 0, reinterpret_cast<sockaddr*>(&to), sizeof to);
  } else if (action == "write-file" || action == "read-file") {
    if (argc < 3) return 2;
    int fd = action == "write-file" ? open(argv[2], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)
                                    : open(argv[2], O_RDONLY | O_CLOEXEC);
    r = fd;
    if (fd >= 0) close(fd);
  } else {
    r = attempt(action);
    if (r == -3) {
      fprintf(stderr, "unknown action %s\n", action.c_str());
      return 2;
    }
  }
  if (r >= 0) {
    printf("%s ok\n", action.c_str());
  } else {
    printf("%s %s\n", action.c_str(), strerrorname_np(errno) ? strerrorname_np(errno) : "E?");
  }
  return 0;
}
