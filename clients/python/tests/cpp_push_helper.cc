// Test helper: one push through the C++ client, gradients (and ids) read
// from raw little-endian files, so Python tests can compare the Python
// client's updates with the C++ client's.
#include <fstream>
#include <iostream>
#include <iterator>
#include <vector>

#include "clients/cpp/client.h"
#include "gflags/gflags.h"
#include "partitioner/cluster_spec.h"
#include "util/wire_dtype.h"

DEFINE_string(cluster, "", "Cluster spec JSON.");
DEFINE_string(variable, "", "Variable to push to.");
DEFINE_string(grads_file, "", "float32 gradients.");
DEFINE_string(ids_file, "", "int64 ids (embedding variables).");
DEFINE_string(wire_dtype, "fp32", "fp32, bf16 or fp16.");

template <typename T>
std::vector<T> ReadRaw(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                          std::istreambuf_iterator<char>());
  std::vector<T> out(bytes.size() / sizeof(T));
  std::copy(bytes.begin(), bytes.begin() + out.size() * sizeof(T),
            reinterpret_cast<char*>(out.data()));
  return out;
}

int main(int argc, char** argv) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  auto cluster = psrt::LoadClusterSpec(FLAGS_cluster, 2223);
  if (!cluster.ok()) {
    std::cerr << cluster.status() << "\n";
    return 2;
  }
  psrt::ClientOptions options;
  options.ps_addresses = cluster->ps;
  auto wire_dtype = psrt::ParseWireDtypeFlag(FLAGS_wire_dtype);
  if (!wire_dtype.ok()) {
    std::cerr << wire_dtype.status() << "\n";
    return 2;
  }
  options.wire_dtype = *wire_dtype;
  auto client = psrt::Client::Connect(options);
  if (!client.ok() || !(*client)->RefreshCatalog().ok()) {
    std::cerr << "cannot connect\n";
    return 1;
  }
  const std::vector<float> grads = ReadRaw<float>(FLAGS_grads_file);
  absl::Status s;
  if (FLAGS_ids_file.empty()) {
    s = (*client)->PushDense(FLAGS_variable, grads.data());
  } else {
    const std::vector<int64_t> ids = ReadRaw<int64_t>(FLAGS_ids_file);
    s = (*client)->PushRows(FLAGS_variable, ids, grads.data());
  }
  if (!s.ok()) {
    std::cerr << s << "\n";
    return 1;
  }
  return 0;
}
