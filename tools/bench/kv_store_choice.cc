// Measures the embedded key-value stores Debian packages for the hash
// embedding's SSD tier (RocksDB 7.8, LevelDB 1.23, LMDB 0.9) on the tier's
// own access pattern: spill rows in batches, then steady state where each
// step promotes (reads and deletes) Zipf-chosen spilled rows and spills as
// many others. Run by tools/bench/kv_store_choice.sh; prints one line per
// store with rows/s for each phase.
#include <leveldb/db.h>
#include <leveldb/filter_policy.h>
#include <leveldb/write_batch.h>
#include <lmdb.h>
#include <rocksdb/db.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

std::string RowBytes(int64_t id, const std::string& noise) {
  // Random bytes (a rotation of a random block per id) with the id first.
  std::string v(noise.size() / 2, '\0');
  const size_t shift =
      static_cast<size_t>(id * 2654435761u) % (noise.size() / 2);
  std::memcpy(v.data(), noise.data() + shift, v.size());
  std::memcpy(v.data(), &id, std::min<size_t>(8, v.size()));
  return v;
}

std::string Key(int64_t id) {
  std::string k(8, '\0');
  for (int i = 0; i < 8; ++i) k[i] = static_cast<char>(id >> (56 - 8 * i));
  return k;
}

double Seconds() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// What each store must do for the tier.
struct Store {
  virtual ~Store() = default;
  // Each id's row bytes: `value` with the id written over its first 8
  // bytes and the rest random (no store may compress rows away).
  virtual void PutBatch(const std::vector<int64_t>& ids,
                        const std::string& value) = 0;
  // Reads and deletes each id; returns how many were found.
  virtual int64_t TakeBatch(const std::vector<int64_t>& ids) = 0;
};

struct Rocks : Store {
  rocksdb::DB* db = nullptr;
  rocksdb::WriteOptions wo;
  explicit Rocks(const std::string& dir) {
    rocksdb::Options o;
    o.create_if_missing = true;
    o.write_buffer_size = 8 << 20;
    o.max_write_buffer_number = 2;
    o.compression = rocksdb::kNoCompression;  // float rows barely compress
    rocksdb::BlockBasedTableOptions t;
    t.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
    t.block_cache = rocksdb::NewLRUCache(16 << 20);
    o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(t));
    wo.disableWAL = true;
    if (!rocksdb::DB::Open(o, dir, &db).ok()) std::abort();
  }
  ~Rocks() override { delete db; }
  void PutBatch(const std::vector<int64_t>& ids,
                const std::string& value) override {
    rocksdb::WriteBatch b;
    for (int64_t id : ids) b.Put(Key(id), RowBytes(id, value));
    db->Write(wo, &b);
  }
  int64_t TakeBatch(const std::vector<int64_t>& ids) override {
    std::vector<std::string> keys;
    for (int64_t id : ids) keys.push_back(Key(id));
    std::vector<rocksdb::Slice> slices(keys.begin(), keys.end());
    std::vector<std::string> values;
    auto st = db->MultiGet(rocksdb::ReadOptions(), slices, &values);
    rocksdb::WriteBatch b;
    int64_t found = 0;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (st[i].ok()) {
        ++found;
        b.Delete(keys[i]);
      }
    }
    db->Write(wo, &b);
    return found;
  }
};

struct Level : Store {
  leveldb::DB* db = nullptr;
  explicit Level(const std::string& dir) {
    leveldb::Options o;
    o.create_if_missing = true;
    o.write_buffer_size = 8 << 20;
    o.filter_policy = leveldb::NewBloomFilterPolicy(10);
    o.compression = leveldb::kNoCompression;
    if (!leveldb::DB::Open(o, dir, &db).ok()) std::abort();
  }
  ~Level() override { delete db; }
  void PutBatch(const std::vector<int64_t>& ids,
                const std::string& value) override {
    leveldb::WriteBatch b;
    for (int64_t id : ids) b.Put(Key(id), RowBytes(id, value));
    db->Write(leveldb::WriteOptions(), &b);
  }
  int64_t TakeBatch(const std::vector<int64_t>& ids) override {
    leveldb::WriteBatch b;
    int64_t found = 0;
    std::string v;
    for (int64_t id : ids) {
      std::string k = Key(id);
      if (db->Get(leveldb::ReadOptions(), k, &v).ok()) {
        ++found;
        b.Delete(k);
      }
    }
    db->Write(leveldb::WriteOptions(), &b);
    return found;
  }
};

struct Lmdb : Store {
  MDB_env* env = nullptr;
  MDB_dbi dbi = 0;
  explicit Lmdb(const std::string& dir) {
    mdb_env_create(&env);
    mdb_env_set_mapsize(env, size_t{64} << 30);
    // No sync: the tier is rebuilt from checkpoints, as with the others'
    // disabled WAL.
    if (mdb_env_open(env, dir.c_str(), MDB_NOSYNC | MDB_WRITEMAP, 0644) != 0)
      std::abort();
    MDB_txn* txn;
    mdb_txn_begin(env, nullptr, 0, &txn);
    mdb_dbi_open(txn, nullptr, 0, &dbi);
    mdb_txn_commit(txn);
  }
  ~Lmdb() override { mdb_env_close(env); }
  void PutBatch(const std::vector<int64_t>& ids,
                const std::string& value) override {
    MDB_txn* txn;
    mdb_txn_begin(env, nullptr, 0, &txn);
    for (int64_t id : ids) {
      std::string k = Key(id);
      MDB_val key{k.size(), k.data()};
      std::string v = RowBytes(id, value);
      MDB_val val{v.size(), v.data()};
      mdb_put(txn, dbi, &key, &val, 0);
    }
    mdb_txn_commit(txn);
  }
  int64_t TakeBatch(const std::vector<int64_t>& ids) override {
    MDB_txn* txn;
    mdb_txn_begin(env, nullptr, 0, &txn);
    int64_t found = 0;
    for (int64_t id : ids) {
      std::string k = Key(id);
      MDB_val key{k.size(), k.data()};
      MDB_val val;
      if (mdb_get(txn, dbi, &key, &val) == 0) {
        ++found;
        mdb_del(txn, dbi, &key, nullptr);
      }
    }
    mdb_txn_commit(txn);
    return found;
  }
};

// Zipf(s) over [0, n) by inverse transform on a precomputed CDF.
struct Zipf {
  std::vector<double> cdf;
  Zipf(int64_t n, double s) : cdf(n) {
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) cdf[i] = (sum += std::pow(i + 1, -s));
    for (double& c : cdf) c /= sum;
  }
  int64_t operator()(std::mt19937_64& rng) const {
    double u = std::uniform_real_distribution<double>(0, 1)(rng);
    return std::lower_bound(cdf.begin(), cdf.end(), u) - cdf.begin();
  }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr,
                 "usage: kv_store_choice STORE(rocksdb|leveldb|lmdb) DIR "
                 "ROWS ROW_BYTES\n");
    return 2;
  }
  const std::string kind = argv[1], dir = argv[2];
  const int64_t rows = std::atoll(argv[3]);
  // Twice the row's bytes of noise, rows cut from it at random offsets.
  std::string value(2 * std::atoi(argv[4]), '\0');
  std::mt19937_64 noise_rng(7);
  for (char& c : value) c = static_cast<char>(noise_rng());
  Store* store = kind == "rocksdb"   ? static_cast<Store*>(new Rocks(dir))
                 : kind == "leveldb" ? static_cast<Store*>(new Level(dir))
                                     : static_cast<Store*>(new Lmdb(dir));
  constexpr int64_t kBatch = 4096;
  // Spill: every row once, in batches as an eviction writes them (ids in a
  // shuffled order, as evictions pick them).
  std::vector<int64_t> order(rows);
  for (int64_t i = 0; i < rows; ++i) order[i] = i;
  std::mt19937_64 rng(1);
  std::shuffle(order.begin(), order.end(), rng);
  double t = Seconds();
  for (int64_t i = 0; i < rows; i += kBatch) {
    std::vector<int64_t> ids(order.begin() + i,
                             order.begin() + std::min(rows, i + kBatch));
    store->PutBatch(ids, value);
  }
  const double spill_s = Seconds() - t;
  // Steady state: each step takes kBatch Zipf ids (promotions; a hit is a
  // spilled row) and puts them back (the evictions that make room).
  Zipf zipf(rows, 1.05);
  int64_t taken = 0, looked = 0;
  t = Seconds();
  for (int step = 0; step < 200; ++step) {
    std::vector<int64_t> ids(kBatch);
    for (int64_t& id : ids) id = zipf(rng);
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    taken += store->TakeBatch(ids);
    looked += ids.size();
    store->PutBatch(ids, value);
  }
  const double steady_s = Seconds() - t;
  std::printf(
      "%-8s rows=%lld row_bytes=%zu spill %.0f rows/s; steady "
      "take+put %.0f ids/s (%lld of %lld found)\n",
      kind.c_str(), static_cast<long long>(rows), value.size() / 2,
      rows / spill_s, looked / steady_s, static_cast<long long>(taken),
      static_cast<long long>(looked));
  delete store;
  return 0;
}
