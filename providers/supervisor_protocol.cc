#include "providers/supervisor_protocol.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <memory>

namespace sandgate::providers {

Result<std::pair<UniqueFd, UniqueFd>> make_control_pair() {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
    return sys_error("socketpair");
  UniqueFd a(sv[0]), b(sv[1]);
  int one = 1;
  for (int fd : sv) {
    if (::setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof one) != 0)
      return sys_error("setsockopt SO_PASSCRED");
    int size = static_cast<int>(kMaxMessage) * 2;
    // Best effort: the default buffer may be smaller than a large argv.
    (void)::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
  }
  return std::make_pair(std::move(a), std::move(b));
}

Status send_message(int sock, const Json& body, const std::vector<int>& fds, pid_t cred_pid) {
  std::string text = dump_json(body);
  if (text.size() > kMaxMessage)
    return logic_error("send message", "message of " + std::to_string(text.size()) +
                                           " bytes exceeds the limit (argv/env too large)");
  struct iovec iov = {text.data(), text.size()};
  struct msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(
      struct cmsghdr) char control[CMSG_SPACE(sizeof(int) * 8) + CMSG_SPACE(sizeof(struct ucred))];
  size_t control_len = 0;
  if (fds.size() > 8) return logic_error("send message", "too many file descriptors");
  if (!fds.empty() || cred_pid != 0) {
    std::memset(control, 0, sizeof control);
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    struct cmsghdr* c = CMSG_FIRSTHDR(&msg);
    if (!fds.empty()) {
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
      std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
      control_len += CMSG_SPACE(sizeof(int) * fds.size());
      c = CMSG_NXTHDR(&msg, c);
    }
    if (cred_pid != 0) {
      struct ucred cred = {cred_pid, ::getuid(), ::getgid()};
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_CREDENTIALS;
      c->cmsg_len = CMSG_LEN(sizeof cred);
      std::memcpy(CMSG_DATA(c), &cred, sizeof cred);
      control_len += CMSG_SPACE(sizeof cred);
    }
    msg.msg_controllen = control_len;
  }
  for (;;) {
    ssize_t n = ::sendmsg(sock, &msg, MSG_NOSIGNAL);
    if (n >= 0) return {};
    if (errno != EINTR) return sys_error("sendmsg");
  }
}

Result<Message> recv_message(int sock) {
  // One buffer per thread, kept and never cleared: a fresh zeroed 256 KiB string per message
  // was an mmap, a memset and 64 page faults (then an munmap) for every message of every call,
  // three per call, in the supervisor and in sandgate. The kernel writes only the message's own
  // bytes, and only those n bytes are read below.
  thread_local const std::unique_ptr<char[]> buf(new char[kMaxMessage]);
  struct iovec iov = {buf.get(), kMaxMessage};
  struct msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(
      struct cmsghdr) char control[CMSG_SPACE(sizeof(int) * 8) + CMSG_SPACE(sizeof(struct ucred))];
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  while ((n = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC)) < 0) {
    if (errno != EINTR) return sys_error("recvmsg");
  }
  Message out;
  for (struct cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET) continue;
    if (c->cmsg_type == SCM_RIGHTS) {
      size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
        out.fds.emplace_back(fd);
      }
    } else if (c->cmsg_type == SCM_CREDENTIALS) {
      struct ucred cred;
      std::memcpy(&cred, CMSG_DATA(c), sizeof cred);
      out.sender_pid = cred.pid;
    }
  }
  if (n == 0) return sys_error(EPIPE, "recvmsg", "peer closed the control socket");
  if (msg.msg_flags & MSG_TRUNC) return logic_error("recvmsg", "message truncated");
  auto body = parse_json(std::string_view(buf.get(), static_cast<size_t>(n)), "control message");
  if (!body.ok()) return std::move(body).error();
  out.body = std::move(body).value();
  return out;
}

Json error_to_json(const Error& e) {
  return {{"errno", e.err}, {"step", e.step}, {"path", e.path}, {"detail", e.detail}};
}

Error error_from_json(const Json& j) {
  Error e;
  if (!j.is_object()) return e;
  auto text = [&](const char* key) {
    auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  if (auto it = j.find("errno"); it != j.end() && it->is_number_integer()) {
    // An errno is small and positive; anything else is not one (and would not fit an int).
    int64_t v = it->get<int64_t>();
    e.err = v > 0 && v < 4096 ? static_cast<int>(v) : 0;
  }
  e.step = text("step");
  e.path = text("path");
  e.detail = text("detail");
  return e;
}

Result<SupervisorEvent> read_supervisor_event(const Json& body) {
  auto bad = [](const std::string& what) { return logic_error("read supervisor message", what); };
  if (!body.is_object()) return bad("expected a JSON object, got " + describe_json(body));
  SupervisorEvent ev;
  auto op = body.find("op");
  if (op == body.end() || !op->is_string())
    return bad("field 'op': expected a string, got " +
               (op == body.end() ? std::string("nothing") : describe_json(*op)));
  ev.op = op->get<std::string>();
  if (auto id = body.find("id"); id != body.end()) {
    if (!id->is_number_unsigned())
      return bad("field 'id': expected a call id, got " + describe_json(*id));
    ev.id = id->get<uint64_t>();
  }
  if (auto ws = body.find("wait_status"); ws != body.end()) {
    // A wait status is an int (wait(2)); the kernel's fit in 16 bits.
    if (!ws->is_number_integer() || ws->get<int64_t>() < 0 || ws->get<int64_t>() > 0xffff)
      return bad("field 'wait_status': expected a wait status, got " + describe_json(*ws));
    ev.wait_status = static_cast<int>(ws->get<int64_t>());
  }
  if (auto ic = body.find("in_child"); ic != body.end()) {
    if (!ic->is_boolean())
      return bad("field 'in_child': expected true or false, got " + describe_json(*ic));
    ev.in_child = ic->get<bool>();
  }
  if (auto ip = body.find("in_parked"); ip != body.end()) {
    if (!ip->is_boolean())
      return bad("field 'in_parked': expected true or false, got " + describe_json(*ip));
    ev.in_parked = ip->get<bool>();
  }
  if (auto la = body.find("landlock_abi"); la != body.end()) {
    if (!la->is_number_integer() || la->get<int64_t>() < 0 || la->get<int64_t>() > 1000)
      return bad("field 'landlock_abi': expected an ABI version, got " + describe_json(*la));
    ev.landlock_abi = la->get<int>();
  }
  if (auto lm = body.find("landlock_missing"); lm != body.end()) {
    if (!lm->is_string())
      return bad("field 'landlock_missing': expected a string, got " + describe_json(*lm));
    ev.landlock_missing = lm->get<std::string>();
  }
  if (ev.op == "error" || ev.op == "exec_failed" || ev.op == "park_failed")
    ev.error = error_from_json(body);
  return ev;
}

}  // namespace sandgate::providers
