#include "session/dns_resolver.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <vector>

#include "core/log.h"
#include "core/netlink.h"
#include "core/terminal_text.h"

namespace sandgate::session {

namespace {

constexpr size_t kMaxDatagram = 4096;  // what is read of one query or reply

std::string ipv4_text(const uint8_t* a) {
  return std::to_string(a[0]) + "." + std::to_string(a[1]) + "." + std::to_string(a[2]) + "." +
         std::to_string(a[3]);
}

}  // namespace

Result<sockaddr_in> parse_dns_upstream(const std::string& text) {
  auto bad = [&](const std::string& why) {
    return Error{
        EINVAL, "--dns-upstream", "",
        "\"" + text + "\": " + why + " (expected IPV4[:PORT], e.g. 203.0.113.53 or 10.0.0.2:5353)"};
  };
  std::string host = text, port = "53";
  if (auto colon = text.find(':'); colon != std::string::npos) {
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  sockaddr_in a{};
  a.sin_family = AF_INET;
  if (host.empty()) return bad("no address");
  if (::inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1)
    return bad(
        host.find_first_not_of("0123456789.") != std::string::npos
            ? "\"" + host +
                  "\" is not an IPv4 address (a name would need a resolver to find the resolver)"
            : "\"" + host + "\" is not an IPv4 address");
  unsigned value = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size() || value == 0 ||
      value > 65535)
    return bad("port \"" + port + "\" is not 1..65535");
  a.sin_port = htons(static_cast<uint16_t>(value));
  return a;
}

std::string to_string(const sockaddr_in& a) {
  return ipv4_text(reinterpret_cast<const uint8_t*>(&a.sin_addr)) + ":" +
         std::to_string(ntohs(a.sin_port));
}

Result<std::unique_ptr<DnsResolver>> DnsResolver::start(DnsResolverConfig config, Admit admit) {
  std::unique_ptr<DnsResolver> r(new DnsResolver(std::move(config), std::move(admit)));
  const auto& c = r->config_;
  auto udp_socket = [&]() -> Result<UniqueFd> {
    const int type = SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC;
    if (c.netns_fd >= 0) return socket_in_netns(c.netns_fd, AF_INET, type, 0);
    UniqueFd fd(::socket(AF_INET, type, 0));
    if (!fd) return sys_error("socket for the DNS resolver");
    return fd;
  };
  SG_ASSIGN_OR_RETURN(r->listen_fd_, udp_socket());
  if (::bind(r->listen_fd_.get(), reinterpret_cast<const sockaddr*>(&c.listen), sizeof c.listen) !=
      0)
    return sys_error("bind the run's DNS resolver", to_string(c.listen));
  socklen_t len = sizeof r->config_.listen;
  (void)::getsockname(r->listen_fd_.get(), reinterpret_cast<sockaddr*>(&r->config_.listen), &len);
  if (c.upstream) {
    // Checked once here, so that an unreachable upstream is an error of the run's start; each
    // query then gets a socket of its own (upstream_socket).
    SG_ASSIGN_OR_RETURN(UniqueFd probe, udp_socket());
    if (::connect(probe.get(), reinterpret_cast<const sockaddr*>(&*c.upstream),
                  sizeof *c.upstream) != 0)
      return sys_error("connect to the upstream DNS resolver (--dns-upstream)",
                       to_string(*c.upstream));
  }
  if (c.netns_fd >= 0) {
    r->netns_ = UniqueFd(::fcntl(c.netns_fd, F_DUPFD_CLOEXEC, 0));
    if (!r->netns_) return sys_error("keep the upstream network namespace for the DNS resolver");
  }
  r->wake_ = UniqueFd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!r->wake_) return sys_error("eventfd for the DNS resolver");
  uint64_t seed = 0;
  if (::getrandom(&seed, sizeof seed, 0) != sizeof seed) seed = static_cast<uint64_t>(::getpid());
  r->id_state_ = seed | 1;
  r->thread_ = std::thread([p = r.get()] { p->serve(); });
  return r;
}

DnsResolver::~DnsResolver() { stop(); }

void DnsResolver::stop() {
  if (thread_.joinable()) {
    stopping_ = true;
    uint64_t one = 1;
    (void)!::write(wake_.get(), &one, sizeof one);
    thread_.join();
  }
  pending_.clear();  // their sockets
  listen_fd_.reset();
  wake_.reset();
  netns_.reset();
}

void DnsResolver::begin_call(uint64_t call) { call_ = call; }

void DnsResolver::settle() {
  if (!thread_.joinable()) return;
  std::unique_lock lock(mu_);
  uint64_t ticket = ++settle_requested_;
  uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof one);
  // Bounded: a resolver thread that cannot answer must not hold the run's call forever.
  cv_.wait_for(lock, std::chrono::seconds(2), [&] { return settle_done_ >= ticket; });
}

std::vector<DnsResolver::Decision> DnsResolver::end_call(uint64_t call, uint64_t* not_kept) {
  // What the call sent and the kernel holds for the resolver is still the call's.
  settle();
  call_ = 0;
  std::lock_guard lock(mu_);
  std::vector<Decision> out;
  for (auto& d : decisions_)
    if (d.call == call) out.push_back(std::move(d.decision));
  decisions_.clear();
  if (not_kept) *not_kept = not_kept_;
  not_kept_ = 0;
  return out;
}

std::vector<std::string> DnsResolver::log() const {
  std::lock_guard lock(mu_);
  return log_;
}

uint16_t DnsResolver::next_id() {
  // xorshift64 from a random seed: ids the run cannot predict (it never sees them anyway:
  // they travel between this process and the upstream), and none in use twice.
  for (;;) {
    id_state_ ^= id_state_ << 13;
    id_state_ ^= id_state_ >> 7;
    id_state_ ^= id_state_ << 17;
    auto id = static_cast<uint16_t>(id_state_ >> 24);
    if (!pending_.count(id)) return id;
  }
}

void DnsResolver::decide(uint64_t call, EgressVerdict v, const sockaddr_in& client) {
  v.port = 53;
  v.protocol = "udp";
  std::string line = std::string(v.allowed ? "answered " : "refused ") + v.query_type + " " +
                     terminal_safe(v.name) + " " + v.answer +
                     (v.address.empty() ? "" : " " + v.address) + " from " + to_string(client);
  spdlog::debug("dns resolver {}: {}", to_string(config_.listen), line);
  std::lock_guard lock(mu_);
  if (log_.size() < kKeep) log_.push_back(std::move(line));
  if (call == 0) return;  // outside every call (a resident process): logged, attributed to none
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  uint64_t ts =
      static_cast<uint64_t>(now.tv_sec) * 1'000'000'000ULL + static_cast<uint64_t>(now.tv_nsec);
  if (decisions_.size() < kKeep)
    decisions_.push_back({call, {ts, std::move(v)}});
  else
    ++not_kept_;
}

void DnsResolver::reply(const sockaddr_in& client, const std::string& wire) {
  (void)::sendto(listen_fd_.get(), wire.data(), wire.size(), MSG_DONTWAIT,
                 reinterpret_cast<const sockaddr*>(&client), sizeof client);
}

void DnsResolver::on_query(std::string_view wire, const sockaddr_in& client) {
  const uint64_t call = call_;
  EgressVerdict v;
  v.hook = "dns";
  auto parsed = dns::parse_message(wire);
  if (!parsed.ok()) {
    if (wire.size() < dns::kHeaderSize || (static_cast<uint8_t>(wire[2]) & 0x80))
      return;  // no reply possible / a reply
    // The header alone, for a FORMERR that echoes no question.
    dns::Message h;
    h.id =
        static_cast<uint16_t>(static_cast<uint8_t>(wire[0]) << 8 | static_cast<uint8_t>(wire[1]));
    h.opcode = static_cast<uint8_t>((static_cast<uint8_t>(wire[2]) >> 3) & 0x0f);
    h.recursion_desired = static_cast<uint8_t>(wire[2]) & 0x01;
    reply(client, dns::encode_reply(h, dns::kFormErr));
    v.name = "(malformed: " + parsed.error().detail + ")";
    v.query_type = "?";
    v.answer = dns::rcode_name(dns::kFormErr);
    decide(call, std::move(v), client);
    return;
  }
  dns::Message& q = *parsed;
  if (q.response) return;  // not a query: dropped, as a resolver drops stray replies
  if (q.opcode != 0 || q.questions.size() != 1) {
    uint8_t rcode = q.opcode != 0 ? dns::kNotImp : dns::kFormErr;
    if (q.questions.size() != 1) q.question_wire.clear();
    reply(client, dns::encode_reply(q, rcode));
    v.name = q.questions.empty() ? "(no question)" : q.questions[0].name;
    v.query_type = q.questions.empty() ? "?" : dns::type_name(q.questions[0].type);
    v.answer = dns::rcode_name(rcode);
    decide(call, std::move(v), client);
    return;
  }
  const dns::Question& question = q.questions[0];
  v.name = question.name;
  v.query_type = dns::type_name(question.type);
  bool listed = false;
  for (const auto& rule : config_.names)
    if (rule.name == question.name) listed = true;
  if (!listed || question.klass != dns::kClassIn || !config_.upstream) {
    reply(client, dns::encode_reply(q, dns::kRefused));
    v.answer = dns::rcode_name(dns::kRefused);
    decide(call, std::move(v), client);
    return;
  }
  v.allowed = true;
  if (question.type != dns::kTypeA) {
    // IPv4 only: an empty answer for AAAA and every other type of a listed name.
    reply(client, dns::encode_reply(q, dns::kNoError));
    v.answer = dns::rcode_name(dns::kNoError) + " (no " + v.query_type + " records: IPv4 only)";
    decide(call, std::move(v), client);
    return;
  }
  if (pending_.size() >= config_.max_pending || !upstream_ready_) {
    reply(client, dns::encode_reply(q, dns::kServFail));
    v.answer = dns::rcode_name(dns::kServFail) + " (too many queries awaiting the upstream)";
    decide(call, std::move(v), client);
    return;
  }
  uint16_t id = next_id();
  auto ask = dns::encode_query(id, question.name, dns::kTypeA);
  auto fd = upstream_socket();
  if (!ask.ok() || !fd.ok() || ::send(fd->get(), ask->data(), ask->size(), MSG_DONTWAIT) < 0) {
    reply(client, dns::encode_reply(q, dns::kServFail));
    v.answer = dns::rcode_name(dns::kServFail) + " (could not ask the upstream)";
    decide(call, std::move(v), client);
    return;
  }
  Pending p;
  p.fd = std::move(fd).value();
  p.query = std::move(q);
  p.client = client;
  p.name = v.name;
  p.call = call;
  p.deadline = std::chrono::steady_clock::now() + config_.upstream_timeout;
  pending_.emplace(id, std::move(p));
}

Result<UniqueFd> DnsResolver::upstream_socket() const {
  UniqueFd fd(::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) return sys_error("socket for a DNS query");
  // Connected: the kernel then hands over only datagrams from the upstream's address and port.
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&*config_.upstream),
                sizeof *config_.upstream) != 0)
    return sys_error("connect to the upstream DNS resolver", to_string(*config_.upstream));
  return fd;
}

void DnsResolver::on_upstream_reply(uint16_t id, std::string_view wire) {
  auto parsed = dns::parse_message(wire);
  // Only the answer to this socket's own query: another id on its port is a forgery or stray.
  if (!parsed.ok() || !parsed->response || parsed->id != id) return;
  auto it = pending_.find(id);
  if (it == pending_.end()) return;
  // The answer must be to the question asked.
  if (parsed->questions.size() != 1 || parsed->questions[0].name != it->second.name ||
      parsed->questions[0].type != dns::kTypeA)
    return;
  Pending p = std::move(it->second);
  pending_.erase(it);
  EgressVerdict v;
  v.hook = "dns";
  v.name = p.name;
  v.query_type = "A";
  v.allowed = true;
  std::vector<dns::Record> chain;
  auto addresses = dns::addresses_for(*parsed, p.name, &chain);
  std::vector<EgressRule> admit;
  std::string listed;
  for (const auto& a : addresses) {
    std::string text = ipv4_text(a.data());
    listed += (listed.empty() ? "" : ",") + text;
    for (const auto& rule : config_.names) {
      if (rule.name != p.name) continue;
      EgressRule r;
      r.family = AF_INET;
      std::copy(a.begin(), a.end(), r.addr.begin());
      r.prefix_len = 32;
      r.port = rule.port;
      r.protocol = rule.protocol;
      r.text = rule.text + " (" + text + ")";
      admit.push_back(std::move(r));
    }
  }
  uint8_t rcode = parsed->rcode;
  // Admitted before the answer leaves: the run's next connect to these finds them allowed.
  if (!admit.empty()) {
    if (auto st = admit_(admit); !st.ok()) {
      spdlog::warn("dns resolver: could not admit {}: {}", listed, st.error().message());
      rcode = dns::kServFail;
      chain.clear();
      listed.clear();
    }
  }
  reply(p.client, dns::encode_reply(p.query, rcode,
                                    rcode == dns::kNoError ? chain : std::vector<dns::Record>{}));
  v.answer = dns::rcode_name(rcode);
  v.address = listed;
  decide(p.call, std::move(v), p.client);
}

void DnsResolver::expire() {
  auto now = std::chrono::steady_clock::now();
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->second.deadline > now) {
      ++it;
      continue;
    }
    Pending p = std::move(it->second);
    it = pending_.erase(it);
    reply(p.client, dns::encode_reply(p.query, dns::kServFail));
    EgressVerdict v;
    v.hook = "dns";
    v.name = p.name;
    v.query_type = "A";
    v.allowed = true;
    v.answer = dns::rcode_name(dns::kServFail) + " (the upstream did not answer)";
    decide(p.call, std::move(v), p.client);
  }
}

void DnsResolver::serve() {
  std::string buf(kMaxDatagram, '\0');
  // Reads what is queued on the listening socket, at most `limit` datagrams.
  auto take_queries = [&](int limit) {
    for (int i = 0; i < limit; ++i) {
      sockaddr_in from{};
      socklen_t len = sizeof from;
      ssize_t got = ::recvfrom(listen_fd_.get(), buf.data(), buf.size(), MSG_DONTWAIT | MSG_TRUNC,
                               reinterpret_cast<sockaddr*>(&from), &len);
      if (got < 0) return;
      if (static_cast<size_t>(got) > buf.size()) continue;  // oversized: not a query we answer
      on_query(std::string_view(buf.data(), static_cast<size_t>(got)), from);
    }
  };
  // The thread's network namespace is the upstream's: each query's socket is made there.
  if (netns_ && ::setns(netns_.get(), CLONE_NEWNET) != 0) {
    spdlog::error("dns resolver: enter the upstream network namespace: {}", std::strerror(errno));
    upstream_ready_ = false;  // listed names are answered SERVFAIL
  }
  std::vector<pollfd> fds;
  std::vector<uint16_t> ids;  // the pending query of fds[2 + i]
  while (!stopping_) {
    fds.assign({{wake_.get(), POLLIN, 0}, {listen_fd_.get(), POLLIN, 0}});
    ids.clear();
    for (const auto& [id, p] : pending_) {
      fds.push_back({p.fd.get(), POLLIN, 0});
      ids.push_back(id);
    }
    int timeout = pending_.empty() ? -1 : 100;
    int n = ::poll(fds.data(), fds.size(), timeout);
    if (n < 0 && errno != EINTR) {
      spdlog::error("dns resolver: poll: {}", std::strerror(errno));
      return;
    }
    if (stopping_) return;
    if (fds[0].revents & POLLIN) {
      uint64_t count = 0;
      (void)!::read(wake_.get(), &count, sizeof count);
      uint64_t requested;
      {
        std::lock_guard lock(mu_);
        requested = settle_requested_;
      }
      take_queries(static_cast<int>(kKeep));  // everything queued when settle() was called
      {
        std::lock_guard lock(mu_);
        settle_done_ = requested;
      }
      cv_.notify_all();
    }
    // A bounded batch each turn, so a flood on one socket does not starve the others.
    if (fds[1].revents & POLLIN) take_queries(64);
    for (size_t i = 0; i < ids.size(); ++i) {
      if (!(fds[2 + i].revents & POLLIN)) continue;
      for (int k = 0; k < 8; ++k) {
        auto it = pending_.find(ids[i]);  // answered (and closed) by the previous datagram?
        if (it == pending_.end()) break;
        ssize_t got = ::recv(it->second.fd.get(), buf.data(), buf.size(), MSG_DONTWAIT | MSG_TRUNC);
        if (got < 0) break;
        if (static_cast<size_t>(got) > buf.size()) continue;
        on_upstream_reply(ids[i], std::string_view(buf.data(), static_cast<size_t>(got)));
      }
    }
    expire();
  }
}

}  // namespace sandgate::session
