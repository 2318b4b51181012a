#!/usr/bin/env bash
# Verifies the copied test data against the sha256 sums recorded for it.
set -euo pipefail
cd "$(dirname "$0")/../testdata"
sha256sum -c --quiet <<'SUMS'
5b00264637dbfec36bdeaab5676b0b309ff9eb788d63554ca0a249491c86603d  adult/adult.data
a2a9044bc167a35b2361efbabec64e89d69ce82d9790d2980119aac5fd7e9c05  adult/adult.test
c248284c0b5de30c9e1958d6cdd168a34a654758b620e68f46aefa83fc0a576a  adult/adult.names
6670f62da86673226f5b296a7273ed92a2a2bb6b85fd823e66e983b2038c76ad  criteo_deepfm_sagemaker/val.tfrecords
79b4b312b978da32514fb459dc5d7df7b50fcaa4a8696a6d1a72bb3f45f193c3  penguin_tfx/Split-train/data_tfrecord-00000-of-00001.gz
4b64f7f0ff513919bcc91d341a82c7aca1a6d77002c9f7e478330510ded8511f  penguin_tfx/Split-eval/data_tfrecord-00000-of-00001.gz
SUMS
echo "testdata: checksums OK"
