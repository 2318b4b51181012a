// A small ShardStore every request fuzzer runs against: one PS of two, a
// dense variable, a DIV and a MOD embedding and a bounded hash embedding,
// with SGD, Adagrad and Adam, so request validation sees every shard kind.
#ifndef PSRT_TESTS_FUZZ_FUZZ_STORE_H_
#define PSRT_TESTS_FUZZ_FUZZ_STORE_H_

#include <memory>

#include "ps_server/shards/shard_store.h"

namespace psrt {

// `replicated`: --replicas=2 over two hosts, so this PS (0) also keeps the
// backup copies of PS 1's shards, which PS 1's Replicate and
// InstallSnapshot calls write.
inline std::unique_ptr<ShardStore> MakeFuzzStore(bool replicated = false) {
  // 64 MiB at most: a fuzzed CreateVariables cannot take the machine.
  auto store = replicated
                   ? std::make_unique<ShardStore>(
                         0, 2, int64_t{64} << 20,
                         *ReplicaPlacement::Create({"ps0:2223", "ps1:2223"}, 2),
                         Clock::Real())
                   : std::make_unique<ShardStore>(0, 2, int64_t{64} << 20);
  std::vector<VariableSpec> specs(4);
  specs[0].set_name("w");
  specs[0].set_kind(DENSE);
  specs[0].add_shape(64);
  specs[0].add_shape(4);
  specs[0].mutable_partition()->set_num_shards(2);
  specs[1].set_name("emb");
  specs[1].set_kind(EMBEDDING);
  specs[1].add_shape(1000);
  specs[1].add_shape(8);
  specs[1].mutable_partition()->set_num_shards(4);
  specs[1].mutable_optimizer()->set_kind(OptimizerSpec::ADAGRAD);
  specs[2].set_name("mod");
  specs[2].set_kind(EMBEDDING);
  specs[2].add_shape(500);
  specs[2].add_shape(4);
  specs[2].mutable_partition()->set_num_shards(3);
  specs[2].mutable_partition()->set_routing(PartitionSpec::MOD);
  specs[2].mutable_optimizer()->set_kind(OptimizerSpec::ADAM);
  specs[3].set_name("hash");
  specs[3].set_kind(HASH_EMBEDDING);
  specs[3].add_shape(256);
  specs[3].add_shape(4);
  specs[3].mutable_partition()->set_num_shards(2);
  for (VariableSpec& s : specs) s.mutable_optimizer()->set_learning_rate(0.1f);
  (void)store->CreateVariables(0, specs, 2);
  return store;
}

}  // namespace psrt

#endif  // PSRT_TESTS_FUZZ_FUZZ_STORE_H_
