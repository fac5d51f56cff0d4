#include "ebpf/egress.h"

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/fd.h"
#include "ebpf/activity_tracer.h"
#include "ebpf/egress_guard.h"
#include "ebpf/egress_guard.skel.h"

namespace sandgate::ebpf {

namespace {

sg_guard_key key_of(uint64_t run, const EgressRule& r) {
  sg_guard_key k{};
  k.prefixlen = SG_GUARD_FIXED_BITS + r.prefix_len;
  k.run = run;
  k.port = r.port;
  k.protocol = r.protocol;
  k.family = static_cast<__u8>(r.family);
  std::memcpy(k.addr, r.addr.data(), sizeof k.addr);
  return k;
}

EgressDecision decode(const sg_guard_event& e) {
  EgressDecision d;
  d.cgroup_id = e.cgroup_id;
  d.run = e.run;
  d.pid = static_cast<pid_t>(e.pid);
  d.hook = e.hook == 1 ? "connect" : "sendmsg";
  d.family = e.family == AF_INET ? "inet" : "inet6";
  char text[INET6_ADDRSTRLEN] = {};
  ::inet_ntop(e.family == AF_INET ? AF_INET : AF_INET6, e.addr, text, sizeof text);
  d.address = text;
  d.port = e.port;
  d.protocol = e.protocol == IPPROTO_TCP ? "tcp" : e.protocol == IPPROTO_UDP ? "udp" : "";
  d.allowed = e.allowed != 0;
  d.ts_ns = e.ts_ns;
  return d;
}

}  // namespace

EgressGuard::~EgressGuard() {
  for (auto& [run, r] : runs_)
    for (bpf_link* l : r.links) bpf_link__destroy(l);
  if (ring_) ring_buffer__free(ring_);
  if (skel_) egress_guard_bpf__destroy(skel_);
}

Result<std::unique_ptr<EgressGuard>> EgressGuard::open() {
  std::unique_ptr<EgressGuard> g(new EgressGuard());
  g->skel_ = egress_guard_bpf__open_and_load();
  if (!g->skel_) return sys_error(errno, "load the egress guard (cgroup/connect4|6, sendmsg4|6)");
  g->ring_ = ring_buffer__new(
      bpf_map__fd(g->skel_->maps.decisions),
      [](void* ctx, void* data, size_t size) {
        auto* self = static_cast<EgressGuard*>(ctx);
        if (size < sizeof(sg_guard_event) || !self->sink_) return 0;
        sg_guard_event e;
        std::memcpy(&e, data, sizeof e);
        (*self->sink_)(decode(e));
        return 0;
      },
      g.get(), nullptr);
  if (!g->ring_) return sys_error(errno, "open the egress guard's ring buffer");
  return g;
}

Result<uint64_t> EgressGuard::guard(const std::string& dir, const std::vector<EgressRule>& rules) {
  std::lock_guard lock(mu_);
  SG_ASSIGN_OR_RETURN(uint64_t run, cgroup_id_of(dir));
  if (runs_.count(run)) return Error{EEXIST, "guard egress", dir, "this run is guarded already"};
  Run r;
  r.rules = address_rules(rules);
  auto undo = [&](Error e) -> Error {
    for (bpf_link* l : r.links) bpf_link__destroy(l);
    for (const auto& rule : r.rules) {
      sg_guard_key k = key_of(run, rule);
      (void)bpf_map__delete_elem(skel_->maps.allow, &k, sizeof k, 0);
    }
    (void)bpf_map__delete_elem(skel_->maps.runs, &run, sizeof run, 0);
    return e;
  };
  __u8 one = 1;
  for (const auto& rule : r.rules) {
    sg_guard_key k = key_of(run, rule);
    if (bpf_map__update_elem(skel_->maps.allow, &k, sizeof k, &one, sizeof one, BPF_ANY) != 0)
      return undo(sys_error(errno, "allow egress", rule.text));
  }
  // The run is known before the programs see its processes: an unknown run is not guarded.
  if (bpf_map__update_elem(skel_->maps.runs, &run, sizeof run, &one, sizeof one, BPF_ANY) != 0)
    return undo(sys_error(errno, "guard egress", dir));
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) return undo(sys_error(errno, "open cgroup", dir));
  for (bpf_program* p :
       {skel_->progs.guard_connect4, skel_->progs.guard_connect6, skel_->progs.guard_sendmsg4,
        skel_->progs.guard_sendmsg6, skel_->progs.meter_egress, skel_->progs.meter_ingress}) {
    bpf_link* l = bpf_program__attach_cgroup(p, fd.get());
    if (!l) return undo(sys_error(errno, std::string("attach ") + bpf_program__name(p), dir));
    r.links.push_back(l);
  }
  runs_[run] = std::move(r);
  return run;
}

Status EgressGuard::add(uint64_t run, const std::vector<EgressRule>& rules) {
  std::lock_guard lock(mu_);
  auto it = runs_.find(run);
  if (it == runs_.end())
    return logic_error("allow egress", "the run is not guarded", std::to_string(run));
  __u8 one = 1;
  for (const auto& rule : rules) {
    if (rule.is_name()) continue;
    sg_guard_key k = key_of(run, rule);
    bool known = false;
    for (const auto& had : it->second.rules) {
      sg_guard_key h = key_of(run, had);
      if (std::memcmp(&k, &h, sizeof k) == 0) known = true;
    }
    if (known) continue;
    if (bpf_map__update_elem(skel_->maps.allow, &k, sizeof k, &one, sizeof one, BPF_ANY) != 0)
      return sys_error(errno, "allow egress", rule.text);
    it->second.rules.push_back(rule);
  }
  return {};
}

void EgressGuard::release(uint64_t run) {
  std::lock_guard lock(mu_);
  auto it = runs_.find(run);
  if (it == runs_.end()) return;
  for (bpf_link* l : it->second.links) bpf_link__destroy(l);
  for (const auto& rule : it->second.rules) {
    sg_guard_key k = key_of(run, rule);
    (void)bpf_map__delete_elem(skel_->maps.allow, &k, sizeof k, 0);
  }
  (void)bpf_map__delete_elem(skel_->maps.runs, &run, sizeof run, 0);
  runs_.erase(it);
}

void EgressGuard::drain(const std::function<void(const EgressDecision&)>& sink) {
  std::lock_guard lock(mu_);
  sink_ = &sink;
  (void)ring_buffer__consume(ring_);
  sink_ = nullptr;
}

std::vector<EgressDecision> EgressGuard::take(uint64_t run, uint64_t* not_kept) {
  std::lock_guard lock(mu_);
  const std::function<void(const EgressDecision&)> file = [&](const EgressDecision& d) {
    auto it = runs_.find(d.run);
    if (it == runs_.end()) return;  // a released run's last words
    if (it->second.pending.size() < kKeepPerRun)
      it->second.pending.push_back(d);
    else
      ++it->second.not_kept;
  };
  sink_ = &file;
  (void)ring_buffer__consume(ring_);
  sink_ = nullptr;
  auto it = runs_.find(run);
  if (it == runs_.end()) return {};
  if (not_kept) *not_kept = it->second.not_kept;
  it->second.not_kept = 0;
  return std::exchange(it->second.pending, {});
}

EgressGuard::NetBytes EgressGuard::take_net_bytes(uint64_t call) {
  std::lock_guard lock(mu_);
  sg_net_bytes b{};
  NetBytes out;
  if (bpf_map__lookup_and_delete_elem(skel_->maps.net_bytes, &call, sizeof call, &b, sizeof b, 0) !=
      0)
    return out;
  out.bytes_out = b.bytes_out;
  out.bytes_in = b.bytes_in;
  out.packets_out = b.packets_out;
  out.packets_in = b.packets_in;
  return out;
}

std::optional<EgressGuard::NetBytes> EgressGuard::peek_net_bytes(uint64_t call) const {
  sg_net_bytes b{};
  // libbpf sets errno on failure in both its legacy and 1.0 modes.
  if (bpf_map__lookup_elem(skel_->maps.net_bytes, &call, sizeof call, &b, sizeof b, 0) != 0)
    return errno == ENOENT ? std::optional<NetBytes>(NetBytes{}) : std::nullopt;
  return NetBytes{b.bytes_out, b.bytes_in, b.packets_out, b.packets_in};
}

uint64_t EgressGuard::lost() const {
  return __atomic_load_n(&skel_->bss->dropped, __ATOMIC_RELAXED);
}

}  // namespace sandgate::ebpf
