"""The one reader of YAML: environment files (and pipeline.yaml through `read_yaml`), with every
problem as one line `FILE: field.path: message`."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, get_args, get_origin

import yaml
from pydantic import BaseModel
from pydantic import ValidationError as PydanticValidationError

from fminfra.config.environment import EnvironmentConfig
from fminfra.core.config_base import Problems
from fminfra.core.errors import ConfigError
from fminfra.core.rules import EMPTY_CONFIG, MAX_CONFIG_BYTES, MAX_INT_DIGITS, MAX_NESTING

_NO_REUSE = "anchors, aliases and merge keys (&name, *name, <<) are not supported: write the values out"


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that rejects a key given twice in one mapping (PyYAML keeps the last), keys that
    are not plain values, merge keys, aliases, deep nesting and huge integers, each with a line."""

    _depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:  # type: ignore[override]
        if self.check_event(yaml.AliasEvent):  # type: ignore[no-untyped-call]
            event = self.peek_event()  # type: ignore[no-untyped-call]
            raise yaml.composer.ComposerError(None, None, _NO_REUSE, event.start_mark)
        self._depth += 1
        try:
            if self._depth > MAX_NESTING:
                event = self.peek_event()  # type: ignore[no-untyped-call]
                raise yaml.composer.ComposerError(None, None, f"nested deeper than {MAX_NESTING} levels", event.start_mark)
            return super().compose_node(parent, index)  # type: ignore[no-untyped-call,no-any-return]
        finally:
            self._depth -= 1


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            raise yaml.constructor.ConstructorError(None, None, _NO_REUSE, key_node.start_mark)
        if not isinstance(key_node, yaml.ScalarNode):
            kind = "a list" if isinstance(key_node, yaml.SequenceNode) else "a mapping"
            raise yaml.constructor.ConstructorError(
                None, None, f"a mapping key must be a plain value such as a name, got {kind}", key_node.start_mark
            )
        key = loader.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


def _construct_int(loader: _UniqueKeyLoader, node: yaml.ScalarNode) -> int:
    digits = sum(c.isalnum() for c in str(node.value))
    if digits > MAX_INT_DIGITS:
        raise yaml.constructor.ConstructorError(
            None, None, f"an integer of {digits} digits; at most {MAX_INT_DIGITS} are accepted", node.start_mark
        )
    return loader.construct_yaml_int(node)  # type: ignore[no-untyped-call,no-any-return]


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_UniqueKeyLoader.add_constructor("tag:yaml.org,2002:int", _construct_int)


def resolve_config_path(arg: str, config_dir: Path | None = None) -> Path:
    """A config argument: a file path, or an environment name meaning config/NAME.yaml."""
    path = Path(arg)
    if path.suffix in (".yaml", ".yml") or path.exists() or "/" in arg:
        return path
    return (config_dir or Path("config")) / f"{arg}.yaml"


def _loc_to_path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part.startswith("["):
            out += part
        else:
            out += f".{part}" if out else part
    return out


def _model_at(loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    """The model class a location points into (for listing allowed field names)."""
    current: Any = EnvironmentConfig
    for part in loc:
        if isinstance(part, int):
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return None
        field = next((f for n, f in current.model_fields.items() if part in (n, f.alias)), None)
        if field is None:
            return None
        current = _unwrap(field.annotation)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _unwrap(annotation: Any) -> Any:
    while get_origin(annotation) is not None:
        args = [a for a in get_args(annotation) if a is not type(None)]
        models = [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]
        if models:
            return models[0]
        if get_origin(annotation) is dict:
            annotation = args[-1]
        elif args:
            annotation = args[0]
        else:
            return None
    return annotation


def _format_pydantic_errors(file: str, exc: PydanticValidationError) -> list[str]:
    lines: list[str] = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        error = (err.get("ctx") or {}).get("error")
        if isinstance(error, Problems):
            for finding in error.findings:
                rel, msg = finding.path, finding.message
                rel_loc: tuple[int | str, ...] = tuple(p for p in re.split(r"\.(?![^\[]*\])", rel) if p) if rel else ()
                lines.append(f"{file}: {_loc_to_path(loc + rel_loc) or '(top level)'}: {msg}")
            continue
        if err["type"] == "extra_forbidden":
            model = _model_at(loc[:-1])
            allowed = ", ".join(f.alias or n for n, f in model.model_fields.items()) if model else "see `python -m fminfra schema`"
            lines.append(f"{file}: {_loc_to_path(loc)}: unknown field (allowed here: {allowed})")
            continue
        msg = err["msg"]
        if msg.startswith("Value error, "):
            msg = msg[len("Value error, ") :]
        elif err["type"] == "missing":
            msg = "required field is missing"
        else:
            given = err.get("input")
            if isinstance(given, (str, int, float, bool)) or given is None:
                msg += f", got {given!r}"
        lines.append(f"{file}: {_loc_to_path(loc) or '(top level)'}: {msg}")
    return lines


def _one_line(text: str) -> str:
    """A problem as one line: the first line of a multi-line message (PyYAML's reader errors and
    messages that quote a value with a line break have several)."""
    return text.splitlines()[0] if text else text


def parse_config(data: Any, file: str = "<config>") -> EnvironmentConfig:
    """Validate already-parsed YAML data; ConfigError with one line per problem."""
    if data is None:
        raise ConfigError([f"{file}: (file): {EMPTY_CONFIG}"])
    if not isinstance(data, dict):
        raise ConfigError([f"{file}: (top level): must be a mapping of config sections, got {type(data).__name__}"])
    try:
        return EnvironmentConfig.model_validate(data)
    except PydanticValidationError as exc:
        raise ConfigError([_one_line(line) for line in _format_pydantic_errors(file, exc)]) from None


def load_config(path: str | Path) -> EnvironmentConfig:
    """Read and validate one environment file; ConfigError with one line per problem."""
    return parse_config(read_yaml(path), str(path))


def read_yaml(path: str | Path) -> Any:
    """Parse one YAML file (duplicate keys rejected); ConfigError with one line if it cannot be read."""
    file = str(path)
    try:
        size = Path(path).stat().st_size
        if size > MAX_CONFIG_BYTES:
            raise ConfigError([f"{file}: (file): {size:,} bytes; a config file may have at most {MAX_CONFIG_BYTES:,}"])
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError([f"{file}: (file): no such file"]) from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError, OSError) as exc:
        raise ConfigError([f"{file}: (file): cannot read: {exc}"]) from None
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else "(yaml)"
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError([_one_line(f"{file}: {where}: invalid YAML: {problem}")]) from None
    except (ValueError, TypeError, RecursionError) as exc:  # what PyYAML's constructors let through
        raise ConfigError([_one_line(f"{file}: (yaml): invalid YAML: {type(exc).__name__}: {exc}")]) from None


def format_warnings(file: str | Path, cfg: EnvironmentConfig) -> list[str]:
    """The config's warnings, one line each: `FILE: field.path: warning: message`."""
    return [f.line(str(file)) for f in cfg.warnings()]


def config_files(config_dir: Path) -> list[Path]:
    """The environment files of a folder, in name order."""
    return sorted([*config_dir.glob("*.yaml"), *config_dir.glob("*.yml")])
