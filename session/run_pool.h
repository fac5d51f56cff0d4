// Runs made ahead for `sandgate serve --pool N` (issue 15): a create whose request has the shape
// of one the server answered before is answered with a run made already (the controller's run
// cgroups, the provider's environment with its supervisor ready, the first call's process
// parked and placed), and another one is made in the background to take its place. Opening a
// run is most of a cold `exec --socket` (begin_run, the /proc views, the supervisor's start and
// placement); a pooled create costs a lookup.
//
// Which requests: only those identical in everything that shapes a run. The key is the
// request's own line (protocol.h to_json) without its id: provider, tenant, env, ro_binds,
// image, recipe_mode, workspace_size, net, allow; the policy, the base and the network upstream
// are the server's, the same for every run it makes. Three kinds of request are never pooled,
// whatever their key, and always take the cold path:
//   - a workspace recipe: the directory can change between the fill and the create, and the
//     view or copy made ahead would show what it held then (an overlay's lower layer changed
//     under it is undefined: Documentation/filesystems/overlayfs.rst, "Changes to underlying
//     filesystems")
//   - secrets: a run's credentials are read for that run when its create names them
//   - a timeout: a run's wall clock starts when the run is made
//
// Every run made ahead is a run like any other: its own run id, host id range and cgroups,
// recorded in the state directory (owned by serve: `sandgate gc` removes them after a crash). It
// is handed to one create only (taken under the pool's lock), and it is made on the pool's own
// thread, which lives as long as the pool: a supervisor dies with the thread that forked it
// (PR_SET_PDEATHSIG), so the pool must outlive every run it made, handed out or not.
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "session/protocol.h"
#include "session/run_session.h"

namespace sandgate::session {

class Strand;

class RunPool {
 public:
  // Opens one run as `request` asks; called on the pool's thread only.
  using Make = std::function<Result<std::unique_ptr<RunSession>>(const CreateRequest& request)>;
  // At most this many shapes are kept ready (the first ones learned): a server whose clients
  // ask for many shapes pools the first few and makes the rest cold.
  static constexpr size_t kMaxShapes = 4;

  // Keeps `per_shape` runs ready for each shape learned (per_shape > 0).
  RunPool(size_t per_shape, Make make);
  ~RunPool();  // stop()
  RunPool(const RunPool&) = delete;
  RunPool& operator=(const RunPool&) = delete;

  // The pool's key of a request, or nullopt for one that is never pooled (see above).
  static std::optional<std::string> key_of(const CreateRequest& request);

  // A run made ahead for `request`'s shape, never handed out before and still alive
  // (RunSession::alive); null when none is ready (or the shape is not pooled). Runs found dead
  // are closed on the pool's thread. The one taken is made again in the background at
  // refill(), or at once when it was the shape's last.
  std::unique_ptr<RunSession> take(const CreateRequest& request);
  // Makes runs in the background until every shape has its runs ready again. The server calls
  // it when the machine has a moment: after removing a destroyed run.
  void refill();
  // `request` was answered by a run made cold: keep runs of its shape ready from now on.
  void learn(const CreateRequest& request);
  // Stops making runs and closes every run still ready (errors logged). Idempotent. Runs handed
  // out must be closed before the pool is destroyed (their supervisors' parent thread ends).
  void stop();

  // Runs of `request`'s shape ready now (tests, logs).
  size_t ready(const CreateRequest& request) const;
  // Runs of every shape ready now.
  size_t ready_total() const;

 private:
  struct Shape {
    CreateRequest request;
    std::deque<std::unique_ptr<RunSession>> ready;
    bool given_up = false;  // making one failed: not refilled any more
  };
  // On the pool's thread: makes runs until every shape has per_shape_ ready.
  void fill();
  // Posts fill() unless it is posted already. Precondition: mu_ held.
  void post_fill_locked();

  const size_t per_shape_;
  Make make_;
  mutable std::mutex mu_;
  std::map<std::string, Shape> shapes_;
  bool filling_ = false;  // fill() posted and not yet returned
  bool stopping_ = false;
  std::unique_ptr<Strand> worker_;
};

}  // namespace sandgate::session
