// Validates Kubernetes manifests against the API's schemas (and the
// Prometheus operator's PodMonitor against its CRD's schema), as the API
// server would before accepting them: each document of each YAML file
// given is checked by the kubernetes-models class of its apiVersion and
// kind (JSON schemas generated from Kubernetes' OpenAPI spec: required
// fields, types, enums, formats). A TFJob (kubeflow.org/v1) is checked by
// hand for the fields the training operator needs, and each replica's pod
// template against PodTemplateSpec's schema. Prints one line per object;
// exits 1 naming the first invalid one.
//
//   cd /opt/psrt-node && node --input-type=module - FILE... < validate_manifests.mjs
import fs from "node:fs";
import yaml from "js-yaml";
import {
  ConfigMap,
  PersistentVolumeClaim,
  PodTemplateSpec,
  Secret,
  Service,
} from "kubernetes-models/v1";
import { StatefulSet } from "kubernetes-models/apps/v1";
import { Job } from "kubernetes-models/batch/v1";
import { PodDisruptionBudget } from "kubernetes-models/policy/v1";
import { PodMonitor } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1";

const classes = {
  "v1/ConfigMap": ConfigMap,
  "v1/PersistentVolumeClaim": PersistentVolumeClaim,
  "v1/Secret": Secret,
  "v1/Service": Service,
  "apps/v1/StatefulSet": StatefulSet,
  "batch/v1/Job": Job,
  "policy/v1/PodDisruptionBudget": PodDisruptionBudget,
  "monitoring.coreos.com/v1/PodMonitor": PodMonitor,
};

function checkTfJob(doc) {
  const specs = doc.spec?.tfReplicaSpecs;
  if (!specs || typeof specs !== "object") throw new Error("spec.tfReplicaSpecs missing");
  for (const [role, spec] of Object.entries(specs)) {
    if (!["Chief", "Master", "PS", "Worker", "Evaluator"].includes(role)) {
      throw new Error(`tfReplicaSpecs.${role}: not a TFJob replica type`);
    }
    if (!Number.isInteger(spec.replicas) || spec.replicas < 1) {
      throw new Error(`tfReplicaSpecs.${role}.replicas must be a positive integer`);
    }
    if (!["Always", "OnFailure", "Never", "ExitCode"].includes(spec.restartPolicy)) {
      throw new Error(`tfReplicaSpecs.${role}.restartPolicy: ${spec.restartPolicy}`);
    }
    new PodTemplateSpec(spec.template).validate();
    const containers = spec.template.spec.containers;
    if (!containers.some((c) => c.name === "tensorflow")) {
      throw new Error(`tfReplicaSpecs.${role}: no container named "tensorflow"`);
    }
  }
}

let checked = 0;
for (const file of process.argv.slice(2)) {
  for (const doc of yaml.loadAll(fs.readFileSync(file, "utf8"))) {
    if (!doc) continue;
    const key = `${doc.apiVersion}/${doc.kind}`;
    const name = `${file}: ${doc.kind} ${doc.metadata?.name}`;
    try {
      if (key === "kubeflow.org/v1/TFJob") {
        checkTfJob(doc);
      } else if (classes[key]) {
        new classes[key](doc).validate();
      } else {
        throw new Error(`no schema for ${key}`);
      }
    } catch (e) {
      console.log(`INVALID ${name}: ${e.message}`);
      process.exit(1);
    }
    console.log(`valid ${name}`);
    checked++;
  }
}
console.log(`${checked} objects valid`);
