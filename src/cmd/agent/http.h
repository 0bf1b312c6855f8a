#pragma once
// A small HTTP/1.1 server over libmicrohttpd (its static archive; no TLS): GET only, one
// handler, run on libmicrohttpd's own polling thread.
#include <netinet/in.h>

#include <functional>
#include <memory>
#include <string>

struct MHD_Daemon;

namespace gpuscope {

struct HttpReply {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

// "ADDR:PORT" (IPv4, or [IPv6]:PORT); throws UsageError with one line when it is not one.
sockaddr_storage parse_listen(const std::string& text);

// What a client may hold (docs/agent.md, "Slow and greedy clients"): the server listens on a pod
// network, where any pod can open connections and trickle bytes to keep them.
struct HttpLimits {
  // Connections per client address; past this a new one closes that address's longest waiting.
  static constexpr unsigned kPerAddress = 8;
  // Open connections; past this a new one closes the one that has waited longest.
  static constexpr unsigned kMaxOpen = 224;
  // What libmicrohttpd accepts at most: well above kMaxOpen, since a connection cut is counted
  // until libmicrohttpd's thread has closed it, and under load a burst of newcomers came first
  // (a scraper was refused at once in 1 of 150 tries).
  static constexpr unsigned kMaxConnections = 512;
  // Connections still sending their request; past this a new one closes the longest waiting.
  static constexpr unsigned kMaxWaiting = 64;
  static constexpr unsigned kRequestS = 3;    // a request must arrive within this, however it trickles
  static constexpr unsigned kExchangeS = 30;  // and its answer must be taken within this
  static constexpr unsigned kInactivityS = 10;
};

class ConnectionGuard;

class HttpServer {
 public:
  using Handler = std::function<HttpReply(const std::string& path)>;
  // Binds and starts serving; throws UsageError when the address cannot be bound.
  HttpServer(const std::string& listen, Handler h);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;
  // The port bound (useful with port 0).
  int port() const { return port_; }

 private:
  Handler handler_;
  std::unique_ptr<ConnectionGuard> guard_;
  MHD_Daemon* d_ = nullptr;
  int fd_ = -1;
  int port_ = 0;
  friend struct HttpAccess;
};

}  // namespace gpuscope
