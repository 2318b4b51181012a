#include "ps_server/metrics/metrics_http_server.h"

#include <arpa/inet.h>
#include <civetweb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace psrt {

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& bind_address, const MetricsRegistry* registry,
    StatusPage status_page) {
  static const unsigned initialized = mg_init_library(0);
  (void)initialized;
  std::unique_ptr<MetricsHttpServer> server(new MetricsHttpServer());
  server->registry_ = registry;
  server->status_page_ = std::move(status_page);
  // A connection holds a thread until its request arrives or
  // request_timeout_ms passes: with kThreads threads, k idle or half-open
  // connections delay a scrape by at most ceil(k / kThreads) timeouts (16
  // of them: 1 s). Was 2 threads and civetweb's 30 s.
  const std::string threads = absl::StrCat(kThreads);
  const std::string timeout_ms = absl::StrCat(kRequestTimeoutMs);
  const char* options[] = {"listening_ports",
                           bind_address.c_str(),
                           "num_threads",
                           threads.c_str(),
                           "request_timeout_ms",
                           timeout_ms.c_str(),
                           nullptr};
  mg_callbacks callbacks{};
  server->context_ = mg_start(&callbacks, server.get(), options);
  if (server->context_ == nullptr) {
    return absl::UnavailableError(absl::StrCat(
        "cannot serve metrics on ", bind_address,
        " (port in use or address not local?); choose --metrics_port"));
  }
  mg_set_request_handler(server->context_, "/metrics",
                         &MetricsHttpServer::HandleMetrics, server.get());
  if (server->status_page_) {
    mg_set_request_handler(server->context_, "/statusz",
                           &MetricsHttpServer::HandleStatus, server.get());
  }
  mg_server_port ports[4];
  const int n = mg_get_server_ports(server->context_, 4, ports);
  server->port_ = n > 0 ? ports[0].port : 0;
  // Where a connection reaches the listening socket from this host: its
  // own address, or loopback for a wildcard bind.
  const size_t colon = bind_address.rfind(':');
  std::string host =
      colon == std::string::npos ? "" : bind_address.substr(0, colon);
  if (!host.empty() && host.front() == '[') host = host.substr(1);
  if (!host.empty() && host.back() == ']') host.pop_back();
  server->wake_host_ = host.empty() || host == "0.0.0.0" ? "127.0.0.1"
                       : host == "::"                    ? "::1"
                                                         : host;
  return server;
}

void MetricsHttpServer::WakeListener() const {
  sockaddr_storage address{};
  socklen_t length = 0;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&address);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&address);
  if (inet_pton(AF_INET, wake_host_.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port_);
    length = sizeof(*v4);
  } else if (inet_pton(AF_INET6, wake_host_.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port_);
    length = sizeof(*v6);
  } else {
    return;  // a host name: mg_stop takes its poll's second
  }
  const int fd = socket(address.ss_family, SOCK_STREAM | SOCK_NONBLOCK, 0);
  if (fd < 0) return;
  (void)!connect(fd, reinterpret_cast<sockaddr*>(&address), length);
  close(fd);
}

MetricsHttpServer::~MetricsHttpServer() {
  if (context_ == nullptr) return;
  // mg_stop waits for civetweb's master thread, which sees the stop only
  // when its poll of the listening socket returns: up to a second on an
  // idle server, which every ps_server exit paid. A connection to the
  // port ends the poll at once.
  std::atomic<bool> stopped{false};
  std::thread stopper([this, &stopped] {
    mg_stop(context_);
    stopped = true;
  });
  while (!stopped) {
    WakeListener();
    absl::SleepFor(absl::Milliseconds(5));
  }
  stopper.join();
}

int MetricsHttpServer::HandleMetrics(::mg_connection* conn, void* self) {
  const std::string body =
      static_cast<MetricsHttpServer*>(self)->registry_->Render();
  mg_send_http_ok(conn, "text/plain; version=0.0.4",
                  static_cast<long long>(body.size()));
  mg_write(conn, body.data(), body.size());
  return 200;
}

int MetricsHttpServer::HandleStatus(::mg_connection* conn, void* self) {
  const std::string body =
      static_cast<MetricsHttpServer*>(self)->status_page_();
  mg_send_http_ok(conn, "text/html; charset=utf-8",
                  static_cast<long long>(body.size()));
  mg_write(conn, body.data(), body.size());
  return 200;
}

}  // namespace psrt
