"""A command's TensorFlow import leaves Keras's bridges to scikit-learn, pandas and matplotlib out, and only that."""

import json
import sys

import pytest

from opt_train import keras_bridges
from tests.support import run_python

AFTER_THE_RUN = (
    "import json\n"
    "import keras\n"
    "loaded = {name: name in sys.modules for name in ('tensorflow', 'sklearn', 'pandas', 'matplotlib')}\n"
    "from keras.src.trainers.data_adapters import array_slicing\n"
    "from keras.src.wrappers import sklearn_wrapper\n"
    "keras_sees = {'pandas': array_slicing.pandas is not None, 'sklearn': sklearn_wrapper.sklearn is not None}\n"
    # No mark is left behind, so the process itself imports them as usual afterwards.
    "marked = [name for name, module in sys.modules.items() if module is None]\n"
    "print(json.dumps({'loaded': loaded, 'keras_sees': keras_sees, 'marked': marked}))\n"
)


@pytest.mark.slow  # a fresh process importing TensorFlow: ~5 s
def test_the_commands_tensorflow_and_the_digits_leave_the_bridges_out_and_the_process_can_import_them():
    # What every command does first (`cli.common.import_tensorflow`), then the `digits` loader.
    code = (
        "import sys\n"
        "from opt_train import quiet\n"
        "quiet.import_tensorflow()\n"
        "from opt_train.data.sources import load_digits_source\n"
        "load_digits_source(0.2, 0)\n"
        + AFTER_THE_RUN
    )
    done = run_python(code)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found == {
        "loaded": {"tensorflow": True, "sklearn": False, "pandas": False, "matplotlib": False},
        "keras_sees": {"pandas": False, "sklearn": False},
        "marked": [],
    }


def test_modules_imported_before_keras_stay_and_the_marks_go(monkeypatch):
    monkeypatch.delitem(sys.modules, "keras", raising=False)
    monkeypatch.setitem(sys.modules, "pandas", sys.modules.get("pandas") or object())
    monkeypatch.delitem(sys.modules, "sklearn", raising=False)
    before = sys.modules["pandas"]
    with keras_bridges.left_out():
        assert sys.modules["pandas"] is before
        assert sys.modules["sklearn"] is None
    assert sys.modules["pandas"] is before
    assert "sklearn" not in sys.modules


def test_nothing_is_marked_once_keras_is_loaded(monkeypatch):
    monkeypatch.setitem(sys.modules, "keras", sys.modules.get("keras") or object())
    monkeypatch.delitem(sys.modules, "sklearn", raising=False)
    with keras_bridges.left_out():
        assert "sklearn" not in sys.modules
