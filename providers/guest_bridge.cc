#include "providers/guest_bridge.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <optional>
#include <vector>

#include "providers/supervisor_protocol.h"

namespace sandgate::providers {
namespace {

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint32_t get_u32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= static_cast<uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

// Reads what is there (the fd may be blocking: one read per readable poll).
Result<bool> read_some(int fd, FrameReader& reader) {
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return sys_error("read the serial stream");
    if (n == 0) return false;
    reader.feed(std::string_view(buf, static_cast<size_t>(n)));
    return true;
  }
}

Result<std::string> read_whole(int fd) {
  std::string out;
  char buf[65536];
  off_t at = 0;
  for (;;) {
    ssize_t n = ::pread(fd, buf, sizeof buf, at);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return sys_error("read a file to send to the guest");
    if (n == 0) return out;
    out.append(buf, static_cast<size_t>(n));
    at += n;
    if (out.size() > kMaxFramePayload) return logic_error("bridge", "file too large for a frame");
  }
}

std::vector<uint32_t> channels_of(const Json& body, const char* key) {
  std::vector<uint32_t> out;
  auto it = body.find(key);
  if (it == body.end() || !it->is_array()) return out;
  for (const auto& c : *it)
    if (c.is_number_unsigned()) out.push_back(c.get<uint32_t>());
  return out;
}

}  // namespace

std::string encode_frame(const Frame& f) {
  std::string out;
  out.reserve(kFrameHeader + f.payload.size());
  out.push_back(static_cast<char>(f.type));
  put_u32(out, f.channel);
  put_u32(out, static_cast<uint32_t>(f.payload.size()));
  out += f.payload;
  return out;
}

Result<std::optional<Frame>> FrameReader::next() {
  if (buffer_.size() < kFrameHeader) return std::optional<Frame>();
  auto type = static_cast<uint8_t>(buffer_[0]);
  if (type < 1 || type > 4)
    return logic_error("read a frame", "unknown frame type " + std::to_string(type));
  uint32_t len = get_u32(buffer_.data() + 5);
  if (len > kMaxFramePayload)
    return logic_error("read a frame", "payload of " + std::to_string(len) + " bytes is too large");
  if (buffer_.size() < kFrameHeader + len) return std::optional<Frame>();
  Frame f{static_cast<FrameType>(type), get_u32(buffer_.data() + 1),
          buffer_.substr(kFrameHeader, len)};
  buffer_.erase(0, kFrameHeader + len);
  return std::optional<Frame>(std::move(f));
}

Status write_frame(int fd, const Frame& f) { return write_all(fd, encode_frame(f)); }

HostBridgeResult run_host_bridge(UniqueFd supervisor, UniqueFd serial, int stop_fd,
                                 const HostBridgeOptions& options) {
  // A pipe whose reader (Supervisor::exec) went away must not kill sandgate.
  sigset_t pipe_mask;
  sigemptyset(&pipe_mask);
  sigaddset(&pipe_mask, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_mask, nullptr);

  HostBridgeResult result;
  FrameReader reader;
  std::map<uint32_t, UniqueFd> streams;  // channel -> write end of Supervisor::exec's pipe
  uint32_t next_channel = 1;
  for (;;) {
    struct pollfd fds[3] = {
        {supervisor.get(), POLLIN, 0}, {serial.get(), POLLIN, 0}, {stop_fd, POLLIN, 0}};
    int timeout_ms = -1;
    if (!result.heard_guest &&
        options.first_frame_deadline != std::chrono::steady_clock::time_point::max()) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          options.first_frame_deadline - std::chrono::steady_clock::now());
      timeout_ms = static_cast<int>(std::max<int64_t>(0, left.count()));
    }
    int r = ::poll(fds, stop_fd >= 0 ? 3 : 2, timeout_ms);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      result.why = std::string("poll: ") + std::strerror(errno);
      return result;
    }
    if (r == 0) {
      result.why = "the guest did not answer before its boot deadline";
      return result;
    }
    if (stop_fd >= 0 && fds[2].revents) {
      result.why = "stopped";
      return result;
    }
    if (fds[0].revents) {
      auto msg = recv_message(supervisor.get());
      if (!msg.ok()) {
        result.why = "the host's supervisor socket closed";
        return result;
      }
      if (!msg->fds.empty()) {
        // An exec's descriptors are its stdout and stderr (pipes the guest makes) and, when it
        // says "stdin", its stdin last: a file whose whole content travels as a blob.
        const bool exec = msg->body.value("op", "") == "exec";
        const size_t outputs =
            exec ? msg->fds.size() - (msg->body.value("stdin", false) ? 1 : 0) : 0;
        Json chans = Json::array();
        for (size_t i = 0; i < msg->fds.size(); ++i) {
          uint32_t c = next_channel++;
          if (i < outputs) {
            chans.push_back(c);
            streams[c] = std::move(msg->fds[i]);
            continue;
          }
          auto bytes = read_whole(msg->fds[i].get());
          if (!bytes.ok()) {
            result.why = bytes.error().message();
            return result;
          }
          if (!write_frame(serial.get(), {FrameType::kBlob, c, *bytes}).ok()) {
            result.why = "the serial stream closed";
            return result;
          }
          if (exec)
            msg->body["_stdin_blob"] = c;
          else
            chans.push_back(c);
        }
        msg->body[exec ? "_streams" : "_blobs"] = chans;
      }
      if (!write_frame(serial.get(), {FrameType::kMessage, 0, dump_json(msg->body)}).ok()) {
        result.why = "the serial stream closed";
        return result;
      }
    }
    if (fds[1].revents) {
      auto more = read_some(serial.get(), reader);
      if (!more.ok() || !*more) {
        result.why = "the guest's serial stream ended";
        return result;
      }
      for (;;) {
        auto frame = reader.next();
        if (!frame.ok()) {
          result.why = "the guest sent " + frame.error().message();
          return result;
        }
        if (!frame->has_value()) break;
        Frame& f = **frame;
        result.heard_guest = true;
        if (f.type == FrameType::kMessage) {
          auto body = parse_json(f.payload, "a guest frame");
          if (!body.ok() || !body->is_object()) {
            result.why = "the guest sent a message that is not a JSON object";
            return result;
          }
          if (!send_message(supervisor.get(), *body, {}, options.cred_pid).ok()) {
            result.why = "the host's supervisor socket closed";
            return result;
          }
        } else if (f.type == FrameType::kData) {
          auto it = streams.find(f.channel);
          // A reader that is gone (the call ended, its capture closed) loses the rest.
          if (it != streams.end() && !write_all(it->second.get(), f.payload).ok())
            streams.erase(it);
        } else if (f.type == FrameType::kEof) {
          streams.erase(f.channel);
        } else {
          result.why = "the guest sent a blob frame (only the host sends those)";
          return result;
        }
      }
    }
  }
}

std::string run_guest_bridge(int supervisor, int serial, const GuestBridgeHooks& hooks) {
  struct Stream {
    UniqueFd fd;  // read end, non-blocking
    uint64_t call = 0;
  };
  std::map<uint32_t, Stream> streams;
  std::map<uint32_t, UniqueFd> blobs;
  FrameReader reader;
  auto pump = [&](uint32_t chan, Stream& s) -> Result<bool> {  // false at EOF
    char buf[65536];
    for (;;) {
      ssize_t n = ::read(s.fd.get(), buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return true;  // EAGAIN: nothing more now
      if (n == 0) {
        SG_TRY(write_frame(serial, {FrameType::kEof, chan, ""}));
        return false;
      }
      SG_TRY(
          write_frame(serial, {FrameType::kData, chan, std::string(buf, static_cast<size_t>(n))}));
    }
  };
  for (;;) {
    std::vector<struct pollfd> fds = {{supervisor, POLLIN, 0}, {serial, POLLIN, 0}};
    std::vector<uint32_t> order;
    for (auto& [chan, s] : streams) {
      fds.push_back({s.fd.get(), POLLIN, 0});
      order.push_back(chan);
    }
    int r = ::poll(fds.data(), fds.size(), -1);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return std::string("poll: ") + std::strerror(errno);
    for (size_t i = 0; i < order.size(); ++i) {
      if (!fds[i + 2].revents) continue;
      auto it = streams.find(order[i]);
      auto open = pump(it->first, it->second);
      if (!open.ok()) return "serial write: " + open.error().message();
      if (!*open) streams.erase(it);
    }
    if (fds[0].revents) {
      auto msg = recv_message(supervisor);
      if (!msg.ok()) return "the supervisor's socket closed";
      std::string op = msg->body.value("op", "");
      if (hooks.to_host) hooks.to_host(msg->body, msg->sender_pid);
      // The call's output is on the host before its end: whatever it wrote is in its pipes.
      if (op == "exited" || op == "exec_failed") {
        uint64_t id = msg->body.value("id", uint64_t{0});
        for (auto it = streams.begin(); it != streams.end();) {
          if (it->second.call != id) {
            ++it;
            continue;
          }
          auto open = pump(it->first, it->second);
          if (!open.ok()) return "serial write: " + open.error().message();
          it = *open ? std::next(it) : streams.erase(it);
        }
      }
      if (!write_frame(serial, {FrameType::kMessage, 0, dump_json(msg->body)}).ok())
        return "the serial stream closed";
    }
    if (fds[1].revents) {
      auto more = read_some(serial, reader);
      if (!more.ok() || !*more) return "the host's serial stream ended";
      for (;;) {
        auto frame = reader.next();
        if (!frame.ok()) return "the host sent " + frame.error().message();
        if (!frame->has_value()) break;
        Frame& f = **frame;
        if (f.type == FrameType::kBlob) {
          UniqueFd mem(::memfd_create("sandgate-blob", MFD_CLOEXEC | MFD_ALLOW_SEALING));
          if (!mem.valid() || !write_all(mem.get(), f.payload).ok()) return "memfd for a blob";
          ::fcntl(mem.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL);
          // Read from its start by whoever gets it (a call's stdin reads where the offset is).
          ::lseek(mem.get(), 0, SEEK_SET);
          blobs[f.channel] = std::move(mem);
          continue;
        }
        if (f.type != FrameType::kMessage) continue;
        auto body = parse_json(f.payload, "a guest frame");
        if (!body.ok() || !body->is_object()) return "the host sent a message that is not JSON";
        std::vector<UniqueFd> keep;  // our copies of what we pass, closed after sending
        std::vector<int> pass;
        for (uint32_t c : channels_of(*body, "_blobs")) {
          auto it = blobs.find(c);
          if (it == blobs.end()) continue;
          pass.push_back(it->second.get());
          keep.push_back(std::move(it->second));
          blobs.erase(it);
        }
        uint64_t call = body->value("id", uint64_t{0});
        for (uint32_t c : channels_of(*body, "_streams")) {
          auto pipe = make_pipe(O_CLOEXEC);
          if (!pipe.ok()) return "pipe: " + pipe.error().message();
          ::fcntl(pipe->read.get(), F_SETFL, O_NONBLOCK);
          pass.push_back(pipe->write.get());
          keep.push_back(std::move(pipe->write));
          streams[c] = Stream{std::move(pipe->read), call};
        }
        // An exec's stdin comes after its stdout and stderr.
        if (auto in = body->find("_stdin_blob"); in != body->end() && in->is_number_unsigned()) {
          if (auto it = blobs.find(in->get<uint32_t>()); it != blobs.end()) {
            pass.push_back(it->second.get());
            keep.push_back(std::move(it->second));
            blobs.erase(it);
          }
        }
        body->erase("_blobs");
        body->erase("_streams");
        body->erase("_stdin_blob");
        std::string op = body->value("op", "");
        if (hooks.to_supervisor) hooks.to_supervisor(*body);
        if (!send_message(supervisor, *body, pass).ok()) return "the supervisor's socket closed";
        if (op == "shutdown") return "the host said shutdown";
      }
    }
  }
}

}  // namespace sandgate::providers
