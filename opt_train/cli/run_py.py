"""OpenSeq2Seq's `run.py` command line (`--config_file=x --mode=train ...`) read as opt-train's, TF-free.

run.py (NVIDIA/OpenSeq2Seq@8681d38, open_seq2seq/utils/utils.py `get_base_config`) takes
`--config_file`, `--mode` (train by default; eval, train_eval, infer, interactive_infer),
`--infer_output_file`, `--continue_learning`, `--no_dir_check`, `--benchmark`,
`--bench_steps`, `--bench_start`, `--debug_port`, `--enable_logs`, `--use_xla_jit`, and
overrides any scalar of `base_params` with `--key=value` (nested keys joined by `/`:
`--optimizer_params/learning_rate=0.1`, `--use_horovod=True`). `translate` turns such a
command line into opt-train's, with one note line for each flag whose meaning differs.

A migrating user mixes both forms, in either order: opt-train's own options before a command
(`--config`/`-c`, `--set`/`-s`, `--mode`, `--verbose`) are read here too
(`--config_file=x.yaml --set max_steps=5`, `--config x.yaml --enable_logs`), and run.py's flags
after `train` among its own options (`train --config x.yaml --np 2 --enable_logs`).
"""

from __future__ import annotations

import click

from opt_train.suggest import closest

MODES = ("train", "eval", "train_eval", "infer", "interactive_infer")
# Flags run.py takes without a value (`--use_horovod` alone: the override `--use_horovod=True`).
SWITCHES = ("--continue_learning", "--no_dir_check", "--benchmark", "--enable_logs", "--use_xla_jit", "--use_horovod")
# Flags run.py takes with a value and opt-train has no use for (a note each).
VALUED = ("--infer_output_file", "--debug_port", "--bench_steps", "--bench_start")
NOTES = {
    "--continue_learning": "opt-train continues the run in logdir whenever the config describes the same run "
                           "(OpenSeq2Seq refused a logdir holding a checkpoint without this flag)",
    "--no_dir_check": "opt-train checks logdir by what run it holds: a different run goes to <logdir>-N",
    "--enable_logs": "opt-train always writes metrics.jsonl, events and the resolved config into logdir; "
                     "stdout and stderr are not copied to logdir/logs",
    "--debug_port": "no TensorFlow debugger: ignored",
    "--use_xla_jit": "read as jit_compile=true",
}


# opt-train's own options without a command (`cli.main.cli`'s), read in run.py's form too.
CONFIG_FLAGS = ("--config", "-c")
SET_FLAGS = ("--set", "-s")
OWN_SWITCHES = ("--verbose",)
OWN_FLAGS = (*CONFIG_FLAGS, *SET_FLAGS, "--mode", *OWN_SWITCHES)


def is_run_py(argv):
    """True when the command line is run.py's: it names `--config_file`, or, with no command, a flag only
    run.py takes (`opt-train --config x.yaml --enable_logs`, `... --batch_size_per_gpu=64`)."""
    if any(arg == "--config_file" or arg.startswith("--config_file=") for arg in argv):
        return True
    if any(arg in ("--help", "-h", "--version") for arg in argv):
        return False
    foreign = False
    for flag, _ in _pairs(argv, strict=False):
        if flag is None:
            return False  # a command (or a stray word) for click to read
        foreign = foreign or flag not in OWN_FLAGS
    return foreign


def _pairs(argv, strict=True):
    """`(flag, value)` for each run.py argument: `--a=b`, `--a b`, or a switch with value None.

    Not `strict` (only asking whether the line is run.py's), a word where a flag should be ends the
    pairs as `(None, word)`, and a flag without its value is `(flag, None)`, instead of an error.
    """
    i = 0
    while i < len(argv):
        arg = argv[i]
        if not arg.startswith("--") and arg not in (*CONFIG_FLAGS, *SET_FLAGS):
            if not strict:
                yield None, arg
                return
            raise click.UsageError(f"run.py takes only --flags; received {arg!r}")
        flag, has_value, value = arg.partition("=")
        if not has_value:
            if flag in SWITCHES or flag in OWN_SWITCHES:
                value = None
            elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                value = argv[i + 1]
                i += 1
            elif strict and flag in _train_options():
                raise _train_option_refused(flag)
            elif strict:
                raise click.UsageError(f"{flag} needs a value (run.py: {flag}=VALUE){_flag_hint(flag)}")
        yield flag, value
        i += 1


def _train_options():
    """`opt-train train`'s own options (`--np`, `--no-resume`, ...), read from the command itself."""
    return set(_train_takes_value()) - set(OWN_FLAGS)


def _train_option_refused(flag):
    return click.UsageError(f"{flag} is an option of `opt-train train`, not of the form without a command: "
                            f"opt-train train --config CONFIG {flag} ...")


def _flag_hint(flag):
    """"; did you mean '--verbose'?" for a misspelt flag of either form, else ''."""
    suggestion = closest(flag, (*OWN_FLAGS, *SWITCHES, *VALUED, "--config_file", "--mode", "--benchmark"))
    return f"; did you mean '{suggestion}'?" if suggestion and suggestion != flag else ""


class _Reading:
    """What run.py's flags of one command line say, read one `(flag, value)` pair at a time."""

    def __init__(self):
        self.configs, self.sets, self.notes, self.front, self.bench = [], [], [], [], {}
        self.mode, self.benchmark, self.run_py_config = None, False, False

    def read(self, flag, value):
        if flag == "--config_file" or flag in CONFIG_FLAGS:
            self.configs.append(value)
            self.run_py_config = self.run_py_config or flag == "--config_file"
        elif flag in SET_FLAGS:
            self.sets.append(value)
        elif flag in OWN_SWITCHES:
            self.front.append(flag)
        elif flag == "--mode":
            if value not in MODES:
                raise click.UsageError(f"--mode: has to be one of {', '.join(MODES)} (as run.py). Received: {value!r}")
            if value == "interactive_infer":
                raise click.UsageError("--mode interactive_infer: run.py refuses it too (it is for notebooks)")
            if value == "infer":
                raise click.UsageError("--mode infer: OpenSeq2Seq's model classes decoded their infer data to "
                                       "--infer_output_file; opt-train's is `opt-train predict --config CONFIG "
                                       "--input EXAMPLES.npz --output OUT.npz` (the latest checkpoint in logdir)")
            self.mode = value
        elif flag == "--benchmark":
            self.benchmark = True
        elif flag == "--use_horovod" and value is None:
            self.sets.append("use_horovod=true")
        elif flag in ("--bench_steps", "--bench_start"):
            self.bench[flag] = value
        elif flag == "--use_xla_jit":
            self.sets.append("jit_compile=true")
            self.notes.append(f"{flag}: {NOTES[flag]}")
        elif flag == "--infer_output_file":
            self.notes.append(f"{flag}: used by --mode infer only: ignored")
        elif flag in NOTES:
            self.notes.append(f"{flag}: {NOTES[flag]}")
        elif flag in _train_options():
            raise _train_option_refused(flag)
        else:
            # run.py's override of a base_params scalar: `/` nests, as its nest_dict.
            self.sets.append(f"{flag[2:].replace('/', '.')}={value}")

    def settle_bench(self, benchmark):
        """run.py's --benchmark: max_steps = --bench_steps (20), timing from --bench_start; without
        `benchmark`, a note for each of them given."""
        if not benchmark:
            self.notes += [f"{flag}: used with --benchmark only: ignored" for flag in self.bench]
            return
        self.sets += [f"max_steps={self.bench.get('--bench_steps', 20)}", "num_epochs=null"]
        if "--bench_start" in self.bench:
            self.sets.append(f"bench_start={self.bench['--bench_start']}")

    def config_args(self):
        return [part for config in self.configs for part in ("--config", config)]

    def set_args(self):
        return [part for item in self.sets for part in ("--set", item)]


def opt_train_words(argv):
    """`(argv, notes)` in opt-train's words for a command line holding run.py's flags (alone, mixed with
    opt-train's options, or after `train`); None for a command line of opt-train's own."""
    return translate(argv) if is_run_py(argv) else translate_train(argv)


def translate(argv):
    """`(opt-train argv, notes)` for run.py's `argv`; a flag opt-train cannot honour is a `click.UsageError`.

    The mode defaults to run.py's (train) when `--config_file` names the config, to opt-train's
    (train_eval) when `--config` does.
    """
    if any(arg in ("--help", "-h") for arg in argv):
        return ["--help"], []
    reading = _Reading()
    for flag, value in _pairs(argv):
        reading.read(flag, value)
    if not reading.configs:
        raise click.UsageError("--config_file: required (run.py: --config_file=CONFIG; or opt-train's --config CONFIG)")
    mode = reading.mode or ("train" if reading.run_py_config else "train_eval")
    reading.settle_bench(reading.benchmark)
    if reading.benchmark:
        command = [*reading.front, "train", *reading.config_args(), "--benchmark"]
        if mode == "train":
            reading.sets.append("eval_steps=null")
        elif mode == "eval":
            raise click.UsageError("--benchmark times training: give --mode train or train_eval with it")
    else:
        command = [*reading.front, *reading.config_args(), "--mode", mode]
    return command + reading.set_args(), reading.notes


def translate_train(argv):
    """`(opt-train argv, notes)` for `[--verbose] train ...` with run.py's flags among train's own, else None.

    `opt-train train --config x.yaml --enable_logs --batch_size_per_gpu=64` is read as
    `opt-train train --config x.yaml --set batch_size_per_gpu=64` with --enable_logs's note, as
    the form without a command reads them. A word click would not know either (a misspelt
    option of train's) is left for click to refuse.
    """
    at = next((i for i, arg in enumerate(argv) if not arg.startswith("-")), None)
    if at is None or argv[at] != "train" or any(arg not in OWN_SWITCHES for arg in argv[:at]):
        return None
    takes_value = _train_takes_value()
    own, foreign = [], []
    args = argv[at + 1:]
    i = 0
    while i < len(args):
        arg = args[i]
        flag, has_value, _ = arg.partition("=")
        if flag in ("--help", "-h") or flag in takes_value:
            own.append(arg)
            if not has_value and takes_value.get(flag) and i + 1 < len(args):
                own.append(args[i + 1])
                i += 1
        elif _is_run_py_flag(flag):
            foreign.append(arg)
            if not has_value and flag not in SWITCHES and i + 1 < len(args) and not args[i + 1].startswith("-"):
                foreign.append(args[i + 1])
                i += 1
        else:
            own.append(arg)
        i += 1
    if not foreign:
        return None
    reading = _Reading()
    for flag, value in _pairs(foreign):
        if flag == "--mode":
            raise click.UsageError("--mode: only without a command (opt-train --config CONFIG --mode train); "
                                   "`opt-train train` is --mode train_eval")
        reading.read(flag, value)
    # train's own --benchmark keeps its max_steps unless run.py's --bench_steps/--bench_start come with it.
    reading.settle_bench("--benchmark" in own and bool(reading.bench))
    return [*argv[:at], "train", *reading.config_args(), *own, *reading.set_args()], reading.notes


def _train_takes_value():
    """`opt-train train`'s own options (with `--config`/`--set`), each to whether it takes a value."""
    from opt_train.cli.train import train

    return {opt: not (param.is_flag or param.count) for param in train.params for opt in param.opts}


def _is_run_py_flag(flag):
    """A flag of run.py's own (`--enable_logs`, `--config_file`) or its override of a config key
    (`--batch_size_per_gpu`, `--optimizer_params/learning_rate`); a misspelt option is click's to refuse."""
    from opt_train.config.schema import FIELD_NAMES

    return flag in (*SWITCHES, *VALUED, "--config_file", "--mode") or flag[2:].split("/")[0] in FIELD_NAMES
