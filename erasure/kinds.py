"""Pluggable kinds: a `kind` name, a typed config, and one registry per family that picks.

The OpenLineage client's transport factory, built once for key stores, warehouse connections
and rebuild targets. A family (`KindRegistry`) maps each kind name to its config model (a
`KindConfig` subclass whose `kind` field defaults to the name) and its factory (config,
context) -> product. A kind registers in code (`registry.register(Config, factory)` or the
`@registry.kind(Config)` decorator), or from another package through the family's Python
entry point group: the entry point is named after the kind and loads a factory whose
`config_class` attribute is its config model. A factory may be given as its dotted path
(`"package.module:function"`), imported when the first product is built: a family declares
its built-in kinds beside its configs without importing the code that acts on them (the
catalog parses `rebuild:` without importing the rebuild actions). Entry points are read on
the first lookup, so a new backend needs no edit of this repository.

Errors are `KindError` (a ConfigError, and a ValueError so that pydantic reports it at the
field it came from). They name the family, the known kinds and the bad field, never a value:
configs hold URLs with passwords and tokens.
"""

from __future__ import annotations

import importlib
import re
import threading
from collections.abc import Callable, Mapping
from importlib.metadata import entry_points
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from erasure.errors import ConfigError, describe_invalid

_NAME = re.compile(r"^[a-z][a-z0-9_]{0,39}$")


class KindError(ConfigError, ValueError):
    """A kind is unknown, failed to load, or its config is invalid."""


class KindConfig(BaseModel):
    """The typed config of one kind; subclasses declare `kind: Literal["name"] = "name"`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: str
    # A config written without `kind` is this kind when it has this field (the catalog's
    # forms from before kinds existed: `{url: ...}`, `{sql: ...}`); None: `kind` is required.
    implied_by: ClassVar[str | None] = None


ConfigT = TypeVar("ConfigT", bound=KindConfig)
ContextT = TypeVar("ContextT")
ProductT = TypeVar("ProductT")
C = TypeVar("C", bound=KindConfig)
F = TypeVar("F", bound=Callable[..., Any])
_DOTTED = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


class KindRegistry(Generic[ConfigT, ContextT, ProductT]):
    """The kinds of one family: name -> (config model, factory(config, context) -> product)."""

    def __init__(
        self,
        base: type[ConfigT],
        *,
        family: str,
        group: str,
    ) -> None:
        """`base`: what every config of the family extends; `family`: its name in messages;
        `group`: the entry point group plug-ins register under."""
        self.base = base
        self.family = family
        self.group = group
        self._kinds: dict[str, tuple[type[ConfigT], Callable[[Any, ContextT], ProductT] | str]] = {}
        self._imported: dict[str, Callable[[Any, ContextT], ProductT]] = {}  # dotted -> factory
        self._broken: dict[str, str] = {}  # entry point name -> why it did not load
        self._discovered = False
        self._discovering = False
        self._lock = threading.RLock()

    # -- registration ----------------------------------------------------------------------

    def register(self, config: type[C], factory: Callable[[C, ContextT], ProductT] | str) -> None:
        """Make `config`'s kind known; registering the same pair again changes nothing.

        `factory` may be the dotted path of one (`"package.module:function"`), imported when
        the kind first builds something."""
        name = _kind_of(config)
        if isinstance(factory, str) and not _DOTTED.match(factory):
            raise TypeError(f"{factory!r} is not a dotted path such as 'package.module:function'")
        if not issubclass(config, self.base):
            raise TypeError(
                f"{config.__qualname__} must extend {self.base.__qualname__} to be a "
                f"{self.family} kind"
            )
        implied = config.implied_by
        if implied is not None and implied not in config.model_fields:
            raise TypeError(f"{config.__qualname__}.implied_by names no field: {implied!r}")
        with self._lock:
            known = self._kinds.get(name)
            if known is not None and known != (config, factory):
                raise KindError(
                    f"{self.family} kind {name!r} is registered twice: by "
                    f"{_where(known[1])} and by {_where(factory)}; rename one"
                )
            self._kinds[name] = (config, factory)

    def kind(self, config: type[C]) -> Callable[[F], F]:
        """Decorator: register the decorated factory (a class or function) for `config`."""

        def register(factory: F) -> F:
            self.register(config, factory)
            return factory

        return register

    def unregister(self, name: str) -> None:
        """Forget a kind (a plug-in being unloaded, a test's own kind)."""
        with self._lock:
            self._kinds.pop(name, None)

    # -- lookup ----------------------------------------------------------------------------

    def names(self) -> list[str]:
        """Every known kind, sorted."""
        self._discover()
        return sorted(self._kinds)

    def import_factories(self) -> None:
        """Import every kind's factory now (a process that forks workers loads them once)."""
        self._discover()
        for _, factory in list(self._kinds.values()):
            if isinstance(factory, str):
                self._import(factory)

    def config_class(self, name: object) -> type[ConfigT]:
        """The config model of kind `name`; KindError naming the known kinds if unknown."""
        self._discover()
        if isinstance(name, str) and name in self._kinds:
            return self._kinds[name][0]
        if isinstance(name, str) and name in self._broken:
            raise KindError(
                f"the {self.family} kind {name!r} comes from a plug-in that failed to load "
                f"({self._broken[name]}); fix or uninstall the package that provides it"
            )
        shown = repr(name) if isinstance(name, str) and _NAME.match(name) else "(not a kind name)"
        raise KindError(
            f"unknown {self.family} kind {shown}: kind is one of {', '.join(self.names())}; "
            f"fix the kind, or install the package that provides it (entry point group "
            f"{self.group!r})"
        )

    def parse(self, raw: Mapping[str, Any]) -> ConfigT:
        """The typed config a mapping describes; `kind` may be left out where it is implied."""
        if not isinstance(raw, Mapping):
            raise KindError(
                f"a {self.family} is a mapping with 'kind' (one of {', '.join(self.names())}) "
                "and that kind's fields"
            )
        name = raw["kind"] if "kind" in raw else self._implied_kind(raw)
        config = self.config_class(name)
        try:
            return config.model_validate({**raw, "kind": name})
        except ValidationError as exc:
            problems = describe_invalid(exc, locations=True)
            raise KindError(f"invalid {name} {self.family} config: {problems}") from None

    def validate(self, value: Any) -> Any:
        """A pydantic before-validator: mappings are parsed, configs pass as they are."""
        return value if isinstance(value, self.base) else self.parse(value)

    def build(self, config: ConfigT, context: ContextT) -> ProductT:
        """What the factory of `config`'s kind makes of it in `context`."""
        self.config_class(config.kind)
        factory = self._kinds[config.kind][1]
        return (self._import(factory) if isinstance(factory, str) else factory)(config, context)

    # -- internals -------------------------------------------------------------------------

    def _implied_kind(self, raw: Mapping[str, Any]) -> str:
        self._discover()
        implied = {
            config.implied_by: name
            for name, (config, _) in self._kinds.items()
            if config.implied_by is not None
        }
        given = sorted(field for field in implied if field in raw)
        if len(given) == 1:
            return implied[given[0]]
        known = f"kind is one of {', '.join(self.names())}"
        if not implied:
            raise KindError(f"'kind' is required: {known}")
        fields = _either(sorted(implied))
        if given:
            raise KindError(f"give exactly one of {fields}, or name the kind ({known})")
        raise KindError(f"name the kind ({known}), or give exactly one of {fields}")

    def _import(self, dotted: str) -> Callable[[Any, ContextT], ProductT]:
        with self._lock:
            if dotted not in self._imported:
                module, _, attribute = dotted.partition(":")
                try:
                    factory = getattr(importlib.import_module(module), attribute)
                except (ImportError, AttributeError) as exc:
                    raise KindError(
                        f"the {self.family} factory {dotted!r} cannot be imported "
                        f"({type(exc).__name__}); fix the installation or the registration"
                    ) from None
                self._imported[dotted] = factory
            return self._imported[dotted]

    def _discover(self) -> None:
        """Read the family's entry points once, on first use."""
        if self._discovered:
            return
        with self._lock:  # re-entrant: a module imported below may look kinds up
            if self._discovered or self._discovering:
                return
            self._discovering = True
            try:
                self._import_kinds()
            finally:
                self._discovering = False
            self._discovered = True

    def _import_kinds(self) -> None:
        for point in entry_points(group=self.group):
            try:
                factory = point.load()
            except Exception as exc:  # a broken plug-in: reported when its kind is asked for
                self._broken[point.name] = (
                    f"{type(exc).__name__} loading entry point {point.value!r}; "
                    f'`python -c "import {point.module}"` shows why'
                )
                continue
            config = getattr(factory, "config_class", None)
            if isinstance(config, type) and issubclass(config, KindConfig):
                try:
                    self.register(config, factory)
                except (TypeError, KindError) as exc:
                    self._broken[point.name] = f"entry point {point.value!r}: {exc}"
                    continue
            if point.name not in self._kinds:
                self._broken[point.name] = (
                    f"entry point {point.value!r} registered no kind {point.name!r}: its "
                    "factory needs a `config_class` whose kind is the entry point's name"
                )


def _kind_of(config: type[KindConfig]) -> str:
    field = config.model_fields.get("kind")
    name = None if field is None else field.default
    if not isinstance(name, str) or not _NAME.match(name):
        raise TypeError(
            f"{config.__qualname__} must declare its kind as `kind: Literal['name'] = 'name'` "
            "(lower case letters, digits, underscores)"
        )
    return name


def _either(fields: list[str]) -> str:
    quoted = [repr(f) for f in fields]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]


def _where(factory: Callable[..., Any] | str) -> str:
    if isinstance(factory, str):
        return factory
    return f"{getattr(factory, '__module__', '?')}.{getattr(factory, '__qualname__', factory)}"
