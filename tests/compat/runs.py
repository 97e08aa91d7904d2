"""A literal config's first two updates, for the transcribed OpenSeq2Seq and RETURNN suites."""

from opt_train.config import load_config


def train_two_updates(paths, logdir, overrides=()):
    """Two updates of the config, its own length and schedule kept (a Session run to step 2).

    The run ends as any run does (checkpoint, final evaluation, final_metrics.json) but
    for the export of the model (`export=false`), which these suites do not look at
    (0.3-2 s of CPU a config; tests/models/test_export.py checks exports).

    Returns `(config, final metrics)`.
    """
    from opt_train.distributed import get_backend
    from opt_train.training.builder import build_run
    from opt_train.training.loop import Session

    overrides = [f"logdir={logdir}", "use_horovod=false", "num_gpus=null", "batch_size_per_gpu=8",
                 "save_summaries_steps=1", "print_loss_steps=1", "export=false", *overrides]
    config = load_config(list(paths), overrides)
    session = Session(build_run(config, get_backend()))
    try:
        session.start(resume=False)
        session.loop(until=2)
        return config, session.finish()
    finally:
        session.close()
