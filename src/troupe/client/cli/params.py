"""Typer's parameter coercion without pydantic for plain values.

Typer (0.29) turns every parameter's value into its annotated type with a pydantic
``TypeAdapter``, built when the parameter is first used: a short command such as
``troupe session exec NAME -- true`` would load pydantic (and build an adapter per parameter)
only to hand strings through. :func:`install` (called by the composition root,
:mod:`troupe.main`) gives each parameter a coercion that does what those adapters do for a
``str``, a ``list[str]``, a choice (enum or literal) or a bool that already is one, and leaves
anything else to Typer's own (built then, as before): results and error messages stay Typer's.
It replaces ``get_runtime_param`` of Typer's parameter class, the hook Typer itself made lazy
"to avoid up-front costs"; with another Typer version it would need a look.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, get_args, get_origin

from typer._click import Context
from typer._coercion import RuntimeParam, TypeDescriptor, build_runtime_param
from typer._param_types import choice_coercion_annotation, coerce_cli_choice
from typer.core import _TyperParameter

_NOT_PLAIN = object()


def plain_value(descriptor: TypeDescriptor, value: Any, ctx: Context | None) -> Any:
    """The value Typer's adapter would return, or ``_NOT_PLAIN`` where it must decide."""
    annotation: Any = descriptor.annotation
    info = descriptor.parameter_info
    if info.parser is not None:
        return _NOT_PLAIN
    if annotation is str and type(value) is str:
        return value
    if annotation is bool and type(value) is bool:
        return value
    if (
        get_origin(annotation) is list
        and get_args(annotation) == (str,)
        and isinstance(value, list | tuple)
        and all(type(item) is str for item in value)
    ):
        return list(value)
    choice = choice_coercion_annotation(annotation, info)
    if choice is not None:
        choices, case_sensitive = choice
        try:
            return coerce_cli_choice(value, choices=choices, case_sensitive=case_sensitive, ctx=ctx)
        except ValueError:  # Typer's own reports it
            return _NOT_PLAIN
    return _NOT_PLAIN


@dataclass(frozen=True)
class _PlainFirst(RuntimeParam):
    """Plain values here; anything else (and the errors) through Typer's coercion."""

    descriptor: TypeDescriptor

    def _coerce_value(self, value: Any, param: _TyperParameter, ctx: Context) -> Any:
        result = plain_value(self.descriptor, value, ctx)
        if result is not _NOT_PLAIN:
            return result
        typer_own = build_runtime_param(self.descriptor)
        param._runtime_param = typer_own
        return typer_own._coerce_value(value, param=param, ctx=ctx)


def _get_runtime_param(self: _TyperParameter) -> RuntimeParam:
    if self._runtime_param is None:
        d = self.type_descriptor
        self._runtime_param = (
            build_runtime_param(d)  # files: Typer's own
            if d.file_annotation is not None
            else _PlainFirst(parameter_info=d.parameter_info, annotation=d.annotation, descriptor=d)
        )
    return self._runtime_param


def install() -> None:
    """Every Typer parameter (help options included) tries :func:`plain_value` first."""
    setattr(_TyperParameter, "get_runtime_param", _get_runtime_param)  # noqa: B010
