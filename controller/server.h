// The orchestrator protocol behind `sandgate serve`: JSON requests in, JSON responses out, so
// an orchestrator in any language can create environments, run calls with intents and get
// outcomes back, and destroy them. Transport (stdin/stdout lines, a unix socket) is the CLI's.
//
//   {"id":1,"op":"create","provider":"namespaces","workspace":"./repo","env":["TERM"],
//    "tenant":"default","timeout":"30m"}          -> {"id":1,"ok":true,"env":"r...","workspace":"/workspace",...}
//   {"id":2,"op":"exec","env":"r...","argv":["make","-j2"],"intent":"compile"}
//                                                  -> {"id":2,"ok":true,"outcome":{...}}
//   {"id":3,"op":"destroy","env":"r..."}           -> {"id":3,"ok":true}
//   {"id":4,"op":"providers"} / {"id":5,"op":"policy"} / {"id":6,"op":"list"}
// Any failure: {"id":N,"ok":false,"error":"one line"}. Requests are handled one at a time.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "controller/session.h"
#include "core/json.h"
#include "providers/registry.h"

namespace sandgate::controller {

class Server {
 public:
  Server(Controller& controller, const providers::Registry& registry,
         providers::ProviderOptions options)
      : controller_(controller), registry_(registry), options_(std::move(options)) {}
  ~Server();

  // Handles one request; never throws.
  Json handle(const Json& request);
  // Parses one line and handles it; a malformed line is an error response naming the problem.
  std::string handle_line(const std::string& line);
  // Destroys every environment still open (end of input, SIGTERM).
  void close_all();
  // Cancels a call in progress: the fd the caller's exec polls (e.g. a signalfd).
  void set_cancel_fd(int fd) { cancel_fd_ = fd; }

 private:
  Result<Json> create(const Json& r);
  Result<Json> exec(const Json& r);
  Result<Json> destroy(const Json& r);
  Json providers_list() const;

  Controller& controller_;
  const providers::Registry& registry_;
  providers::ProviderOptions options_;
  std::map<std::string, std::unique_ptr<providers::Provider>> providers_;
  std::map<std::string, std::unique_ptr<RunSession>> sessions_;
  int cancel_fd_ = -1;
};

}  // namespace sandgate::controller
