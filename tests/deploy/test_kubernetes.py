"""deploy/kubernetes/*.yaml: valid Kubernetes objects, and the fields psrt
relies on are consistent.

Every process finds the others through cluster.json, so its host names must
be the per-pod DNS names (<set or job>-<i>.<headless service>), as many as
the replicas or completions, on the ports the containers expose; a server's
task index comes from its ordinal, a worker's from its completion index;
workers are a Job that ends; the PS is probed over gRPC health on its port,
kept from voluntary disruption and scraped by Prometheus; memory limits are
set (the PS's guard reads them); SIGTERM leaves time for the final
checkpoint."""
import json
import os
import re
import shutil
import subprocess

import pytest
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))


def source(path):
    under_bazel = os.path.join(os.environ.get("TEST_SRCDIR", "."), "psrt", path)
    return under_bazel if os.path.exists(under_bazel) else path


MANIFEST = source("deploy/kubernetes/psrt.yaml")
TFJOB = source("deploy/kubernetes/psrt-tfjob.yaml")
SECRET = source("deploy/kubernetes/psrt-secret.yaml")
DATA = source("deploy/kubernetes/psrt-data.yaml")
PODMONITOR = source("deploy/kubernetes/psrt-podmonitor.yaml")
ALL = (MANIFEST, TFJOB, SECRET, DATA, PODMONITOR)
# kubernetes-models and js-yaml, installed by tools/install_deps.sh.
NODE_TOOLS = os.environ.get("PSRT_NODE_PREFIX", "/opt/psrt-node")


def load(*paths):
    docs = []
    for path in paths or (MANIFEST,):
        with open(path) as f:
            docs += [d for d in yaml.safe_load_all(f) if d]
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d["kind"], {})[d["metadata"]["name"]] = d
    return by_kind


def flags(container):
    text = " ".join(container["args"])
    return dict(re.findall(r"--(\w+)=(\S+)", text)), text


def test_cluster_spec_names_every_server_and_worker_pod():
    k = load()
    cluster = json.loads(k["ConfigMap"]["psrt-cluster"]["data"]["cluster.json"])["cluster"]
    ps = k["StatefulSet"]["psrt-ps"]
    workers = k["Job"]["psrt-worker"]
    for role, name, template, count, service_name, index in (
        (
            "ps",
            "psrt-ps",
            ps["spec"]["template"],
            ps["spec"]["replicas"],
            ps["spec"]["serviceName"],
            "${HOSTNAME##*-}",
        ),
        (
            "worker",
            "psrt-worker",
            workers["spec"]["template"],
            workers["spec"]["completions"],
            workers["spec"]["template"]["spec"]["subdomain"],
            "${JOB_COMPLETION_INDEX}",
        ),
    ):
        service = k["Service"][service_name]
        assert service["spec"]["clusterIP"] == "None", "per-pod DNS needs a headless Service"
        labels = template["metadata"]["labels"]
        assert all(labels.get(key) == v for key, v in service["spec"]["selector"].items())
        container = template["spec"]["containers"][0]
        ports = {p["containerPort"] for p in container["ports"]}
        addresses = cluster[role]
        assert len(addresses) == count, role
        for i, address in enumerate(addresses):
            host, port = address.rsplit(":", 1)
            # StatefulSet pods and Indexed Job pods are both <name>-<i>.
            assert host == f"{name}-{i}.{service['metadata']['name']}", address
            assert int(port) in ports, address
        f, text = flags(container)
        assert f["cluster"].startswith("/etc/psrt/")
        assert f"--task_index={index}" in text, role
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        assert "/etc/psrt" in mounts
        assert "memory" in container["resources"]["limits"], role


def test_workers_are_an_indexed_job_that_ends():
    k = load()
    assert "psrt-worker" not in k.get("StatefulSet", {}), "a StatefulSet restarts finished workers"
    spec = k["Job"]["psrt-worker"]["spec"]
    assert spec["completionMode"] == "Indexed"
    assert spec["parallelism"] == spec["completions"], "sync training needs every worker at once"
    assert spec["template"]["spec"]["restartPolicy"] in ("OnFailure", "Never")


def test_ps_disruption_budget_and_metrics_scraping():
    k = load()
    ps = k["StatefulSet"]["psrt-ps"]["spec"]
    pdb = k["PodDisruptionBudget"]["psrt-ps"]["spec"]
    assert pdb["selector"]["matchLabels"] == ps["selector"]["matchLabels"]
    # A drain (a managed node group's upgrade) may take one PS at a time;
    # 0 would block every drain until training ends.
    assert pdb["maxUnavailable"] == 1
    annotations = ps["template"]["metadata"]["annotations"]
    f, _ = flags(ps["template"]["spec"]["containers"][0])
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == f["metrics_port"]
    assert annotations["prometheus.io/path"] == "/metrics"
    # Workers export their training metrics on --metrics_port (off by
    # default): the annotation must name the port the flag opens.
    workers = k["Job"]["psrt-worker"]["spec"]["template"]
    container = workers["spec"]["containers"][0]
    f, _ = flags(container)
    assert workers["metadata"]["annotations"]["prometheus.io/port"] == f["metrics_port"]
    assert int(f["metrics_port"]) in {p["containerPort"] for p in container["ports"]}


def pod_templates(k):
    yield k["StatefulSet"]["psrt-ps"]["spec"]["template"], "ps"
    yield k["Job"]["psrt-worker"]["spec"]["template"], "worker"
    for role, spec in k["TFJob"]["psrt"]["spec"]["tfReplicaSpecs"].items():
        yield spec["template"], role.lower()


def test_every_object_carries_the_recommended_labels():
    k = load(*ALL)
    for kind, objects in k.items():
        for name, obj in objects.items():
            labels = obj["metadata"].get("labels", {})
            assert labels.get("app.kubernetes.io/name") == "psrt", (kind, name)
            assert labels.get("app.kubernetes.io/instance"), (kind, name)
            assert not {"app", "role"} & set(labels), (kind, name)
    for template, role in pod_templates(k):
        labels = template["metadata"]["labels"]
        assert labels["app.kubernetes.io/component"] == role
        assert labels["app.kubernetes.io/name"] == "psrt"


def test_every_claim_secret_and_config_map_a_pod_mounts_is_shipped():
    k = load(*ALL)
    for template, role in pod_templates(k):
        for volume in template["spec"].get("volumes", []):
            if "persistentVolumeClaim" in volume:
                claim = volume["persistentVolumeClaim"]
                assert claim["claimName"] in k["PersistentVolumeClaim"], (role, claim)
                assert claim.get("readOnly"), "workers only read the training data"
            if "configMap" in volume:
                assert volume["configMap"]["name"] in k["ConfigMap"], (role, volume)
            secret = volume.get("secret")
            if secret and not secret.get("optional"):
                assert secret["secretName"] in k["Secret"], (role, secret)
    claim = k["PersistentVolumeClaim"]["psrt-data"]["spec"]
    assert claim["accessModes"] == ["ReadWriteMany"], "pods on several nodes mount it"


def secret_files(template):
    """Files each mounted secret volume gives the container: {path: key}."""
    container = template["spec"]["containers"][0]
    mounts = {m["name"]: m["mountPath"] for m in container.get("volumeMounts", [])}
    files = {}
    for volume in template["spec"].get("volumes", []):
        secret = volume.get("secret")
        if not secret or volume["name"] not in mounts:
            continue
        keys = [i["key"] for i in secret.get("items", [])] or ["token", "peer-secret"]
        if secret["secretName"] == "psrt-auth":
            for key in keys:
                files[f"{mounts[volume['name']]}/{key}"] = key
    return files


def test_token_and_peer_secret_come_from_the_secret_and_only_servers_get_the_peer_secret():
    k = load(*ALL)
    secret = k["Secret"]["psrt-auth"]
    # Shipped empty: a process given an empty token stops at start.
    assert secret["stringData"] == {"token": "", "peer-secret": ""}
    for template, role in pod_templates(k):
        container = template["spec"]["containers"][0]
        text = " ".join(container["args"])
        files = secret_files(template)
        token = re.search(r"--auth_token_file=(\S+)", text)
        assert token and files.get(token.group(1)) == "token", (role, files)
        peer = re.search(r"--peer_secret_file=(\S+)", text)
        if role == "ps":
            assert peer and files.get(peer.group(1)) == "peer-secret", (role, files)
        else:
            assert not peer and "peer-secret" not in files.values(), role
    # TLS follows the optional Secret psrt-tls: flags only when its files exist.
    for name, role in (("psrt-ps", "ps"), ("psrt-worker", "worker")):
        kind = "StatefulSet" if role == "ps" else "Job"
        template = k[kind][name]["spec"]["template"]
        tls = [v for v in template["spec"]["volumes"] if v["name"] == "tls"][0]
        assert tls["secret"] == {"secretName": "psrt-tls", "optional": True, "defaultMode": 0o400}
        assert "[ -f /etc/psrt-tls/" in template["spec"]["containers"][0]["args"][0]


def test_pod_monitor_scrapes_both_roles_on_their_metrics_port():
    k = load(*ALL)
    monitor = k["PodMonitor"]["psrt"]["spec"]
    selector = monitor["selector"]["matchLabels"]
    (endpoint,) = monitor["podMetricsEndpoints"]
    assert endpoint["path"] == "/metrics"
    for name, kind in (("psrt-ps", "StatefulSet"), ("psrt-worker", "Job")):
        template = k[kind][name]["spec"]["template"]
        labels = template["metadata"]["labels"]
        assert all(labels.get(key) == v for key, v in selector.items()), name
        container = template["spec"]["containers"][0]
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        f, _ = flags(container)
        assert ports[endpoint["port"]] == int(f["metrics_port"]), name


def test_tfjob_lets_the_operator_write_tf_config():
    job = load(TFJOB)["TFJob"]["psrt"]
    specs = job["spec"]["tfReplicaSpecs"]
    assert set(specs) == {"PS", "Worker"}
    for role, spec in specs.items():
        container = spec["template"]["spec"]["containers"][0]
        assert container["name"] == "tensorflow", "the operator finds its port on this container"
        assert {"name": "tfjob-port", "containerPort": 2222} in container["ports"]
        # No --cluster and no --task_index: both come from TF_CONFIG.
        assert not [a for a in container["args"] if a.startswith(("--cluster", "--task_index"))]
        assert "memory" in container["resources"]["limits"], role
    ps = specs["PS"]["template"]
    container = ps["spec"]["containers"][0]
    f = dict(a[2:].split("=", 1) for a in container["args"])
    assert container["readinessProbe"]["grpc"]["port"] == 2222
    assert f["restore"] == "auto"
    assert ps["spec"]["terminationGracePeriodSeconds"] > int(f["final_checkpoint_wait_secs"])
    assert ps["metadata"]["annotations"]["prometheus.io/port"] == f["metrics_port"]
    worker = specs["Worker"]["template"]
    f = dict(a[2:].split("=", 1) for a in worker["spec"]["containers"][0]["args"])
    assert worker["metadata"]["annotations"]["prometheus.io/port"] == f["metrics_port"]
    assert job["spec"]["runPolicy"]["cleanPodPolicy"] == "Running"


def validate(*paths):
    """Runs tests/deploy/validate_manifests.mjs on `paths` with the
    kubernetes-models schemas; returns (exit code, output)."""
    node = shutil.which("node")
    have = node and os.path.isdir(os.path.join(NODE_TOOLS, "node_modules", "kubernetes-models"))
    if not have:
        why = f"node or {NODE_TOOLS}/node_modules/kubernetes-models missing (tools/install_deps.sh)"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    with open(os.path.join(HERE, "validate_manifests.mjs")) as script:
        run = subprocess.run(
            [node, "--input-type=module", "-", *[os.path.abspath(p) for p in paths]],
            stdin=script,
            cwd=NODE_TOOLS,
            capture_output=True,
            text=True,
        )
    return run.returncode, run.stdout + run.stderr


def test_manifests_match_the_kubernetes_api_schema(tmp_path):
    code, output = validate(*ALL)
    assert code == 0, output
    assert "10 objects valid" in output, output
    # The validator can fail: a misspelt enum, a string where an integer
    # belongs, a container without its (required) name, each named.
    for path, good, bad, expected in (
        (MANIFEST, "completionMode: Indexed", "completionMode: Indexd", "completionMode"),
        (MANIFEST, "completions: 2", "completions: two", "completions"),
        (MANIFEST, "- name: ps-worker\n          image", "- image", "name"),
        (DATA, "[ReadWriteMany]", "[ReadWriteSome]", "accessModes"),
        (SECRET, "type: Opaque", "type: [Opaque]", "type"),
        (PODMONITOR, "interval: 15s", "interval: soon", "interval"),
    ):
        text = open(path).read()
        broken = text.replace(good, bad)
        assert broken != text, (path, good)
        broken_path = tmp_path / "broken.yaml"
        broken_path.write_text(broken)
        code, output = validate(str(broken_path))
        assert code == 1 and "INVALID" in output and expected in output, output


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


def test_ps_memory_is_what_the_sizing_rule_gives_for_the_shipped_catalog():
    """The PS pods' memory request and limit are psctl size's for
    deepfm-variables.json (ps_worker --model=deepfm's catalog) with the
    manifest's PS count and 100M ids, as the manifest's comment says."""
    psctl = source("tools/psctl/psctl")
    if not os.access(psctl, os.X_OK):
        psctl = source("bazel-bin/tools/psctl/psctl")
    k = load(MANIFEST, TFJOB)
    num_ps = k["StatefulSet"]["psrt-ps"]["spec"]["replicas"]
    out = subprocess.run(
        [
            psctl,
            f"--variables={source('deploy/kubernetes/deepfm-variables.json')}",
            f"--num_ps={num_ps}",
            "--hash_rows=100000000",
            "size",
        ],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    sized = re.search(r"requests: \{memory: (\d+Mi)\}, limits: \{memory: (\d+Mi)\}", out.stdout)
    assert sized, out.stdout
    request, limit = sized.groups()
    ps_specs = [
        k["StatefulSet"]["psrt-ps"]["spec"]["template"],
        k["TFJob"]["psrt"]["spec"]["tfReplicaSpecs"]["PS"]["template"],
    ]
    for template in ps_specs:
        resources = template["spec"]["containers"][0]["resources"]
        assert resources["requests"]["memory"] == request, out.stdout
        assert resources["limits"]["memory"] == limit, out.stdout
