#include "ps_server/rpc/rendezvous_store.h"

#include <string>

#include "gtest/gtest.h"

namespace psrt {
namespace {

RendezvousRequest Set(int worker, int64_t generation, const std::string& key,
                      const std::string& value) {
  RendezvousRequest request;
  request.set_worker(worker);
  request.set_generation(generation);
  RendezvousEntry* entry = request.add_set();
  entry->set_key(key);
  entry->set_value(value);
  return request;
}

RendezvousRequest Get(int worker, int64_t generation, const std::string& key) {
  RendezvousRequest request;
  request.set_worker(worker);
  request.set_generation(generation);
  request.add_get(key);
  return request;
}

TEST(RendezvousStoreTest, KeysSetByOneWorkerAreReadByAnother) {
  RendezvousStore store(3);
  auto empty = store.Serve(Get(1, 0, "0"));
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->found_size(), 0);
  EXPECT_EQ(empty->newest_generation(), -1);
  ASSERT_TRUE(store.Serve(Set(0, 0, "0", std::string("a\0b", 3))).ok());
  auto got = store.Serve(Get(2, 0, "0"));
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->found_size(), 1);
  EXPECT_EQ(got->found(0).value(), std::string("a\0b", 3));
  EXPECT_EQ(got->newest_generation(), 0);
  ASSERT_EQ(got->newest_generation_workers_size(), 1);
  EXPECT_EQ(got->newest_generation_workers(0), 0);
  // Another generation is another namespace.
  auto other = store.Serve(Get(2, 1, "0"));
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(other->found_size(), 0);
}

TEST(RendezvousStoreTest, AKeyIsSetOnceAndARetryWithTheSameValueSucceeds) {
  RendezvousStore store(2);
  ASSERT_TRUE(store.Serve(Set(0, 0, "k", "v")).ok());
  EXPECT_TRUE(store.Serve(Set(0, 0, "k", "v")).ok());
  absl::StatusOr<RendezvousResponse> changed = store.Serve(Set(1, 0, "k", "w"));
  EXPECT_EQ(changed.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(changed.status().message().find("set by worker 0"),
            std::string::npos)
      << changed.status();
  EXPECT_EQ(store.Serve(Get(1, 0, "k"))->found(0).value(), "v");
}

TEST(RendezvousStoreTest, OnlyTheTwoNewestGenerationsAreKept) {
  RendezvousStore store(2);
  ASSERT_TRUE(store.Serve(Set(0, 0, "a", "0")).ok());
  ASSERT_TRUE(store.Serve(Set(0, 1, "a", "1")).ok());
  ASSERT_TRUE(store.Serve(Set(1, 2, "a", "2")).ok());
  EXPECT_EQ(store.Serve(Get(0, 0, "a"))->found_size(), 0);
  EXPECT_EQ(store.Serve(Get(0, 1, "a"))->found_size(), 1);
  auto newest = store.Serve(Get(0, 2, "a"));
  EXPECT_EQ(newest->newest_generation(), 2);
  ASSERT_EQ(newest->newest_generation_workers_size(), 1);
  EXPECT_EQ(newest->newest_generation_workers(0), 1);
  // Generation 1 may still be written (its stragglers), 0 not.
  EXPECT_TRUE(store.Serve(Set(1, 1, "b", "1")).ok());
  absl::StatusOr<RendezvousResponse> over = store.Serve(Set(1, 0, "b", "0"));
  EXPECT_EQ(over.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(over.status().message().find("formed again as generation 2"),
            std::string::npos)
      << over.status();
}

TEST(RendezvousStoreTest, HostileRequestsAreRefusedNamingWhatWasWrong) {
  RendezvousStore store(2);
  struct Case {
    RendezvousRequest request;
    std::string says;
  };
  std::vector<Case> cases = {
      {Set(2, 0, "k", "v"), "worker 2 is not a worker of this cluster"},
      {Set(-1, 0, "k", "v"), "worker -1 is not a worker"},
      {Set(0, -1, "k", "v"), "generation -1 is outside"},
      {Set(0, int64_t{1} << 50, "k", "v"), "is outside"},
      {Set(0, 0, "", "v"), "a key is 1-128 bytes"},
      {Set(0, 0, "../../etc/passwd\n", "v"), "a key is 1-128 bytes"},
      {Set(0, 0, std::string(129, 'k'), "v"), "(129 bytes)"},
      {Set(0, 0, "k", std::string(store.max_value_bytes() + 1, 'v')),
       "at most 5120"},
      {Get(0, 0, std::string("a\0b", 3)), "a key is 1-128 bytes"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<RendezvousResponse> answer = store.Serve(c.request);
    EXPECT_EQ(answer.status().code(), absl::StatusCode::kInvalidArgument)
        << c.says;
    EXPECT_NE(answer.status().message().find(c.says), std::string::npos)
        << answer.status();
  }
  // Nothing of those was stored.
  EXPECT_EQ(store.Serve(Get(0, 0, "k"))->newest_generation(), -1);
}

TEST(RendezvousStoreTest, AGenerationHoldsBoundedEntriesAllOrNothing) {
  RendezvousStore store(1);  // 4 + 16 = 20 keys a generation
  ASSERT_EQ(store.max_entries_per_generation(), 20);
  RendezvousRequest fill;
  fill.set_worker(0);
  for (int i = 0; i < 18; ++i) {
    RendezvousEntry* e = fill.add_set();
    e->set_key("k" + std::to_string(i));
    e->set_value("v");
  }
  ASSERT_TRUE(store.Serve(fill).ok());
  RendezvousRequest over;
  over.set_worker(0);
  for (int i = 0; i < 3; ++i) {
    RendezvousEntry* e = over.add_set();
    e->set_key("x" + std::to_string(i));
    e->set_value("v");
  }
  absl::StatusOr<RendezvousResponse> refused = store.Serve(over);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted)
      << refused.status();
  EXPECT_EQ(store.Serve(Get(0, 0, "x0"))->found_size(), 0)
      << "a refused request stores nothing";
  // 21 keys in one request are refused before they are looked at.
  for (int i = 3; i < 21; ++i) {
    RendezvousEntry* e = over.add_set();
    e->set_key("x" + std::to_string(i));
  }
  EXPECT_EQ(store.Serve(over).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace psrt
