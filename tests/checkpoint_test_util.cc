#include "tests/checkpoint_test_util.h"

#include <cstring>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "partitioner/test_variable_spec.h"
#include "ps_server/checkpoint/checkpoint_catalog.h"
#include "ps_server/checkpoint/shard_file.h"

namespace psrt {
namespace {

VariableSpec Spec(const std::string& name, VariableKind kind,
                  std::vector<int64_t> shape, int shards,
                  OptimizerSpec::Kind optimizer,
                  PartitionSpec::Routing routing = PartitionSpec::DIV) {
  VariableSpec s = TestVariableSpec(name, kind, std::move(shape), shards,
                                    optimizer, 0.01f, routing);
  s.mutable_partition()->set_placement(PartitionSpec::GREEDY_BYTES);
  s.mutable_initializer()->set_kind(InitializerSpec::UNIFORM);
  s.mutable_initializer()->set_min(-0.1f);
  s.mutable_initializer()->set_max(0.1f);
  return s;
}

constexpr int64_t kVocab = 20000;

}  // namespace

std::vector<VariableSpec> CheckpointTestSpecs(int shards) {
  return {
      Spec("dense/adam", DENSE, {300, 7}, 3, OptimizerSpec::ADAM),
      Spec("dense/momentum", DENSE, {1000}, 2, OptimizerSpec::MOMENTUM),
      Spec("emb/adagrad_mod", EMBEDDING, {kVocab, 8}, shards,
           OptimizerSpec::ADAGRAD, PartitionSpec::MOD),
      Spec("emb/ftrl_div", EMBEDDING, {kVocab, 4}, shards, OptimizerSpec::FTRL),
      Spec("emb/sgd", EMBEDDING, {kVocab, 2}, shards, OptimizerSpec::SGD),
      Spec("hash/adagrad", HASH_EMBEDDING, {0, 8}, shards,
           OptimizerSpec::ADAGRAD),
  };
}

int64_t TrainUntil(const ClientOptions& options, int workers,
                   const std::atomic<bool>& stop, int min_pushes_per_worker,
                   std::atomic<int64_t>* pushed) {
  std::atomic<int64_t> own{0};
  std::atomic<int64_t>& pushes = pushed != nullptr ? *pushed : own;
  const int64_t before = pushes.load();
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      auto client = Client::Connect(options);
      if (!client.ok() || !(*client)->RefreshCatalog().ok()) {
        ADD_FAILURE() << "worker " << w << " cannot connect";
        return;
      }
      std::mt19937_64 rng(w + 1);
      std::normal_distribution<float> grad(0, 1);
      std::vector<float> g_adam(2100), g_mom(1000);
      for (int step = 0; !stop.load() || step < min_pushes_per_worker; ++step) {
        std::vector<int64_t> ids(256), hash_ids(256);
        for (auto& id : ids) id = rng() % kVocab;
        for (auto& id : hash_ids)
          id = static_cast<int64_t>(rng() >> 1) % 100000 - 50000;
        std::vector<float> g8(ids.size() * 8), g4(ids.size() * 4),
            g2(ids.size() * 2), gh(hash_ids.size() * 8);
        for (auto* v : {&g_adam, &g_mom, &g8, &g4, &g2, &gh}) {
          for (float& x : *v) x = grad(rng);
        }
        std::vector<PushOp> ops = {
            PushOp::Dense("dense/adam", g_adam.data()),
            PushOp::Dense("dense/momentum", g_mom.data()),
            PushOp::Rows("emb/adagrad_mod", ids, g8.data()),
            PushOp::Rows("emb/ftrl_div", ids, g4.data()),
            PushOp::Rows("emb/sgd", ids, g2.data()),
            PushOp::Rows("hash/adagrad", hash_ids, gh.data()),
        };
        StepOptions step_options;
        step_options.step = step;
        if (absl::Status s = (*client)->Push(ops, step_options); !s.ok()) {
          ADD_FAILURE() << "push failed: " << s;
          return;
        }
        pushes.fetch_add(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  return pushes.load() - before;
}

absl::StatusOr<CheckpointContents> ReadCheckpoint(const std::string& uri,
                                                  const S3Options& s3) {
  auto storage = OpenStorage(uri, s3);
  if (!storage.ok()) return storage.status();
  CheckpointContents c;
  auto manifest = ReadManifest(**storage, "");
  if (!manifest.ok()) return manifest.status();
  c.manifest = *manifest;
  for (const CheckpointFile& f : c.manifest.files()) {
    auto data = (*storage)->Read(f.path());
    if (!data.ok()) return data.status();
    auto file = DecodeShardFile(*std::move(data), f.path());
    if (!file.ok()) return file.status();
    const int64_t stride = file->row_stride();
    auto& rows = c.rows[f.variable()];
    for (int64_t i = 0; i < file->num_rows(); ++i) {
      const float* row = file->rows + i * stride;
      if (!rows.emplace(file->Id(i), std::vector<float>(row, row + stride))
               .second) {
        return absl::DataLossError(absl::StrCat("row ", file->Id(i), " of ",
                                                f.variable(), " saved twice"));
      }
    }
    c.versions[f.variable()][f.shard()] = file->header.version();
  }
  return c;
}

std::string CompareRows(const CheckpointContents& a,
                        const CheckpointContents& b) {
  if (a.rows.size() != b.rows.size()) {
    return absl::StrCat(a.rows.size(), " vs ", b.rows.size(), " variables");
  }
  for (const auto& [name, rows] : a.rows) {
    auto it = b.rows.find(name);
    if (it == b.rows.end()) return absl::StrCat("no ", name);
    if (rows.size() != it->second.size()) {
      return absl::StrCat(name, ": ", rows.size(), " vs ", it->second.size(),
                          " rows");
    }
    for (const auto& [id, row] : rows) {
      auto r = it->second.find(id);
      if (r == it->second.end()) return absl::StrCat(name, ": no row ", id);
      if (row.size() != r->second.size() ||
          std::memcmp(row.data(), r->second.data(),
                      row.size() * sizeof(float)) != 0) {
        return absl::StrCat(name, " row ", id, " differs (first value ", row[0],
                            " vs ", r->second[0], ")");
      }
    }
  }
  return "";
}

std::string ComparePulledValues(Client* client, const CheckpointContents& c) {
  for (const VariableSpec& spec : c.manifest.variables()) {
    const auto& rows = c.rows.at(spec.name());
    int64_t width = 1;
    for (int i = 1; i < spec.shape_size(); ++i) width *= spec.shape(i);
    std::vector<int64_t> ids;
    for (const auto& [id, row] : rows) ids.push_back(id);
    std::vector<float> pulled(ids.size() * width);
    absl::Status s;
    if (spec.kind() == DENSE) {
      s = client->PullDense(spec.name(), pulled.data());
    } else {
      s = client->PullRows(spec.name(), ids, pulled.data());
    }
    if (!s.ok()) return s.ToString();
    size_t i = 0;
    for (const auto& [id, row] : rows) {
      if (std::memcmp(pulled.data() + i * width, row.data(),
                      width * sizeof(float)) != 0) {
        return absl::StrCat(spec.name(), " row ", id, ": pulled ",
                            pulled[i * width], ", saved ", row[0]);
      }
      ++i;
    }
  }
  return "";
}

}  // namespace psrt
