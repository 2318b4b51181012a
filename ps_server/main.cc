// ps_server: holds parameter shards and applies optimizer updates.
//
//   ps_server                                 # one PS on :2223
//   ps_server --cluster=cluster.json --task_index=1
//   TF_CONFIG='{"cluster": {...}, "task": {"type": "ps", "index": 0}}'
//   ps_server
//   ps_server --checkpoint_uri=s3://bucket/run1 --restore=auto
//   ps_server --checkpoint_uri=/mnt/efs/run1 --checkpoint_every_secs=600
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "cli/data_plane_flags.h"
#include "cli/help.h"
#include "cli/security_flags.h"
#include "gflags/gflags.h"
#include "glog/logging.h"
#include "partitioner/cluster_spec.h"
#include "proto/buffer_pool.h"
#include "ps_server/checkpoint/checkpoint_catalog.h"
#include "ps_server/checkpoint/checkpoint_schedule.h"
#include "ps_server/rpc/server.h"
#include "ps_server/shards/ssd_tier_dir.h"
#include "util/thread_pool.h"

DEFINE_string(peer_secret_file, "",
              "File holding the secret only the cluster's ps_server processes "
              "share (never workers or clients): each PS proves with it which "
              "PS it is on the calls it makes to the others (leases, "
              "replication, rejoin, handback, checkpoints). Required on a "
              "secured (--auth_token_file, --tls_require_client_cert) "
              "cluster of 2 PS or more; empty: PS-to-PS calls are not "
              "proven.");
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
DEFINE_int32(data_plane_port, 0,
             "With --data_plane=fabric, the TCP port its tcp provider "
             "listens on (on this task's cluster-spec host): for firewalls "
             "that open named ports. 0: one the kernel picks. Taken: the "
             "data plane stays off, with a warning naming it.");
DEFINE_int32(metrics_port, -1,
             "Prometheus /metrics port. -1: the gRPC port + 1000; 0: off.");
DEFINE_string(grpc_reflection, "auto",
              "Serve gRPC server reflection, so grpcurl can list and call the "
              "methods without ps.proto: on, off, or auto (on unless "
              "--auth_token_file is set: reflection answers without the token, "
              "as the health service does; it tells only the schema, no "
              "data).");
DEFINE_string(metrics_bind_address, "0.0.0.0",
              "Address for /metrics (127.0.0.1 keeps it local).");
DEFINE_int64(max_message_bytes, 16 << 20,
             "Largest single gRPC message sent or accepted. Tensors of any "
             "size still move: clients split them into messages.");
DEFINE_int64(max_push_bytes, int64_t{2} << 30,
             "Largest Push call (all its messages) accepted.");
DEFINE_int64(memory_limit_bytes, 0,
             "Bytes of shards this PS may hold: creating variables, and "
             "hash-embedding tables growing on push, are refused "
             "(RESOURCE_EXHAUSTED) past it. 0: 90% of the memory available "
             "at each creation or growth: the host's MemAvailable, or in a "
             "container the cgroup memory limit less its working set.");
DEFINE_int64(memory_budget_mb, 0,
             "A memory budget for this PS's shards, in MiB, that hash "
             "embeddings stay within: at it, a table that needs room evicts "
             "its least recently updated rows (by the global step of their "
             "last update) instead of refusing the push; dense and "
             "known-vocabulary variables past it are refused as with "
             "--memory_limit_bytes, which it replaces (set one). 0: no "
             "budget. With --replicas, backups evict the rows their "
             "primaries evict; give every PS the same budget.");
DEFINE_string(ssd_tier_dir, "",
              "Directory (on an SSD) where hash embeddings with "
              "storage.tier = SSD keep the rows evicted from memory, one "
              "row file per shard in <dir>/<storage.path>/shard-<N>, "
              "emptied when the shard is created (a restarted PS restores "
              "from its checkpoint). Empty: $TMPDIR (or /tmp) "
              "/psrt-ssd-tier/ps<task>-<pid>, removed as the PS exits; one "
              "left by a PS that was killed is removed by the next PS that "
              "starts on the machine.");
DEFINE_double(eviction_interval_secs, 1.0,
              "How often hash embeddings with eviction (eviction.ttl_steps "
              "in the variable's spec) are swept for rows idle longer than "
              "their ttl; each sweep holds a shard's lock for at most 8192 "
              "rows at a time.");
DEFINE_int32(replicas, 1,
             "Copies of every shard. 1: none (a PS lost is restored from the "
             "last checkpoint). R > 1: each PS's shards are also kept by the "
             "next R-1 PS on other hosts, and a push is acknowledged only "
             "after they applied it (docs/operations.md, Replicas). Every PS "
             "of a cluster must use the same value; the cluster needs R "
             "different hosts.");
DEFINE_int32(apply_threads, 0,
             "Helper threads that split large updates and reads (dense >= 1 "
             "MiB, >= 16k embedding rows) over the cores. 0: cores - 1.");
DEFINE_double(shutdown_grace_secs, 5,
              "On SIGTERM/SIGINT, how long calls in flight may finish.");

DEFINE_string(checkpoint_uri, "",
              "Where checkpoints go: a directory (local disk, EFS/NFS), "
              "file:///dir or s3://bucket/prefix. Empty: no checkpoints "
              "unless a request names a location.");
DEFINE_double(checkpoint_every_secs, 0,
              "PS 0: checkpoint every N seconds while training progresses "
              "(0: off).");
DEFINE_int64(checkpoint_every_steps, 0,
             "PS 0: checkpoint every N global steps (0: off).");
DEFINE_bool(checkpoint_storage_per_host, false,
            "--checkpoint_uri is this host's own storage on every PS (a local "
            "disk; SageMaker's /opt/ml/checkpoints, synced to S3): PS 0 then "
            "sends every PS the manifest, so a PS restarted on its host can "
            "restore alone. Leave off for shared storage (S3, EFS).");
DEFINE_int32(keep_checkpoints, 5,
             "Complete checkpoints kept under --checkpoint_uri (0: all).");
DEFINE_int32(checkpoint_threads, 2,
             "Shard files this PS writes at once during a checkpoint.");
DEFINE_double(checkpoint_max_mb_per_sec, 0,
              "Cap on the rate this PS writes checkpoint data (MB/s; 0: as "
              "fast as the storage allows). Lower it if checkpoints slow "
              "training steps on a busy PS.");
DEFINE_bool(checkpoint_on_shutdown, true,
            "On SIGTERM/SIGINT with --checkpoint_uri: PS 0 takes a final "
            "checkpoint of every PS before exiting; the other PS keep "
            "serving until it has saved their shards.");
DEFINE_double(final_checkpoint_wait_secs, 600,
              "PS other than 0: how long to wait on SIGTERM for PS 0's "
              "final checkpoint (they stop early if PS 0 is unreachable).");
DEFINE_string(restore, "",
              "Restore at start-up: 'latest' (the newest checkpoint under "
              "--checkpoint_uri; an error if none), 'auto' (latest if any, "
              "else start empty), or one checkpoint's URI. Empty: start "
              "empty.");
DEFINE_string(s3_endpoint, "",
              "http(s)://host:port of an S3-compatible store (path-style); "
              "empty: AWS S3.");
DEFINE_string(s3_region, "",
              "Region to sign for (empty: $AWS_REGION, "
              "$AWS_DEFAULT_REGION, us-east-1).");
DEFINE_int32(s3_part_mib, 16, "Multipart upload part size in MiB (>= 5).");
DEFINE_int32(s3_upload_threads, 8, "Parts of one object uploaded at once.");
DEFINE_string(s3_ca_bundle, "",
              "PEM file of the CAs to trust for an https --s3_endpoint (a "
              "private CA). Empty: AWS_CA_BUNDLE, the profile's ca_bundle, "
              "else the system's CAs.");
DEFINE_bool(s3_reuse_connections, true,
            "Pool S3 connections (one TLS handshake per connection, not per "
            "request). false: a new connection per request, for proxies that "
            "mishandle keep-alive.");
DEFINE_int32(s3_max_attempts, 6,
             "Attempts per S3 request on 5xx, throttling or network errors.");

namespace {

psrt::S3Options S3OptionsFromFlags() {
  psrt::S3Options s3;
  s3.endpoint = FLAGS_s3_endpoint;
  s3.region = FLAGS_s3_region;
  s3.part_bytes = int64_t{FLAGS_s3_part_mib} << 20;
  s3.upload_threads = FLAGS_s3_upload_threads;
  s3.max_attempts = FLAGS_s3_max_attempts;
  s3.ca_bundle = FLAGS_s3_ca_bundle;
  s3.reuse_connections = FLAGS_s3_reuse_connections;
  return s3;
}

// The flags as ServerOptions (without the restore point). INVALID_ARGUMENT
// naming the flag for a bad value.
absl::StatusOr<psrt::ServerOptions> ServerOptionsFromFlags() {
  auto cluster = psrt::LoadClusterSpec(FLAGS_cluster, 2223);
  if (!cluster.ok()) return cluster.status();
  for (const std::string& note : cluster->notes) LOG(INFO) << note;
  int task = FLAGS_task_index;
  if (task < 0) {
    task = cluster->has_task && cluster->task.type == "ps" ? cluster->task.index
                                                           : 0;
  }
  if (task >= cluster->num_ps()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--task_index=", task, " but the cluster lists ",
                     cluster->num_ps(), " PS tasks"));
  }
  int port = FLAGS_port;
  if (port == 0) {
    std::string host;
    if (auto s = psrt::SplitHostPort(cluster->ps[task], &host, &port);
        !s.ok()) {
      return s;
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
    return absl::InvalidArgumentError(
        "--max_message_bytes must be within [64 KiB, 1 GiB]");
  }
  options.limits.max_message_bytes = FLAGS_max_message_bytes;
  options.limits.max_push_bytes = FLAGS_max_push_bytes;
  options.memory_limit_bytes = FLAGS_memory_limit_bytes;
  if (FLAGS_memory_budget_mb < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--memory_budget_mb must be >= 0, got ", FLAGS_memory_budget_mb));
  }
  if (FLAGS_memory_budget_mb > 0) {
    if (FLAGS_memory_limit_bytes > 0) {
      return absl::InvalidArgumentError(
          "set --memory_budget_mb or --memory_limit_bytes, not both: the "
          "budget is a memory limit at which hash embeddings evict");
    }
    if (FLAGS_memory_budget_mb > (int64_t{1} << 30)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--memory_budget_mb=", FLAGS_memory_budget_mb, " is above 1 PiB"));
    }
    options.memory_limit_bytes = FLAGS_memory_budget_mb << 20;
    options.evict_at_memory_limit = true;
  }
  options.replicas = FLAGS_replicas;
  auto data_plane = psrt::DataPlaneFromFlags();
  if (!data_plane.ok()) return data_plane.status();
  options.data_plane = data_plane->data_plane;
  options.data_plane_providers = data_plane->providers;
  if (FLAGS_data_plane_port < 0 || FLAGS_data_plane_port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--data_plane_port=", FLAGS_data_plane_port, ": expected 0 to 65535"));
  }
  options.data_plane_port = FLAGS_data_plane_port;
  options.ssd_tier_dir = FLAGS_ssd_tier_dir;  // empty: Run makes one
  if (!(FLAGS_eviction_interval_secs > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--eviction_interval_secs must be > 0, got ",
                     FLAGS_eviction_interval_secs));
  }
  options.eviction_interval = absl::Seconds(FLAGS_eviction_interval_secs);
  if (FLAGS_apply_threads < 0) {
    return absl::InvalidArgumentError("--apply_threads must be >= 0");
  }
  auto security = psrt::SecurityOptionsFromFlags();
  if (!security.ok()) return security.status();
  options.security = *security;
  if (!FLAGS_peer_secret_file.empty()) {
    auto secret = psrt::ReadSecretFile(FLAGS_peer_secret_file);
    if (!secret.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--peer_secret_file: ", secret.status().message()));
    }
    options.security.peer_secret =
        std::string(absl::StripAsciiWhitespace(*secret));
    if (options.security.peer_secret.size() < 16) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--peer_secret_file=", FLAGS_peer_secret_file, " holds ",
          options.security.peer_secret.size(),
          " characters: use at least 16 random ones (openssl rand -hex 32)"));
    }
  }
  if (FLAGS_grpc_reflection == "auto") {
    options.reflection = options.security.auth_token.empty();
    if (!options.reflection) {
      LOG(INFO) << "gRPC reflection is off: it would answer without "
                   "--auth_token_file's token (--grpc_reflection=on serves "
                   "it anyway)";
    }
  } else if (FLAGS_grpc_reflection == "on" || FLAGS_grpc_reflection == "off") {
    options.reflection = FLAGS_grpc_reflection == "on";
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--grpc_reflection=", FLAGS_grpc_reflection,
                     ": expected on, off or auto"));
  }
  options.checkpoint.uri = FLAGS_checkpoint_uri;
  options.checkpoint.keep = FLAGS_keep_checkpoints;
  options.checkpoint.storage_per_host = FLAGS_checkpoint_storage_per_host;
  options.checkpoint.threads = FLAGS_checkpoint_threads;
  options.checkpoint.max_bytes_per_sec =
      static_cast<int64_t>(FLAGS_checkpoint_max_mb_per_sec * 1e6);
  if (FLAGS_s3_part_mib < 5) {
    return absl::InvalidArgumentError(
        "--s3_part_mib must be at least 5 (S3's minimum part size)");
  }
  // Storage is opened through this one opener everywhere in the process.
  options.checkpoint.open_storage =
      psrt::StorageOpenerFor(S3OptionsFromFlags());
  if (!FLAGS_checkpoint_uri.empty()) {
    if (auto s = options.checkpoint.open_storage(FLAGS_checkpoint_uri);
        !s.ok()) {
      return absl::Status(
          s.status().code(),
          absl::StrCat("--checkpoint_uri: ", s.status().message()));
    }
  }
  return options;
}

psrt::CheckpointSchedule CheckpointScheduleFromFlags() {
  psrt::CheckpointSchedule schedule;
  schedule.every = absl::Seconds(FLAGS_checkpoint_every_secs);
  schedule.every_steps = FLAGS_checkpoint_every_steps;
  schedule.on_shutdown = FLAGS_checkpoint_on_shutdown;
  schedule.final_wait = absl::Seconds(FLAGS_final_checkpoint_wait_secs);
  return schedule;
}

// Serves until SIGTERM or SIGINT (blocked in `signals`), taking the
// scheduled checkpoints meanwhile and the final one then. Returns false if
// the final checkpoint failed.
bool ServeUntilSignalled(psrt::Server* server, const sigset_t& signals) {
  const psrt::CheckpointSchedule schedule = CheckpointScheduleFromFlags();
  psrt::ScheduledCheckpoints periodic(server->checkpoints(), server->store(),
                                      schedule);
  bool final_ok = true;
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    LOG(INFO) << "received " << (sig == SIGTERM ? "SIGTERM" : "SIGINT")
              << ": the health service answers NOT_SERVING from now on";
    server->SetNotServing();
    periodic.Stop();
    final_ok = psrt::TakeFinalCheckpoint(
        server->checkpoints(), *server->store(), schedule,
        [server] { return server->service()->final_checkpoint_saved(); });
    LOG(INFO) << "shutting down (grace " << FLAGS_shutdown_grace_secs << "s)";
    server->Shutdown(absl::Now() + absl::Seconds(FLAGS_shutdown_grace_secs));
  });
  server->Wait();
  waiter.join();
  return final_ok;
}

int Run() {
  auto options = ServerOptionsFromFlags();
  if (!options.ok()) {
    LOG(ERROR) << options.status();
    return 2;
  }
  psrt::ThreadPool::SetDefaultSize(FLAGS_apply_threads);
  auto restore = psrt::ResolveRestore(FLAGS_restore, FLAGS_checkpoint_uri,
                                      options->checkpoint.open_storage);
  if (!restore.ok()) {
    LOG(ERROR) << "--restore=" << FLAGS_restore << ": " << restore.status();
    return 1;
  }
  options->restore_uri = *restore;

  // Signals are taken by one thread with sigwait, not by async handlers.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  // Declared before the server: removed after its stores closed.
  std::unique_ptr<psrt::OwnedSsdTierDir> owned_ssd_tier_dir;
  if (options->ssd_tier_dir.empty()) {
    const std::string root = psrt::OwnedSsdTierDir::DefaultRoot();
    auto owned = psrt::OwnedSsdTierDir::Create(root, options->ps_task);
    if (owned.ok()) {
      owned_ssd_tier_dir = *std::move(owned);
      options->ssd_tier_dir = owned_ssd_tier_dir->path();
    } else {
      // Only tiered tables need it (a read-only file system serves the
      // rest): creating one fails then, naming the directory.
      LOG(WARNING) << owned.status()
                   << "; hash embeddings with storage.tier = SSD will be "
                      "refused";
      options->ssd_tier_dir =
          psrt::OwnedSsdTierDir::PathFor(root, options->ps_task);
    }
  }
  auto server = psrt::Server::Create(*options);
  if (!server.ok()) {
    LOG(ERROR) << server.status();
    return 1;
  }
  const bool final_ok = ServeUntilSignalled(server->get(), signals);
  LOG(INFO) << "ps_server stopped";
  return final_ok ? 0 : 1;
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
  if (FLAGS_memory_budget_mb > 0) {
    // glibc's defaults: the tuning keeps up to 1 GiB of freed memory
    // resident, which a budget cannot afford (on the 50M-id stream at 324
    // MiB it held a PS at budget + 12% instead of -5%; docs/benchmarks.md).
    LOG(INFO) << "--memory_budget_mb: glibc's malloc defaults kept (freed "
                 "memory goes back to the system)";
  } else {
    psrt::TuneAllocatorForLargeMessages();
  }
  return Run();
}
