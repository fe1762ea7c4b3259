"""Content redaction: secrets and e-mail addresses are masked before message text leaves the process.

Shared by the instrumentation (on every captured message) and the processor (on content it
forwards). Built-in patterns cover the API keys of OpenAI, Anthropic, AWS (key ids and secret keys),
GitHub, Slack, Google and GitLab, JWTs, PEM private key blocks, passwords in connection URLs and
after names such as ``password=``, bearer and basic auth credentials, and e-mail addresses; an
optional user callable runs after them. A failing user callable never lets unredacted text
through: the whole text is replaced by :data:`REDACTION_FAILED`.

An e-mail address is an identifier agents pass on (to a lookup tool, in a hand-off), so it is masked
by a pseudonym, ``[REDACTED:email:3fa9c1d2]``: a keyed hash (HMAC-SHA256, a random key per
:class:`Redactor`, never written anywhere) that is the same for the same address within the process.
Attribution can then still see that an agent passed on an address other than the one it was given,
without anyone learning either address.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import os
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from otel_blame.trajectory import Trajectory

logger = logging.getLogger(__name__)

REDACTION_FAILED = "[content withheld: redaction hook failed]"


@dataclass(frozen=True)
class RedactionPattern:
    """One thing to mask: ``regex`` matches are replaced by ``[REDACTED:{label}]``.

    When the regex has a group named ``secret``, only that group is replaced (so the
    surrounding ``Bearer`` or ``api_key=`` stays readable).
    """

    label: str
    regex: re.Pattern[str]
    # Cheap pre-checks: the regex runs only if one of ``triggers`` occurs in the text (in the
    # lower-cased text when ``ignore_case``; triggers are then lower case) and, if set, one of
    # ``also`` does too. Empty: always run. Plain substring tests are much cheaper than regexes.
    triggers: tuple[str, ...] = ()
    ignore_case: bool = False
    also: tuple[str, ...] = ()
    # Only a match whose secret (or whole match) passes this check is masked; it gets the secret
    # and the whole match (the name it was written under, for one).
    validate: Callable[[str, str], bool] | None = None
    # masked by a keyed pseudonym (the same for the same value under one key) instead of the label alone
    pseudonym: bool = False

    def __post_init__(self) -> None:
        # each trigger with its rarest character: a one-character test (memchr) is an order of
        # magnitude cheaper than a substring search, and most texts lack the rare character
        object.__setattr__(self, "_gated", tuple((_rarest_char(t), t) for t in self.triggers))

    def may_match(self, text: str, lowered: str) -> bool:
        haystack = lowered if self.ignore_case else text
        if self.triggers:
            for gate, trigger in self._gated:  # type: ignore[attr-defined]
                if gate in haystack and trigger in haystack:
                    break
            else:
                return False
        if self.also:
            for needle in self.also:
                if needle in text:
                    return True
            return False
        return True

    def apply(self, text: str, key: bytes = b"") -> tuple[str, int]:
        marker = f"[REDACTED:{self.label}]"
        secret_groups = [name for name in self.regex.groupindex if name.startswith("secret")]
        if self.pseudonym and key:
            return self.regex.subn(lambda match: self._pseudonym(match.group(0), key), text)
        if not secret_groups and self.validate is None:
            return self.regex.subn(marker, text)
        count = 0

        def replace(match: re.Match[str]) -> str:
            nonlocal count
            start, end = match.span()
            for name in secret_groups:
                if match.start(name) != -1:
                    start, end = match.span(name)
                    break
            if self.validate is not None and not self.validate(text[start:end], match.group(0)):
                return match.group(0)
            count += 1
            whole_start = match.start()
            whole = match.group(0)
            return whole[: start - whole_start] + marker + whole[end - whole_start :]

        redacted = self.regex.sub(replace, text)
        return redacted, count

    def _pseudonym(self, value: str, key: bytes) -> str:
        digest = hmac.new(key, value.lower().encode("utf-8"), hashlib.sha256).hexdigest()[:8]
        return f"[REDACTED:{self.label}:{digest}]"


# Characters of a standard or URL-safe base64 run; used to find where a secret ends.
_B64 = r"A-Za-z0-9+/"


# lower-case letters from the most to the least frequent in English text; any other character
# (upper case, digits, punctuation) is rarer in prose than all of them
_LETTERS_BY_FREQUENCY = "etaoinsrhldcumfpgwybvkxjqz"


def _rarest_char(trigger: str) -> str:
    """The character of ``trigger`` least likely to occur in ordinary text (a pre-check's gate)."""
    candidates = [c for c in trigger if not c.isspace()] or list(trigger)
    return max(candidates, key=lambda c: _LETTERS_BY_FREQUENCY.find(c) if c in _LETTERS_BY_FREQUENCY else 99)


def _is_basic_credentials(token: str, _match: str = "") -> bool:
    """``Basic`` is an English word: only a token that decodes to ``user:password`` is masked."""
    try:
        decoded = base64.b64decode(token + "=" * (-len(token) % 4), validate=True)
    except (binascii.Error, ValueError):
        return False
    return b":" in decoded


def _is_secret_value(value: str, written: str = "") -> bool:
    """Whether a value written under a secret's name is one; what is not: a placeholder
    (``YOUR_API_KEY``, ``<your-token>``, ``xxxx``), an environment variable's name
    (``OPENAI_API_KEY``), a substitution (``${TOKEN}``, ``{{ secret }}``), code passing a
    variable on (``cancellation_token=ctx.cancellation_token``, ``api_key=api_key``) or one
    capitalised word of prose (``API Token: Follow …``). Measured on the Who&When logs by
    bench/redaction_false_positives.py."""
    return not (
        (_WORD.match(value) and _PROSE.match(written))
        or _PLACEHOLDER.match(value)
        or _ENV_NAME.match(value)
        or _SUBSTITUTION.match(value)
        or (_VARIABLE.match(code := value.rstrip(")]}")) and _NAMED_LIKE_A_SECRET.search(code))
    )


_PLACEHOLDER = re.compile(
    r"(?i)^[<{\[(\s]*(?:your|my|insert|replace|enter|example|sample|dummy|placeholder|changeme|redacted)"
    r"(?:[\s_\-.]|$)|^(?:x{4,}|\*{3,}|\.{3,}|…)"
)
_ENV_NAME = re.compile(r"^[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+$")
_SUBSTITUTION = re.compile(r"^(?:\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|\{\{.*\}\}|%\([A-Za-z_]\w*\)s)$")
_VARIABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*(?:\(\))?$")
# the variable's own name ends in a secret's name: ``api_key``, ``self.token``, ``ctx.cancellation_token``
_NAMED_LIKE_A_SECRET = re.compile(
    r"(?i)(?:^|[._])(?:api_?key|key|token|secret|password|passwd|pwd|passphrase)$"
)
# "API Token: Follow the instructions": a capitalised name, a colon and a capitalised word is prose
_WORD = re.compile(r"^[A-Z][a-z]+$")
_PROSE = re.compile(r"^(?:[A-Za-z0-9]+[ _\-])*[A-Z][a-z]+: ")

# Names under which a secret value is usually written: ``password=``, ``"client_secret": "…"``,
# ``AWS_SECRET_ACCESS_KEY=…``, ``githubToken``. Before the name may come words joined by ``_`` or
# ``-`` (``aws_``, ``X-Api-``) and then one camel-case word (``github``, ``Db``): a longer camel-case
# name (``SystemEntropyOriginTrialToken``, a web page's public metadata) is not a secret's name.
_NAME_PREFIX = r"(?:[A-Za-z0-9]+[_\-])*(?-i:[A-Z]?[a-z0-9]+)?"
_SECRET_NAMES = (
    r"(?:api[_-]?key|apikey|access[_-]?key(?:[_-]?id)?|secret[_-]?access[_-]?key|secretaccesskey"
    r"|secret[_-]?key|client[_-]?secret|private[_-]?key|(?:access|auth|refresh|session|id)[_-]?token"
    r"|token|secret|password|passwd|passphrase|pwd)"
)

BUILTIN_PATTERNS: tuple[RedactionPattern, ...] = (
    RedactionPattern(
        # A whole PEM private key block (RSA, EC, DSA, OPENSSH, ENCRYPTED, PGP ... BLOCK); a block
        # with no END line (cut off) is masked to the end of its base64 body.
        "private_key",
        re.compile(
            r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"
            r"(?:.*?-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|[A-Za-z0-9+/=\s:,.\\-]*)",
            re.DOTALL,
        ),
        triggers=("PRIVATE KEY",),
    ),
    RedactionPattern(
        # JSON Web Tokens: header.payload.signature, the first two base64url-encoded JSON objects.
        "jwt",
        re.compile(r"\beyJ[A-Za-z0-9_\-]{4,}\.eyJ[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]*"),
        triggers=("eyJ",),
    ),
    RedactionPattern(
        "bearer_token",
        re.compile(r"(?i)\bbearer\s+(?P<secret>[A-Za-z0-9\-._~+/]{8,}=*)"),
        triggers=("bearer",),
        ignore_case=True,
    ),
    RedactionPattern(
        "basic_auth",
        re.compile(rf"(?i)\bbasic\s+(?P<secret>[{_B64}]{{8,}}={{0,2}})(?![{_B64}=])"),
        triggers=("basic",),
        ignore_case=True,
        validate=_is_basic_credentials,
    ),
    RedactionPattern(
        # scheme://user:password@host: the password only, so the URL stays readable.
        "url_password",
        re.compile(r"(?i)\b[a-z][a-z0-9+.\-]*://[^\s/:@\"'<>]*:(?P<secret>[^\s/@\"'<>]+)@"),
        triggers=("://",),
    ),
    RedactionPattern(
        # An AWS secret access key (40 base64 characters, mixed case with a digit, "/" or "+")
        # where the text also speaks of AWS or carries an AWS key id.
        "aws_secret_key",
        re.compile(
            rf"(?<![{_B64}=])(?=[{_B64}]*[a-z])(?=[{_B64}]*[A-Z])(?=[{_B64}]*[0-9/+])"
            rf"[{_B64}]{{40}}(?![{_B64}=])"
        ),
        triggers=("aws", "akia", "asia", "secret"),
        ignore_case=True,
    ),
    RedactionPattern(
        "api_key",
        re.compile(
            r"(?<![A-Za-z0-9])(?:"
            r"sk-(?:proj-|ant-(?:api\d\d-|admin\d\d-)?|svcacct-|admin-|live-|test-)?[A-Za-z0-9_\-]{16,}"
            r"|(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[0-9A-Z]{16}"  # AWS key ids
            r"|gh[pousr]_[A-Za-z0-9]{30,}"  # GitHub tokens
            r"|github_pat_[A-Za-z0-9_]{30,}"
            r"|xox[abposre]-[A-Za-z0-9\-]{10,}"  # Slack
            r"|AIza[0-9A-Za-z_\-]{35}"  # Google API keys
            r"|glpat-[A-Za-z0-9_\-]{20,}"  # GitLab
            r")"
        ),
        triggers=(
            "sk-",
            "AKIA",
            "ASIA",
            "AGPA",
            "AIDA",
            "AROA",
            "ANPA",
            "ANVA",
            "AIPA",
            "ghp_",
            "gho_",
            "ghu_",
            "ghs_",
            "ghr_",
            "github_pat_",
            "xox",
            "AIza",
            "glpat-",
        ),
    ),
    RedactionPattern(
        # name = value, name: "value", "name": "value"; a quoted value is masked up to its quote.
        "api_key",
        re.compile(
            rf"(?i)(?<![A-Za-z0-9])(?:{_NAME_PREFIX})?{_SECRET_NAMES}(?:\\?[\"'])?\s*[:=]\s*(?!\[REDACTED:)"
            r"(?:\\?\"(?P<secret_dq>(?:[^\"\\\n]|\\(?!\")){4,})"
            r"|\\?'(?P<secret_sq>(?:[^'\\\n]|\\(?!')){4,})"
            r"|(?P<secret>[^\s\"',;&\\]{4,}))"
        ),
        triggers=("key", "token", "secret", "passw", "pwd", "passphrase"),
        ignore_case=True,
        also=(":", "="),
        validate=_is_secret_value,
    ),
    RedactionPattern(
        "email",
        re.compile(
            r"\b[A-Za-z0-9._%+\-]+@[A-Za-z0-9](?:[A-Za-z0-9\-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9\-]+)*\.[A-Za-z]{2,}\b"
        ),
        triggers=("@",),
        pseudonym=True,
    ),
)


@dataclass(frozen=True)
class Redacted:
    """The outcome of one redaction: the safe text and how many spans of it were masked."""

    text: str
    replacements: int
    hook_failed: bool = False

    @property
    def changed(self) -> bool:
        return self.replacements > 0 or self.hook_failed


class Redactor:
    """Masks secrets in text; ``hook`` (str -> str) runs after the built-in patterns.

    ``builtin=False`` turns the built-in patterns off (the hook still runs);
    ``extra_patterns`` adds ``(label, regex)`` pairs of your own.
    """

    def __init__(
        self,
        hook: Callable[[str], str] | None = None,
        *,
        builtin: bool = True,
        extra_patterns: Iterable[tuple[str, str | re.Pattern[str]]] = (),
    ) -> None:
        patterns = list(BUILTIN_PATTERNS) if builtin else []
        for label, regex in extra_patterns:
            patterns.append(RedactionPattern(label, re.compile(regex) if isinstance(regex, str) else regex))
        self._patterns = tuple(patterns)
        self._key = os.urandom(16)  # for pseudonyms: never leaves the process (or its workers)
        self._hook = hook
        self._lock = threading.Lock()
        self._hook_failures = 0

    def __getstate__(self) -> dict[str, object]:
        """Picklable (to analysis worker processes) when its hook is: the lock is made anew."""
        state = dict(self.__dict__)
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    @property
    def hook_failures(self) -> int:
        """How often the user hook raised or returned something other than a string."""
        return self._hook_failures

    def redact(self, text: str) -> Redacted:
        """Return ``text`` with every match masked; never raises for a failing user hook."""
        total = 0
        lowered = text.lower()
        for pattern in self._patterns:
            if pattern.may_match(text, lowered):
                text, count = pattern.apply(text, self._key)
                if count:
                    total += count
                    lowered = text.lower()
        if self._hook is None:
            return Redacted(text, total)
        try:
            hooked = self._hook(text)
            if not isinstance(hooked, str):
                raise TypeError(f"redaction hook returned {type(hooked).__name__}, not str")
        except Exception:
            with self._lock:
                self._hook_failures += 1
                first = self._hook_failures == 1
            if first:
                logger.exception("otel-blame: the redaction hook failed; content is withheld")
            return Redacted(REDACTION_FAILED, total, hook_failed=True)
        if hooked != text:
            total += 1
        return Redacted(hooked, total)

    def __call__(self, text: str) -> str:
        return self.redact(text).text


DEFAULT_REDACTOR = Redactor()


class RedactingLogFilter(logging.Filter):
    """Masks secrets in log records, so otel-blame's own log lines never print what content hides.

    Put on a handler (a logger's filters do not see records propagated from child loggers). The
    message is formatted and masked once, and so is the traceback text; the built-in patterns
    only, so a failing user hook cannot recurse through logging.
    """

    def __init__(self, redactor: Redactor | None = None) -> None:
        super().__init__()
        self._redactor = redactor or DEFAULT_REDACTOR
        self._formatter = logging.Formatter()

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a broken format string: logging reports it itself, leave it be
            return True
        record.msg, record.args = self._redactor(message), None
        if record.exc_info and not record.exc_text:
            record.exc_text = self._formatter.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self._redactor(record.exc_text)
        if record.stack_info:
            record.stack_info = self._redactor(record.stack_info)
        return True


def redact_trajectory(trajectory: Trajectory, redactor: Redactor) -> Trajectory:
    """A copy of a Trajectory with every piece of free text (task fields, step contents) redacted:
    what an external LLM, a listener or the blame store may see of a run."""
    task = trajectory.task.model_copy(
        update={
            key: redactor(value) if isinstance(value, str) else value
            for key, value in trajectory.task.model_dump().items()
            if key in ("name", "input", "expected_output", "final_output")
        }
    )
    steps = [step.model_copy(update={"content": redactor(step.content)}) for step in trajectory.steps]
    return trajectory.model_copy(update={"task": task, "steps": steps})
