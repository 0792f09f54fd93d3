"""SessionConfig: command-line flags > environment > kstui.toml (workspace, then user config dir) > defaults.

No heavy imports here: `kstui --help` and bad-input errors go through this module.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

CONFIG_NAME = "kstui.toml"


class ConfigError(ValueError):
    """One line naming the file and the field (or the flag / variable) that is wrong."""


@dataclass
class SessionConfig:
    kernel: Path
    workspace: Path
    # Agent. None = the agent module's default (for the model: the strongest one the SDK knows).
    model: str | None = None
    max_tokens: int | None = None  # None: the agent module's default
    thinking_budget: int | None = None  # None: the agent module's default; 0 = off
    api_key: str | None = field(default=None, repr=False)
    base_url: str | None = None
    no_agent: bool = False
    # Session limits and behaviour.
    max_evals: int | None = None
    max_cost: float | None = None
    max_turns: int | None = None
    self_ask: bool = False
    wait_for_human: bool = False  # when the agent ends its turn with nothing queued: wait (TUI) or end
    resume: bool = False
    branch: str | None = None
    questions: Path | None = None
    # Where and how to evaluate.
    eval_cmd: str | None = None
    gpu: str | None = None
    devices: str | None = None
    shards: int = 1
    warm_workers: bool = True  # local GPUs: prepare each next harness worker while the agent works
    scenarios: str = "full"
    eval_args: tuple[str, ...] = ()  # extra harness arguments for every evaluation (e.g. --check-only)
    confirm_shell: bool = False
    unconfined_shell: bool = False  # bash without bubblewrap, where bubblewrap cannot run: the user's choice
    # Acceptance: a gain must exceed max(noise of both results, this floor); within
    # borderline_factor x that margin the candidate and the best are re-evaluated, interleaved.
    noise_floor_pct: float = 0.5
    borderline_factor: float = 3.0
    recheck_rounds: int = 2
    stall_evals: int = 5
    stall_turns: int = 8
    bash_timeout_s: float = 120.0
    harness_dir: Path = field(default_factory=lambda: default_harness_dir())

    @property
    def manual(self) -> bool:
        return self.no_agent or not self.api_key


def default_harness_dir() -> Path:
    """Where the installed harness package lives (the judge whose files must not change mid-session)."""
    import harness

    return Path(harness.__file__).resolve().parent


# What kstui.toml may set, with the type each value must have. Secrets are deliberately absent:
# an API key lives in the environment, never in a file that may be committed.
_FILE_FIELDS: dict[str, tuple[type, ...]] = {
    "model": (str,),
    "max_tokens": (int,),
    "thinking": (int,),
    "base_url": (str,),
    "no_agent": (bool,),
    "max_evals": (int,),
    "max_cost": (int, float),
    "max_turns": (int,),
    "self_ask": (bool,),
    "branch": (str,),
    "questions": (str,),
    "eval_cmd": (str,),
    "gpu": (str,),
    "devices": (str,),
    "shards": (int,),
    "warm_workers": (bool,),
    "scenarios": (str,),
    "confirm_shell": (bool,),
    "unconfined_shell": (bool,),
    "noise_floor_pct": (int, float),
    "borderline_factor": (int, float),
    "recheck_rounds": (int,),
    "stall_evals": (int,),
    "stall_turns": (int,),
    "bash_timeout_s": (int, float),
}
# File / flag names that differ from the dataclass field.
_RENAMES = {"thinking": "thinking_budget"}
_NONNEGATIVE = {"max_tokens", "thinking", "max_evals", "max_cost", "max_turns", "noise_floor_pct",
                "recheck_rounds", "stall_evals", "stall_turns", "bash_timeout_s"}


def user_config_path(env: Mapping[str, str]) -> Path:
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME", str(Path.home()))) / ".config")
    return Path(base) / "kstui" / CONFIG_NAME


def read_config_file(path: Path) -> dict[str, Any]:
    """The validated settings of one kstui.toml (relative paths resolved against its folder)."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from None
    # Accept either top-level keys or the same keys grouped under [agent] / [session].
    flat: dict[str, Any] = {}
    for key, value in data.items():
        if key in ("agent", "session") and isinstance(value, dict):
            flat.update(value)
        else:
            flat[key] = value
    out: dict[str, Any] = {}
    for key, value in flat.items():
        types = _FILE_FIELDS.get(key)
        if types is None:
            raise ConfigError(f"{path}: field {key!r}: unknown setting")
        if isinstance(value, bool) and bool not in types or not isinstance(value, types):
            want = " or ".join(t.__name__ for t in types)
            raise ConfigError(f"{path}: field {key!r}: should be {want}, got {value!r}")
        if key in _NONNEGATIVE and value < 0:
            raise ConfigError(f"{path}: field {key!r}: should not be negative, got {value!r}")
        if key == "questions":
            value = str((path.parent / value).resolve())
        out[key] = value
    return out


def _env_settings(env: Mapping[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if env.get("KSTUI_MODEL"):
        out["model"] = env["KSTUI_MODEL"]
    for var, key in (("KSTUI_MAX_TOKENS", "max_tokens"), ("KSTUI_THINKING", "thinking")):
        raw = env.get(var)
        if raw:
            try:
                value = int(raw)
            except ValueError:
                raise ConfigError(f"environment {var}: should be an integer, got {raw!r}") from None
            if value < 0:
                raise ConfigError(f"environment {var}: should not be negative, got {raw!r}")
            out[key] = value
    if env.get("ANTHROPIC_BASE_URL"):
        out["base_url"] = env["ANTHROPIC_BASE_URL"]
    return out


def build_config(
    kernel: Path,
    flags: Mapping[str, Any] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    workspace: Path | None = None,
) -> SessionConfig:
    """Merge the sources. flags holds only what was given on the command line (None = not given)."""
    env = os.environ if env is None else env
    kernel = kernel.resolve()
    workspace = (workspace or kernel.parent).resolve()
    merged: dict[str, Any] = {}
    for path in (user_config_path(env), workspace / CONFIG_NAME):  # later overrides earlier
        if path.is_file():
            merged.update(read_config_file(path))
    merged.update(_env_settings(env))
    merged.update({k: v for k, v in (flags or {}).items() if v is not None})

    known = {f.name for f in fields(SessionConfig)}
    values: dict[str, Any] = {}
    for key, value in merged.items():
        name = _RENAMES.get(key, key)
        if name not in known:
            raise ConfigError(f"setting {key!r}: unknown")
        values[name] = value
    if values.get("questions") is not None:
        values["questions"] = Path(values["questions"])
    config = SessionConfig(kernel=kernel, workspace=workspace, **values)
    return replace(config, api_key=env.get("ANTHROPIC_API_KEY") or None)
