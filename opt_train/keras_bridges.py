"""Keras's optional bridges to scikit-learn, pandas, matplotlib and IPython, left out of a command's TensorFlow import (TF-free).

Importing TensorFlow imports all of Keras, and Keras imports scikit-learn (for
`keras.wrappers.SKLearnClassifier`), pandas (so `fit` takes DataFrames),
matplotlib (for `keras.visualization`) and IPython (so `KerasFileEditor` draws in a
notebook) when they are installed: about 2.9 s of CPU out of 6.5 in every process
that starts TensorFlow, none of which a training run uses. Keras imports each inside
`try: ... except ImportError`, so a module marked absent in `sys.modules` for the
length of the import is skipped; the marks are removed afterwards, so the process (a
user's factory, the `digits` loader, `lr --plot`) imports any of them as usual.
Inside an opt-train command, Keras's own scikit-learn wrappers, DataFrame inputs,
image-gallery plots and notebook display of a file editor are therefore unavailable;
opt-train calls none of them. (`requests`, which Keras's RemoteMonitor imports
optionally, cannot be left out: TensorFlow's failure handling imports it unconditionally.)
"""

from __future__ import annotations

import contextlib
import sys

# The modules Keras 3 imports optionally at its own import: keras/src/wrappers,
# keras/src/trainers/data_adapters/array_slicing.py, keras/src/visualization (pyplot
# and patches), keras/src/saving/file_editor.py; a marked package makes its submodules
# absent too.
BRIDGED_MODULES = ("sklearn", "pandas", "matplotlib", "IPython")


@contextlib.contextmanager
def left_out():
    """Within this block, a first import of Keras skips the bridged modules not yet imported."""
    if "keras" in sys.modules:
        yield
        return
    marked = [name for name in BRIDGED_MODULES if name not in sys.modules]
    for name in marked:
        sys.modules[name] = None
    try:
        yield
    finally:
        for name in marked:
            if sys.modules.get(name, 0) is None:
                del sys.modules[name]
