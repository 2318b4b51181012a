#include "tests/raw_rpc.h"

#include <chrono>
#include <memory>

#include "grpcpp/impl/client_unary_call.h"
#include "grpcpp/support/sync_stream.h"

namespace psrt {
namespace {

void SetDeadline(grpc::ClientContext* context) {
  context->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::seconds(10));
}

}  // namespace

grpc::Status RawUnary(grpc::Channel* channel, const std::string& method,
                      const std::string& bytes) {
  grpc::ClientContext context;
  SetDeadline(&context);
  const std::string path = "/psrt.ParameterServer/" + method;
  grpc::internal::RpcMethod rpc(path.c_str(),
                                grpc::internal::RpcMethod::NORMAL_RPC);
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request(&slice, 1), response;
  return grpc::internal::BlockingUnaryCall(channel, rpc, &context, request,
                                           &response);
}

grpc::Status HealthCheck(grpc::Channel* channel, int* serving_status) {
  grpc::ClientContext context;
  SetDeadline(&context);
  grpc::internal::RpcMethod rpc("/grpc.health.v1.Health/Check",
                                grpc::internal::RpcMethod::NORMAL_RPC);
  grpc::Slice empty("");  // HealthCheckRequest{service: ""}
  grpc::ByteBuffer request(&empty, 1), response;
  grpc::Status s = grpc::internal::BlockingUnaryCall(channel, rpc, &context,
                                                     request, &response);
  if (!s.ok()) return s;
  std::vector<grpc::Slice> slices;
  if (!response.Dump(&slices).ok()) {
    return grpc::Status(grpc::StatusCode::INTERNAL, "unreadable answer");
  }
  std::string bytes;
  for (const grpc::Slice& slice : slices) {
    bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  // HealthCheckResponse{status = 1 (varint)}: 0x08 <status>; nothing for
  // UNKNOWN (0).
  *serving_status = bytes.size() == 2 && bytes[0] == 0x08 ? bytes[1] : 0;
  return s;
}

grpc::Status RawPull(grpc::Channel* channel, const std::string& bytes) {
  grpc::ClientContext context;
  SetDeadline(&context);
  grpc::internal::RpcMethod rpc("/psrt.ParameterServer/Pull",
                                grpc::internal::RpcMethod::SERVER_STREAMING);
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request(&slice, 1), response;
  std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader(
      grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(
          channel, rpc, &context, request));
  while (reader->Read(&response)) {
  }
  return reader->Finish();
}

grpc::Status RawPush(grpc::Channel* channel,
                     const std::vector<std::string>& messages) {
  grpc::ClientContext context;
  SetDeadline(&context);
  grpc::ByteBuffer response;
  grpc::internal::RpcMethod rpc("/psrt.ParameterServer/Push",
                                grpc::internal::RpcMethod::CLIENT_STREAMING);
  std::unique_ptr<grpc::ClientWriter<grpc::ByteBuffer>> writer(
      grpc::internal::ClientWriterFactory<grpc::ByteBuffer>::Create(
          channel, rpc, &context, &response));
  for (const std::string& m : messages) {
    grpc::Slice slice(m);
    grpc::ByteBuffer message(&slice, 1);
    if (!writer->Write(message)) break;
  }
  writer->WritesDone();
  return writer->Finish();
}

}  // namespace psrt
