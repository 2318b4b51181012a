// One training example and a batch of them.
//
// Sparse features are (id, value) pairs, as the DeepFM-on-SageMaker records
// (`ids`, `values`) and LibSVM lines carry them; models that need a fixed
// number of fields per example (FM, DeepFM) check Batch::fields(). Dense
// features (pixels, normalized numbers) are a fixed-length float vector.
#ifndef PSRT_PS_WORKER_DATA_EXAMPLE_H_
#define PSRT_PS_WORKER_DATA_EXAMPLE_H_

#include <cstdint>
#include <vector>

namespace psrt {

struct Example {
  float label = 0;  // 0/1 for binary tasks, the class index for multiclass
  std::vector<int64_t> ids;
  std::vector<float> values;  // one per id
  std::vector<float> dense;

  void Clear() {
    label = 0;
    ids.clear();
    values.clear();
    dense.clear();
  }
};

// Examples in struct-of-arrays form: example i's sparse features are
// ids/values[offsets[i], offsets[i + 1]); its dense features are
// dense[i * dense_dim, (i + 1) * dense_dim).
struct Batch {
  int size = 0;
  int dense_dim = 0;
  std::vector<float> labels;
  std::vector<int64_t> ids;
  std::vector<float> values;
  std::vector<int32_t> offsets = {0};
  std::vector<float> dense;

  void Clear() {
    size = 0;
    dense_dim = 0;
    labels.clear();
    ids.clear();
    values.clear();
    offsets.assign(1, 0);
    dense.clear();
  }

  // Room for a batch the size of `other` (with 1/8 to spare).
  void ReserveLike(const Batch& other) {
    auto room = [](size_t n) { return n + n / 8; };
    labels.reserve(room(other.labels.size()));
    ids.reserve(room(other.ids.size()));
    values.reserve(room(other.values.size()));
    offsets.reserve(room(other.offsets.size()));
    dense.reserve(room(other.dense.size()));
  }

  // Appends an example. REQUIRES: its dense size equals dense_dim (or the
  // batch is empty).
  void Add(const Example& e) {
    if (size == 0) dense_dim = static_cast<int>(e.dense.size());
    labels.push_back(e.label);
    ids.insert(ids.end(), e.ids.begin(), e.ids.end());
    values.insert(values.end(), e.values.begin(), e.values.end());
    offsets.push_back(static_cast<int32_t>(ids.size()));
    dense.insert(dense.end(), e.dense.begin(), e.dense.end());
    ++size;
  }

  // Features per example if every example has the same count, else -1.
  int fields() const {
    if (size == 0) return 0;
    const int f = offsets[1];
    for (int i = 1; i <= size; ++i) {
      if (offsets[i] != i * f) return -1;
    }
    return f;
  }

  // Examples [begin, end) as a batch of their own.
  Batch Slice(int begin, int end) const {
    Batch b;
    b.size = end - begin;
    b.dense_dim = dense_dim;
    b.labels.assign(labels.begin() + begin, labels.begin() + end);
    b.ids.assign(ids.begin() + offsets[begin], ids.begin() + offsets[end]);
    b.values.assign(values.begin() + offsets[begin],
                    values.begin() + offsets[end]);
    b.offsets.resize(b.size + 1);
    for (int i = 0; i <= b.size; ++i) {
      b.offsets[i] = offsets[begin + i] - offsets[begin];
    }
    b.dense.assign(dense.begin() + static_cast<size_t>(begin) * dense_dim,
                   dense.begin() + static_cast<size_t>(end) * dense_dim);
    return b;
  }
};

}  // namespace psrt

#endif  // PSRT_PS_WORKER_DATA_EXAMPLE_H_
