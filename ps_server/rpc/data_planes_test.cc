#include "ps_server/rpc/data_planes.h"

#include <unistd.h>

#include "dataplane/host_key.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

std::unique_ptr<DataPlanes> StartShmAndTcp() {
  DataPlanesOptions options;
  options.providers = {"shm", "tcp"};
  return DataPlanes::Start(
      options, [](dataplane::Request, DataPlaneCaller, dataplane::Respond) {});
}

OpenDataPlaneRequest FromProcess(uint32_t process_id) {
  OpenDataPlaneRequest request;
  request.add_providers("shm");
  request.add_providers("tcp");
  request.set_host_key(dataplane::SharedMemoryHostKey());
  request.set_process_id(process_id);
  return request;
}

// The process the PS runs in is never this test's: any other pid.
constexpr uint32_t kAnotherProcess = 1;

TEST(DataPlanesTest, ServesShmToAnotherProcessOfItsHostOnly) {
  std::unique_ptr<DataPlanes> planes = StartShmAndTcp();
  ASSERT_NE(planes, nullptr);
  EXPECT_EQ(planes->Describe().rfind("shm, tcp at ", 0), 0u)
      << planes->Describe();

  auto shm = planes->Open(FromProcess(kAnotherProcess));
  ASSERT_TRUE(shm.ok()) << shm.status();
  EXPECT_EQ(shm->provider(), "shm");

  // The PS's own process (an in-process cluster's client): libfabric
  // 1.17's shm misbehaves between two endpoints of one process.
  auto own = planes->Open(FromProcess(static_cast<uint32_t>(getpid())));
  ASSERT_TRUE(own.ok()) << own.status();
  EXPECT_EQ(own->provider(), "tcp");

  // Another host (or another network namespace of this one).
  OpenDataPlaneRequest elsewhere = FromProcess(kAnotherProcess);
  elsewhere.set_host_key(elsewhere.host_key() + "|net:[1]");
  auto remote = planes->Open(elsewhere);
  ASSERT_TRUE(remote.ok()) << remote.status();
  EXPECT_EQ(remote->provider(), "tcp");

  // A client older than the doorbell (it says no process id).
  auto old = planes->Open(FromProcess(0));
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ(old->provider(), "tcp");

  // A client that offers tcp only.
  OpenDataPlaneRequest tcp_only = FromProcess(kAnotherProcess);
  tcp_only.clear_providers();
  tcp_only.add_providers("tcp");
  auto tcp = planes->Open(tcp_only);
  ASSERT_TRUE(tcp.ok()) << tcp.status();
  EXPECT_EQ(tcp->provider(), "tcp");
}

TEST(DataPlanesTest, ShmOffersStopAtWhatItsEndpointTakesThenTcp) {
  std::unique_ptr<DataPlanes> planes = StartShmAndTcp();
  ASSERT_NE(planes, nullptr);
  for (int i = 0; i < DataPlanes::kShmOffers; ++i) {
    auto offer = planes->Open(FromProcess(kAnotherProcess));
    ASSERT_TRUE(offer.ok()) << offer.status();
    ASSERT_EQ(offer->provider(), "shm") << "offer " << i;
  }
  auto past = planes->Open(FromProcess(kAnotherProcess));
  ASSERT_TRUE(past.ok()) << past.status();
  EXPECT_EQ(past->provider(), "tcp");
}

}  // namespace
}  // namespace psrt
