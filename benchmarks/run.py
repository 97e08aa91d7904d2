"""Runs every measurement of the harness in one process and writes the results as JSON.

    python -m benchmarks.run [--quick] [--out FILE]   (default: benchmarks/results/<date>-harness.json)

`--quick` uses tiny models and few steps, measures the baselines on large_mlp (with XLA) and
default with live input only, one feature on the default scenario only, and runs `--benchmark`
in this process (for the smoke test); its figures mean nothing.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time

from benchmarks import results_path
from benchmarks import scenarios as setups
from benchmarks import startup, timing
from benchmarks.flops import MatmulProbe, mlp_step_flops

PREFETCHED_BATCHES = 16
COMPUTE_FEATURES = ("loss_scaling", "iter_size_4", "clipping", "larc")
# A quick run measures one feature (the summaries, the most to trace): each is the same loop
# over another config, and every feature's config is validated by the smoke test.
QUICK_FEATURES = ("summaries_every_step",)

# The targets: (key in "figures", comparison, threshold).
TARGETS = (
    ("default.opt_train/tape_loop", ">=", 0.97),
    ("default.opt_train/keras_fit", ">=", 1.5),
    ("large_mlp.opt_train/tape_loop", ">=", 0.97),
    ("large_mlp.opt_train/keras_fit", ">=", 1.5),
    ("large_mlp.opt_train_xla/tape_loop", ">=", 1.15),
    ("matmul_mlp.fraction_of_matmul", ">=", 0.85),
    ("features.*", ">=", 0.95),
    ("startup.help_seconds", "<=", 0.3),
)


class Harness:
    """Builds the pipelines of each section, measures them interleaved, and collects the figures."""

    def __init__(self, quick, workdir):
        self.quick = quick
        self.workdir = workdir
        self.scenarios = setups.scenarios(quick)
        self._logdirs = 0

    def logdir(self):
        self._logdirs += 1
        return os.path.join(self.workdir, f"run{self._logdirs}")

    def config(self, scenario, extra=()):
        return setups.load(scenario, self.logdir(), extra)

    def source(self, config, live=False):
        from opt_train.data import build_data

        from benchmarks.pipelines import BatchSource

        data = build_data(config.data, dict(config.data_params), batch_size=config.batch_size_per_gpu,
                          seed=config.random_seed)
        return BatchSource(data.train, PREFETCHED_BATCHES, live=live)

    def measure(self, pipelines, scenario, extra_measures=None):
        """Interleaves the pipelines (and any extra zero-argument measures); returns name -> figures."""
        measures = {
            name: (lambda p=pipeline: p.measure(scenario.warmup, scenario.steps))
            for name, pipeline in pipelines.items()
        }
        measures.update(extra_measures or {})
        seconds = timing.interleave(measures, scenario.repeats)
        figures = {
            name: timing.summarize(seconds[name], scenario.steps, pipeline.samples_per_update)
            for name, pipeline in pipelines.items()
        }
        for pipeline in pipelines.values():
            pipeline.close()
        return figures, seconds

    # -- sections ------------------------------------------------------------------
    def matmul_probe(self):
        return MatmulProbe.square(size=256 if self.quick else 2048, calls=2 if self.quick else 6)

    def flops(self, scenario, figures, probe, probe_seconds):
        """Each pipeline's FLOP/s on an MLP scenario against the bare matmul's, measured interleaved."""
        matmul_per_sec = [probe.flops_per_call * probe.calls / total for total in probe_seconds]
        matmul_median = statistics.median(matmul_per_sec)
        flops = mlp_step_flops(scenario.layer_sizes, scenario.batch_size)
        achieved = {name: flops * value["steps_per_sec"] for name, value in figures.items()}
        return {
            "flops_formula": "6 * batch * sum(n_in * n_out) per step (forward + both backward matmuls)",
            "flops_per_step": flops,
            "flops_per_step_exact": mlp_step_flops(scenario.layer_sizes, scenario.batch_size, exact=True),
            "matmul": {
                "size": probe.size,
                "calls_per_repeat": probe.calls,
                "median_flops_per_sec": matmul_median,
                "max_flops_per_sec": max(matmul_per_sec),
                "repeats_flops_per_sec": [round(value) for value in matmul_per_sec],
            },
            "achieved_flops_per_sec": achieved,
            "fraction_of_matmul": {name: round(value / matmul_median, 4) for name, value in achieved.items()},
        }

    def baselines(self, scenario, live=False, with_xla=True, with_flops=False):
        """(a) opt-train, (b) tape loop, (c) fit on one scenario, plus the XLA variants of (a) and (b).

        `with_flops` interleaves the bare matmul probe too, for the FLOP/s each pipeline
        reaches and the largest (a)/(c) any pipeline running these matmuls could reach.
        """
        from benchmarks.pipelines import KerasFitPipeline, OptTrainPipeline, TapeLoopPipeline

        config = self.config(scenario)
        source = self.source(config, live)
        pipelines = {
            "opt_train": OptTrainPipeline(config, source),
            "tape_loop": TapeLoopPipeline(config, source),
            "keras_fit": KerasFitPipeline(config, source),
        }
        if with_xla:
            xla_config = self.config(scenario, ("jit_compile=true",))
            pipelines["opt_train_xla"] = OptTrainPipeline(xla_config, source)
            pipelines["tape_loop_xla"] = TapeLoopPipeline(config, source, jit_compile=True)
        probes = {}
        if with_flops:
            probes = {"matmul": self.matmul_probe(),
                      "step_matmuls": MatmulProbe.mlp_step(scenario.layer_sizes, scenario.batch_size)}
        figures, seconds = self.measure(pipelines, scenario, {name: probe.measure for name, probe in probes.items()})
        ratios = {
            "opt_train/tape_loop": timing.ratio(figures["opt_train"], figures["tape_loop"]),
            "opt_train/keras_fit": timing.ratio(figures["opt_train"], figures["keras_fit"]),
        }
        if with_xla:
            ratios["opt_train_xla/tape_loop"] = timing.ratio(figures["opt_train_xla"], figures["tape_loop"])
            ratios["tape_loop_xla/tape_loop"] = timing.ratio(figures["tape_loop_xla"], figures["tape_loop"])
            ratios["opt_train_xla/tape_loop_xla"] = timing.ratio(figures["opt_train_xla"], figures["tape_loop_xla"])
        best = {name: timing.ratio(figures[a], figures[b], "best_samples_per_sec")
                for name, (a, b) in ((name, name.split("/")) for name in ratios)}
        section = {
            "input": "live tf.data iterator" if live else f"{PREFETCHED_BATCHES} pre-fetched batches, cycled",
            "set": setups.set_flags(scenario),
            "batch_size": scenario.batch_size,
            "timed_steps": scenario.steps,
            "warmup_steps": scenario.warmup,
            "repeats": scenario.repeats,
            "pipelines": figures,
            "ratios": ratios,
            "ratios_of_best_repeats": best,
        }
        if probes:
            section["flops"] = self.flops(scenario, figures, probes["matmul"], seconds["matmul"])
            step_matmuls = probes["step_matmuls"]
            matmuls_ms = 1000.0 * statistics.median(seconds["step_matmuls"]) / step_matmuls.calls
            section["step_matmuls"] = {
                "products": [list(product) for product in step_matmuls.products],
                "ms_per_step": matmuls_ms,
                "ms_per_step_repeats": [round(1000.0 * total / step_matmuls.calls, 4)
                                        for total in seconds["step_matmuls"]],
            }
            # No pipeline can take less than its matmuls alone: (c) over that bounds (a)/(c).
            section["ceiling"] = {
                "opt_train/keras_fit": round(figures["keras_fit"]["ms_per_step"] / matmuls_ms, 4),
                "meaning": "(a)/(c) if (a) took no time but the step's matmuls, run alone at their own shapes",
            }
        return section

    def features(self, scenario, names=tuple(setups.FEATURES)):
        """opt-train with each pipeline feature, against the plain pipeline at the same micro-batch."""
        from benchmarks.pipelines import OptTrainPipeline

        source = None
        pipelines = {}
        for feature in ("plain", *[name for name in names if name != "plain"]):
            config = self.config(scenario, setups.FEATURES[feature])
            source = source or self.source(config)
            pipelines[feature] = OptTrainPipeline(config, source)
        figures, _ = self.measure(pipelines, scenario)
        plain = figures["plain"]
        return {
            "set": setups.set_flags(scenario),
            "timed_steps": scenario.steps,
            "repeats": scenario.repeats,
            "features": {name: " ".join(setups.FEATURES[name]) for name in pipelines},
            "pipelines": figures,
            "ratio_vs_plain": {name: timing.ratio(value, plain) for name, value in figures.items() if name != "plain"},
            "ratio_vs_plain_of_best_repeats": {
                name: timing.ratio(value, plain, "best_samples_per_sec")
                for name, value in figures.items()
                if name != "plain"
            },
        }

    def matmul_bound(self, scenario):
        """opt-train and the tape loop on a matmul-bound MLP, interleaved with a bare matmul probe."""
        from benchmarks.pipelines import OptTrainPipeline, TapeLoopPipeline

        config = self.config(scenario)
        source = self.source(config)
        pipelines = {"opt_train": OptTrainPipeline(config, source), "tape_loop": TapeLoopPipeline(config, source)}
        probe = self.matmul_probe()
        figures, seconds = self.measure(pipelines, scenario, {"matmul": probe.measure})
        return {
            "set": setups.set_flags(scenario),
            "layer_sizes": list(scenario.layer_sizes),
            "batch_size": scenario.batch_size,
            "pipelines": figures,
            **self.flops(scenario, figures, probe, seconds["matmul"]),
        }

    def startup(self):
        default = self.scenarios["default"]
        return {
            "help": startup.help_seconds(runs=1 if self.quick else 5),
            "tensorflow_import": startup.tensorflow_import_seconds(runs=1 if self.quick else 6),
            "first_step": startup.first_step_seconds(setups.DEFAULT_CONFIG, default.overrides, self.logdir()),
            "cli_benchmark": startup.cli_benchmark(
                setups.DEFAULT_CONFIG, default.overrides, self.logdir(), max_steps=20 if self.quick else 300,
                in_process=self.quick,
            ),
        }


def _figures(results):
    """The figures the targets are about, from whichever sections ran."""
    figures = {}
    for scenario, section in results.get("baselines", {}).items():
        for name, value in section["ratios"].items():
            figures[f"{scenario}.{name}"] = value
    if "matmul_bound" in results:
        figures["matmul_mlp.fraction_of_matmul"] = results["matmul_bound"]["fraction_of_matmul"]["opt_train"]
    if "startup" in results:
        figures["startup.help_seconds"] = results["startup"]["help"]["median_seconds"]
    for scenario, section in results.get("features", {}).items():
        for name, value in section["ratio_vs_plain"].items():
            figures[f"features.{scenario}.{name}"] = value
    return figures


def _ceilings(results):
    """The largest value each figure could take on this machine, where the harness measured one."""
    return {
        f"{scenario}.{name}": value
        for scenario, section in results.get("baselines", {}).items()
        for name, value in section.get("ceiling", {}).items()
        if name != "meaning"
    }


def _targets(results):
    """Each issue target with its measured value, whether it is met, and its measured ceiling if any."""
    figures, ceilings = _figures(results), _ceilings(results)
    rows = []
    for pattern, comparison, threshold in TARGETS:
        keys = [key for key in figures if key == pattern or (pattern.endswith("*") and key.startswith(pattern[:-1]))]
        for key in keys:
            value = figures[key]
            met = value >= threshold if comparison == ">=" else value <= threshold
            row = {"figure": key, "target": f"{comparison} {threshold}", "value": value, "met": bool(met)}
            if key in ceilings:
                row["ceiling"] = ceilings[key]
                row["reachable"] = bool(ceilings[key] >= threshold)
            rows.append(row)
    return rows


def _meta(quick, started):
    import keras
    import tensorflow as tf

    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": "python -m benchmarks.run" + (" --quick" if quick else ""),
        "quick": quick,
        "python": platform.python_version(),
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "loadavg_start": list(os.getloadavg()),
        "import_seconds": time.perf_counter() - started,
    }


SECTIONS = ("startup", "baselines", "features", "matmul_bound")


def run_all(quick=False, workdir=None, sections=SECTIONS):
    """The `sections` asked for, in the order the README reports them; returns the results dict."""
    started = time.perf_counter()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    results = {"meta": _meta(quick, started)}
    harness = Harness(quick, workdir or tempfile.mkdtemp(prefix="opt_train_bench_"))
    if "startup" in sections:
        results["startup"] = harness.startup()
    if "baselines" in sections:
        results["baselines"] = {}
        # The same section on each scenario: a quick run measures large_mlp's (pre-fetched input,
        # XLA, FLOP/s) and default's with live input below, not default's pre-fetched.
        for name in ("large_mlp",) if quick else ("default", "large_mlp"):
            results["baselines"][name] = harness.baselines(harness.scenarios[name], with_flops=name == "large_mlp")
            gc.collect()
        results["baselines"]["default_live_input"] = harness.baselines(
            harness.scenarios["default"], live=True, with_xla=False
        )
    if "features" in sections:
        results["features"] = {"default": harness.features(harness.scenarios["default"],
                                                           QUICK_FEATURES if quick else tuple(setups.FEATURES))}
        gc.collect()
        if not quick:  # the same section on another scenario: the smoke test runs it once
            # Summaries every 100 steps need windows of hundreds of steps: measured on the default only.
            results["features"]["large_mlp"] = harness.features(harness.scenarios["large_mlp"], COMPUTE_FEATURES)
            gc.collect()
    if "matmul_bound" in sections:
        results["matmul_bound"] = harness.matmul_bound(harness.scenarios["matmul_mlp"])
    results["targets"] = _targets(results)
    results["meta"]["loadavg_end"] = list(os.getloadavg())
    results["meta"]["total_seconds"] = time.perf_counter() - started
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, few steps (smoke test only)")
    parser.add_argument("--out", help="where to write the JSON (default: benchmarks/results/<date>-harness.json)")
    parser.add_argument("--only", nargs="+", choices=SECTIONS, default=SECTIONS, help="run only these sections")
    args = parser.parse_args(argv)
    workdir = tempfile.mkdtemp(prefix="opt_train_bench_")
    try:
        results = run_all(quick=args.quick, workdir=workdir, sections=tuple(args.only))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    args.out = args.out or results_path.dated("harness", quick=args.quick)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as handle:
        json.dump(results, handle, indent=2)
        handle.write("\n")
    missed = [row for row in results["targets"] if not row["met"]]
    sys.stdout.write(f"wrote {args.out}; {len(results['targets']) - len(missed)} targets met, {len(missed)} missed\n")
    for row in results["targets"]:
        verdict = "met   " if row["met"] else "MISSED"
        ceiling = f"; at most {row['ceiling']:.3g} on this machine" if "ceiling" in row else ""
        sys.stdout.write(f"  {verdict} {row['figure']}: {row['value']:.4g} (target {row['target']}{ceiling})\n")


if __name__ == "__main__":
    main()
