"""Name normalisation and closest-name suggestions for every registry (TF-free)."""

from __future__ import annotations

import difflib
import functools

from opt_train.errors import ParamError


def normalize(name: str) -> str:
    """Lowercase, separators dropped, a trailing "optimizer" removed: `Adam_Optimizer` -> `adam`."""
    key = str(name).lower().replace("_", "").replace("-", "")
    if key.endswith("optimizer") and key != "optimizer":
        key = key[: -len("optimizer")]
    return key


@functools.lru_cache(maxsize=64)
def _by_normalized(candidates):
    return {normalize(c): c for c in candidates}


def closest(name, candidates):
    """The candidate most like `name`, or None when nothing is close."""
    candidates = tuple(candidates)
    by_key = _by_normalized(candidates)
    hits = difflib.get_close_matches(normalize(name), list(by_key), n=1, cutoff=0.5)
    if hits:
        return by_key[hits[0]]
    hits = difflib.get_close_matches(str(name), candidates, n=1, cutoff=0.5)
    return hits[0] if hits else None


_NOT_GIVEN = object()


def key_hint(name, known, suggestion=_NOT_GIVEN):
    """"; did you mean 'logdir'?", else the valid keys when there are few, else ''.

    `suggestion`: `closest(name, known)` (None included) when the caller has it already: it is the costly part.
    """
    if suggestion is _NOT_GIVEN:
        suggestion = closest(str(name), known)
    if suggestion:
        return f"; did you mean '{suggestion}'?"
    if len(known) <= 12:
        return f"; valid: {', '.join(sorted(map(str, known)))}"
    return ""


class UnknownNameError(ParamError):
    """A name that no registry knows; carries the closest valid name.

    `code="unknown_name"` for a value naming something (`optimizer: Adamm`), then
    `param` is the parameter whose value it is; `code="unknown_key"` for a parameter
    name no spec has (`decay_stepz`), then `param` is that name itself.
    """

    def __init__(self, kind, name, candidates, *, param=None, code="unknown_name"):
        self.kind = kind
        self.name = name
        self.candidates = sorted(candidates)
        self.suggestion = closest(name, self.candidates)
        hint = (
            f"; did you mean '{self.suggestion}'?"
            if self.suggestion
            else f"; valid: {', '.join(self.candidates)}"
        )
        text = f"unknown {kind} '{name}'{hint}"
        if code == "unknown_key":
            param = str(name) if param is None else param
            message = f"unknown key{key_hint(name, self.candidates, self.suggestion)}"
        else:
            message = text
        super().__init__(param, code, message, None, text=text)


class Registry:
    """The names of one kind (optimizers, datasets, ...): found by any spelling, did-you-mean on a miss.

    `resolve` accepts any case, `_`/`-` and a trailing "optimizer" (`normalize`), and
    the `aliases` ({alias: canonical}, e.g. OpenSeq2Seq's function names of lr
    policies); an unknown name raises `UnknownNameError` suggesting the closest of
    the names and aliases, with `param` as the parameter whose value it is.
    """

    def __init__(self, kind, names, aliases=None, *, param=None):
        self.kind = kind
        self.names = tuple(names)
        self.param = param
        aliases = dict(aliases or {})
        self.candidates = self.names + tuple(alias for alias in aliases if alias not in self.names)
        self._by_key = {normalize(alias): canonical for alias, canonical in aliases.items()}
        self._by_key.update({normalize(name): name for name in self.names})

    def resolve(self, name):
        """The canonical name for `name`; `UnknownNameError` when there is none."""
        canonical = self._by_key.get(normalize(name)) if isinstance(name, str) else None
        if canonical is None:
            raise UnknownNameError(self.kind, name, self.candidates, param=self.param)
        return canonical

    def get(self, name):
        """The canonical name for `name`, or None."""
        return self._by_key.get(normalize(name)) if isinstance(name, str) else None

    def __contains__(self, name):
        return self.get(name) is not None

    def __iter__(self):
        return iter(self.names)

    def __len__(self):
        return len(self.names)
