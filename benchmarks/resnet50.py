"""ResNet-50 on synthetic ImageNet-shaped batches: images/s of opt-train's loop, `Model.fit` and a hand-written loop.

    python -m benchmarks.resnet50 [--dtype float32|mixed] [--batch 32] [--image-size 224]
                                  [--steps 10] [--repeats 3] [--out FILE]
    python -m benchmarks.resnet50 --quick --out /tmp/r.json   # VGG16 on tiny images: checks the harness only

The classic data-parallel figure, on one device: the same harness runs unchanged on a
GPU (pass `--dtype mixed` there). The model and data are `configs/resnet50_synthetic.yaml`
with ImageNet's shape set by `--set` overrides (224x224x3, 1000 classes), so pipeline (a)
is exactly what `opt-train train` runs on that config. The three pipelines and the
interleaved measurement are those of `benchmarks/run.py` (`benchmarks/pipelines.py`).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import sys
import tempfile

from benchmarks import results_path, timing
from benchmarks.scenarios import DEFAULT_CONFIG

CONFIG = os.path.join(os.path.dirname(DEFAULT_CONFIG), "resnet50_synthetic.yaml")
PREFETCHED_BATCHES = 4
TARGET = ("opt_train/keras_fit", ">=", 1.0)


# --quick swaps ResNet-50 for VGG16, another keras.applications model: the same harness, with
# 20 layers to build and trace rather than ResNet-50's 176 (a quarter-width MobileNet's 87 took
# 2.4x the CPU of VGG16 at the quick run's 32x32 images and batch of 2).
QUICK_MODEL = ("model={keras_application: VGG16}", "model_params={pooling: avg}")


def overrides(*, dtype, batch, image_size, classes, steps, model=None, quick=False):
    """`--set` overrides that make the example config an ImageNet-shaped benchmark run."""
    train_examples = batch * PREFETCHED_BATCHES
    # The data's eval split (20%) comes out of num_examples; the train split must hold the prefetched batches.
    examples = max(10, math.ceil(train_examples / 0.8) + 1)
    items = [
        f"data_params={{num_examples: {examples}, height: {image_size}, width: {image_size}, "
        f"channels: 3, num_classes: {classes}}}",
        f"batch_size_per_gpu={batch}",
        f"dtype={dtype}",
        # The tape loop and fit get the optimizer's constant rate: so does (a).
        "lr_policy=fixed",
        "num_epochs=null",
        "max_steps=1000000",
        # No evaluation, checkpoints or summaries inside the timed updates; one progress
        # line per timed window, as a run reports every print_loss_steps.
        "eval_steps=null",
        "save_checkpoint_steps=null",
        "save_summaries_steps=null",
        f"print_loss_steps={steps}",
    ]
    if dtype == "mixed":
        items.append("loss_scaling=Backoff")
    if quick:
        items.extend(QUICK_MODEL)
    if model:
        items.append(f"model={{keras_application: {model}}}")
    return items


def measure(args, workdir):
    """Builds the three pipelines on the same batches, measures them interleaved; returns the result dict."""
    from benchmarks.pipelines import BatchSource, KerasFitPipeline, OptTrainPipeline, TapeLoopPipeline
    from opt_train.config import load_config

    sets = overrides(
        dtype=args.dtype, batch=args.batch, image_size=args.image_size, classes=args.classes,
        steps=args.steps, model=args.model, quick=args.quick,
    )
    config = load_config([CONFIG], [*sets, f"logdir={os.path.join(workdir, 'run')}"])
    from opt_train.distributed import get_backend
    from opt_train.training.builder import build_data_for

    source = BatchSource(build_data_for(config, get_backend()).train, PREFETCHED_BATCHES)
    pipelines = {}
    for cls in (OptTrainPipeline, TapeLoopPipeline, KerasFitPipeline):
        pipelines[cls.name] = cls(config, source)
    measures = {
        name: (lambda pipeline=pipeline: pipeline.measure(args.warmup, args.steps))
        for name, pipeline in pipelines.items()
    }
    seconds = timing.interleave(measures, args.repeats)
    figures = {
        name: timing.summarize(seconds[name], args.steps, pipelines[name].samples_per_update)
        for name in pipelines
    }
    for pipeline in pipelines.values():
        pipeline.close()
    ratios = {
        "opt_train/keras_fit": timing.ratio(figures["opt_train"], figures["keras_fit"]),
        "opt_train/tape_loop": timing.ratio(figures["opt_train"], figures["tape_loop"]),
        "opt_train/keras_fit_best": timing.ratio(figures["opt_train"], figures["keras_fit"], "best_samples_per_sec"),
    }
    key, comparison, threshold = TARGET
    return {
        "setup": {
            "config": os.path.relpath(CONFIG, os.path.dirname(os.path.dirname(CONFIG))),
            "overrides": sets,
            "batch": args.batch,
            "image_size": args.image_size,
            "classes": args.classes,
            "dtype": args.dtype,
            "steps": args.steps,
            "warmup": args.warmup,
            "repeats": args.repeats,
            "quick": args.quick,
        },
        "images_per_sec": {name: round(figure["samples_per_sec"], 3) for name, figure in figures.items()},
        "figures": figures,
        "ratios": ratios,
        "target": {"key": key, "comparison": comparison, "threshold": threshold, "met": ratios[key] >= threshold},
        "meta": _meta(),
    }


def _meta():
    import keras
    import tensorflow as tf

    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "gpus": [device.name for device in tf.config.list_physical_devices("GPU")],
        "load_average": list(os.getloadavg()),
    }


def parse(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", choices=("float32", "mixed"), default="float32")
    parser.add_argument("--batch", type=int, default=None, help="images per update (default 32; quick 2)")
    parser.add_argument("--image-size", type=int, default=None, help="height = width (default 224; quick 32)")
    parser.add_argument("--classes", type=int, default=None, help="classes (default 1000; quick 4)")
    parser.add_argument("--steps", type=int, default=None, help="timed updates per measurement (default 10)")
    parser.add_argument("--warmup", type=int, default=None, help="untimed updates before each (default 2)")
    parser.add_argument("--repeats", type=int, default=None, help="interleaved measurements (default 3)")
    parser.add_argument("--model", default=None, help="another keras.applications name (default: the config's ResNet50)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks the harness; figures mean nothing")
    parser.add_argument("--out", help="where to write the JSON (default: benchmarks/results/<date>-resnet50.json)")
    args = parser.parse_args(argv)
    defaults = (
        {"batch": 2, "image_size": 32, "classes": 4, "steps": 1, "warmup": 1, "repeats": 1}
        if args.quick else
        {"batch": 32, "image_size": 224, "classes": 1000, "steps": 10, "warmup": 2, "repeats": 3}
    )
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    return args


def main(argv=None):
    args = parse(argv)
    with tempfile.TemporaryDirectory(prefix="resnet50-bench-") as workdir:
        result = measure(args, workdir)
    args.out = args.out or results_path.dated("resnet50", quick=args.quick)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=2, sort_keys=True)
        handle.write("\n")
    for name, value in result["images_per_sec"].items():
        print(f"{name:>10}: {value:10.2f} images/s")
    target = result["target"]
    verdict = "met" if target["met"] else "missed"
    print(f"{target['key']} = {result['ratios'][target['key']]:.3f} ({verdict}: target {target['comparison']} "
          f"{target['threshold']}); written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
