"""Reads YAML safely into plain data plus the file and line where each dotted key was set."""

from __future__ import annotations

import os
import re
import stat

import yaml

from opt_train.config.issues import ConfigIssue
from opt_train.errors import ParamError

# YAML 1.1 (PyYAML) reads `1e-3` as a string; YAML 1.2 and every user read it as a
# number. This pattern adds the exponent forms without a dot to the float resolver.
_EXPONENT_FLOAT = re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$")


# A config is a page of keys, not a data set: these bounds stop a hostile or careless file
# (an alias bomb, a deep or huge document, a FIFO) before it costs memory or time.
MAX_CONFIG_BYTES = 1 << 20
MAX_VALUES = 100_000  # keys, items and scalars once every alias is expanded
MAX_DEPTH = 100


class ConfigLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """The safe loader (libyaml's where PyYAML was built with it: 30x faster) with `1e-3` read as a float."""


ConfigLoader.add_implicit_resolver("tag:yaml.org,2002:float", _EXPONENT_FLOAT, list("-+0123456789."))

_BRACKETS = re.compile(r"[\[\]{}]")


def flow_depth(text):
    """The deepest `[`/`{` nesting in `text`, counting brackets inside strings too (an upper bound)."""
    depth = deepest = 0
    for match in _BRACKETS.finditer(text):
        depth = depth + 1 if match.group() in "[{" else max(depth - 1, 0)
        deepest = max(deepest, depth)
    return deepest


PLAIN_COLLECTION_TAGS = ("tag:yaml.org,2002:map", "tag:yaml.org,2002:seq", "tag:yaml.org,2002:omap")


def child_key(parent, name):
    """The dotted key of `name` under `parent` (`''` is the top level)."""
    return f"{parent}.{name}" if parent else str(name)


def item_key(parent, index):
    return f"{parent}[{index}]"


class _Reader:
    """Turns a composed YAML node tree into data, recording each key's line."""

    def __init__(self, loader, file):
        self.loader = loader
        self.file = file
        self.locations = {}
        self.issues = []

    def read(self, node, key):
        if isinstance(node, (yaml.MappingNode, yaml.SequenceNode)) and node.tag not in PLAIN_COLLECTION_TAGS:
            # Collections are read here, not by the constructor, so their tags are checked here:
            # `!!python/object/apply:...` is refused as the safe loader refuses it on a scalar.
            raise yaml.constructor.ConstructorError(
                None, None, f"the tag {node.tag!r} is not allowed in a config", node.start_mark
            )
        if isinstance(node, yaml.MappingNode):
            return self.read_mapping(node, key)
        if isinstance(node, yaml.SequenceNode):
            return [
                self.read_item(item, item_key(key, index)) for index, item in enumerate(node.value)
            ]
        return self.construct(node)

    def construct(self, node):
        """A scalar's value; a tag that cannot read it (`!!float abc`) becomes a YAML error at its line."""
        try:
            return self.loader.construct_object(node, deep=True)
        except yaml.YAMLError:
            raise
        except Exception as error:  # PyYAML's constructors fail in many ways on a bad tagged value
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot read {node.value!r} as {node.tag.rsplit(':', 1)[-1]} ({error})",
                node.start_mark,
            ) from None

    def read_item(self, node, key):
        self.locations[key] = (self.file, node.start_mark.line + 1)
        return self.read(node, key)

    def key_name(self, key_node):
        """A mapping key; a list or mapping used as a key becomes its text, so it stays hashable."""
        name = self.construct(key_node)
        return str(name) if isinstance(name, (list, dict)) else name

    def read_mapping(self, node, key):
        explicit = [pair for pair in node.value if pair[0].tag != "tag:yaml.org,2002:merge"]
        self.loader.flatten_mapping(node)
        merged = node.value[: len(node.value) - len(explicit)]
        data = {}
        for key_node, value_node in merged:
            name = self.key_name(key_node)
            self.locations[child_key(key, name)] = (self.file, key_node.start_mark.line + 1)
            data[name] = self.read(value_node, child_key(key, name))
        seen = set()
        for key_node, value_node in explicit:
            name = self.key_name(key_node)
            dotted = child_key(key, name)
            line = key_node.start_mark.line + 1
            if name in seen:
                self.issues.append(
                    ConfigIssue(self.file, line, dotted, "duplicate_key", "set twice in one mapping")
                )
            seen.add(name)
            self.locations[dotted] = (self.file, line)
            data[name] = self.read(value_node, dotted)
        return data


def parse_yaml(text, file):
    """`(data, locations, issues)` for YAML `text` said to come from `file`.

    `locations` maps each dotted key (`larc_params.larc_eta`, `summaries[1]`)
    to `(file, line)`. A syntax error is one `yaml_syntax` issue; a document over
    the size bounds one `too_large` issue, found before anything is built from it.
    """
    if len(text) > MAX_CONFIG_BYTES:
        return None, {}, [too_large(file, f"the config is larger than {MAX_CONFIG_BYTES // 1024} KiB")]
    try:
        node, loader = compose(text)
    except yaml.YAMLError as error:
        return None, {}, [syntax_issue(error, file)]
    except RecursionError:
        return None, {}, [too_large(file, f"the YAML is nested more than {MAX_DEPTH} levels deep")]
    try:
        if node is None:
            return {}, {}, []
        problem = size_problem(node)
        if problem:
            return None, {}, [ConfigIssue(file, None, "", *problem)]
        reader = _Reader(loader, file)
        data = reader.read(node, "")
        return data, reader.locations, reader.issues
    except yaml.YAMLError as error:
        return None, {}, [syntax_issue(error, file)]
    finally:
        loader.dispose()


def compose(text):
    """`(node, loader)`: the YAML node graph of `text`, aliases still shared (nothing expanded yet).

    libyaml's composer recurses in C and crashes the process on a document nested some
    ten thousand levels deep, so flow nesting is bounded before it parses; block nesting
    is bounded by the file size (each level costs a line longer than the last).
    Raises `RecursionError` for text nested too deeply.
    """
    if flow_depth(text) > MAX_DEPTH:
        raise RecursionError(text[:0])
    loader = ConfigLoader(text)
    try:
        return loader.get_single_node(), loader
    except BaseException:
        loader.dispose()
        raise


def size_problem(root):
    """`(code, message)` saying why the node graph under `root` cannot be read (aliases expanded), or None.

    Walks the graph once, without recursion, memoising each node's expanded size and
    depth, so an alias bomb is measured in the time of its text, not of its expansion.
    """
    sizes, depths = {}, {}
    on_path = set()
    stack = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        ident = id(node)
        if ident in sizes:
            continue
        children = node_children(node)
        if not children_done:
            if ident in on_path:
                return RECURSIVE_ALIAS
            on_path.add(ident)
            stack.append((node, True))
            for child in children:
                if id(child) in on_path:
                    return RECURSIVE_ALIAS
                if id(child) not in sizes:
                    stack.append((child, False))
            continue
        on_path.discard(ident)
        sizes[ident] = 1 + sum(sizes[id(child)] for child in children)
        depths[ident] = 1 + max((depths[id(child)] for child in children), default=0)
        if depths[ident] > MAX_DEPTH:
            return "too_large", f"the YAML is nested more than {MAX_DEPTH} levels deep"
        if sizes[ident] > MAX_VALUES:
            return "too_large", f"the YAML expands to more than {MAX_VALUES:,} values (aliases included)"
    return None


RECURSIVE_ALIAS = ("yaml_syntax", "invalid YAML: an alias refers to a value that contains it (a recursive alias)")


def node_children(node):
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def too_large(file, message):
    return ConfigIssue(file, None, "", "too_large", message)


def syntax_issue(error, file):
    """One `yaml_syntax` issue at the line PyYAML blames."""
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    line = mark.line + 1 if mark is not None else None
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    return ConfigIssue(file, line, "", "yaml_syntax", f"invalid YAML: {problem}")


def read_yaml_file(path, shown_as):
    """Like `parse_yaml` for a file on disk; a missing or unreadable file is one `file_not_found` issue.

    Only a regular file is opened (a FIFO or a device would block or never end), and
    no more of it is read than the size bound allows.
    """
    def unreadable(reason):
        return None, {}, [ConfigIssue(shown_as, None, "", "file_not_found", reason)]

    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return unreadable("no such file")
    except (OSError, ValueError) as error:
        return unreadable(f"cannot read ({type(error).__name__})")
    if not stat.S_ISREG(mode):
        kind = "a folder" if stat.S_ISDIR(mode) else "not a regular file"
        return unreadable(f"cannot read: {kind}")
    try:
        with open(path, "rb") as stream:
            raw = stream.read(MAX_CONFIG_BYTES + 1)
    except OSError as error:
        return unreadable(f"cannot read ({type(error).__name__})")
    if len(raw) > MAX_CONFIG_BYTES:
        return None, {}, [too_large(shown_as, f"the config is larger than {MAX_CONFIG_BYTES // 1024} KiB")]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        return unreadable(f"cannot read: not UTF-8 text (byte {error.start})")
    return parse_yaml(text, shown_as)


def _too_large(text):
    return ParamError(None, "too_large", text, text=text)


def parse_scalar(text):
    """A `--set` value read as YAML (numbers, booleans, null, `[a, b]` lists, strings).

    Held to the bounds of a config file: raises `yaml.YAMLError` for bad YAML and
    `ParamError` (a ValueError, code `too_large`) for a value over the bounds.
    """
    if len(text) > MAX_CONFIG_BYTES:
        raise _too_large(f"the value is longer than {MAX_CONFIG_BYTES // 1024} KiB")
    try:
        node, loader = compose(text)
    except RecursionError:
        raise _too_large(f"the value is nested more than {MAX_DEPTH} levels deep") from None
    try:
        if node is None:
            return None
        problem = size_problem(node)
        if problem:
            raise _too_large(problem[1])
        return _Reader(loader, None).read(node, "")
    finally:
        loader.dispose()
