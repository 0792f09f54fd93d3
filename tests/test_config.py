from pathlib import Path

import pytest

from kstui.engine.config import ConfigError, build_config, read_config_file


@pytest.fixture
def kernel(tmp_path: Path) -> Path:
    k = tmp_path / "ws" / "k.cu"
    k.parent.mkdir()
    k.write_text("// kernel\n")
    return k


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {"HOME": str(tmp_path / "home"), **extra}


def test_defaults(tmp_path: Path, kernel: Path) -> None:
    c = build_config(kernel, env=_env(tmp_path))
    assert c.kernel == kernel.resolve() and c.workspace == kernel.parent.resolve()
    assert c.model is None and c.api_key is None and c.manual
    assert c.noise_floor_pct == 0.5 and c.scenarios == "full"


def test_precedence_flags_env_workspace_user(tmp_path: Path, kernel: Path) -> None:
    user = tmp_path / "home" / ".config" / "kstui" / "kstui.toml"
    user.parent.mkdir(parents=True)
    user.write_text('model = "user-model"\nmax_tokens = 100\nthinking = 5\nmax_evals = 3\nself_ask = true\n')
    (kernel.parent / "kstui.toml").write_text('[agent]\nmodel = "ws-model"\nmax_tokens = 200\n')
    c = build_config(kernel, env=_env(tmp_path))
    assert (c.model, c.max_tokens, c.thinking_budget, c.max_evals, c.self_ask) == ("ws-model", 200, 5, 3, True)
    env = _env(tmp_path, KSTUI_MODEL="env-model", KSTUI_THINKING="64", ANTHROPIC_API_KEY="sk-x",
               ANTHROPIC_BASE_URL="http://127.0.0.1:9")
    c = build_config(kernel, env=env)
    assert (c.model, c.max_tokens, c.thinking_budget) == ("env-model", 200, 64)
    assert c.api_key == "sk-x" and c.base_url == "http://127.0.0.1:9" and not c.manual
    c = build_config(kernel, {"model": "flag-model", "thinking": None, "max_evals": 9, "no_agent": True}, env=env)
    assert (c.model, c.thinking_budget, c.max_evals) == ("flag-model", 64, 9)
    assert c.manual  # --no-agent wins over a key


def test_xdg_config_home(tmp_path: Path, kernel: Path) -> None:
    xdg = tmp_path / "xdg" / "kstui" / "kstui.toml"
    xdg.parent.mkdir(parents=True)
    xdg.write_text('scenarios = "quick"\nquestions = "mine.toml"\n')
    c = build_config(kernel, env=_env(tmp_path, XDG_CONFIG_HOME=str(tmp_path / "xdg")))
    assert c.scenarios == "quick"
    assert c.questions == (xdg.parent / "mine.toml").resolve()  # relative to the file that says it


@pytest.mark.parametrize("body, needle", [
    ("max_tokens = 'lots'\n", "field 'max_tokens': should be int"),
    ("self_ask = 1\n", "field 'self_ask': should be bool"),
    ("max_evals = true\n", "field 'max_evals': should be int"),
    ("api_key = 'sk-ant-xyz'\n", "field 'api_key': unknown setting"),
    ("max_cost = -1\n", "field 'max_cost': should not be negative"),
    ("model = \n", "not valid TOML"),
])
def test_malformed_file_is_one_line_naming_file_and_field(tmp_path: Path, kernel: Path, body: str,
                                                          needle: str) -> None:
    path = kernel.parent / "kstui.toml"
    path.write_text(body)
    with pytest.raises(ConfigError) as err:
        build_config(kernel, env=_env(tmp_path))
    message = str(err.value)
    assert needle in message and str(path) in message and "\n" not in message


@pytest.mark.parametrize("var, value", [("KSTUI_MAX_TOKENS", "many"), ("KSTUI_THINKING", "-3")])
def test_bad_environment_names_the_variable(tmp_path: Path, kernel: Path, var: str, value: str) -> None:
    with pytest.raises(ConfigError, match=var):
        build_config(kernel, env=_env(tmp_path, **{var: value}))


def test_read_config_file_reports_unreadable(tmp_path: Path) -> None:
    bad = tmp_path / "kstui.toml"
    bad.write_bytes(b"\xff\xfe model = 1")
    with pytest.raises(ConfigError, match="kstui.toml"):
        read_config_file(bad)


def test_the_default_harness_dir_is_the_installed_harness(tmp_path: Path, kernel: Path) -> None:
    import harness

    config = build_config(kernel, env=_env(tmp_path))
    assert config.harness_dir == Path(harness.__file__).resolve().parent
    assert (config.harness_dir / "runner.py").is_file()  # the judge whose files the session fingerprints
