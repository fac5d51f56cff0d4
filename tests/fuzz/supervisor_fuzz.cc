// The supervisor's messages as the host reads them (providers/supervisor_protocol.cc): one
// SOCK_SEQPACKET message from inside the sandbox, through the real recv_message on a socket
// pair, then read_supervisor_event, which the host's call loop acts on. Neither may throw or
// crash, whatever the message.
#include <sys/socket.h>
#include <unistd.h>

#include "providers/supervisor_protocol.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sandgate;
  using namespace sandgate::providers;
  // The kernel refuses a message larger than the socket's buffer (EMSGSIZE), and recv_message
  // reads at most kMaxMessage: larger inputs test the kernel, not sandgate.
  if (size > kMaxMessage) return 0;
  static auto pair = make_control_pair();
  FUZZ_CHECK(pair.ok(), "socketpair: " + (pair.ok() ? "" : pair.error().message()));
  int a = pair->first.get(), b = pair->second.get();
  if (::send(a, data, size, MSG_NOSIGNAL) != static_cast<ssize_t>(size)) return 0;
  if (size == 0) {
    // A zero-length datagram reads as n == 0, which recv_message takes for a closed peer.
    auto msg = recv_message(b);
    FUZZ_CHECK(!msg.ok(), "an empty message was read as a message");
    return 0;
  }
  auto msg = recv_message(b);
  if (!msg.ok()) {
    (void)msg.error().message();
    return 0;
  }
  auto ev = read_supervisor_event(msg->body);
  if (!ev.ok()) {
    (void)ev.error().message();
    return 0;
  }
  (void)ev->error.message();
  return 0;
}
