"""How the job is started, held against the config: launcher ranks without `use_horovod` refused naming the key, the reverse a warning."""

import os

from tests.support import SMALL_RUN, one_error_line


def test_launched_as_ranks_without_use_horovod_is_refused_naming_the_key(write_config, tmp_path):
    from click.testing import CliRunner

    from opt_train.cli.main import cli as group

    config = write_config(SMALL_RUN)
    result = CliRunner().invoke(group, ["train", "--config", str(config)], env={"HOROVOD_SIZE": "2", "HOROVOD_RANK": "1"})
    assert result.exit_code == 2, result.output
    line = one_error_line(result)
    assert "use_horovod" in line and "2 ranks" in line
    assert not (tmp_path / "run").exists()


def test_use_horovod_without_a_launcher_warns(write_config, tmp_path):
    """The reverse is a warning, checked TF-free: training one rank is not wrong, only maybe not meant."""
    from opt_train.config import load_config
    from opt_train.training.launch import check_launch

    config = load_config([str(write_config({**SMALL_RUN, "use_horovod": True}))])
    saved = {name: os.environ.pop(name, None) for name in ("HOROVOD_SIZE", "HOROVOD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")}
    try:
        assert "not started by horovodrun" in check_launch(config)
    finally:
        os.environ.update({k: v for k, v in saved.items() if v is not None})
