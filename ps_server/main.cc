// ps_server: holds parameter shards and applies optimizer updates.
//
//   ps_server                                 # one PS on :2223
//   ps_server --cluster=cluster.json --task_index=1
//   TF_CONFIG='{"cluster": {...}, "task": {"type": "ps", "index": 0}}'
//   ps_server
#include <csignal>
#include <cstdlib>
#include <thread>

#include "absl/strings/str_cat.h"
#include "cli/help.h"
#include "gflags/gflags.h"
#include "glog/logging.h"
#include "partitioner/cluster_spec.h"
#include "proto/buffer_pool.h"
#include "ps_server/server.h"
#include "ps_server/thread_pool.h"

DEFINE_string(cluster, "",
              "Cluster spec: TF_CONFIG-style JSON inline (starting with '{') "
              "or a file. Empty: the TF_CONFIG environment variable, else a "
              "single PS on localhost:2223.");
DEFINE_int32(task_index, -1,
             "This PS's index in cluster.ps. -1: TF_CONFIG's task.index when "
             "its task.type is \"ps\", else 0.");
DEFINE_int32(port, 0,
             "Port to listen on. 0: the port of this task's cluster.ps entry.");
DEFINE_string(bind_address, "0.0.0.0", "Address to listen on.");
DEFINE_int32(metrics_port, -1,
             "Prometheus /metrics port. -1: the gRPC port + 1000; 0: off.");
DEFINE_string(metrics_bind_address, "0.0.0.0",
              "Address for /metrics (127.0.0.1 keeps it local).");
DEFINE_int64(max_message_bytes, 16 << 20,
             "Largest single gRPC message sent or accepted. Tensors of any "
             "size still move: clients split them into messages.");
DEFINE_int64(max_push_bytes, int64_t{2} << 30,
             "Largest Push call (all its messages) accepted.");
DEFINE_int64(memory_limit_bytes, 0,
             "Refuse to create variables whose shards on this PS would pass "
             "this many bytes. 0: 90% of the memory available at creation.");
DEFINE_int32(apply_threads, 0,
             "Helper threads that split large updates and reads (dense >= 1 "
             "MiB, >= 16k embedding rows) over the cores. 0: cores - 1.");
DEFINE_double(shutdown_grace_secs, 5,
              "On SIGTERM/SIGINT, how long calls in flight may finish.");

namespace {

int Run() {
  auto cluster = psrt::LoadClusterSpec(FLAGS_cluster, 2223);
  if (!cluster.ok()) {
    LOG(ERROR) << cluster.status();
    return 2;
  }
  int task = FLAGS_task_index;
  if (task < 0) {
    task = cluster->has_task && cluster->task.type == "ps" ? cluster->task.index
                                                           : 0;
  }
  if (task >= cluster->num_ps()) {
    LOG(ERROR) << "--task_index=" << task << " but the cluster lists "
               << cluster->num_ps() << " PS tasks";
    return 2;
  }
  int port = FLAGS_port;
  if (port == 0) {
    std::string host;
    if (auto s = psrt::SplitHostPort(cluster->ps[task], &host, &port);
        !s.ok()) {
      LOG(ERROR) << s;
      return 2;
    }
  }
  psrt::ServerOptions options;
  options.cluster = *cluster;
  options.ps_task = task;
  options.listen_address = absl::StrCat(FLAGS_bind_address, ":", port);
  const int metrics_port =
      FLAGS_metrics_port < 0 ? port + 1000 : FLAGS_metrics_port;
  if (metrics_port > 0) {
    options.metrics_address =
        absl::StrCat(FLAGS_metrics_bind_address, ":", metrics_port);
  }
  if (FLAGS_max_message_bytes < (64 << 10) ||
      FLAGS_max_message_bytes > (1 << 30)) {
    LOG(ERROR) << "--max_message_bytes must be within [64 KiB, 1 GiB]";
    return 2;
  }
  options.limits.max_message_bytes = FLAGS_max_message_bytes;
  options.limits.max_push_bytes = FLAGS_max_push_bytes;
  options.memory_limit_bytes = FLAGS_memory_limit_bytes;

  if (FLAGS_apply_threads < 0) {
    LOG(ERROR) << "--apply_threads must be >= 0";
    return 2;
  }
  psrt::ThreadPool::SetDefaultSize(FLAGS_apply_threads);

  // Signals are taken by one thread with sigwait, not by async handlers.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  auto server = psrt::Server::Create(options);
  if (!server.ok()) {
    LOG(ERROR) << server.status();
    return 1;
  }
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    LOG(INFO) << "received " << (sig == SIGTERM ? "SIGTERM" : "SIGINT")
              << "; shutting down (grace " << FLAGS_shutdown_grace_secs << "s)";
    (*server)->Shutdown(absl::Now() + absl::Seconds(FLAGS_shutdown_grace_secs));
  });
  (*server)->Wait();
  waiter.join();
  LOG(INFO) << "ps_server stopped";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "psrt parameter server: holds dense and embedding shards and applies "
      "optimizer updates pushed by workers.\n"
      "  ps_server [--cluster=JSON|FILE] [--task_index=N] [--port=P]");
  gflags::SetVersionString("0.1.0");
  FLAGS_logtostderr = true;
  psrt::HandleHelpFlag(argc, argv, "ps_server/");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  google::InitGoogleLogging(argv[0]);
  psrt::TuneAllocatorForLargeMessages();
  return Run();
}
