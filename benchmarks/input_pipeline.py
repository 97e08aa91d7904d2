"""Input pipelines compared: the same data trained from TFRecord files and from memory (samples/s, peak RSS, resume cost).

    python -m benchmarks.input_pipeline [--quick] [--rss-gib 1.0] [--out FILE]

1. Throughput: the default model (mlp [128], batch 64), and a wider one (mlp [1024, 1024]),
   on 64-feature examples, once
   with `data: npz` (in memory) and once with `data: tfrecord` (the same arrays written
   by `opt-train data to-tfrecord`), both driven through the training loop's own
   `Session`. After the first epoch of each, timed stretches alternate between the two
   runs; the ratio is the median TFRecord rate over the median in-memory rate.
2. Peak RSS: each reader trains a few hundred updates in its own process on a data set
   of `--rss-gib` GiB (wide examples, so it is written quickly); the process reports its
   own peak resident set size.
3. Resume: the time to the first batch of a TFRecord stream started at the middle of an
   epoch (what a resume does) against `skip`ping there, and the bytes a tf.data iterator
   checkpoint of that stream would add to every checkpoint (the position skip adds none).

`--quick` uses tiny sizes and the default model only (for the smoke test); its figures mean nothing.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import yaml

from benchmarks import results_path

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = {"model": "mlp", "model_params": {"hidden_units": [128]}}  # configs/default.yaml's model
# A wider model: more compute per batch, so the reader's share of the step is smaller.
WIDE = {"model": "mlp", "model_params": {"hidden_units": [1024, 1024]}}


def write_arrays(path, examples, features, classes=10, seed=0):
    """Gaussian blobs, one per class, as a .npz of `x` (float32) and `y` (int64)."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(classes, features)).astype(np.float32)
    y = rng.integers(classes, size=examples)
    x = np.empty((examples, features), np.float32)
    for start in range(0, examples, 65536):  # in chunks: the noise of 1 GiB at once would double the peak
        stop = min(start + 65536, examples)
        x[start:stop] = centres[y[start:stop]] + rng.normal(size=(stop - start, features)).astype(np.float32)
    np.savez(path, x=x, y=y)


def configs(workdir, examples, features, shards, model=MODEL):
    """(in-memory config, TFRecord config) over the same arrays."""
    from opt_train.data.convert import to_tfrecord

    arrays = os.path.join(workdir, f"data-{examples}x{features}.npz")
    records = os.path.join(workdir, f"records-{examples}x{features}")
    if not os.path.exists(arrays):
        write_arrays(arrays, examples, features)
    converted = to_tfrecord(arrays, records, shards=shards)
    common = {
        **model, "batch_size_per_gpu": 64, "max_steps": 10**9, "print_loss_steps": 10**6,
        "save_checkpoint_steps": None, "save_summaries_steps": None, "eval_steps": None, "random_seed": 0,
    }
    memory = {**common, "data": "npz", "data_params": {"path": arrays, "eval_fraction": 0.01}}
    records = {**common, "data": "tfrecord", "data_params": converted["data_params"]}
    return memory, records


def load(payload, workdir, name):
    from opt_train.config import load_config

    path = os.path.join(workdir, f"{name}.yaml")
    with open(path, "w") as handle:
        yaml.safe_dump({**payload, "logdir": os.path.join(workdir, name)}, handle)
    return load_config([path])


def session(payload, workdir, name):
    from opt_train.distributed import SingleProcess
    from opt_train.training.builder import build_run
    from opt_train.training.loop import Session

    run = build_run(load(payload, workdir, name), SingleProcess())
    started = Session(run, stream=io.StringIO())
    started.start(resume=False)
    return started


def throughput(workdir, quick, model=MODEL, name="default"):
    """Samples/s of each reader after its first epoch, timed in alternating stretches."""
    examples = 512 if quick else 64000
    memory, records = configs(workdir, examples, 64, shards=4 if quick else 16, model=model)
    sessions = {"in_memory": session(memory, workdir, f"memory-{name}"),
                "tfrecord": session(records, workdir, f"tfrecord-{name}")}
    epoch = sessions["tfrecord"].run.data.steps_per_epoch
    for running in sessions.values():
        running.loop(until=epoch + 5)  # the first epoch (and tracing) untimed
    stretch, repeats = (5, 3) if quick else (300, 7)
    rates = {name: [] for name in sessions}
    for repeat in range(repeats):
        order = list(sessions) if repeat % 2 == 0 else list(reversed(sessions))
        for name in order:
            running = sessions[name]
            start = time.perf_counter()
            running.loop(until=running.step + stretch)
            rates[name].append(stretch * 64 / (time.perf_counter() - start))
    medians = {name: statistics.median(values) for name, values in rates.items()}
    resume = resume_cost(sessions["tfrecord"].run.data, epoch, workdir)
    for running in sessions.values():
        running.close()
    return {
        "model": model, "examples": examples, "features": 64, "batch": 64, "steps_per_epoch": epoch,
        "samples_per_sec": medians, "ratio_tfrecord_over_memory": medians["tfrecord"] / medians["in_memory"],
        "repeats": {name: [round(v, 1) for v in values] for name, values in rates.items()},
        "resume": resume,
    }


def resume_cost(data, steps_per_epoch, workdir):
    """Seconds to the first batch from the middle of the second epoch: started there, or skipped to."""
    import tensorflow as tf

    position = steps_per_epoch + steps_per_epoch // 2
    figures = {"position": position}
    for name, make in (("start", lambda: data.train_from(0)), ("resume_at_position", lambda: data.train_from(position)),
                       ("skip_to_position", lambda: data.train.skip(position))):
        start = time.perf_counter()
        next(iter(make()))
        figures[f"{name}_seconds"] = time.perf_counter() - start
    iterator = iter(data.train_from(position))
    next(iterator)
    prefix = tf.train.Checkpoint(iterator=iterator).write(os.path.join(workdir, "iterator", "ckpt"))
    directory = os.path.dirname(prefix)
    figures["iterator_checkpoint_bytes"] = sum(
        os.path.getsize(os.path.join(directory, f)) for f in os.listdir(directory) if f.startswith("ckpt")
    )
    return figures


def peak_rss(workdir, gib, quick):
    """Peak RSS (MiB) of a process training each reader on a data set of `gib` GiB."""
    features = 1024  # 4 KiB an example: 1 GiB is 262,144 of them
    examples = max(2048, int(gib * 2**30 / (4 * features)))
    memory, records = configs(workdir, examples, features, shards=4 if quick else 32)
    steps = 5 if quick else 300
    figures = {"gib": gib, "examples": examples, "features": features, "updates": steps}
    for name, payload in (("in_memory", memory), ("tfrecord", records)):
        path = os.path.join(workdir, f"rss-{name}.json")
        with open(path, "w") as handle:
            json.dump({**payload, "logdir": os.path.join(workdir, f"rss-{name}")}, handle)
        child = subprocess.run([sys.executable, "-m", "benchmarks.input_pipeline", "--child", path, str(steps)],
                               cwd=REPO, capture_output=True, text=True, check=True,
                               env={**os.environ, "PYTHONPATH": REPO})
        figures[f"{name}_peak_rss_mib"] = json.loads(child.stdout.strip().splitlines()[-1])["peak_rss_mib"]
    data_bytes = sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(workdir)
                     for f in files if ".tfrecord" in f and f"{examples}x{features}" in d)
    figures["tfrecord_bytes"] = data_bytes
    return figures


def child(config_path, steps):
    """Runs in its own process: builds one reader's run, trains `steps` updates, prints its peak RSS."""
    with open(config_path) as handle:
        payload = json.load(handle)
    workdir = os.path.dirname(config_path)
    running = session(payload, workdir, os.path.basename(config_path)[:-5])
    running.loop(until=steps)
    running.close()
    print(json.dumps({"peak_rss_mib": own_peak_rss_mib()}))


def own_peak_rss_mib():
    """This process's peak RSS since its exec: VmHWM.

    Not `getrusage(...).ru_maxrss`: Linux keeps that across execve, so a child
    started from a parent holding the arrays would report the parent's peak.
    """
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_all(quick=False, rss_gib=1.0, workdir=None):
    from opt_train.cli.common import import_tensorflow

    import_tensorflow()
    with tempfile.TemporaryDirectory(dir=workdir) as scratch:
        results = {"quick": quick, "throughput": throughput(scratch, quick)}
        if not quick:  # the same code on another model: the smoke test runs it once
            results["throughput_wide"] = throughput(scratch, quick, WIDE, "wide")
        results["peak_rss"] = peak_rss(scratch, 0.01 if quick else rss_gib, quick)
    results["command"] = "python -m benchmarks.input_pipeline" + (" --quick" if quick else "")
    return results


def summary(results):
    speed, rss, resume = results["throughput"], results["peak_rss"], results["throughput"]["resume"]
    return "\n".join([
        f"samples/s after the first epoch: in memory {speed['samples_per_sec']['in_memory']:.0f}, "
        f"TFRecord {speed['samples_per_sec']['tfrecord']:.0f}, ratio {speed['ratio_tfrecord_over_memory']:.3f}",
        *([f"wider model {results['throughput_wide']['model']['model_params']['hidden_units']}: in memory "
           f"{results['throughput_wide']['samples_per_sec']['in_memory']:.0f}, TFRecord "
           f"{results['throughput_wide']['samples_per_sec']['tfrecord']:.0f}, ratio "
           f"{results['throughput_wide']['ratio_tfrecord_over_memory']:.3f}"] if "throughput_wide" in results else []),
        f"peak RSS on {rss['gib']} GiB ({rss['examples']} x {rss['features']} float32): in memory "
        f"{rss['in_memory_peak_rss_mib']:.0f} MiB, TFRecord {rss['tfrecord_peak_rss_mib']:.0f} MiB",
        f"resume at batch {resume['position']}: first batch in {resume['resume_at_position_seconds']:.2f} s "
        f"(fresh start {resume['start_seconds']:.2f} s, skip {resume['skip_to_position_seconds']:.2f} s); "
        f"an iterator checkpoint would add {resume['iterator_checkpoint_bytes']} bytes per checkpoint",
    ])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, few steps (smoke test only)")
    parser.add_argument("--rss-gib", type=float, default=1.0, help="size of the peak-RSS data set in GiB")
    parser.add_argument("--out", help="write the figures as JSON here (default: benchmarks/results/<date>-input_pipeline.json)")
    parser.add_argument("--workdir", help="where the data sets are written (default: the system temp dir)")
    parser.add_argument("--child", nargs=2, metavar=("CONFIG", "STEPS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child[0], int(args.child[1]))
        return
    results = run_all(quick=args.quick, rss_gib=args.rss_gib, workdir=args.workdir)
    from opt_train.atomic import write_text

    write_text(args.out or results_path.dated("input_pipeline", quick=args.quick), json.dumps(results, indent=2) + "\n")
    print(summary(results))


if __name__ == "__main__":
    from benchmarks import command_line

    command_line(main)
