#include "agent/http.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/system.h"

namespace gpuscope {

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
                           size_t*, void** state) {
    auto* self = static_cast<HttpServer*>(cls);
    // The first call for a request only announces its headers.
    if (!*state) {
      *state = self;
      return MHD_YES;
    }
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
  if (bind(fd_, reinterpret_cast<sockaddr*>(&ss), len) != 0 || ::listen(fd_, 64) != 0) {
    int e = errno;
    close(fd_);
    throw UsageError("cannot listen on " + listen + ": " + strerror(e));
  }
  sockaddr_storage got{};
  socklen_t gl = sizeof got;
  getsockname(fd_, reinterpret_cast<sockaddr*>(&got), &gl);
  port_ = ntohs(got.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&got)->sin6_port
                                          : reinterpret_cast<sockaddr_in*>(&got)->sin_port);
  d_ = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL, 0, nullptr, nullptr, &HttpAccess::answer, this,
                        MHD_OPTION_LISTEN_SOCKET, fd_, MHD_OPTION_CONNECTION_TIMEOUT, 10u, MHD_OPTION_CONNECTION_LIMIT,
                        64u, MHD_OPTION_END);
  if (!d_) {
    close(fd_);
    throw UsageError("cannot start the HTTP server on " + listen);
  }
}

HttpServer::~HttpServer() {
  if (d_) MHD_stop_daemon(d_);  // closes the listening socket it was given
}

}  // namespace gpuscope
