"""A session file's text: YAML in (a mapping, each key once), YAML out (the create request's
values that differ from its defaults, under the comment that points editors at its schema).

One reader and one writer for the CLI (``-f``, ``session spec``) and the web launch dialog
(load / download spec); what the mapping must hold is :class:`~troupe.api.models.SessionCreate`'s
to say (docs/design.md, 'Session files').
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import yaml

from troupe.api.values import format_size

if TYPE_CHECKING:
    from troupe.api.models import SessionCreate

#: Where the manager serves the file's JSON Schema.
SCHEMA_PATH = "/v1/schemas/session.json"


class SpecFileError(ValueError):
    """The text is no session file: not YAML, a key twice, or no mapping."""


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, but a key given twice in one mapping is an error (PyYAML would
    keep the last one silently)."""


def _mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"key {key!r} is given twice", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def parse(text: str) -> dict[str, Any]:
    """The mapping ``text`` holds; :class:`SpecFileError` (with the line) if it holds none."""
    try:
        data = yaml.load(text, Loader=_Loader)  # a SafeLoader
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        what = " ".join(str(getattr(e, "problem", None) or e).split())
        raise SpecFileError(f"{where}not valid YAML: {what}") from None
    if not isinstance(data, dict):
        kind = "empty" if data is None else f"a {type(data).__name__}"
        raise SpecFileError(
            f"a session file is a mapping of the create request's fields, not {kind}"
        )
    return data


def _sizes(value: Any) -> Any:
    """``value`` with every ``mem`` (bytes) written as a size (``256m``), as people write it."""
    if isinstance(value, list):
        return [_sizes(v) for v in value]
    if isinstance(value, dict):
        return {
            k: format_size(v) if k == "mem" and isinstance(v, int) else _sizes(v)
            for k, v in value.items()
        }
    return value


def dump(req: SessionCreate, url: str) -> str:
    """``req`` as a session file: the values that differ from the defaults, in the model's
    order, under a comment pointing editors at the schema served at ``url``."""
    data = _sizes(req.model_dump(mode="json", exclude_defaults=True))
    head = f"# yaml-language-server: $schema={url.rstrip('/')}{SCHEMA_PATH}\n"
    body = yaml.safe_dump(data, sort_keys=False, allow_unicode=True, default_flow_style=False)
    return head + body
