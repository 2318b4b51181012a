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
