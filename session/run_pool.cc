#include "session/run_pool.h"

#include <vector>

#include "core/log.h"
#include "session/strand.h"

namespace sandgate::session {

RunPool::RunPool(size_t per_shape, Make make)
    : per_shape_(per_shape), make_(std::move(make)), worker_(std::make_unique<Strand>()) {}

RunPool::~RunPool() { stop(); }

std::optional<std::string> RunPool::key_of(const CreateRequest& request) {
  if (!request.workspace.empty() || !request.secrets.empty() || request.timeout)
    return std::nullopt;
  // The request's own line: a field added to CreateRequest (and to its line) is part of the
  // key without anyone remembering to add it here.
  return dump_json(to_json(Request{Json(), request}));
}

std::unique_ptr<RunSession> RunPool::take(const CreateRequest& request) {
  auto key = key_of(request);
  if (!key) return nullptr;
  std::lock_guard lock(mu_);
  auto it = shapes_.find(*key);
  if (it == shapes_.end() || stopping_) return nullptr;
  std::unique_ptr<RunSession> run;
  auto dead = std::make_shared<std::vector<std::unique_ptr<RunSession>>>();
  while (!run && !it->second.ready.empty()) {
    run = std::move(it->second.ready.front());
    it->second.ready.pop_front();
    // A run kept idle can die meanwhile (its supervisor killed by an OOM or an operator): it
    // is not handed out, and its removal is the pool thread's (the supervisors' parent), off
    // the client's path.
    if (auto st = run->alive(); !st.ok()) {
      spdlog::warn("serve --pool: a run made ahead is gone, not handed out: {}",
                   st.error().message());
      dead->push_back(std::move(run));
    }
  }
  if (!dead->empty())
    worker_->post([dead] {
      for (auto& run : *dead)
        if (auto st = run->close(); !st.ok())
          spdlog::error("serve --pool: closing run {}: {}", run->run_id(), st.error().message());
    });
  // Making a run takes the CPU the client's call is about to need: the refill waits for
  // refill() (the server calls it once a run is removed, off any client's path) unless the
  // shape ran dry, where the next create would otherwise be made cold.
  if (it->second.ready.empty()) post_fill_locked();
  return run;
}

void RunPool::learn(const CreateRequest& request) {
  auto key = key_of(request);
  if (!key) return;
  std::lock_guard lock(mu_);
  if (stopping_ || shapes_.count(*key) || shapes_.size() >= kMaxShapes) return;
  shapes_.emplace(*key, Shape{request, {}});
  post_fill_locked();
}

void RunPool::refill() {
  std::lock_guard lock(mu_);
  post_fill_locked();
}

size_t RunPool::ready(const CreateRequest& request) const {
  auto key = key_of(request);
  if (!key) return 0;
  std::lock_guard lock(mu_);
  auto it = shapes_.find(*key);
  return it == shapes_.end() ? 0 : it->second.ready.size();
}

size_t RunPool::ready_total() const {
  std::lock_guard lock(mu_);
  size_t n = 0;
  for (const auto& [key, shape] : shapes_) n += shape.ready.size();
  return n;
}

void RunPool::post_fill_locked() {
  if (filling_ || stopping_) return;
  filling_ = true;
  worker_->post([this] { fill(); });
}

void RunPool::fill() {
  for (;;) {
    std::string key;
    CreateRequest request;
    {
      std::lock_guard lock(mu_);
      auto it = shapes_.begin();
      while (it != shapes_.end() && (it->second.given_up || it->second.ready.size() >= per_shape_))
        ++it;
      if (stopping_ || it == shapes_.end()) {
        filling_ = false;
        return;
      }
      key = it->first;
      request = it->second.request;
    }
    // Outside the lock: a create meanwhile takes what is ready, or goes cold.
    auto made = make_(request);
    std::unique_ptr<RunSession> unwanted;
    {
      std::lock_guard lock(mu_);
      auto it = shapes_.find(key);
      if (!made.ok()) {
        // A shape that could be made cold and cannot be made now (the host ran out of id
        // ranges, a provider went away) is not retried in a loop: what is ready is handed
        // out, and then its creates are made cold.
        spdlog::warn("serve --pool: no longer keeping runs ready for {}: {}", key,
                     made.error().message());
        if (it != shapes_.end()) it->second.given_up = true;
        continue;
      }
      if (stopping_ || it == shapes_.end())
        unwanted = std::move(made).value();
      else
        it->second.ready.push_back(std::move(made).value());
    }
    if (unwanted)
      if (auto st = unwanted->close(); !st.ok())
        spdlog::error("serve --pool: closing run {}: {}", unwanted->run_id(), st.error().message());
  }
}

void RunPool::stop() {
  std::vector<std::unique_ptr<RunSession>> ready;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    for (auto& [key, shape] : shapes_)
      for (auto& run : shape.ready) ready.push_back(std::move(run));
    shapes_.clear();
  }
  // Closed before the pool's thread ends: it is their supervisors' parent.
  for (auto& run : ready)
    if (auto st = run->close(); !st.ok())
      spdlog::error("serve --pool: closing run {}: {}", run->run_id(), st.error().message());
  // Waits for a run being made (fill() closes it: stopping_) and ends the thread.
  worker_->stop();
}

}  // namespace sandgate::session
