"""The one secret policy (harness.secret_env) and the no-secrets check (harness.secret_scan)."""

import base64
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from nvcc_support import needs_nvcc

from harness.secret_env import REDACTED, is_secret_name, is_withheld, redact, scrubbed, secret_values
from harness.secret_scan import find_secret, secret_check

ROOT = Path(__file__).resolve().parents[1]
KEY = "sk-ant-api03-Zq8vLw2XkP9mRt4YbN6cJd1HsF7gA3eU0iO5xKyTzQwErTy"


@pytest.mark.parametrize("name", ["ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GITHUB_TOKEN", "HF_TOKEN", "AWS_SECRET_ACCESS_KEY",
                                  "AWS_SESSION_TOKEN", "DB_PASSWORD", "MY_PASSWD", "GPG_PASSPHRASE", "SOME_CREDENTIALS",
                                  "X_APIKEY", "NPM_AUTH", "SSH_PRIVATE_KEY", "github_pat", "Slack_Token"])
def test_secret_names(name):
    assert is_secret_name(name) and is_withheld(name)


@pytest.mark.parametrize("name", ["PATH", "HOME", "GIT_AUTHOR_NAME", "MONKEY_PATCH", "KEYBOARD", "CUDA_VISIBLE_DEVICES",
                                  "LANG", "TOKENIZERS_PARALLELISM", "PYTHONPATH"])
def test_ordinary_names_are_not_secrets(name):
    assert not is_secret_name(name) and not is_withheld(name)


@pytest.mark.parametrize("name", ["ANTHROPIC_BASE_URL", "AWS_PROFILE", "GOOGLE_APPLICATION_CREDENTIALS", "SSH_AUTH_SOCK",
                                  "KUBECONFIG", "NETRC", "GNUPGHOME", "DOCKER_CONFIG", "HF_HOME"])
def test_credential_carriers_are_withheld(name):
    assert is_withheld(name) and not scrubbed({name: "/some/long/path/value"})


def test_settings_are_withheld_but_not_redacted():
    assert secret_values({"ANTHROPIC_BASE_URL": "https://api.anthropic.com", "ANTHROPIC_MODEL": "claude-x-1234"}) == {}


def test_a_url_with_a_password_is_a_secret_whatever_its_name():
    env = {"MIRROR": "https://bob:hunter2hunter2@pypi.example.com/simple", "PLAIN": "https://pypi.example.com/simple"}
    assert scrubbed(env) == {"PLAIN": env["PLAIN"]}
    assert secret_values(env) == {env["MIRROR"]: "MIRROR"}


def test_secret_values_skip_short_values_but_scrubbing_does_not():
    env = {"A_TOKEN": "short", "B_KEY": KEY, "PATH": "/bin"}
    assert secret_values(env) == {KEY: "B_KEY"}
    assert scrubbed(env) == {"PATH": "/bin"}
    assert secret_values({}, extra=["x" * 12]) == {"x" * 12: "extra"}


def test_redact_replaces_values_as_written_and_as_json_escapes_them():
    secret = 'pa"ss\\word-123456'
    text = f"plain {secret} json {json.dumps(secret)} key {KEY[:30]}"
    out = redact(text, [secret])
    assert secret not in out and json.dumps(secret)[1:-1] not in out and KEY[:30] not in out
    assert out.count(REDACTED) == 3


def _kernel(body: str) -> bytes:
    return (ROOT / "workspace" / "rmsnorm.cu").read_bytes() + body.encode()


LEAKS = {
    "plain": f'const char* k = "{KEY}";',
    "split across literals": 'const char* k = "' + '" "'.join(KEY[i:i + 5] for i in range(0, len(KEY), 5)) + '";',
    "hex escapes": 'const char* k = "' + "".join(f"\\x{ord(c):02x}" for c in KEY) + '";',
    "octal escapes": 'const char* k = "' + "".join(f"\\{ord(c):03o}" for c in KEY) + '";',
    "character array": "char k[] = {" + ", ".join(f"'{c}'" for c in KEY) + "};",
    "number array": "int k[] = {" + ", ".join(str(ord(c)) for c in KEY) + "};",
    "hex numbers": "int k[] = {" + ",".join(hex(ord(c)) for c in KEY) + "};",
    "reversed": f'const char* k = "{KEY[::-1]}";',
    "hex text": f'const char* k = "{KEY.encode().hex().upper()}";',
    "base64": f'const char* k = "{base64.b64encode(b"xy" + KEY.encode()).decode()}";',
    "upper case in a comment": f"// {KEY.upper()}",
    "a piece of it": f'const char* k = "{KEY[7:40]}";',
}


@pytest.mark.parametrize("how", sorted(LEAKS))
def test_a_kernel_carrying_a_secret_fails_the_check_naming_the_variable_never_the_value(how):
    check = secret_check(_kernel(LEAKS[how]), {KEY: "ANTHROPIC_API_KEY"})
    assert not check.ok and check.name == "no-secrets"
    assert "ANTHROPIC_API_KEY" in check.detail and KEY not in check.detail and KEY[7:20] not in check.detail


def test_what_the_check_does_not_catch_is_what_its_docstring_says():
    xored = "int k[] = {" + ", ".join(str(ord(c) ^ 0x5A) for c in KEY) + "};"
    short_pieces = "/*" + " filler ".join(KEY[i:i + 10] for i in range(0, len(KEY), 20)) + "*/"
    for body in (xored, short_pieces):
        assert find_secret(_kernel(body), {KEY: "K"}) is None


@pytest.mark.parametrize("kernel", ["flash_fwd.cu", "rmsnorm.cu"])
def test_the_starting_kernels_pass_with_many_secrets_around(kernel):
    import secrets

    values = {secrets.token_urlsafe(24): f"S{i}" for i in range(50)} | {"hunter2hunter2": "DB_PASSWORD"}
    assert secret_check((ROOT / "workspace" / kernel).read_bytes(), values).ok


@needs_nvcc
def test_an_evaluation_refuses_the_kernel_and_prints_no_secret(tmp_path):
    kernel = tmp_path / "k.cu"
    kernel.write_bytes(_kernel(f'\nint leaked = "{KEY}";\n'))  # a compile error that quotes the line
    shutil.copy(ROOT / "workspace" / "rmsnorm.toml", tmp_path / "k.toml")
    env = {**os.environ, "ANTHROPIC_API_KEY": KEY, "KSTUI_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, "-m", "harness", "eval", str(kernel), "--check-only", "--json", "-"],
                          capture_output=True, text=True, env=env, timeout=300)
    result = json.loads(proc.stdout)
    check = next(c for c in result["checks"] if c["name"] == "no-secrets")
    assert proc.returncode == 1 and not check["ok"] and "ANTHROPIC_API_KEY" in check["detail"]
    assert KEY not in proc.stdout + proc.stderr and KEY[7:30] not in proc.stdout + proc.stderr
    assert REDACTED in result["build"]["log"]
