// Serves a MetricsRegistry at http://<address>/metrics and, when given, a
// status page at /statusz (civetweb).
#ifndef PSRT_PS_SERVER_METRICS_METRICS_HTTP_SERVER_H_
#define PSRT_PS_SERVER_METRICS_METRICS_HTTP_SERVER_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "ps_server/metrics/metrics.h"

struct mg_connection;
struct mg_context;

namespace psrt {

class MetricsHttpServer {
 public:
  // Threads serving connections, and how long one may take to send its
  // request before it is dropped: idle or half-open connections (a port
  // scan, a stuck client) must not starve the scraper.
  static constexpr int kThreads = 8;
  static constexpr int kRequestTimeoutMs = 1000;

  // Listens on `bind_address` ("0.0.0.0:9100", "127.0.0.1:0" for any free
  // port). `registry` must outlive the server. `status_page`, if set,
  // renders the HTML served at /statusz (called per request, from the
  // server's threads).
  using StatusPage = std::function<std::string()>;
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      const std::string& bind_address, const MetricsRegistry* registry,
      StatusPage status_page = nullptr);
  ~MetricsHttpServer();
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  int port() const { return port_; }

 private:
  MetricsHttpServer() = default;
  static int HandleMetrics(::mg_connection* conn, void* self);
  static int HandleStatus(::mg_connection* conn, void* self);
  // Connects to the listening port and hangs up (ends civetweb's poll).
  void WakeListener() const;

  const MetricsRegistry* registry_ = nullptr;
  StatusPage status_page_;
  mg_context* context_ = nullptr;
  int port_ = 0;
  std::string wake_host_;  // an address of the listening socket
};

}  // namespace psrt

#endif  // PSRT_PS_SERVER_METRICS_METRICS_HTTP_SERVER_H_
