// gRPC's standard server metrics, named and labelled as gRPC's Prometheus
// interceptors (go-grpc-prometheus, java-grpc-prometheus) name them, so
// dashboards and alerts written for any gRPC service work on ps_server:
//
//   grpc_server_started_total{grpc_type,grpc_service,grpc_method}
//   grpc_server_handled_total{grpc_type,grpc_service,grpc_method,grpc_code}
//   grpc_server_handling_seconds{grpc_type,grpc_service,grpc_method}
//     (histogram: from the call's start to its status being sent)
//
// grpc_type is unary, client_stream, server_stream or bidi_stream;
// grpc_code the status code's name (OK, INVALID_ARGUMENT, ...). Every
// service the server hosts is counted: psrt.ParameterServer, health,
// reflection. A call the client cancels before its status is sent is
// started but not handled.
#ifndef PSRT_PS_SERVER_METRICS_GRPC_SERVER_METRICS_H_
#define PSRT_PS_SERVER_METRICS_GRPC_SERVER_METRICS_H_

#include <memory>

#include "grpcpp/support/server_interceptor.h"
#include "ps_server/metrics/metrics.h"

namespace psrt {

// An interceptor factory for grpc::ServerBuilder's
// experimental().SetInterceptorCreators; `registry` must outlive the
// server.
std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
MakeGrpcServerMetricsFactory(MetricsRegistry* registry);

}  // namespace psrt

#endif  // PSRT_PS_SERVER_METRICS_GRPC_SERVER_METRICS_H_
