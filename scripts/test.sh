#!/usr/bin/env bash
# Runs the test suite: installs what the tests need (dev extras, Horovod built
# against the installed TensorFlow), then pytest. Extra arguments go to pytest,
# e.g. `bash scripts/test.sh -m "not slow"`.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install --quiet --disable-pip-version-check -e ".[dev,profile,mlflow]"
bash scripts/install_horovod.sh
bash scripts/install_postgres.sh
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
# Two workers, each taking the next test as it frees (worksteal: durations vary from
# milliseconds to a minute); `-n 0` as an extra argument runs in one process.
exec python -m pytest -n 2 --dist worksteal "$@"
