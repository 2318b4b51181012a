// The same cases as psrt's ps_bench, through ps-lite (dmlc/ps-lite), the
// peer the row-path issue measures psrt against: dense_4MiB and
// dense_64MiB (one value of 1M / 16M floats, SGD on the server, pull of the
// whole value) and embedding_100k (100k distinct random ids of a 1M x 16
// table, Adagrad on the server, pull of the rows), one operation in flight,
// ZPush/ZPull (ps-lite's zero-copy calls). The server applies updates with
// no checks, as ps-lite's own examples do.
//
// Not built by Bazel and not part of psrt: tools/bench/pslite_compare.py
// compiles it against a ps-lite checkout the caller builds (ps-lite's code
// is never in this repository). Roles come from ps-lite's DMLC_*
// environment; BENCH_SECONDS (default 2) per operation.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <vector>

#include "ps/ps.h"

using namespace ps;

constexpr int kDim = 16;
constexpr int64_t kVocab = 1000000;
std::vector<float> dense_store[2];  // cmd 0: 1M floats, cmd 1: 16M floats
std::vector<float> emb, acc;        // cmd 2

void Handle(const KVMeta& meta, const KVPairs<float>& req,
            KVServer<float>* server) {
  KVPairs<float> res;
  if (meta.cmd < 2) {
    std::vector<float>& w = dense_store[meta.cmd];
    const size_t n = meta.cmd == 0 ? (1 << 20) : (16 << 20);
    if (w.empty()) w.assign(n, 0.0f);
    if (meta.push) {
      const float* g = req.vals.data();
      for (size_t i = 0; i < n; ++i) w[i] -= 0.01f * g[i];
    } else {
      res.keys = req.keys;
      res.vals = SArray<float>(w.data(), n, false);
      res.lens = SArray<int>(1, static_cast<int>(n));
    }
  } else {
    if (emb.empty()) {
      emb.assign(kVocab * kDim, 0.01f);
      acc.assign(kVocab * kDim, 0.1f);
    }
    const size_t k = req.keys.size();
    if (meta.push) {
      for (size_t i = 0; i < k; ++i) {
        float* w = emb.data() + req.keys[i] * kDim;
        float* a = acc.data() + req.keys[i] * kDim;
        const float* g = req.vals.data() + i * kDim;
        if (i + 16 < k) {
          __builtin_prefetch(emb.data() + req.keys[i + 16] * kDim, 1);
          __builtin_prefetch(acc.data() + req.keys[i + 16] * kDim, 1);
        }
        for (int c = 0; c < kDim; ++c) {
          a[c] += g[c] * g[c];
          w[c] -= 0.01f * g[c] / std::sqrt(a[c]);
        }
      }
    } else {
      res.keys = req.keys;
      res.vals.resize(k * kDim);
      for (size_t i = 0; i < k; ++i) {
        if (i + 16 < k)
          __builtin_prefetch(emb.data() + req.keys[i + 16] * kDim);
        std::copy_n(emb.data() + req.keys[i] * kDim, kDim,
                    res.vals.data() + i * kDim);
      }
    }
  }
  server->Response(meta, res);
}

template <typename Op>
double Rate(Op op, double seconds) {
  for (int i = 0; i < 3; ++i) op();  // warm-up
  auto start = std::chrono::steady_clock::now();
  int ops = 0;
  double elapsed = 0;
  do {
    op();
    ++ops;
    elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
  } while (elapsed < seconds);
  return ops / elapsed;
}

void RunWorker() {
  KVWorker<float> kv(0, 0);
  const double seconds =
      getenv("BENCH_SECONDS") ? atof(getenv("BENCH_SECONDS")) : 2.0;
  for (int cmd = 0; cmd < 2; ++cmd) {
    const size_t n = cmd == 0 ? (1 << 20) : (16 << 20);
    const char* name = cmd == 0 ? "dense_4MiB" : "dense_64MiB";
    SArray<Key> keys(1, 0);
    SArray<float> vals(n, 0.001f);
    SArray<int> lens(1, static_cast<int>(n));
    SArray<float> out;
    double push =
        Rate([&] { kv.Wait(kv.ZPush(keys, vals, lens, cmd)); }, seconds);
    double pull =
        Rate([&] { kv.Wait(kv.ZPull(keys, &out, nullptr, cmd)); }, seconds);
    const double gb = n * 4 / 1e9;
    printf("pslite %-15s push %8.1f ops/s %6.3f GB/s\n", name, push, push * gb);
    printf("pslite %-15s pull %8.1f ops/s %6.3f GB/s\n", name, pull, pull * gb);
    fflush(stdout);
  }
  // 4 batches of 100k distinct random ids (sorted, as ps-lite requires).
  std::vector<SArray<Key>> batches(4);
  std::mt19937_64 rng(1);
  std::vector<Key> all(kVocab);
  std::iota(all.begin(), all.end(), 0);
  for (auto& b : batches) {
    std::shuffle(all.begin(), all.end(), rng);
    std::vector<Key> ids(all.begin(), all.begin() + 100000);
    std::sort(ids.begin(), ids.end());
    b = SArray<Key>(ids);
  }
  SArray<float> grads(100000 * kDim, 0.01f);
  SArray<float> out;
  int next = 0;
  double push = Rate(
      [&] { kv.Wait(kv.ZPush(batches[next++ % 4], grads, {}, 2)); }, seconds);
  double pull =
      Rate([&] { kv.Wait(kv.ZPull(batches[next++ % 4], &out, nullptr, 2)); },
           seconds);
  const double gb = 100000 * (8 + kDim * 4) / 1e9;
  printf("pslite %-15s push %8.1f ops/s %6.3f GB/s %6.2fM rows/s\n",
         "embedding_100k", push, push * gb, push * 0.1);
  printf("pslite %-15s pull %8.1f ops/s %6.3f GB/s %6.2fM rows/s\n",
         "embedding_100k", pull, pull * gb, pull * 0.1);
  fflush(stdout);
}

int main() {
  Start(0);
  if (IsServer()) {
    auto* server = new KVServer<float>(0);
    server->set_request_handle(Handle);
    RegisterExitCallback([server] { delete server; });
  }
  if (IsWorker()) RunWorker();
  Finalize(0, true);
  return 0;
}
