"""The `no-secrets` check: a kernel whose bytes carry the value of a secret in the harness's environment.

The agent never sees a secret (its bash and the worker get scrubbed environments), so a secret in a
kernel means one leaked some other way; a kernel carrying it must not be committed or shown. The
finding names the variable, never the value.

What is caught, for a secret of at least 8 letters and digits once punctuation is dropped (a piece
is a run of at least 31 of those, in order; a short secret must appear whole):
- the value or a piece of it anywhere in the file, in any letter case, whatever separates its
  characters (split across string literals, commas, spaces, comments, line continuations);
- the same read backwards;
- hex and base64 encodings of the value, as text;
- the value spelled as escape sequences in string literals ("\\x73\\x6b...", octal, \\u) or as a
  sequence of character or number literals ({'s', 'k', ...}, {115, 107, ...}).
What is not: any other computed encoding (XOR, offsets, compression, encryption), pieces shorter
than the piece length scattered among other text, and a value assembled at run time. The check is a
filter for a leak that is plain to see; the wall is that no secret reaches the agent or the worker.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping

from harness.result import Check

NAME = "no-secrets"
PIECE = 16  # pieces of this many characters are searched for; any run of 2 * PIECE - 1 holds one
WHOLE_UP_TO = 2 * PIECE  # a secret (or encoding) up to this long is searched for whole

_NOT_ALNUM = re.compile(r"[^0-9a-z]+")
_STRING = re.compile(r'(?:u8|[uUL])?"((?:[^"\\\n]|\\.)*)"', re.S)
_CHAR_OR_NUMBER = re.compile(
    r"(?:u8|[uUL])?'((?:[^'\\\n]|\\.){1,4})'|\b(0[xX][0-9a-fA-F]+|0[bB][01]+|0[0-7]*|[1-9][0-9]*)[uUlL]*\b")
_ESCAPE = re.compile(r"\\(?:x([0-9a-fA-F]+)|([0-7]{1,3})|u([0-9a-fA-F]{4})|U([0-9a-fA-F]{8})|(.))", re.S)
_SIMPLE_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", "a": "\a", "b": "\b", "f": "\f", "v": "\v"}


def _project(text: str) -> str:
    return _NOT_ALNUM.sub("", text.lower())


def _unescape(body: str) -> str:
    def one(m: re.Match) -> str:
        hexa, octal, u4, u8, other = m.groups()
        code = int(hexa, 16) if hexa else int(octal, 8) if octal else int(u4 or u8, 16) if (u4 or u8) else None
        if code is None:
            return _SIMPLE_ESCAPES.get(other, other)
        return chr(code) if code <= 0x10FFFF else ""

    return _ESCAPE.sub(one, body)


def _literal_views(text: str) -> list[str]:
    """The string literals' contents decoded, and the character and number literals as characters."""
    strings = "".join(_unescape(m.group(1)) for m in _STRING.finditer(text))
    chars = []
    for m in _CHAR_OR_NUMBER.finditer(_STRING.sub(" ", text)):
        if m.group(1) is not None:
            chars.append(_unescape(m.group(1)))
        else:
            value = int(m.group(2), 0) if not re.fullmatch(r"0[0-7]+", m.group(2)) else int(m.group(2), 8)
            chars.append(chr(value) if value <= 0x10FFFF else " ")
    return [strings, "".join(chars)]


def _needles(form: str) -> list[str]:
    """The whole form if short, else its pieces at every PIECE-th character (and one ending it)."""
    if len(form) <= WHOLE_UP_TO:
        return [form]
    starts = list(range(0, len(form) - PIECE + 1, PIECE)) + [len(form) - PIECE]
    return [form[i:i + PIECE] for i in starts]


def _forms(secret: str) -> list[tuple[str, str]]:
    """(how, projected text) for every encoding searched for."""
    raw = secret.encode("utf-8", "replace")
    plain = _project(secret)
    forms = [("", plain), (" (reversed)", plain[::-1]), (" (hex)", raw.hex())]
    for shift in range(3):
        encoded = base64.b64encode(b"\0" * shift + raw).decode()
        # The characters the padding or the end touched are left out: they depend on what surrounds it.
        forms.append((" (base64)", _project(encoded[4 if shift else 0:-4])))
    return [(how, form) for how, form in forms if len(form) >= 8]


def find_secret(data: bytes, secrets: Mapping[str, str]) -> tuple[str, str] | None:
    """(variable name, how it was written) of the first secret found in `data`, or None.

    `secrets` maps each value to its variable's name (harness.secret_env.secret_values)."""
    if not secrets:
        return None
    text = data.decode("utf-8", "replace")
    views = [("", _project(text))] + [(" (in literals)", _project(v)) for v in _literal_views(text)]
    for value, name in secrets.items():
        if len(_project(value)) < 8:
            continue
        for how, form in _forms(value):
            for where, view in views:
                if any(needle in view for needle in _needles(form)):
                    return name, how or where
    return None


def secret_check(data: bytes, secrets: Mapping[str, str]) -> Check:
    found = find_secret(data, secrets)
    if found is None:
        return Check(NAME, True, "")
    name, how = found
    return Check(NAME, False, f"the kernel contains the value of the secret variable {name}{how}: "
                              "it is not run, shown or committed")
