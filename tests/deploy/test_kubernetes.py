"""deploy/kubernetes/psrt.yaml: the fields psrt relies on are consistent.

Every process finds the others through cluster.json, so its host names must
be the StatefulSets' per-pod DNS names (<set>-<i>.<headless service>), as
many as the replicas, on the ports the containers expose; the task index
comes from the pod ordinal; the PS is probed over gRPC health on its port;
and SIGTERM leaves time for the final checkpoint."""
import json
import os
import re

import yaml

MANIFEST = os.path.join(os.environ.get("TEST_SRCDIR", "."), "psrt", "deploy/kubernetes/psrt.yaml")
if not os.path.exists(MANIFEST):
    MANIFEST = "deploy/kubernetes/psrt.yaml"


def load():
    with open(MANIFEST) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d["kind"], {})[d["metadata"]["name"]] = d
    return by_kind


def flags(container):
    text = " ".join(container["args"])
    return dict(re.findall(r"--(\w+)=(\S+)", text)), text


def test_cluster_spec_names_every_pod_of_each_stateful_set():
    k = load()
    cluster = json.loads(k["ConfigMap"]["psrt-cluster"]["data"]["cluster.json"])["cluster"]
    for role, set_name in (("ps", "psrt-ps"), ("worker", "psrt-worker")):
        sts = k["StatefulSet"][set_name]
        service = k["Service"][sts["spec"]["serviceName"]]
        assert service["spec"]["clusterIP"] == "None", "per-pod DNS needs a headless Service"
        assert service["spec"]["selector"] == sts["spec"]["selector"]["matchLabels"]
        container = sts["spec"]["template"]["spec"]["containers"][0]
        ports = {p["containerPort"] for p in container["ports"]}
        addresses = cluster[role]
        assert len(addresses) == sts["spec"]["replicas"], role
        for i, address in enumerate(addresses):
            host, port = address.rsplit(":", 1)
            assert host == f"{set_name}-{i}.{service['metadata']['name']}", address
            assert int(port) in ports, address
        f, text = flags(container)
        assert f["cluster"].startswith("/etc/psrt/")
        assert "--task_index=${HOSTNAME##*-}" in text, "task index must come from the ordinal"
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        assert "/etc/psrt" in mounts


def test_ps_probes_checkpoints_and_grace_period():
    k = load()
    spec = k["StatefulSet"]["psrt-ps"]["spec"]["template"]["spec"]
    container = spec["containers"][0]
    f, _ = flags(container)
    grpc_port = int(f["port"])
    assert container["readinessProbe"]["grpc"]["port"] == grpc_port
    assert container["livenessProbe"]["grpc"]["port"] == grpc_port
    assert f["checkpoint_uri"].startswith(("s3://", "/", "file://"))
    assert f["restore"] == "auto", "a restarted pod must reload its shards"
    # PS 0 checkpoints on SIGTERM while the others wait for it: the grace
    # period must outlast that wait.
    assert spec["terminationGracePeriodSeconds"] > int(f["final_checkpoint_wait_secs"])
    assert int(f["metrics_port"]) in {p["containerPort"] for p in container["ports"]}
