// Starts real ps_server processes on loopback ports for multi-process tests
// (the counterpart of TensorFlow's grpc_testlib). Each process gets the
// TF_CONFIG-style cluster spec on its command line and logs to a file in
// the test's output directory.
#ifndef PSRT_TESTS_LOCAL_CLUSTER_H_
#define PSRT_TESTS_LOCAL_CLUSTER_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "clients/cpp/client.h"
#include "partitioner/cluster_spec.h"

namespace psrt {

// A TCP port nobody listens on right now (bound and released).
int PickUnusedPort();

class LocalCluster {
 public:
  struct Options {
    int num_ps = 2;
    int num_workers = 1;                   // worker entries in the cluster spec
    std::vector<std::string> extra_flags;  // for every ps_server
    std::string binary = "ps_server/ps_server";  // relative to runfiles
    // The loopback address every PS binds to and the cluster spec names
    // (PS and workers); callers still connect from 127.0.0.1.
    std::string host = "127.0.0.1";
    // PS i on its own loopback address 127.0.0.(i+1) instead, so that the
    // cluster spec names as many hosts as PS (--replicas needs hosts).
    bool one_host_per_ps = false;
    // How the test's clients connect (TLS, token), matching extra_flags.
    SecurityOptions client_security;
  };

  struct WorkerRun {
    int exit_code = -1;  // -1: killed (timeout)
    std::string output;  // stdout and stderr
  };

  // Starts the servers and waits until each answers its health check.
  static absl::StatusOr<std::unique_ptr<LocalCluster>> Start(Options options);
  // SIGTERM to every server, SIGKILL after a grace period.
  ~LocalCluster();

  const ClusterSpec& spec() const { return spec_; }
  std::vector<std::string> ps_addresses() const { return spec_.ps; }
  int metrics_port(int ps) const { return metrics_ports_[ps]; }
  const std::string& log_path(int ps) const { return logs_[ps]; }
  // PS `ps`'s log so far, every run of it ("" if it cannot be read).
  std::string log(int ps) const;

  ClientOptions MakeClientOptions() const;

  // Kills PS `ps` with `signal` and waits for it to exit; returns its exit
  // status as from waitpid.
  int Kill(int ps, int signal);
  // Starts PS `ps` again on its port, with `more_flags` after the others
  // (a later flag wins), and waits until it is healthy.
  absl::Status Restart(int ps, std::vector<std::string> more_flags = {});
  bool Running(int ps) const { return pids_[ps] > 0; }
  pid_t pid(int ps) const { return pids_[ps]; }

  // Runs `binary` (relative to runfiles) as each worker in `indices`, all
  // at once, with TF_CONFIG naming that worker, and waits for them (killing
  // them after `timeout`). With `log_prefix`, worker i's output goes to
  // <log_prefix><i>.log as it runs (to watch it from another thread).
  std::vector<WorkerRun> RunWorkers(const std::string& binary,
                                    const std::vector<std::string>& args,
                                    const std::vector<int>& indices,
                                    absl::Duration timeout,
                                    const std::string& log_prefix = "");

 private:
  // How long a PS may take to serve after it was launched (sanitizer builds
  // on a loaded 2-core machine start slowly).
  static constexpr absl::Duration kStartTimeout = absl::Seconds(60);

  LocalCluster() = default;
  std::string PsHost(int ps) const;
  void PickAddresses();
  absl::Status LaunchAll();
  absl::Status Launch(int ps, const std::vector<std::string>& more_flags = {});
  // Waits until PS `only_ps` (-1: every PS) answers its health check; fails
  // at once, with the end of its log, when one exits instead.
  absl::Status WaitUntilServing(int only_ps, absl::Duration timeout);
  // Whether a PS failed because its port was taken after it was picked.
  bool LostPortRace() const;

  Options options_;
  ClusterSpec spec_;
  std::vector<int> metrics_ports_;
  std::vector<pid_t> pids_;
  std::vector<std::string> logs_;
};

// Runs `binary` (relative to runfiles) once per entry of `tf_configs`, all
// at once, with that TF_CONFIG ("" = none), and waits for them (killing them
// after `timeout`).
std::vector<LocalCluster::WorkerRun> RunPrograms(
    const std::string& binary, const std::vector<std::string>& args,
    const std::vector<std::string>& tf_configs, absl::Duration timeout,
    const std::string& log_prefix = "");

// An empty directory `name` under the test's temporary directory.
std::string FreshTestDir(const std::string& name);

// Fetches http://127.0.0.1:port/metrics (or another `path`: /statusz).
absl::StatusOr<std::string> FetchMetrics(int port,
                                         const std::string& path = "/metrics");

// The value of one sample ("name{labels}") in Prometheus text, or -1.
double MetricValue(const std::string& text, const std::string& sample);

}  // namespace psrt

#endif  // PSRT_TESTS_LOCAL_CLUSTER_H_
