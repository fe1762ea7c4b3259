"""Sign-in, sessions, cross-site request forgery and the Content-Security-Policy of the web UI.

Sessions are stateless signed cookies (``<expiry>.<hmac>`` keyed by the auth token), so any
replica that knows the token accepts a sign-in made on another. Every state-changing request
(POST) must carry the CSRF token (form field ``csrf_token`` or header ``X-CSRF-Token``) matching
the ``otel_blame_csrf`` cookie, and a browser's ``Origin``, when sent, must be this host; API
calls authenticated with a Bearer header carry no ambient credentials and need neither.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import Response

SESSION_COOKIE = "otel_blame_session"
CSRF_COOKIE = "otel_blame_csrf"
CSRF_FIELD = "csrf_token"
CSRF_HEADER = "x-csrf-token"

# Everything from this origin only; no inline script or style, no framing, forms post here only.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; form-action 'self'; frame-ancestors 'none'; "
    "base-uri 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",  # 'no-referrer' would make browsers send 'Origin: null' on POSTs
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}


class Authenticator:
    """Checks the Bearer header or the session cookie against the configured token."""

    def __init__(self, token: str | None, session_seconds: int) -> None:
        self._token = token
        self._key = hashlib.sha256(b"otel-blame-ui-session\0" + token.encode()).digest() if token else b""
        self._session_seconds = session_seconds

    @property
    def enabled(self) -> bool:
        return self._token is not None

    def token_matches(self, given: str) -> bool:
        return self._token is not None and hmac.compare_digest(given.encode(), self._token.encode())

    def bearer_ok(self, request: Request) -> bool:
        header = request.headers.get("authorization", "")
        scheme, _, value = header.partition(" ")
        return scheme.lower() == "bearer" and self.token_matches(value.strip())

    def _sign(self, expiry: int) -> str:
        return hmac.new(self._key, str(expiry).encode(), hashlib.sha256).hexdigest()

    def new_session(self) -> str:
        expiry = int(time.time()) + self._session_seconds
        return f"{expiry}.{self._sign(expiry)}"

    def session_ok(self, request: Request) -> bool:
        value = request.cookies.get(SESSION_COOKIE, "")
        expiry_text, _, signature = value.partition(".")
        if not expiry_text.isdigit() or not signature:
            return False
        expiry = int(expiry_text)
        return expiry > time.time() and hmac.compare_digest(signature, self._sign(expiry))

    def allowed(self, request: Request) -> tuple[bool, str]:
        """(allowed, how): how is 'open', 'bearer' or 'session'."""
        if not self.enabled:
            return True, "open"
        if self.bearer_ok(request):
            return True, "bearer"
        if self.session_ok(request):
            return True, "session"
        return False, ""


def csrf_token(request: Request) -> str:
    """The CSRF token of this browser: its cookie, or a new one that the response will set."""
    existing = request.cookies.get(CSRF_COOKIE, "")
    if len(existing) >= 32:
        return existing
    fresh = getattr(request.state, "new_csrf", None)
    if fresh is None:
        fresh = secrets.token_urlsafe(32)
        request.state.new_csrf = fresh
    return fresh


def set_csrf_cookie(request: Request, response: Response, secure: bool) -> None:
    fresh = getattr(request.state, "new_csrf", None)
    if fresh:
        response.set_cookie(CSRF_COOKIE, fresh, httponly=True, samesite="strict", secure=secure, path="/")


def origin_ok(request: Request) -> bool:
    """A browser's Origin (sent on every cross-origin POST) must be this server; without an Origin,
    a browser's Sec-Fetch-Site must say same-origin. Non-browser clients send neither."""
    origin = request.headers.get("origin")
    if origin is not None and origin != "null":
        return urlsplit(origin).netloc == request.headers.get("host", "")
    if origin == "null":  # a privacy-hiding browser: trust only its own same-origin statement
        return request.headers.get("sec-fetch-site") == "same-origin"
    return request.headers.get("sec-fetch-site", "same-origin") in ("same-origin", "none")


def csrf_ok(request: Request, form_token: str | None) -> bool:
    cookie = request.cookies.get(CSRF_COOKIE, "")
    given = form_token or request.headers.get(CSRF_HEADER, "")
    return bool(cookie) and bool(given) and hmac.compare_digest(cookie.encode(), given.encode())


def add_security_headers(response: Response) -> Response:
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    return response
