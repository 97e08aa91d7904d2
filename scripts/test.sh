#!/usr/bin/env bash
# Runs the test suite: installs what the tests need (this checkout with its dev extras,
# unless scripts/installed.py finds it installed already; Horovod built against the
# installed TensorFlow), then pytest. Extra arguments go to pytest,
# e.g. `bash scripts/test.sh -m "not slow"`.
set -euo pipefail
cd "$(dirname "$0")/.."
EXTRAS=dev,profile,mlflow
python scripts/installed.py "$EXTRAS" || python -m pip install --quiet --disable-pip-version-check -e ".[$EXTRAS]"
bash scripts/install_horovod.sh
bash scripts/install_postgres.sh
bash scripts/install_sshd.sh
bash scripts/install_slurm.sh
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
# Bytecode is written (to the checkout's __pycache__/, ignored by git): where a container sets
# PYTHONDONTWRITEBYTECODE, every one of the suite's few hundred processes would compile opt-train
# from source again, and each xdist worker the tests (~4 s of CPU at collection).
unset PYTHONDONTWRITEBYTECODE
# Two workers, each handed the next test as it frees; the tests of one xdist_group (a
# module whose tests share a trained fixture) all go to one worker, so that the fixture
# is trained once, not once per worker. `-n 0` as an extra argument runs in one process.
exec python -m pytest -n 2 --dist loadgroup "$@"
