// A PS believes only what a PS proves (security/peer_identity.h): forged
// PS-to-PS calls against a secured in-process cluster (3 PS, --replicas=2,
// an auth token and a peer secret). Each forged call is sent twice: with
// a worker's credentials (the token, no PS proof) and with PS 2's proof
// naming another PS. Each is refused with PERMISSION_DENIED, and nothing
// changes: no PS retires, none takes over, every backup stays in sync.
// These are the calls that, unproven, took a shard offline, dropped an
// in-sync backup (losing acknowledged pushes) and made a backup take over
// from a healthy primary.
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "proto/ps.grpc.pb.h"
#include "ps_server/rpc/in_process_cluster.h"
#include "security/peer_identity.h"
#include "security/security.h"

namespace psrt {
namespace {

constexpr char kToken[] = "worker-and-ps-token";
constexpr char kPeerSecret[] = "only-the-ps-hold-this-secret";

// 3 PS: PS t's first backup is PS t+1 (mod 3).
std::unique_ptr<InProcessCluster> StartSecuredCluster() {
  InProcessCluster::Options o;
  o.auth_token = kToken;
  o.peer_secret = kPeerSecret;
  auto cluster = InProcessCluster::Start(o);
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  if (!cluster.ok()) return nullptr;
  (*cluster)->Advance(absl::Seconds(1));  // every lease granted
  return std::move(*cluster);
}

// Who calls: a worker (the token only), or PS `task` (its proof too).
struct Caller {
  std::string what;
  int proves_task = -1;  // -1: a worker
};

std::vector<Caller> Forgers() {
  return {{"a worker's credentials", -1}, {"PS 2's credentials", 2}};
}

std::unique_ptr<ParameterServer::Stub> StubTo(InProcessCluster* cluster,
                                              int task) {
  std::vector<
      std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
      interceptors;
  interceptors.push_back(MakeTokenInterceptorFactory(kToken));
  return ParameterServer::NewStub(
      cluster->ps(task)
          ->grpc_server()
          ->experimental()
          .InProcessChannelWithInterceptors(grpc::ChannelArguments(),
                                            std::move(interceptors)));
}

void Prepare(grpc::ClientContext* context, const Caller& caller,
             const char* method) {
  context->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  if (caller.proves_task >= 0) {
    PeerIdentity(kPeerSecret)
        .Sign(context, caller.proves_task,
              absl::StrCat("/psrt.ParameterServer/", method));
  }
}

// One unary call `call` (named `method`) to PS `to`, made as `caller`.
template <typename Request, typename Response>
grpc::Status Unary(InProcessCluster* cluster, int to, const Caller& caller,
                   const char* method,
                   grpc::Status (ParameterServer::Stub::*call)(
                       grpc::ClientContext*, const Request&, Response*),
                   const Request& request) {
  grpc::ClientContext context;
  Prepare(&context, caller, method);
  Response response;
  return (StubTo(cluster, to).get()->*call)(&context, request, &response);
}

// One client-streaming call of one Frame whose header is `header`.
template <typename Response>
grpc::Status StreamOne(InProcessCluster* cluster, int to, const Caller& caller,
                       const char* method,
                       std::unique_ptr<grpc::ClientWriter<Frame>> (
                           ParameterServer::Stub::*call)(grpc::ClientContext*,
                                                         Response*),
                       const google::protobuf::Message& header) {
  grpc::ClientContext context;
  Prepare(&context, caller, method);
  auto stub = StubTo(cluster, to);
  Response response;
  auto writer = (stub.get()->*call)(&context, &response);
  Frame frame;
  frame.set_header(header.SerializeAsString());
  writer->Write(frame);
  writer->WritesDone();
  return writer->Finish();
}

// Nothing changed: every PS serves its own shards (no retire, no
// takeover), none is failed over, every backup is in sync.
void ExpectUntouched(InProcessCluster* cluster, const std::string& after) {
  cluster->Advance(absl::Seconds(3));
  for (int t = 0; t < 3; ++t) {
    for (int owner = 0; owner < 3; ++owner) {
      EXPECT_EQ(cluster->Serves(t, owner), t == owner)
          << "PS " << t << " for PS " << owner << "'s shards, after " << after;
    }
    EXPECT_TRUE(cluster->ps(t)->membership()->failed().empty()) << after;
    EXPECT_FALSE(cluster->ps(t)->replicator()->replaced()) << after;
    for (const auto& backup : cluster->ps(t)->replicator()->Backups()) {
      EXPECT_TRUE(backup.in_sync && !backup.catching_up)
          << "PS " << t << "'s backup PS " << backup.task << " after " << after
          << ": " << backup.error;
    }
  }
}

void ExpectRefused(const grpc::Status& s, const std::string& what) {
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED)
      << what << ": " << s.error_message();
}

TEST(PeerTrustTest, ProvenPeersRunTheClusterAsBefore) {
  auto cluster = StartSecuredCluster();
  ASSERT_NE(cluster, nullptr);
  ExpectUntouched(cluster.get(), "start");
  for (int t = 0; t < 3; ++t) {
    EXPECT_TRUE(cluster->ps(t)->lease()->Check().ok()) << "PS " << t;
  }
}

TEST(PeerTrustTest, AForgedRenewLeaseRetiresNobody) {
  auto cluster = StartSecuredCluster();
  ASSERT_NE(cluster, nullptr);
  for (const Caller& caller : Forgers()) {
    // "PS 1 at term 1" (failed over): PS 1 would learn it was replaced.
    LeaseRequest request;
    request.set_from_task(1);
    request.set_from_term(1);
    const grpc::Status s = Unary(cluster.get(), 0, caller, "RenewLease",
                                 &ParameterServer::Stub::RenewLease, request);
    ExpectRefused(s, "RenewLease with " + caller.what);
    if (caller.proves_task < 0) {
      EXPECT_TRUE(absl::StrContains(s.error_message(), "no PS's proof"))
          << s.error_message();
    } else {
      EXPECT_TRUE(absl::StrContains(s.error_message(),
                                    "names PS 1 as its sender but the call "
                                    "proves to come from PS 2"))
          << s.error_message();
    }
    ExpectUntouched(cluster.get(), "a forged RenewLease, " + caller.what);
  }
}

TEST(PeerTrustTest, AForgedRejoinDropsNoBackup) {
  auto cluster = StartSecuredCluster();
  ASSERT_NE(cluster, nullptr);
  for (const Caller& caller : Forgers()) {
    // "PS 1 (PS 0's backup) restarted": PS 0 would restart its stream.
    RejoinRequest request;
    request.set_from_task(1);
    ExpectRefused(Unary(cluster.get(), 0, caller, "Rejoin",
                        &ParameterServer::Stub::Rejoin, request),
                  "Rejoin with " + caller.what);
    ExpectUntouched(cluster.get(), "a forged Rejoin, " + caller.what);
  }
}

TEST(PeerTrustTest, AForgedReplicateHelloTakesNothingOver) {
  auto cluster = StartSecuredCluster();
  ASSERT_NE(cluster, nullptr);
  for (const Caller& caller : Forgers()) {
    // "PS 0 restarted" (a new incarnation), to its backup PS 1.
    ReplicationHeader hello;
    hello.set_from_task(0);
    hello.set_incarnation(0x5eed1234);
    ExpectRefused(StreamOne(cluster.get(), 1, caller, "Replicate",
                            &ParameterServer::Stub::Replicate, hello),
                  "Replicate hello with " + caller.what);
    ExpectUntouched(cluster.get(), "a forged Replicate hello, " + caller.what);
  }
}

TEST(PeerTrustTest, AForgedHandbackHandsNothingBack) {
  auto cluster = StartSecuredCluster();
  ASSERT_NE(cluster, nullptr);
  for (const Caller& caller : Forgers()) {
    HandbackRequest request;
    request.set_from_task(0);
    request.set_incarnation(0x5eed1234);
    request.set_stream_from(1);
    ExpectRefused(Unary(cluster.get(), 1, caller, "Handback",
                        &ParameterServer::Stub::Handback, request),
                  "Handback with " + caller.what);
    ExpectUntouched(cluster.get(), "a forged Handback, " + caller.what);
  }
}

TEST(PeerTrustTest, AForgedInstallSnapshotInstallsNothing) {
  auto cluster = StartSecuredCluster();
  ASSERT_NE(cluster, nullptr);
  for (const Caller& caller : Forgers()) {
    SnapshotChunk chunk;
    chunk.set_from_task(0);
    chunk.set_variable("w");
    chunk.set_last(true);
    ExpectRefused(StreamOne(cluster.get(), 1, caller, "InstallSnapshot",
                            &ParameterServer::Stub::InstallSnapshot, chunk),
                  "InstallSnapshot with " + caller.what);
    ExpectUntouched(cluster.get(), "a forged InstallSnapshot, " + caller.what);
  }
}

TEST(PeerTrustTest, AWorkerCannotVoteOrDriveShardSaves) {
  auto cluster = StartSecuredCluster();
  ASSERT_NE(cluster, nullptr);
  const Caller worker = Forgers()[0];
  SuspectRequest suspect;
  suspect.set_task(0);
  ExpectRefused(Unary(cluster.get(), 1, worker, "Suspect",
                      &ParameterServer::Stub::Suspect, suspect),
                "Suspect");
  ExpectRefused(Unary(cluster.get(), 1, worker, "SaveShards",
                      &ParameterServer::Stub::SaveShards, SaveShardsRequest()),
                "SaveShards");
  // A proof of the right task for another method does not carry over.
  grpc::ClientContext context;
  Prepare(&context, {"PS 1's Suspect proof", -1}, "RenewLease");
  context.AddMetadata(
      PeerIdentity::kMetadataKey,
      PeerIdentity(kPeerSecret).Proof(1, "/psrt.ParameterServer/Suspect"));
  LeaseRequest request;
  request.set_from_task(1);
  request.set_from_term(1);
  LeaseResponse response;
  const grpc::Status s =
      StubTo(cluster.get(), 0)->RenewLease(&context, request, &response);
  ExpectRefused(s, "RenewLease with a Suspect proof");
  EXPECT_TRUE(absl::StrContains(s.error_message(), "does not check"))
      << s.error_message();
  ExpectUntouched(cluster.get(), "a worker's Suspect and SaveShards");
}

TEST(PeerTrustTest, ASecuredClusterWithoutAPeerSecretDoesNotStart) {
  InProcessCluster::Options o;
  o.auth_token = kToken;
  auto cluster = InProcessCluster::Start(o);
  ASSERT_FALSE(cluster.ok());
  EXPECT_EQ(cluster.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(
      absl::StrContains(cluster.status().message(), "--peer_secret_file"))
      << cluster.status();
}

}  // namespace
}  // namespace psrt
