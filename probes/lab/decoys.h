// The lab's decoy servers (lab.h): one thread inside the lab's network namespace serving every
// decoy of lab_addresses.h from a poll loop, and the log they write.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/fd.h"
#include "core/result.h"
#include "probes/lab/lab.h"

namespace sandgate::probes::lab {

// The decoys' events, in memory and optionally appended to a JSON-lines file. Thread-safe.
class EventLog {
 public:
  // `file`: empty for memory only.
  static Result<std::unique_ptr<EventLog>> open(const std::string& file);

  // Stamps seq and `at`, stores the event and writes its line.
  void append(LabEvent event);
  std::vector<LabEvent> snapshot() const;

 private:
  EventLog() = default;
  mutable std::mutex mu_;
  std::vector<LabEvent> events_;
  UniqueFd file_;
};

// The answer of the DNS decoy to one query datagram: `answer` holds the reply (an A record with
// the production host for A queries, no records otherwise), `name` and `type` what was asked.
// False when the datagram is not a DNS query (it is then logged as a plain datagram).
struct DnsExchange {
  std::string name;
  uint16_t type = 0;
  std::string answer;
};
bool answer_dns_query(std::string_view query, DnsExchange& out);

// The metadata decoy's answer to one HTTP request (a complete HTTP/1.1 response).
std::string answer_metadata_request(const std::string& method, const std::string& path,
                                    const std::vector<std::pair<std::string, std::string>>& headers,
                                    const std::string& canary_token);

class DecoyServer {
 public:
  // Starts the decoy thread: it enters the namespace behind netns_fd, makes and binds every
  // listener (failing start() if one cannot be made), then serves until stopped.
  static Result<std::unique_ptr<DecoyServer>> start(int netns_fd, std::string canary_token,
                                                    EventLog& log);
  ~DecoyServer();  // stops and joins the thread
  DecoyServer(const DecoyServer&) = delete;
  DecoyServer& operator=(const DecoyServer&) = delete;

  // Returns once the thread has handled everything that was ready when settle() was called.
  Status settle();

 private:
  struct Listener;
  struct Connection;
  DecoyServer(std::string canary_token, EventLog& log);

  Status open_listeners();
  void serve();
  void accept_all(size_t listener);
  void receive_datagrams(size_t listener);
  // Reads what a connection sent; true when it is finished (answered, closed or full).
  bool read_connection(Connection& c);
  void finish_connection(Connection& c);
  void wake();

  std::string canary_token_;
  EventLog& log_;
  UniqueFd wake_;  // eventfd: stop and settle requests
  std::vector<Listener> listeners_;
  std::vector<Connection> connections_;
  std::thread thread_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  uint64_t settle_requested_ = 0;
  uint64_t settle_done_ = 0;
};

}  // namespace sandgate::probes::lab
