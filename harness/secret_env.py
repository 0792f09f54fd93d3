"""The one secret policy: which environment variables are secrets, their values, and environments without them.

Everything kstui and the harness hand to untrusted code (the agent's bash, the evaluation worker,
the build) gets `scrubbed(env)`; everything they write or print (the trace, notes, commit messages,
the EvalResult) is passed through `redact` with `secret_values(env)`; a kernel that contains one of
those values is refused (harness.secret_scan). The harness is the lowest layer, so kstui imports
this module rather than keeping its own rules.

Two notions:
- a secret *name* (`is_secret_name`): the variable's value is a secret, to be redacted wherever it
  appears and refused in a kernel: *_KEY, *_TOKEN, *SECRET*, *PASSWORD*, *CREDENTIAL*, ...;
- a *withheld* variable (`is_withheld`): never passed to an untrusted process, whether or not its
  value is secret text: every secret name, plus credential carriers whose value is a path, a socket
  or a setting (ANTHROPIC_*, cloud credentials, the SSH and GPG agents, netrc, kubeconfig).
A value that is a URL with a password in it (`https://user:pass@host`) is a secret whatever its name.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping

REDACTED = "[redacted]"
# Shorter values are not searched for inside text (a 4-character value would match everywhere);
# they are still withheld from untrusted processes by name.
MIN_SECRET_LEN = 8

_SECRET_NAME = re.compile(
    r"(?:^|_)(?:KEY|KEYS|TOKEN|TOKENS|PAT|AUTH)(?:_|$)|APIKEY|SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIAL"
    r"|PRIVATE_?KEY|COOKIE|SESSION_?ID",
    re.IGNORECASE,
)
_WITHHELD_PREFIXES = ("ANTHROPIC_", "CLAUDE_", "OPENAI_", "AWS_", "AZURE_", "GOOGLE_", "GCP_", "GCLOUD_",
                      "CLOUDSDK_", "HF_", "HUGGING_FACE_", "GH_", "GITHUB_", "GITLAB_", "NPM_", "PYPI_", "TWINE_",
                      "VAULT_", "DOCKER_", "KUBE", "SSH_", "GPG_", "GNUPG", "KRB5", "NETRC", "BW_", "OP_")
_WITHHELD_NAMES = frozenset({"NETRC", "KUBECONFIG", "GNUPGHOME", "DATABASE_URL", "REDIS_URL", "SENTRY_DSN",
                             "DBUS_SESSION_BUS_ADDRESS", "XAUTHORITY", "DISPLAY", "WAYLAND_DISPLAY"})
_URL_PASSWORD = re.compile(r"[a-z][\w+.-]*://[^/\s:@]*:[^/\s@]+@", re.IGNORECASE)
_ANTHROPIC_KEY = re.compile(r"sk-ant-[A-Za-z0-9_\-]{8,}")


def is_secret_name(name: str) -> bool:
    """The variable's value is a secret (redacted everywhere, refused in a kernel)."""
    return bool(_SECRET_NAME.search(name))


def is_secret_value(value: str) -> bool:
    """A value that is a secret whatever the variable is called: a key or a URL carrying a password."""
    return bool(_URL_PASSWORD.search(value) or _ANTHROPIC_KEY.search(value))


def is_withheld(name: str, value: str = "") -> bool:
    """Never passed to an untrusted process (the agent's bash, the worker, the build)."""
    upper = name.upper()
    return (is_secret_name(name) or upper.startswith(_WITHHELD_PREFIXES) or upper in _WITHHELD_NAMES
            or is_secret_value(value))


def scrubbed(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment without any withheld variable (os.environ when None)."""
    env = os.environ if env is None else env
    return {k: v for k, v in env.items() if not is_withheld(k, v)}


def secret_values(env: Mapping[str, str] | None = None, extra: Iterable[str] = ()) -> dict[str, str]:
    """{value: variable name} of the secrets in an environment (os.environ when None), plus `extra`
    (e.g. a key read from a config file, named "extra"). Values shorter than MIN_SECRET_LEN are left
    out: they cannot be searched for in text without matching everywhere."""
    env = os.environ if env is None else env
    found: dict[str, str] = {}
    for name, value in env.items():
        if len(value) >= MIN_SECRET_LEN and (is_secret_name(name) or is_secret_value(value)):
            found.setdefault(value, name)
    for value in extra:
        if value and len(value) >= MIN_SECRET_LEN:
            found.setdefault(value, "extra")
    return found


def redact(text: str, values: Iterable[str]) -> str:
    """`text` with every value (as written, and as it appears inside a JSON string) replaced, and any
    Anthropic-shaped key too. Longest first, so a secret that contains another is replaced whole."""
    for value in sorted(set(values), key=len, reverse=True):
        text = text.replace(value, REDACTED)
        escaped = json.dumps(value)[1:-1]
        if escaped != value:
            text = text.replace(escaped, REDACTED)
    return _ANTHROPIC_KEY.sub(REDACTED, text)
