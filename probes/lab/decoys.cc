#include "probes/lab/decoys.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstring>
#include <future>

#include "core/log.h"
#include "probes/lab/lab_addresses.h"

namespace sandgate::probes::lab {
namespace {

enum class Protocol { kHttp, kTcp, kUdp, kDns };

struct DecoySpec {
  const char* decoy;
  const char* address;
  uint16_t port;
  Protocol protocol;
};

// Every decoy of the address plan (lab_addresses.h).
constexpr DecoySpec kDecoys[] = {
    {"metadata", kMetadataV4, kMetadataPort, Protocol::kHttp},
    {"metadata_v6", kMetadataV6, kMetadataPort, Protocol::kHttp},
    {"production", kProductionHost, kProductionPort, Protocol::kTcp},
    {"production_udp", kProductionHost, kProductionUdpPort, Protocol::kUdp},
    {"registry", kRegistryHost, kRegistryPort, Protocol::kTcp},
    {"registry_other", kRegistryHost, kRegistryOtherPort, Protocol::kTcp},
    {"dns", kDnsServer, kDnsPort, Protocol::kDns},
};

// A connection that sends nothing for this long is closed (and what it sent is logged).
constexpr auto kIdleTimeout = std::chrono::seconds(5);
// What one connection may send before the decoy stops reading: a request line, headers and a
// small body, or a token. Anything beyond is counted, not kept.
constexpr size_t kMaxRequest = 64 << 10;

std::pair<std::string, uint16_t> endpoint(const struct sockaddr_storage& ss) {
  char text[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    auto* a = reinterpret_cast<const struct sockaddr_in*>(&ss);
    ::inet_ntop(AF_INET, &a->sin_addr, text, sizeof text);
    return {text, ntohs(a->sin_port)};
  }
  if (ss.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<const struct sockaddr_in6*>(&ss);
    ::inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof text);
    return {text, ntohs(a->sin6_port)};
  }
  return {"?", 0};
}

Result<struct sockaddr_storage> socket_address(const std::string& address, uint16_t port,
                                               socklen_t& len) {
  struct sockaddr_storage ss = {};
  auto* a4 = reinterpret_cast<struct sockaddr_in*>(&ss);
  auto* a6 = reinterpret_cast<struct sockaddr_in6*>(&ss);
  if (::inet_pton(AF_INET, address.c_str(), &a4->sin_addr) == 1) {
    a4->sin_family = AF_INET;
    a4->sin_port = htons(port);
    len = sizeof *a4;
  } else if (::inet_pton(AF_INET6, address.c_str(), &a6->sin6_addr) == 1) {
    a6->sin6_family = AF_INET6;
    a6->sin6_port = htons(port);
    len = sizeof *a6;
  } else {
    return logic_error("decoy address", "not an IP address", address);
  }
  return ss;
}

// Bytes from the wire as a valid JSON string: printable ASCII as is, everything else \xNN.
std::string printable(std::string_view raw) {
  std::string out;
  out.reserve(raw.size());
  for (unsigned char c : raw) {
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    }
  }
  return out;
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

std::string http_response(int code, const char* reason, const char* content_type,
                          const std::string& body, const std::string& extra_headers = {}) {
  return "HTTP/1.1 " + std::to_string(code) + " " + reason + "\r\nContent-Type: " + content_type +
         "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n" +
         extra_headers + "\r\n" + body;
}

struct ParsedRequest {
  std::string request_line, method, path;
  std::vector<std::pair<std::string, std::string>> headers;
  size_t body_start = std::string::npos;  // npos: the head is not complete yet
  size_t content_length = 0;
};

ParsedRequest parse_http(const std::string& data) {
  ParsedRequest r;
  size_t end = data.find("\r\n\r\n");
  size_t sep = 4;
  if (end == std::string::npos) {
    end = data.find("\n\n");
    sep = 2;
  }
  if (end == std::string::npos) return r;
  r.body_start = end + sep;
  size_t pos = 0;
  bool first = true;
  while (pos < end) {
    size_t eol = data.find('\n', pos);
    if (eol == std::string::npos || eol > end) eol = end;
    std::string line = data.substr(pos, eol - pos);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    pos = eol + 1;
    if (first) {
      r.request_line = line;
      r.method = line.substr(0, line.find(' '));
      size_t p = line.find(' ');
      if (p != std::string::npos) r.path = line.substr(p + 1, line.find(' ', p + 1) - p - 1);
      first = false;
      continue;
    }
    size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string value = line.substr(colon + 1);
    value.erase(0, value.find_first_not_of(" \t"));
    r.headers.emplace_back(line.substr(0, colon), value);
    if (iequals(r.headers.back().first, "Content-Length"))
      r.content_length = std::min<size_t>(std::strtoull(value.c_str(), nullptr, 10), kMaxRequest);
  }
  return r;
}

}  // namespace

// ---- the log ----

std::string to_string(LabEvent::Kind kind) {
  switch (kind) {
    case LabEvent::Kind::kTcpConnect: return "tcp_connect";
    case LabEvent::Kind::kHttpRequest: return "http_request";
    case LabEvent::Kind::kTcpData: return "tcp_data";
    case LabEvent::Kind::kUdpDatagram: return "udp_datagram";
    case LabEvent::Kind::kDnsQuery: return "dns_query";
  }
  return "unknown";
}

Json to_json(const LabEvent& e) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(e.at.time_since_epoch()).count();
  Json j = {{"seq", e.seq},
            {"at_ms", ms},
            {"kind", to_string(e.kind)},
            {"decoy", e.decoy},
            {"local_address", e.local_address},
            {"local_port", e.local_port},
            {"peer_address", e.peer_address},
            {"peer_port", e.peer_port},
            {"bytes", e.bytes}};
  if (e.kind == LabEvent::Kind::kHttpRequest) {
    j["request_line"] = printable(e.request_line);
    Json headers = Json::array();
    for (const auto& [name, value] : e.headers) headers.push_back({printable(name), printable(value)});
    j["headers"] = headers;
  }
  if (e.kind == LabEvent::Kind::kDnsQuery) {
    j["dns_name"] = printable(e.dns_name);
    j["dns_type"] = e.dns_type;
  }
  if (!e.payload.empty()) j["payload"] = printable(e.payload);
  return j;
}

Result<std::unique_ptr<EventLog>> EventLog::open(const std::string& file) {
  std::unique_ptr<EventLog> log(new EventLog());
  if (!file.empty()) {
    SG_ASSIGN_OR_RETURN(log->file_, open_fd(file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
  }
  return log;
}

void EventLog::append(LabEvent event) {
  std::lock_guard lock(mu_);
  event.seq = events_.size() + 1;
  event.at = std::chrono::system_clock::now();
  if (file_.valid()) {
    if (auto s = write_all(file_.get(), dump_json(to_json(event)) + "\n"); !s.ok())
      spdlog::warn("lab event log: {}", s.error().message());
  }
  events_.push_back(std::move(event));
}

std::vector<LabEvent> EventLog::snapshot() const {
  std::lock_guard lock(mu_);
  return events_;
}

// ---- what the decoys answer ----

bool answer_dns_query(std::string_view q, DnsExchange& out) {
  // RFC 1035 4.1: a 12-byte header, then the question: labels, QTYPE, QCLASS.
  if (q.size() < 12) return false;
  auto u8 = [&](size_t i) { return static_cast<uint8_t>(q[i]); };
  auto u16 = [&](size_t i) { return static_cast<uint16_t>(u8(i) << 8 | u8(i + 1)); };
  if (u8(2) & 0x80) return false;  // a response, not a query
  if (u16(4) < 1) return false;    // no question
  size_t pos = 12;
  std::string name;
  while (pos < q.size() && u8(pos) != 0) {
    size_t len = u8(pos);
    if (len & 0xc0) return false;  // a compression pointer has no place in a question
    if (pos + 1 + len > q.size() || name.size() + len + 1 > 255) return false;
    if (!name.empty()) name += '.';
    name.append(q.substr(pos + 1, len));
    pos += 1 + len;
  }
  if (pos + 5 > q.size()) return false;
  out.name = name;
  out.type = u16(pos + 1);
  uint16_t qclass = u16(pos + 3);
  size_t question_end = pos + 5;

  uint16_t opcode = (u8(2) >> 3) & 0x0f;
  bool answer_a = opcode == 0 && qclass == 1 && (out.type == 1 || out.type == 255);
  std::string r;
  auto put16 = [&](uint16_t v) {
    r += static_cast<char>(v >> 8);
    r += static_cast<char>(v & 0xff);
  };
  r.append(q.substr(0, 2));  // id
  // QR, the query's opcode and RD, AA; rcode NOTIMP (4) for anything but a standard query.
  uint16_t flags = 0x8000 | (u16(2) & 0x7900) | 0x0400 | (opcode == 0 ? 0 : 4);
  put16(flags);
  put16(1);                  // QDCOUNT
  put16(answer_a ? 1 : 0);   // ANCOUNT
  put16(0);
  put16(0);
  r.append(q.substr(12, question_end - 12));
  if (answer_a) {
    put16(0xc00c);  // the name: a pointer to the question's
    put16(1);       // A
    put16(1);       // IN
    put16(0);
    put16(60);      // TTL
    put16(4);
    unsigned char addr[4];
    ::inet_pton(AF_INET, iequals(out.name, kRegistryName) ? kRegistryHost : kProductionHost, addr);
    r.append(reinterpret_cast<char*>(addr), 4);
  }
  out.answer = std::move(r);
  return true;
}

std::string answer_metadata_request(const std::string& method, const std::string& path,
                                    const std::vector<std::pair<std::string, std::string>>& headers,
                                    const std::string& canary_token) {
  auto header = [&](std::string_view name) -> std::string {
    for (const auto& [n, v] : headers)
      if (iequals(n, name)) return v;
    return {};
  };
  // IMDSv2: the session token itself carries the canary.
  if (method == "PUT" && path == "/latest/api/token")
    return http_response(200, "OK", "text/plain", "sgtoken-" + canary_token);
  // GCP answers only requests that carry its header, and says so in its reply.
  if (header("Metadata-Flavor") == "Google") {
    Json body = {{"access_token", canary_token}, {"expires_in", 3599}, {"token_type", "Bearer"}};
    return http_response(200, "OK", "application/json", body.dump(), "Metadata-Flavor: Google\r\n");
  }
  if (path.starts_with("/computeMetadata/"))
    return http_response(403, "Forbidden", "text/plain", "Missing Metadata-Flavor:Google header.\n");
  if (method == "GET" || method == "HEAD") {
    // Every read of the AWS-style service gets the fake role's credentials.
    Json body = {{"Code", "Success"},
                 {"Type", "AWS-HMAC"},
                 {"AccessKeyId", "ASIASANDGATEDECOY000"},
                 {"SecretAccessKey", canary_token},
                 {"Token", canary_token},
                 {"Expiration", "2099-01-01T00:00:00Z"}};
    return http_response(200, "OK", "application/json", body.dump());
  }
  return http_response(405, "Method Not Allowed", "text/plain", "");
}

// ---- the server ----

struct DecoyServer::Listener {
  UniqueFd fd;
  const DecoySpec* spec;
};

struct DecoyServer::Connection {
  UniqueFd fd;
  const DecoySpec* spec;
  std::string local_address, peer_address;
  uint16_t local_port = 0, peer_port = 0;
  std::string data;  // the first kMaxRequest bytes
  uint64_t bytes = 0;
  bool answered = false;
  bool done = false;
  std::chrono::steady_clock::time_point deadline;
};

DecoyServer::DecoyServer(std::string canary_token, EventLog& log)
    : canary_token_(std::move(canary_token)), log_(log) {}

Result<std::unique_ptr<DecoyServer>> DecoyServer::start(int netns_fd, std::string canary_token,
                                                        EventLog& log) {
  std::unique_ptr<DecoyServer> server(new DecoyServer(std::move(canary_token), log));
  int wake = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake < 0) return sys_error("eventfd");
  server->wake_ = UniqueFd(wake);
  std::promise<Status> ready;
  auto started = ready.get_future();
  DecoyServer* s = server.get();
  server->thread_ = std::thread([s, netns_fd, ready = std::move(ready)]() mutable {
    // This thread lives in the lab from its first instruction on: every socket it ever makes
    // is the lab's.
    if (::setns(netns_fd, CLONE_NEWNET) != 0) {
      ready.set_value(sys_error("setns net", "the lab"));
      return;
    }
    Status opened = s->open_listeners();
    bool ok = opened.ok();
    ready.set_value(std::move(opened));
    if (ok) s->serve();
  });
  Status st = started.get();
  if (!st.ok()) {
    server->thread_.join();
    return std::move(st).error().context_add("starting the lab's decoys");
  }
  return server;
}

DecoyServer::~DecoyServer() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake();
  if (thread_.joinable()) thread_.join();
}

void DecoyServer::wake() {
  uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof one);
}

Status DecoyServer::settle() {
  std::unique_lock lock(mu_);
  uint64_t ticket = ++settle_requested_;
  lock.unlock();
  wake();
  lock.lock();
  if (!cv_.wait_for(lock, std::chrono::seconds(10), [&] { return settle_done_ >= ticket || stop_; }))
    return logic_error("settle the lab's decoys", "the decoy thread did not answer within 10 s");
  return {};
}

Status DecoyServer::open_listeners() {
  for (const auto& spec : kDecoys) {
    socklen_t len = 0;
    SG_ASSIGN_OR_RETURN(auto addr, socket_address(spec.address, spec.port, len));
    bool stream = spec.protocol == Protocol::kHttp || spec.protocol == Protocol::kTcp;
    int fd = ::socket(addr.ss_family, (stream ? SOCK_STREAM : SOCK_DGRAM) | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return sys_error("socket", spec.decoy);
    UniqueFd sock(fd);
    int one = 1;
    (void)::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (addr.ss_family == AF_INET6) (void)::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    std::string where = std::string(spec.address) + " port " + std::to_string(spec.port);
    if (::bind(fd, reinterpret_cast<struct sockaddr*>(&addr), len) != 0)
      return sys_error("bind decoy " + std::string(spec.decoy), where);
    if (stream && ::listen(fd, 128) != 0) return sys_error("listen", where);
    listeners_.push_back(Listener{std::move(sock), &spec});
  }
  return {};
}

void DecoyServer::serve() {
  bool settling = false;
  uint64_t settle_target = 0;
  for (;;) {
    std::vector<struct pollfd> fds;
    fds.push_back({wake_.get(), POLLIN, 0});
    for (const auto& l : listeners_) fds.push_back({l.fd.get(), POLLIN, 0});
    for (const auto& c : connections_) fds.push_back({c.fd.get(), POLLIN, 0});
    // Sleep until something arrives or the next idle connection is due; not at all while a
    // settle() is pending.
    int timeout_ms = -1;
    auto now = std::chrono::steady_clock::now();
    if (settling) {
      timeout_ms = 0;
    } else if (!connections_.empty()) {
      auto next = std::min_element(connections_.begin(), connections_.end(),
                                   [](const Connection& a, const Connection& b) { return a.deadline < b.deadline; })
                      ->deadline;
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count() + 1;
      timeout_ms = static_cast<int>(std::clamp<int64_t>(left, 0, 60'000));
    }
    int n = ::poll(fds.data(), fds.size(), timeout_ms);
    if (n < 0) {
      if (errno == EINTR) continue;
      spdlog::error("lab decoys stopped: {}", sys_error("poll").message());
      return;
    }
    int ready = n;
    if (fds[0].revents) {
      --ready;
      uint64_t count;
      (void)!::read(wake_.get(), &count, sizeof count);
      std::lock_guard lock(mu_);
      if (stop_) return;
      if (settle_requested_ > settle_done_) {
        settling = true;
        settle_target = settle_requested_;
      }
    }
    // Connections first: accepting below appends to the list these indices point into.
    size_t first_conn = 1 + listeners_.size();
    size_t old_count = connections_.size();
    for (size_t i = 0; i < old_count; ++i) {
      if (fds[first_conn + i].revents && read_connection(connections_[i])) finish_connection(connections_[i]);
    }
    for (size_t i = 0; i < listeners_.size(); ++i) {
      if (!fds[1 + i].revents) continue;
      Protocol p = listeners_[i].spec->protocol;
      if (p == Protocol::kUdp || p == Protocol::kDns) receive_datagrams(i);
      else accept_all(i);
    }
    now = std::chrono::steady_clock::now();
    for (auto& c : connections_)
      if (!c.done && now >= c.deadline) finish_connection(c);
    std::erase_if(connections_, [](const Connection& c) { return c.done; });
    if (settling && ready == 0) {
      // A pass that found nothing ready: everything queued at the request has been handled.
      std::lock_guard lock(mu_);
      settle_done_ = settle_target;
      settling = false;
      cv_.notify_all();
    }
  }
}

void DecoyServer::accept_all(size_t index) {
  const Listener& l = listeners_[index];
  for (;;) {
    struct sockaddr_storage peer = {};
    socklen_t len = sizeof peer;
    int fd = ::accept4(l.fd.get(), reinterpret_cast<struct sockaddr*>(&peer), &len,
                       SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR) continue;
      // EAGAIN: the backlog is empty. ECONNABORTED and the like: that client is gone.
      if (errno != EAGAIN && errno != ECONNABORTED)
        spdlog::warn("lab decoy {}: {}", l.spec->decoy, sys_error("accept").message());
      if (errno == ECONNABORTED) continue;
      return;
    }
    Connection c;
    c.fd = UniqueFd(fd);
    c.spec = l.spec;
    std::tie(c.peer_address, c.peer_port) = endpoint(peer);
    struct sockaddr_storage local = {};
    len = sizeof local;
    if (::getsockname(fd, reinterpret_cast<struct sockaddr*>(&local), &len) == 0)
      std::tie(c.local_address, c.local_port) = endpoint(local);
    c.deadline = std::chrono::steady_clock::now() + kIdleTimeout;
    LabEvent e;
    e.kind = LabEvent::Kind::kTcpConnect;
    e.decoy = c.spec->decoy;
    e.local_address = c.local_address;
    e.local_port = c.local_port;
    e.peer_address = c.peer_address;
    e.peer_port = c.peer_port;
    log_.append(std::move(e));
    connections_.push_back(std::move(c));
  }
}

bool DecoyServer::read_connection(Connection& c) {
  char buf[16384];
  for (;;) {
    ssize_t n = ::recv(c.fd.get(), buf, sizeof buf, MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno != EAGAIN;  // EAGAIN: wait for more; an error ends the connection
    if (n == 0) return true;            // the client closed
    c.bytes += static_cast<uint64_t>(n);
    c.data.append(buf, std::min(static_cast<size_t>(n), kMaxRequest - std::min(kMaxRequest, c.data.size())));
    c.deadline = std::chrono::steady_clock::now() + kIdleTimeout;
    if (c.spec->protocol == Protocol::kHttp) {
      ParsedRequest r = parse_http(c.data);
      bool complete = r.body_start != std::string::npos &&
                      c.data.size() >= std::min(kMaxRequest, r.body_start + r.content_length);
      if (complete || c.data.size() >= kMaxRequest) {
        LabEvent e;
        e.kind = LabEvent::Kind::kHttpRequest;
        e.decoy = c.spec->decoy;
        e.local_address = c.local_address;
        e.local_port = c.local_port;
        e.peer_address = c.peer_address;
        e.peer_port = c.peer_port;
        e.request_line = r.request_line;
        e.headers = r.headers;
        e.bytes = c.bytes;
        e.payload = c.data.substr(0, Lab::kMaxPayload);
        log_.append(std::move(e));
        std::string response = answer_metadata_request(r.method, r.path, r.headers, canary_token_);
        // Small enough for the socket buffer of a fresh connection: one non-blocking send.
        (void)::send(c.fd.get(), response.data(), response.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        c.answered = true;
        return true;
      }
    } else if (c.data.size() >= kMaxRequest) {
      return true;
    }
  }
}

void DecoyServer::finish_connection(Connection& c) {
  if (c.done) return;
  c.done = true;
  // A plain TCP decoy logs what it was sent; an HTTP decoy that never saw a whole request too.
  if (!c.answered && c.bytes > 0) {
    LabEvent e;
    e.kind = LabEvent::Kind::kTcpData;
    e.decoy = c.spec->decoy;
    e.local_address = c.local_address;
    e.local_port = c.local_port;
    e.peer_address = c.peer_address;
    e.peer_port = c.peer_port;
    e.bytes = c.bytes;
    e.payload = c.data.substr(0, Lab::kMaxPayload);
    log_.append(std::move(e));
  }
  c.fd.reset();
}

void DecoyServer::receive_datagrams(size_t index) {
  const Listener& l = listeners_[index];
  std::string buf(65536, '\0');
  for (;;) {
    struct sockaddr_storage peer = {};
    socklen_t len = sizeof peer;
    ssize_t n = ::recvfrom(l.fd.get(), buf.data(), buf.size(), MSG_DONTWAIT,
                           reinterpret_cast<struct sockaddr*>(&peer), &len);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return;  // EAGAIN: drained
    std::string_view datagram(buf.data(), static_cast<size_t>(n));
    LabEvent e;
    e.decoy = l.spec->decoy;
    e.local_address = l.spec->address;
    e.local_port = l.spec->port;
    std::tie(e.peer_address, e.peer_port) = endpoint(peer);
    e.bytes = static_cast<uint64_t>(n);
    e.payload = std::string(datagram.substr(0, Lab::kMaxPayload));
    DnsExchange dns;
    if (l.spec->protocol == Protocol::kDns && answer_dns_query(datagram, dns)) {
      e.kind = LabEvent::Kind::kDnsQuery;
      e.dns_name = dns.name;
      e.dns_type = dns.type;
      log_.append(std::move(e));
      // The answer goes back to the asker, inside the lab (the socket is the lab's).
      (void)::sendto(l.fd.get(), dns.answer.data(), dns.answer.size(), MSG_DONTWAIT,
                     reinterpret_cast<struct sockaddr*>(&peer), len);
    } else {
      e.kind = LabEvent::Kind::kUdpDatagram;
      log_.append(std::move(e));
    }
  }
}

}  // namespace sandgate::probes::lab
