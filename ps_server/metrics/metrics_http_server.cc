#include "ps_server/metrics/metrics_http_server.h"

#include <civetweb.h>

#include "absl/strings/str_cat.h"

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
  return server;
}

MetricsHttpServer::~MetricsHttpServer() {
  if (context_ != nullptr) mg_stop(context_);
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
