// Calls a psrt server's methods with raw bytes -- what a hostile or broken
// client can send -- bypassing the generated stubs' serialization.
#ifndef PSRT_TESTS_RAW_RPC_H_
#define PSRT_TESTS_RAW_RPC_H_

#include <string>
#include <vector>

#include "grpcpp/channel.h"
#include "grpcpp/support/status.h"

namespace psrt {

// `bytes` as the request of unary method `method` ("CreateVariables", ...);
// 10 s deadline.
grpc::Status RawUnary(grpc::Channel* channel, const std::string& method,
                      const std::string& bytes);
// `bytes` as a Pull request; the response stream is drained.
grpc::Status RawPull(grpc::Channel* channel, const std::string& bytes);
// `messages` as one Push stream.
grpc::Status RawPush(grpc::Channel* channel,
                     const std::vector<std::string>& messages);

// grpc.health.v1.Health/Check for the whole server (service ""): the
// answer's status (1 SERVING, 2 NOT_SERVING) in `*serving_status`.
grpc::Status HealthCheck(grpc::Channel* channel, int* serving_status);

}  // namespace psrt

#endif  // PSRT_TESTS_RAW_RPC_H_
