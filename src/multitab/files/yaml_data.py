"""YAML as plain data, bounded: the one loader of every YAML file the project reads (params.yaml, runs.yaml,
hyperparameter files, dvc.yaml and dvc.lock, the pretrained checkpoints' lock).

- Safe: PyYAML's safe constructor (libyaml's parser where PyYAML is built with it), so no tag constructs an
  object and nothing in a file runs code.
- A key given twice in one mapping is an error (YAML says keys are unique; PyYAML keeps the last value
  without a word). A key that a merge (`<<: *base`) brings in may be given again: that is what merges are for.
- Bounded: before anything is built, one pass over the parser's events measures the document as its aliases
  expand it. A document whose aliases add more than `MAX_ALIAS_VALUES` values (the "billion laughs": a few
  hundred bytes of nested `&a [*b, *b, ...]` that expand to 10^9 values, and grow memory in whoever walks,
  prints or compares the result), an alias that refers to the collection holding it, or nesting deeper than
  `MAX_DEPTH` (libyaml's composer recurses; far deeper input crashes the interpreter) is refused with the line
  of the alias or collection that crossed the limit. The pass reads events one at a time: its memory does not
  depend on the expansion.

`load_yaml` raises yaml.YAMLError (`YamlLimitError` for a limit); `read_yaml_file` a ValueError naming the
file; `yaml_problem` is the one line of either. `short_repr(value)` quotes a value read from a file in a message,
cut to a readable size.
"""

from __future__ import annotations

import reprlib
from pathlib import Path
from typing import Any

import yaml

MAX_ALIAS_VALUES = 100_000  # values (scalars and collections) that aliases may add to a document
MAX_DEPTH = 200  # nesting of collections

_BASE: type[Any] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser where PyYAML has it


_SHOWN = reprlib.Repr()
_SHOWN.maxlevel, _SHOWN.maxstring, _SHOWN.maxother = 3, 80, 80
_SHOWN.maxtuple = _SHOWN.maxlist = _SHOWN.maxdict = _SHOWN.maxset = 6


def short_repr(value: Any, limit: int = 200) -> str:
    """`repr(value)` cut to a readable size (a level, a few items, `limit` characters): a message quotes what
    a file gave without formatting a value of any size (a huge list, a deeply nested one)."""
    text = _SHOWN.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


YAMLError = yaml.YAMLError  # what the loading functions raise (a caller need not import yaml)


class YamlLimitError(yaml.MarkedYAMLError):
    """A document beyond the loader's bounds (module docstring); `problem_mark` is where it crossed them."""


class _Loader(_BASE):  # type: ignore[misc,valid-type]
    """The safe loader that refuses a key given twice in one mapping (a merge's keys may be overridden)."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._checked: set[int] = set()

    def flatten_mapping(self, node: yaml.MappingNode) -> None:
        # the first call on a node sees its keys as written (a later one sees them with its merges' keys)
        if id(node) not in self._checked:
            self._checked.add(id(node))
            seen: dict[Any, Any] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node)
                try:
                    twice = key in seen
                except TypeError:  # an unhashable key: the constructor names it
                    continue
                if twice:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"key {short_repr(key, 80)} appears twice in one mapping (first at line "
                        f"{seen[key].line + 1}); delete one of them", key_node.start_mark)
                seen[key] = key_node.start_mark
        super().flatten_mapping(node)


def check_bounds(text: str | bytes) -> None:
    """Raise YamlLimitError when `text`'s aliases add more than MAX_ALIAS_VALUES values, an alias refers to a
    collection that holds it, or collections nest deeper than MAX_DEPTH (module docstring). Syntax errors
    are left to the loader."""
    sizes: dict[str, int] = {}  # anchor -> the number of values it stands for, its aliases expanded
    stack: list[list[Any]] = []  # the open collections: [anchor, values so far]
    added = 0
    try:
        for event in yaml.parse(text, Loader=_BASE):
            if isinstance(event, yaml.CollectionStartEvent):
                stack.append([event.anchor, 1])
                if len(stack) > MAX_DEPTH:
                    raise YamlLimitError(None, None, f"collections nest deeper than {MAX_DEPTH} levels; flatten "
                                         "the document", event.start_mark)
                continue
            if isinstance(event, yaml.CollectionEndEvent):
                anchor, n = stack.pop()
            elif isinstance(event, yaml.ScalarEvent):
                anchor, n = event.anchor, 1
            elif isinstance(event, yaml.AliasEvent):
                if any(open_anchor == event.anchor for open_anchor, _ in stack):
                    raise YamlLimitError(None, None, f"alias *{event.anchor} refers to a collection that holds "
                                         "it (it would expand without end); write the value out", event.start_mark)
                anchor, n = None, sizes.get(event.anchor, 1)  # an unknown anchor: the loader names it
                added += n
                if added > MAX_ALIAS_VALUES:
                    raise YamlLimitError(None, None, f"aliases (*{event.anchor} and the ones before it) expand the "
                                         f"document by more than {MAX_ALIAS_VALUES:,} values; write the values "
                                         "out or use fewer nested aliases", event.start_mark)
            else:
                continue
            if anchor is not None:
                sizes[anchor] = n
            if stack:
                stack[-1][1] += n
    except YamlLimitError:
        raise
    except yaml.YAMLError:
        return  # not YAML: the loader raises the same error with its full context


def load_yaml(text: str | bytes) -> Any:
    """YAML text as plain data (module docstring); raises yaml.YAMLError with the line of the problem."""
    check_bounds(text)
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - a safe loader


def yaml_problem(e: yaml.YAMLError) -> str:
    """One line for a YAML error: `line N, column M: what` (PyYAML's own text spans several lines)."""
    if isinstance(e, yaml.MarkedYAMLError) and e.problem_mark is not None:
        mark = e.problem_mark
        return f"line {mark.line + 1}, column {mark.column + 1}: {e.problem}"
    return " ".join(str(e).split())


def yaml_error_line(source: str, e: yaml.YAMLError) -> str:
    """`source: not valid YAML: line N, column M: what`, or `source: refused: ...` for a limit."""
    return f"{source}: {'refused' if isinstance(e, YamlLimitError) else 'not valid YAML'}: {yaml_problem(e)}"


def read_yaml_file(path: str | Path) -> Any:
    """`load_yaml` of a file; errors become ValueError naming the file and line."""
    path = Path(path)
    try:
        return load_yaml(path.read_bytes())
    except yaml.YAMLError as e:
        raise ValueError(yaml_error_line(str(path), e)) from None
