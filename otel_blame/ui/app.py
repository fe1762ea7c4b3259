"""The web UI and its JSON API as Starlette routes: standalone (``otel-blame ui``) or inside ``serve``.

The same paths either way: pages under ``/ui/``, the API under ``/api/``. :meth:`BlameUI.routes`
gives routes to add to another Starlette app (the processor's HTTP port); :func:`create_ui_app`
wraps them in an app of their own. Auth, CSRF and the security headers are applied per route, so
the routes carry them wherever they are mounted.
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from importlib import resources
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from otel_blame.attribution.base import AttributionError
from otel_blame.attribution.decision import BlameDecision, blame_decision, verdict_sentence
from otel_blame.attribution.known_answer import same_agent
from otel_blame.attribution.registry import DEFAULT_METHOD, METHOD_NAMES, create_method, is_llm_method
from otel_blame.loaders import SavedRun
from otel_blame.store.blame_store import BlameStore
from otel_blame.store.records import StoredRun, build_run
from otel_blame.trajectory import Outcome
from otel_blame.ui import security
from otel_blame.ui.estimate import estimate_cost
from otel_blame.ui.settings import UISettings
from otel_blame.ui.uploads import (
    UploadError,
    decode_text,
    parse_upload,
    read_body,
    replayed_request,
    upload_file_text,
)
from otel_blame.ui.views import (
    WINDOWS,
    colour_classes,
    culprits_plot,
    format_ago,
    format_time,
    heat_colour,
    parse_duration,
    run_view,
    shorten,
    sparkline_points,
)

log = logging.getLogger(__name__)
Handler = Callable[[Request], Awaitable[Response]]
_TRACE_ID = re.compile(r"^[0-9a-fA-F]{1,64}$")
PAGE_SIZE = 50
PATTERNS_SHOWN = 50  # patterns on the page (and by default in the API), most runs first


class BadQuery(ValueError):
    """A query parameter cannot be read; answered with 400 and this message."""


def _since(value: str | None, now: float) -> float | None:
    """``1h`` (that long ago), unix seconds, or an ISO 8601 time."""
    if not value:
        return None
    try:
        number = float(value)
    except ValueError:
        number = None
    if number is not None and number > 1e8:
        return number
    try:
        return now - parse_duration(value)
    except (ValueError, KeyError):
        pass
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise BadQuery(
            f"since={value!r}: expected a duration (1h, 30m, 7d), unix seconds or ISO 8601"
        ) from None


def _int(request: Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw in (None, ""):
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadQuery(f"{name}={raw!r}: expected a whole number") from None
    if not low <= value <= high:
        raise BadQuery(f"{name}={value}: expected {low} to {high}")
    return value


def _window(value: str | None) -> float:
    try:
        return parse_duration(value or "1h")
    except (ValueError, KeyError):
        raise BadQuery(f"window={value!r}: expected a duration such as 15m, 1h, 24h or 7d") from None


class BlameUI:
    """Pages and API over one :class:`BlameStore`."""

    def __init__(self, store: BlameStore, settings: UISettings | None = None) -> None:
        self.store = store
        self.settings = settings or UISettings()
        token = self.settings.auth_token.get_secret_value() if self.settings.auth_token else None
        self.auth = security.Authenticator(token, self.settings.session_seconds)
        templates = resources.files("otel_blame.ui") / "templates"
        self.templates = Environment(
            loader=FileSystemLoader(str(templates)),
            autoescape=select_autoescape(default=True, default_for_string=True),
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.templates.filters["when"] = format_time
        self.templates.filters["ago"] = format_ago
        self.templates.filters["heat"] = heat_colour
        self.templates.filters["pct"] = lambda value: f"{100 * float(value):.0f}%"
        self.templates.filters["shorten"] = shorten
        self.templates.tests["same_agent"] = same_agent

    # --- wiring -------------------------------------------------------------------------------------

    def routes(self) -> list[BaseRoute]:
        static = str(resources.files("otel_blame.ui") / "static")
        page, api = self._page, self._api
        return [
            Route("/ui", lambda request: RedirectResponse("/ui/", 308), methods=["GET"]),
            Route("/ui/", page(self.failures_page), methods=["GET"]),
            Route("/ui/runs/{trace_id}", page(self.run_page), methods=["GET"]),
            Route("/ui/runs/{trace_id}/steps/{index:int}", page(self.step_page), methods=["GET"]),
            Route("/ui/culprits", page(self.culprits_page), methods=["GET"]),
            Route("/ui/patterns", page(self.patterns_page), methods=["GET"]),
            Route("/ui/attribute", page(self.attribute_page), methods=["GET", "POST"]),
            Route("/ui/login", self._open(self.login_page), methods=["GET", "POST"]),
            Route("/ui/logout", self._open(self.logout), methods=["POST"]),
            Mount("/ui/static", app=StaticFiles(directory=static), name="static"),
            Route("/api/failures", api(self.api_failures), methods=["GET"]),
            Route("/api/runs/{trace_id}", api(self.api_run), methods=["GET"]),
            Route("/api/attribute", api(self.api_attribute), methods=["POST"]),
            Route("/api/culprits", api(self.api_culprits), methods=["GET"]),
            Route("/api/patterns", api(self.api_patterns), methods=["GET"]),
        ]

    def _finish(self, request: Request, response: Response) -> Response:
        security.set_csrf_cookie(request, response, self.settings.secure_cookies)
        return security.add_security_headers(response)

    def _page(self, handler: Handler) -> Handler:
        async def endpoint(request: Request) -> Response:
            allowed, _how = self.auth.allowed(request)
            if not allowed:
                target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
                response: Response = RedirectResponse(f"/ui/login?next={_quote(target)}", 303)
                return self._finish(request, response)
            if request.method == "POST" and not security.origin_ok(request):
                return self._finish(request, self._error_page(request, 403, "Cross-site request refused."))
            try:
                response = await handler(request)
            except BadQuery as error:
                response = self._error_page(request, 400, str(error))
            return self._finish(request, response)

        return endpoint

    def _api(self, handler: Handler) -> Handler:
        async def endpoint(request: Request) -> Response:
            allowed, how = self.auth.allowed(request)
            if not allowed:
                response: Response = JSONResponse(
                    {"error": "authentication required: send 'Authorization: Bearer <token>'"},
                    401,
                    headers={"WWW-Authenticate": 'Bearer realm="otel-blame"'},
                )
                return security.add_security_headers(response)
            if request.method == "POST" and how != "bearer":
                if not security.origin_ok(request):
                    return security.add_security_headers(
                        JSONResponse({"error": "cross-site request refused"}, 403)
                    )
                if how == "session" and not security.csrf_ok(request, None):
                    return security.add_security_headers(
                        JSONResponse({"error": "missing or wrong CSRF token (X-CSRF-Token header)"}, 403)
                    )
            try:
                response = await handler(request)
            except BadQuery as error:
                response = JSONResponse({"error": str(error)}, 400)
            except UploadError as error:
                response = JSONResponse({"error": error.message}, error.status)
            return security.add_security_headers(response)

        return endpoint

    def _open(self, handler: Handler) -> Handler:
        async def endpoint(request: Request) -> Response:
            if request.method == "POST" and not security.origin_ok(request):
                return self._finish(request, self._error_page(request, 403, "Cross-site request refused."))
            return self._finish(request, await handler(request))

        return endpoint

    # --- rendering ----------------------------------------------------------------------------------

    def _render(
        self, request: Request, template: str, http_status: int = 200, **context: Any
    ) -> HTMLResponse:
        context.setdefault("active", "")
        html = self.templates.get_template(template).render(
            csrf_token=security.csrf_token(request),
            auth_enabled=self.auth.enabled,
            signed_in=self.auth.enabled and self.auth.session_ok(request),
            **context,
        )
        return HTMLResponse(html, http_status)

    def _error_page(self, request: Request, status: int, message: str) -> HTMLResponse:
        return self._render(request, "error.html", status, status=status, message=message)

    async def _form(self, request: Request) -> FormData:
        """The posted form (size-limited), after checking its CSRF token."""
        body = await read_body(request, self.settings.max_upload_bytes)
        replay = await replayed_request(request, body)
        form = await replay.form(max_part_size=self.settings.max_upload_bytes)
        token = form.get(security.CSRF_FIELD)
        if not security.csrf_ok(request, token if isinstance(token, str) else None):
            raise UploadError(
                403, "This form has expired or came from another site; reload the page and retry."
            )
        return form

    # --- pages --------------------------------------------------------------------------------------

    async def failures_page(self, request: Request) -> Response:
        now = time.time()
        query = request.query_params
        page = _int(request, "page", 1, 1, 100_000)
        filters = {
            key: query.get(key, "").strip() for key in ("agent", "service", "method", "since", "pattern")
        }
        since = _since(filters["since"], now)
        result = await run_in_threadpool(
            self.store.failures,
            agent=filters["agent"] or None,
            service=filters["service"] or None,
            method=filters["method"] or None,
            since=since,
            limit=PAGE_SIZE,
            offset=(page - 1) * PAGE_SIZE,
            pattern=filters["pattern"] or None,
        )
        choices = await run_in_threadpool(self.store.distinct_values)
        pages = max(1, math.ceil(result.total / PAGE_SIZE))
        # a filter value the store has never seen (a typo, an old link) is said, not shown as "any"
        unknown = {
            key: filters[key]
            for key, known in (("agent", "agents"), ("service", "services"), ("method", "methods"))
            if filters[key] and not _among(key, filters[key], choices[known])
        }
        return self._render(
            request,
            "failures.html",
            active="failures",
            result=result,
            filters=filters,
            choices=choices,
            unknown=unknown,
            windows=list(WINDOWS),
            page=page,
            pages=pages,
            query_without_page="&".join(f"{k}={_quote(v)}" for k, v in filters.items() if v),
        )

    async def run_page(self, request: Request) -> Response:
        trace_id = request.path_params["trace_id"]
        run = await run_in_threadpool(self.store.run, trace_id) if _TRACE_ID.match(trace_id) else None
        if run is None:
            return self._error_page(
                request, 404, f"No attributed failure with trace id {trace_id} is stored."
            )
        view = run_view(run.trajectory, blame_decision(run.trajectory), run, run.annotation)
        return self._render(
            request,
            "run.html",
            active="attribute" if run.source else "failures",
            view=view,
            links=[] if run.source else self.settings.trace_links(run.trace_id),
        )

    async def step_page(self, request: Request) -> Response:
        """One step's whole text: where the run page links a folded step's long text, so a long run's
        page carries previews, not every word of every step."""
        trace_id, index = request.path_params["trace_id"], request.path_params["index"]
        run = await run_in_threadpool(self.store.run, trace_id) if _TRACE_ID.match(trace_id) else None
        if run is None or not 0 <= index < len(run.trajectory.steps):
            return self._error_page(request, 404, f"No step {index} of a stored run {trace_id}.")
        return self._render(
            request,
            "step.html",
            active="attribute" if run.source else "failures",
            run=run,
            step=run.trajectory.steps[index],
            colour_class=colour_classes(run.trajectory.agents)[run.trajectory.steps[index].agent],
        )

    def _count_undecided(self, request: Request) -> bool:
        """``?undecided=1`` counts undecided verdicts among culprits, ``0`` does not; else the setting."""
        raw = request.query_params.get("undecided", "").strip().lower()
        if not raw:
            return self.settings.count_undecided
        if raw in ("1", "true", "yes", "on"):
            return True
        if raw in ("0", "false", "no", "off"):
            return False
        raise BadQuery(f"undecided={raw!r}: expected 1 (count undecided verdicts too) or 0")

    async def culprits_page(self, request: Request) -> Response:
        window_text = request.query_params.get("window") or "1h"
        window = _window(window_text)
        count_undecided = self._count_undecided(request)
        report = await run_in_threadpool(self.store.culprits, window, count_undecided=count_undecided)
        return self._render(
            request,
            "culprits.html",
            active="culprits",
            report=report,
            plot=culprits_plot(report),
            window=window_text,
            windows=list(WINDOWS),
        )

    async def patterns_page(self, request: Request) -> Response:
        window_text = request.query_params.get("window") or "24h"
        window = _window(window_text)
        report = await run_in_threadpool(self.store.patterns, window, limit=PATTERNS_SHOWN)
        return self._render(
            request,
            "patterns.html",
            active="patterns",
            report=report,
            window=window_text,
            windows=list(WINDOWS),
            spark=sparkline_points,
        )

    def _methods(self) -> list[str]:
        return [name for name in METHOD_NAMES if not is_llm_method(name) or self.settings.llm_configured]

    async def attribute_page(self, request: Request) -> Response:
        context: dict[str, Any] = {
            "active": "attribute",
            "methods": self._methods(),
            "method": DEFAULT_METHOD,
            "llm_configured": self.settings.llm_configured,
            "max_upload_mib": self.settings.max_upload_bytes / (1024 * 1024),
        }
        if request.method == "GET":
            return self._render(request, "attribute.html", **context)
        try:
            form = await self._form(request)
            method = str(form.get("method") or DEFAULT_METHOD)
            context["method"] = method
            self._check_method(method)
            upload = form.get("file")
            data, name = await upload_file_text(upload, self.settings.max_upload_bytes)
            if not data.strip():  # no file chosen: the pasted text
                data, name = str(form.get("text") or "").encode("utf-8"), "the pasted trace"
            text = decode_text(data, name, self.settings.max_upload_bytes)
            saved = await run_in_threadpool(parse_upload, text, name)
            assume_failed = form.get("assume_failed") in ("yes", "on", "true", "1")
            context["assume_failed"] = assume_failed
            decision = blame_decision(saved.trajectory)
            if (decision.blame or assume_failed) and is_llm_method(method) and form.get("confirmed") != "yes":
                assert self.settings.llm is not None
                estimate = estimate_cost(method, saved.trajectory, self.settings.llm)
                steps = len(saved.trajectory.steps)
                return self._render(
                    request, "attribute.html", estimate=estimate, pending_text=text, steps=steps, **context
                )
            run, kept = await run_in_threadpool(self._attribute, saved, text, method, name, assume_failed)
        except UploadError as error:
            return self._render(request, "attribute.html", error.status, error=error.message, **context)
        if run is not None and kept:  # Post/Redirect/Get: the address bar holds the verdict's link
            return RedirectResponse(f"/ui/runs/{run.trace_id}", 303)
        return self._render(
            request,
            "run.html",
            active="attribute",
            view=run_view(saved.trajectory, decision, run, saved.annotation),
            links=[],
            source=name,
            not_kept=run is not None and not kept,
        )

    async def login_page(self, request: Request) -> Response:
        target = request.query_params.get("next") or "/ui/"
        if not target.startswith("/") or target.startswith("//"):
            target = "/ui/"
        if not self.auth.enabled:
            return RedirectResponse(target, 303)
        if request.method == "GET":
            return self._render(request, "login.html", next=target)
        try:
            form = await self._form(request)
        except UploadError as error:
            return self._render(request, "login.html", error.status, next=target, error=error.message)
        if not self.auth.token_matches(str(form.get("token") or "")):
            return self._render(request, "login.html", 401, next=target, error="That token is not right.")
        response = RedirectResponse(target, 303)
        response.set_cookie(
            security.SESSION_COOKIE,
            self.auth.new_session(),
            max_age=self.settings.session_seconds,
            httponly=True,
            samesite="strict",
            secure=self.settings.secure_cookies,
            path="/",
        )
        return response

    async def logout(self, request: Request) -> Response:
        try:
            await self._form(request)
        except UploadError as error:
            return self._error_page(request, error.status, error.message)
        response = RedirectResponse("/ui/login" if self.auth.enabled else "/ui/", 303)
        response.delete_cookie(security.SESSION_COOKIE, path="/")
        return response

    # --- attribution of an upload -------------------------------------------------------------------

    def _check_method(self, method: str) -> None:
        if method not in METHOD_NAMES:
            raise UploadError(400, f"unknown method {method!r}; choose one of: {', '.join(self._methods())}")
        if is_llm_method(method) and not self.settings.llm_configured:
            raise UploadError(
                400,
                f"{method} needs an LLM endpoint and none is configured; "
                f"offline methods: {', '.join(self._methods())}",
            )

    def _attribute(
        self, saved: SavedRun, text: str, method_name: str, source: str, assume_failed: bool
    ) -> tuple[StoredRun | None, bool]:
        """Attribute an uploaded run when the one decision (or ``assume_failed``) says to blame it,
        and keep the verdict in the store under an id made from the file and the method, so the same
        upload has the same link; the same content uploaded again keeps the name it was first
        uploaded under. (None, False): not blamed; (run, False): blamed but not kept."""
        trajectory = saved.trajectory
        if not (blame_decision(trajectory).blame or assume_failed):
            return None, False
        method = create_method(method_name, llm=self.settings.llm)
        try:
            attribution = method.attribute(trajectory.model_copy(update={"outcome": Outcome.FAILURE}))
        except AttributionError as error:
            raise UploadError(422, f"{method_name} could not attribute {source}: {error}") from None
        trace_id = upload_id(text, method_name)
        run = build_run(
            trajectory,
            attribution,
            trace_id=trace_id,
            service="",
            source=self._first_source(trace_id) or f"upload: {source}",
            annotation=saved.annotation,
        )
        try:
            self.store.add(run)
        except Exception as error:  # the store is down or full: the verdict is still shown
            why = f"{type(error).__name__}: {error}"
            log.warning("blame store: cannot keep the upload %s (%s)", source, why)
            return run, False
        return run, True

    def _first_source(self, trace_id: str) -> str | None:
        """The name an upload with this id was first kept under, or None (new, or unreadable store)."""
        try:
            earlier = self.store.run(trace_id)
        except Exception:  # the store is down: the upload is named as posted
            return None
        return earlier.source if earlier is not None and earlier.source else None

    # --- API ----------------------------------------------------------------------------------------

    async def api_failures(self, request: Request) -> Response:
        query = request.query_params
        result = await run_in_threadpool(
            self.store.failures,
            agent=query.get("agent") or None,
            service=query.get("service") or None,
            method=query.get("method") or None,
            since=_since(query.get("since"), time.time()),
            limit=_int(request, "limit", PAGE_SIZE, 1, 500),
            offset=_int(request, "offset", 0, 0, 10_000_000),
            pattern=query.get("pattern") or None,
        )
        return JSONResponse(result.model_dump(mode="json"))

    async def api_run(self, request: Request) -> Response:
        trace_id = request.path_params["trace_id"]
        run = await run_in_threadpool(self.store.run, trace_id) if _TRACE_ID.match(trace_id) else None
        if run is None:
            return JSONResponse({"error": f"no attributed failure with trace id {trace_id}"}, 404)
        return JSONResponse(run.model_dump(mode="json"))

    async def api_culprits(self, request: Request) -> Response:
        window = _window(request.query_params.get("window"))
        buckets = _int(request, "buckets", 24, 1, 240)
        count_undecided = self._count_undecided(request)
        report = await run_in_threadpool(
            self.store.culprits, window, buckets=buckets, count_undecided=count_undecided
        )
        return JSONResponse(report.model_dump(mode="json"))

    async def api_patterns(self, request: Request) -> Response:
        window = _window(request.query_params.get("window") or "24h")
        buckets = _int(request, "buckets", 24, 1, 240)
        limit = _int(request, "limit", PATTERNS_SHOWN, 1, 1000)
        report = await run_in_threadpool(self.store.patterns, window, buckets=buckets, limit=limit)
        return JSONResponse(report.model_dump(mode="json"))

    async def api_attribute(self, request: Request) -> Response:
        method = request.query_params.get("method") or DEFAULT_METHOD
        self._check_method(method)
        body = await read_body(request, self.settings.max_upload_bytes)
        content_type = request.headers.get("content-type", "")
        if content_type.startswith("multipart/form-data"):
            replay = await replayed_request(request, body)
            form = await replay.form(max_part_size=self.settings.max_upload_bytes)
            upload = form.get("file")
            if upload is None:
                raise UploadError(400, "multipart upload without a 'file' field")
            data, name = await upload_file_text(upload, self.settings.max_upload_bytes)
        else:  # ?name= names a file posted as the body (curl --data-binary @run.json)
            data, name = body, request.query_params.get("name", "").strip()[:200] or "the request body"
        text = decode_text(data, name, self.settings.max_upload_bytes)
        saved = await run_in_threadpool(parse_upload, text, name)
        assume_failed = request.query_params.get("assume_failed", "").lower() in ("1", "true", "yes")
        decision = blame_decision(saved.trajectory)
        run, kept = await run_in_threadpool(self._attribute, saved, text, method, name, assume_failed)
        return JSONResponse(attribute_answer(saved, decision, run, kept))


def attribute_answer(
    saved: SavedRun, decision: BlameDecision, run: StoredRun | None, kept: bool
) -> dict[str, Any]:
    """``POST /api/attribute``'s answer: the decision, and the blame when there is one (its link when
    kept); a run that is not blamed has no agent, step, reason or scores. ``verdict`` is the line every
    surface shows: ``coder at step 2``, or ``Undecided: coder at step 2 or planner at step 1``."""
    trajectory = saved.trajectory
    answer: dict[str, Any] = {
        "blamed": run is not None,
        "decision": decision.model_dump(mode="json"),
        "agent": None,
        "step": None,
        "confidence": None,
        "decided": None,
        "verdict": None,
        "reason": None,
        "category": None,
        "dependency": None,
        "failure_mode": None,
        "method": None,
        "model": None,
        "scores": [],
        "candidates": [],
        "cost": None,
        "steps": len(trajectory.steps),
        "agents": trajectory.agents,
        "outcome": trajectory.outcome.value,
        "trace_id": trajectory.trace_id,
        "url": None,
        "annotation": saved.annotation.model_dump() if saved.annotation else None,
    }
    if run is not None:
        answer.update(
            agent=run.agent,
            step=run.step,
            confidence=run.confidence,
            decided=run.decided,
            verdict=verdict_sentence(run),
            reason=run.reason,
            category=run.category,
            dependency=run.dependency,
            failure_mode=run.failure_mode,
            method=run.method,
            model=run.model,
            scores=run.scores,
            candidates=[c.model_dump() for c in run.candidates],
            cost=run.cost.model_dump(),
            url=f"/ui/runs/{run.trace_id}" if kept else None,
        )
    return answer


def _among(key: str, value: str, known: list[str]) -> bool:
    """Whether a filter value names one of the stored values (agents: case and spaces aside)."""
    if key == "agent":
        return any(same_agent(value, agent) for agent in known)
    return value in known


def upload_id(text: str, method: str) -> str:
    """The stored id of an uploaded file's verdict: the same file and method, the same link."""
    return hashlib.sha256(f"{method}\n{text}".encode()).hexdigest()[:32]


def _quote(value: str) -> str:
    from urllib.parse import quote

    return quote(value, safe="/")


def create_ui_app(store: BlameStore, settings: UISettings | None = None) -> Starlette:
    """The standalone app of ``otel-blame ui``: the UI routes, and ``/`` leading to them."""
    ui = BlameUI(store, settings)
    routes = [Route("/", lambda request: RedirectResponse("/ui/", 307), methods=["GET"]), *ui.routes()]
    app = Starlette(routes=routes)
    app.state.blame_ui = ui
    return app
