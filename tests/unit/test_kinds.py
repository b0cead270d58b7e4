"""Pluggable kinds: a kind registers from outside erasure/ (in code or by an installed
package's entry point), and every error names the field and the known kinds without echoing
a value."""

from __future__ import annotations

import sys
import textwrap
import uuid
from pathlib import Path
from typing import ClassVar, Literal

import pytest

from erasure.errors import ConfigError
from erasure.kinds import KindConfig, KindError, KindRegistry

SECRET = "s3cr3t-7f1c9a"  # a password that must never appear in a message

# ---------------------------------------------------------------------------------------------
# The registry itself, on a family of its own


class Greeting(KindConfig):
    """The family's base config."""


class Hello(Greeting):
    kind: Literal["hello"] = "hello"
    name: str
    implied_by: ClassVar[str | None] = "name"


class Login(Greeting):
    kind: Literal["login"] = "login"
    user: str
    password: int  # typed: a string here fails validation, and must not be echoed
    implied_by: ClassVar[str | None] = "user"


def greetings() -> KindRegistry[Greeting, str, str]:
    registry: KindRegistry[Greeting, str, str] = KindRegistry(
        Greeting, family="greeting", group=f"erasure.test_{uuid.uuid4().hex[:8]}"
    )

    @registry.kind(Hello)
    def hello(config: Hello, punctuation: str) -> str:
        return f"hello {config.name}{punctuation}"

    registry.register(Login, lambda config, punctuation: f"login {config.user}{punctuation}")
    return registry


def test_a_kind_is_picked_by_name_or_by_the_field_that_implies_it() -> None:
    registry = greetings()
    assert registry.names() == ["hello", "login"]
    assert registry.build(registry.parse({"kind": "hello", "name": "ada"}), "!") == "hello ada!"
    assert registry.build(registry.parse({"name": "ada"}), "?") == "hello ada?"
    assert registry.parse({"user": "u", "password": 1}) == Login(user="u", password=1)


def test_an_unknown_kind_names_the_known_ones_and_where_plugins_come_from() -> None:
    registry = greetings()
    with pytest.raises(KindError) as caught:
        registry.parse({"kind": "goodbye"})
    message = str(caught.value)
    assert "unknown greeting kind 'goodbye': kind is one of hello, login" in message
    assert registry.group in message
    assert isinstance(caught.value, ConfigError) and isinstance(caught.value, ValueError)


def test_a_kind_that_is_not_a_name_is_not_echoed() -> None:
    with pytest.raises(KindError) as caught:
        greetings().parse({"kind": f"postgresql://u:{SECRET}@db/x"})
    assert SECRET not in str(caught.value)
    assert "kind is one of hello, login" in str(caught.value)


def test_a_config_error_names_the_field_never_the_value() -> None:
    with pytest.raises(KindError) as caught:
        greetings().parse({"kind": "login", "user": "u", "password": SECRET, "colour": SECRET})
    message = str(caught.value)
    assert message.startswith("invalid login greeting config: ")
    assert "password: Input should be a valid integer" in message
    assert "colour: Extra inputs are not permitted" in message
    assert SECRET not in message


def test_ambiguous_or_missing_forms_say_what_to_give() -> None:
    registry = greetings()
    with pytest.raises(KindError, match="give exactly one of 'name' or 'user'"):
        registry.parse({"name": "a", "user": "b"})
    with pytest.raises(KindError, match=r"name the kind \(kind is one of hello, login\)"):
        registry.parse({})
    with pytest.raises(KindError, match="is a mapping"):
        registry.parse("hello")  # type: ignore[arg-type]


def test_registration_is_checked() -> None:
    registry = greetings()
    registry.register(Hello, registry._kinds["hello"][1])  # the same pair again: no change
    with pytest.raises(KindError, match="'hello' is registered twice"):
        registry.register(Hello, lambda config, context: "other")

    class NoName(Greeting):
        pass

    class Elsewhere(KindConfig):
        kind: Literal["elsewhere"] = "elsewhere"

    with pytest.raises(TypeError, match="must declare its kind"):
        registry.register(NoName, lambda config, context: "")
    with pytest.raises(TypeError, match="must extend Greeting"):
        registry.register(Elsewhere, lambda config, context: "")  # type: ignore[arg-type]
    registry.unregister("hello")
    assert registry.names() == ["login"]


def write_plugin(root: Path, group: str, entry_points: dict[str, str], module: str) -> None:
    """An installed distribution on `root` (as pip would lay it out): module + entry points."""
    (root / "kinds_probe.py").write_text(textwrap.dedent(module))
    info = root / "kinds_probe-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: kinds-probe\nVersion: 0.1\n")
    lines = "\n".join(f"{name} = {value}" for name, value in entry_points.items())
    (info / "entry_points.txt").write_text(f"[{group}]\n{lines}\n")


def test_an_installed_package_adds_a_kind_through_its_entry_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = greetings()
    write_plugin(
        tmp_path,
        registry.group,
        {
            "wave": "kinds_probe:wave",
            "broken": "kinds_probe_missing:nothing",
            "clash": "kinds_probe:clash",
        },
        f"""
        from typing import Literal
        from {__name__} import Greeting

        class Wave(Greeting):
            kind: Literal["wave"] = "wave"
            hand: str = "right"

        def wave(config, punctuation):
            return "wave " + config.hand + punctuation

        wave.config_class = Wave

        class Clash(Greeting):
            kind: Literal["hello"] = "hello"  # taken: the built-in kind must win

        def clash(config, punctuation):
            return "clash"

        clash.config_class = Clash
        """,
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "kinds_probe", raising=False)

    assert registry.names() == ["hello", "login", "wave"]
    assert registry.build(registry.parse({"kind": "wave"}), ".") == "wave right."
    with pytest.raises(KindError, match=r"'broken' comes from a plug-in that failed to load"):
        registry.parse({"kind": "broken"})
    with pytest.raises(KindError, match=r"'clash' comes from .* 'hello' is registered twice"):
        registry.parse({"kind": "clash"})
    assert registry.build(registry.parse({"name": "ada"}), "") == "hello ada"
