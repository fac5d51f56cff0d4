// The supervisor protocol (supervisor_protocol.h) carried over a byte stream: a virtio-serial
// port between the host and a microVM's guest agent (providers/microvm.h).
//
// The protocol is SOCK_SEQPACKET messages with file descriptors (SCM_RIGHTS) and a sender pid
// (SCM_CREDENTIALS); a serial port carries bytes only. Two bridges, one at each end, turn one
// into the other, so that the host's Supervisor and the guest's supervisor loop are the very
// code the other providers run:
//
//   host: Supervisor <-seqpacket-> HostBridge <-serial-> GuestBridge <-seqpacket-> supervisor
//
// Frames on the stream: [u8 type][u32 channel][u32 length][payload], little-endian:
//   kMessage  a message body (JSON text); "_streams" lists the channels of the pipes it carried
//             (exec: stdout, stderr; the guest makes pipes, the host gets their bytes), and
//             "_blobs" the channels of whole files it carried (config: the sealed seccomp
//             program, sent before as kBlob frames); "_stdin_blob" the channel of an exec's
//             stdin, a file the host had (a memfd, a regular file), carried whole as a kBlob
//   kData     bytes a call wrote on a stream channel (guest -> host)
//   kEof      the stream channel is closed
//   kBlob     a file's whole content (host -> guest), delivered as a memfd with the message
// Every length is bounded (kMaxFramePayload): the guest is untrusted, the host reads it
// strictly and stops at the first malformed frame.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "core/fd.h"
#include "core/json.h"
#include "core/result.h"

namespace sandgate::providers {

enum class FrameType : uint8_t { kMessage = 1, kData = 2, kEof = 3, kBlob = 4 };
inline constexpr size_t kFrameHeader = 9;
inline constexpr size_t kMaxFramePayload = 1 << 20;

struct Frame {
  FrameType type = FrameType::kMessage;
  uint32_t channel = 0;
  std::string payload;
};

std::string encode_frame(const Frame& f);

// Accumulates bytes read from the stream and hands out whole frames.
class FrameReader {
 public:
  void feed(std::string_view bytes) { buffer_.append(bytes); }
  // A frame when one is complete, nullopt when more bytes are needed, an error for a malformed
  // one (unknown type, payload above kMaxFramePayload).
  Result<std::optional<Frame>> next();

 private:
  std::string buffer_;
};

Status write_frame(int fd, const Frame& f);

// The host side. Runs until the serial stream or the Supervisor's socket closes (or `stop_fd`,
// an eventfd, becomes readable). Messages from the guest reach the Supervisor with `cred_pid`
// as their sender (the QEMU process: the host pid that stands for the guest). When no frame has
// come from the guest by `first_frame_deadline` (a guest that does not boot), the bridge gives
// up and closes the Supervisor's socket, which then reports the guest gone.
struct HostBridgeOptions {
  pid_t cred_pid = 0;
  std::chrono::steady_clock::time_point first_frame_deadline =
      std::chrono::steady_clock::time_point::max();
};
struct HostBridgeResult {
  bool heard_guest = false;  // at least one frame arrived
  std::string why;           // why the bridge ended
};
HostBridgeResult run_host_bridge(UniqueFd supervisor, UniqueFd serial, int stop_fd,
                                 const HostBridgeOptions& options);

// The guest side (the agent, pid 1). `on_message` sees each message from the supervisor before
// it is forwarded (the agent places calls in their cgroups there) and may change it; it may
// also send to the supervisor itself (`supervisor`). Returns when the host says "shutdown" (it
// is forwarded first), the serial stream ends or the supervisor's socket closes.
struct GuestBridgeHooks {
  // host -> supervisor: body about to be forwarded (exec: the agent makes the call's cgroup).
  std::function<void(Json& body)> to_supervisor;
  // supervisor -> host: body and the sender pid the kernel gave (started: the call's pid).
  std::function<void(Json& body, pid_t sender_pid)> to_host;
};
std::string run_guest_bridge(int supervisor, int serial, const GuestBridgeHooks& hooks);

}  // namespace sandgate::providers
