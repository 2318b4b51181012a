#!/usr/bin/python3
"""Logistic regression's forward pass on a LibSVM file in pure numpy, from
what `psctl export` wrote: tests/psctl_test checks that the AUC it prints is
the one ps_worker --model=lr reported for the same parameters, i.e. that
the export is the trained model, loadable without psrt.

    numpy_lr_auc.py --export=DIR --eval=FILE     # prints "auc=<value>"
"""
import argparse
import json
import os

import numpy as np


def load(export_dir, name):
    index = json.load(open(os.path.join(export_dir, "index.json")))
    for v in index["variables"]:
        if v["name"] == name:
            values = np.load(os.path.join(export_dir, v["file"]))
            ids = np.load(os.path.join(export_dir, v["ids_file"])) if "ids_file" in v else None
            return values, ids
    raise SystemExit(f"{name} is not in {export_dir}/index.json")


def auc(labels, scores):
    """Area under the ROC curve: the Mann-Whitney statistic, ties at half."""
    order = np.argsort(scores, kind="mergesort")
    s, y = scores[order], labels[order]
    ranks = np.empty(len(s))
    i = 0
    while i < len(s):  # average ranks over runs of equal scores
        j = i
        while j + 1 < len(s) and s[j + 1] == s[i]:
            j += 1
        ranks[i : j + 1] = (i + j) / 2.0 + 1
        i = j + 1
    positives = y.sum()
    negatives = len(y) - positives
    return (ranks[y == 1].sum() - positives * (positives + 1) / 2) / (positives * negatives)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--export", required=True)
    p.add_argument("--eval", required=True)
    args = p.parse_args()
    weights, ids = load(args.export, "lr/weights")
    bias, _ = load(args.export, "lr/bias")
    row_of = {int(i): r for r, i in enumerate(ids)}
    labels, scores = [], []
    for line in open(args.eval):
        parts = line.split()
        if not parts:
            continue
        labels.append(1 if float(parts[0]) > 0 else 0)
        z = np.float32(bias[0])
        for term in parts[1:]:
            fid, value = term.split(":")
            r = row_of.get(int(fid))
            if r is not None:  # ids never trained keep their zero init
                z += np.float32(weights[r, 0]) * np.float32(value)
        scores.append(z)
    labels, scores = np.array(labels), np.array(scores, dtype=np.float32)
    print(f"auc={auc(labels, scores):.6f} examples={len(labels)}")


if __name__ == "__main__":
    main()
