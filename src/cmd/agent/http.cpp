#include "cmd/agent/http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <microhttpd.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <stop_token>
#include <thread>
#include <string>
#include <unordered_set>

#include "core/system.h"

namespace gpuscope {

// libmicrohttpd's own timeout is one of inactivity, which a byte every few seconds resets, and
// its connection limit is first come, first served: a few clients trickling requests would hold
// every connection. This one tracks each connection from libmicrohttpd's callbacks (on its
// polling thread) and closes, with shutdown(), those past their time, from a thread of its own.
// It does so under the lock that the connection's CLOSED notice takes, and libmicrohttpd closes
// the descriptor only after that notice: the descriptor shut is still that connection's.
class ConnectionGuard {
 public:
  using Clock = std::chrono::steady_clock;

  ConnectionGuard()
      : sweeper_([this](std::stop_token stop) {
          pthread_setname_np(pthread_self(), "gs-http-sweep");
          sweep_until(stop);
        }) {}
  ~ConnectionGuard() {
    sweeper_.request_stop();
    sweeper_.join();
    for (Conn* k : conns_) delete k;
  }

  static void notify(void* cls, MHD_Connection* c, void** ctx, MHD_ConnectionNotificationCode code) {
    auto* self = static_cast<ConnectionGuard*>(cls);
    std::lock_guard g(self->mu_);
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
      const MHD_ConnectionInfo* i = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
      const MHD_ConnectionInfo* a = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
      auto* k = new Conn{i ? i->connect_fd : -1, Clock::now(), address_of(a ? a->client_addr : nullptr)};
      *ctx = k;
      self->started(k);
    } else if (auto* k = static_cast<Conn*>(*ctx)) {
      self->conns_.erase(k);
      delete k;
      *ctx = nullptr;
    }
  }
  // The request is in and answered; or the answer has gone, and the next request's time starts.
  void answered(MHD_Connection* c) { mark(c, true); }
  static void completed(void* cls, MHD_Connection* c, void**, MHD_RequestTerminationCode) {
    static_cast<ConnectionGuard*>(cls)->mark(c, false);
  }

 private:
  struct Conn {
    int fd;
    Clock::time_point since;  // when its request began to be awaited
    std::string address;      // the client's address bytes, without the port
    bool answered = false;
    bool cut = false;
  };

  void mark(MHD_Connection* c, bool answered) {
    const MHD_ConnectionInfo* i = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    std::lock_guard g(mu_);
    auto* k = i ? static_cast<Conn*>(i->socket_context) : nullptr;
    if (!k) return;
    k->answered = answered;
    if (!answered) k->since = Clock::now();
  }
  void cut(Conn* k) {
    if (k->fd >= 0) shutdown(k->fd, SHUT_RDWR);  // libmicrohttpd sees the end and closes it
    k->cut = true;
  }
  static std::string address_of(const sockaddr* sa) {
    if (sa && sa->sa_family == AF_INET)
      return {reinterpret_cast<const char*>(&reinterpret_cast<const sockaddr_in*>(sa)->sin_addr), 4};
    if (sa && sa->sa_family == AF_INET6)
      return {reinterpret_cast<const char*>(&reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr), 16};
    return {};
  }
  // Past the limits, a newcomer closes the connection that has waited longest (within its own
  // address first, since every local client shares 127.0.0.1): trickling clients make room, a
  // scraper whose request comes at once is served.
  void started(Conn* k) {
    conns_.insert(k);
    unsigned open = 0, waiting = 0, mine = 0;
    Conn *oldest = nullptr, *oldest_waiting = nullptr, *my_oldest = nullptr, *my_oldest_waiting = nullptr;
    auto older = [](Conn* x, Conn*& than) {
      if (!than || x->since < than->since) than = x;
    };
    for (Conn* x : conns_) {
      if (x->cut) continue;
      bool same = x->address == k->address && x != k;
      open++;
      mine += x->address == k->address;
      older(x, oldest);
      if (same) older(x, my_oldest);
      if (x->answered) continue;
      waiting++;
      older(x, oldest_waiting);
      if (same) older(x, my_oldest_waiting);
    }
    if (mine > HttpLimits::kPerAddress)
      cut(my_oldest_waiting ? my_oldest_waiting : my_oldest);
    else if (waiting > HttpLimits::kMaxWaiting && oldest_waiting != k)
      cut(oldest_waiting);
    else if (open > HttpLimits::kMaxOpen && oldest != k)
      cut(oldest);
  }
  void sweep_until(std::stop_token stop) {
    std::mutex m;
    std::unique_lock l(m);
    while (!cv_.wait_for(l, stop, std::chrono::milliseconds(250), [] { return false; })) {
      if (stop.stop_requested()) return;
      std::lock_guard g(mu_);
      auto now = Clock::now();
      for (Conn* k : conns_)
        if (!k->cut &&
            now - k->since > std::chrono::seconds(k->answered ? HttpLimits::kExchangeS : HttpLimits::kRequestS))
          cut(k);
    }
  }

  std::mutex mu_;
  std::unordered_set<Conn*> conns_;
  std::condition_variable_any cv_;
  std::jthread sweeper_;  // last: it starts once the rest exists
};

sockaddr_storage parse_listen(const std::string& text) {
  sockaddr_storage ss{};
  auto bad = [&] {
    return UsageError("--listen must be ADDR:PORT (an IPv4 address or [IPv6], port 0-65535), not '" + text + "'");
  };
  size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon + 1 >= text.size()) throw bad();
  std::string host = text.substr(0, colon), port = text.substr(colon + 1);
  if (port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos) throw bad();
  unsigned long p = std::stoul(port);
  if (p > 65535) throw bad();
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    auto* a6 = reinterpret_cast<sockaddr_in6*>(&ss);
    a6->sin6_family = AF_INET6;
    a6->sin6_port = htons(static_cast<uint16_t>(p));
    if (inet_pton(AF_INET6, host.substr(1, host.size() - 2).c_str(), &a6->sin6_addr) != 1) throw bad();
    return ss;
  }
  auto* a4 = reinterpret_cast<sockaddr_in*>(&ss);
  a4->sin_family = AF_INET;
  a4->sin_port = htons(static_cast<uint16_t>(p));
  if (inet_pton(AF_INET, host.c_str(), &a4->sin_addr) != 1) throw bad();
  return ss;
}

struct HttpAccess {
  static MHD_Result answer(void* cls, MHD_Connection* c, const char* url, const char* method, const char*, const char*,
                           size_t* upload_size, void** state) {
    auto* self = static_cast<HttpServer*>(cls);
    // The first call for a request only announces its headers.
    if (!*state) {
      *state = self;
      return MHD_YES;
    }
    // A body comes in calls of its own before the last: dropped (the request deadline bounds
    // it), so that the request is answered (405 for a method other than GET) rather than closed.
    if (*upload_size) {
      *upload_size = 0;
      return MHD_YES;
    }
    self->guard_->answered(c);
    HttpReply r;
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
      r.status = 405;
      r.body = "only GET\n";
    } else {
      try {
        r = self->handler_(url);
      } catch (const std::exception& e) {
        r.status = 500;
        r.body = std::string(e.what()) + "\n";
      }
    }
    MHD_Response* resp =
        MHD_create_response_from_buffer(r.body.size(), const_cast<char*>(r.body.data()), MHD_RESPMEM_MUST_COPY);
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, "Content-Type", r.content_type.c_str());
    MHD_Result ret = MHD_queue_response(c, static_cast<unsigned>(r.status), resp);
    MHD_destroy_response(resp);
    return ret;
  }
};

HttpServer::HttpServer(const std::string& listen, Handler h) : handler_(std::move(h)) {
  sockaddr_storage ss = parse_listen(listen);
  // The socket is bound here, so that a port in use is one clear line before anything is loaded.
  fd_ = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) throw UsageError(std::string("cannot create a socket: ") + strerror(errno));
  int one = 1;
  setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (ss.ss_family == AF_INET6) setsockopt(fd_, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
  socklen_t len = ss.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  if (bind(fd_, reinterpret_cast<sockaddr*>(&ss), len) != 0 || ::listen(fd_, SOMAXCONN) != 0) {
    int e = errno;
    close(fd_);
    throw UsageError("cannot listen on " + listen + ": " + strerror(e));
  }
  sockaddr_storage got{};
  socklen_t gl = sizeof got;
  getsockname(fd_, reinterpret_cast<sockaddr*>(&got), &gl);
  port_ = ntohs(got.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&got)->sin6_port
                                          : reinterpret_cast<sockaddr_in*>(&got)->sin_port);
  guard_ = std::make_unique<ConnectionGuard>();
  d_ = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL, 0, nullptr, nullptr, &HttpAccess::answer, this,
                        MHD_OPTION_LISTEN_SOCKET, fd_, MHD_OPTION_CONNECTION_TIMEOUT, HttpLimits::kInactivityS,
                        MHD_OPTION_CONNECTION_LIMIT, HttpLimits::kMaxConnections, MHD_OPTION_NOTIFY_CONNECTION,
                        &ConnectionGuard::notify, guard_.get(), MHD_OPTION_NOTIFY_COMPLETED,
                        &ConnectionGuard::completed, guard_.get(), MHD_OPTION_END);
  if (!d_) {
    close(fd_);
    throw UsageError("cannot start the HTTP server on " + listen);
  }
}

HttpServer::~HttpServer() {
  if (d_) MHD_stop_daemon(d_);  // closes the listening socket it was given
}

}  // namespace gpuscope
