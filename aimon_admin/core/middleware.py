"""Middleware: request ids, the request log, the API's body size limit, the runtime API's lean
stack, styled errors and the sync stack.

The request-id, request-log and body-limit middleware are sync and async capable, so an
async view (the approval long-poll) runs without a thread hop through them.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Awaitable, Callable

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.conf import settings
from django.core.handlers.base import BaseHandler
from django.core.handlers.exception import convert_exception_to_response
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.http.response import HttpResponseBase
from django.utils.module_loading import import_string

from aimon_admin.core.context import Channel, bind, new_request_id
from aimon_admin.core.logging import log_request

logger = logging.getLogger(__name__)

REQUEST_ID_HEADER = "X-Request-ID"
# Read from META directly: `request.headers` builds a mapping of every header (8.7 µs a
# request, docs/performance.md), which nothing else on the runtime API's path needs.
_REQUEST_ID_META = "HTTP_X_REQUEST_ID"
_VALID_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")
# What a response header cannot carry back (a value the server's own parser let through).
_UNSENDABLE = re.compile(r"[\x00\r\n]")

# Paths answered as the JSON API (errors as JSON, the body limit, the API channel): the
# runtime API and the OpenID AuthZEN endpoints, which the specification fixes outside /api/.
AUTHZEN_PREFIXES = ("/access/", "/.well-known/authzen-configuration")
API_PREFIXES = ("/api/", *AUTHZEN_PREFIXES)
BODY_TOO_LARGE_MESSAGE = "Request body is larger than the 1 MiB limit."
BAD_LENGTH_MESSAGE = "Content-Length is not a number."


class _DualMiddleware:
    """A middleware with a `before` hook (may answer early) and an `after` hook."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def before(self, request: HttpRequest) -> HttpResponse | None:
        return None

    def after(self, request: HttpRequest, response: HttpResponse) -> HttpResponse:
        return response

    def __call__(self, request: HttpRequest) -> HttpResponse | Awaitable[HttpResponse]:
        if self.is_async:
            return self._acall(request)
        early = self.before(request)
        if early is not None:
            return early
        return self.after(request, self.get_response(request))

    async def _acall(self, request: HttpRequest) -> HttpResponse:
        early = self.before(request)
        if early is not None:
            return early
        return self.after(request, await self.get_response(request))


class RequestIdMiddleware(_DualMiddleware):
    """Give every request an id (the caller's, if it is well-formed) and echo it back.

    The OpenID AuthZEN endpoints echo the caller's X-Request-ID as sent, whatever its form:
    the specification says the answer carries the same identifier. Logs and audit rows
    still get a well-formed one (a fresh id when the caller's is not).
    """

    def before(self, request: HttpRequest) -> HttpResponse | None:
        supplied = request.META.get(_REQUEST_ID_META, "")
        request_id = supplied if _VALID_REQUEST_ID.match(supplied) else new_request_id()
        request.request_id = request_id  # type: ignore[attr-defined]
        path = request.path
        channel = Channel.API if path.startswith(API_PREFIXES) else Channel.BROWSER
        bind(channel=channel, request_id=request_id)
        if supplied and request_id != supplied and path.startswith(AUTHZEN_PREFIXES):
            request.request_id_echo = supplied  # type: ignore[attr-defined]
        return None

    def after(self, request: HttpRequest, response: HttpResponse) -> HttpResponse:
        echo = getattr(request, "request_id_echo", None)
        if echo is not None and not _UNSENDABLE.search(echo):
            response[REQUEST_ID_HEADER] = echo
        else:
            response[REQUEST_ID_HEADER] = request.request_id  # type: ignore[attr-defined]
        return response


class RequestLogMiddleware(_DualMiddleware):
    """One record per request (aimon_admin.core.logging.log_request), written when its
    answer leaves: under the request id, above everything else, so its time is the whole
    stack's and its status the one sent (a streamed answer's time is to its first byte)."""

    def before(self, request: HttpRequest) -> HttpResponse | None:
        request.log_started = time.perf_counter()  # type: ignore[attr-defined]
        return None

    def after(self, request: HttpRequest, response: HttpResponse) -> HttpResponse:
        log_request(request, response.status_code, time.perf_counter() - request.log_started)  # type: ignore[attr-defined]
        return response


class ApiBodyLimitMiddleware(_DualMiddleware):
    """Refuse API bodies over the limit with 413 before anything reads them (docs/api.md "Basics").

    Bodies without a Content-Length (chunked) are caught when read, by
    DATA_UPLOAD_MAX_MEMORY_SIZE and the API exception handler, which also answer 413.
    """

    def before(self, request: HttpRequest) -> HttpResponse | None:
        if not request.path.startswith(API_PREFIXES):
            return None
        length = request.META.get("CONTENT_LENGTH") or "0"
        try:
            too_large = int(length) > settings.API_MAX_BODY_BYTES
        except ValueError:
            return JsonResponse({"error": "bad_request", "detail": BAD_LENGTH_MESSAGE}, status=400)
        if too_large:
            return JsonResponse({"error": "payload_too_large", "detail": BODY_TOO_LARGE_MESSAGE}, status=413)
        return None


class RuntimeApiHandler(BaseHandler):
    """The runtime API's own request handler: Django's, with `settings.RUNTIME_API_MIDDLEWARE`
    for its middleware list instead of MIDDLEWARE (what `RuntimeApiStack` hands API requests
    to). The chain is built as Django builds its own (`BaseHandler.load_middleware`: each
    middleware run sync or async as it can, the hooks collected), from the other list."""

    def __init__(self, *, is_async: bool) -> None:
        super().__init__()
        self.load_middleware(is_async=is_async)
        self.respond = self._middleware_chain

    def load_middleware(self, is_async: bool = False) -> None:
        self._view_middleware = []
        self._template_response_middleware = []
        self._exception_middleware = []
        handler = convert_exception_to_response(self._get_response_async if is_async else self._get_response)
        handler_is_async = is_async
        for middleware_path in reversed(settings.RUNTIME_API_MIDDLEWARE):
            middleware = import_string(middleware_path)
            can_sync = getattr(middleware, "sync_capable", True)
            can_async = getattr(middleware, "async_capable", False)
            middleware_is_async = can_async and (handler_is_async or not can_sync)
            adapted = self.adapt_method_mode(
                middleware_is_async, handler, handler_is_async, name=f"middleware {middleware_path}"
            )
            instance = middleware(adapted)
            if hasattr(instance, "process_view"):
                self._view_middleware.insert(0, self.adapt_method_mode(is_async, instance.process_view))
            if hasattr(instance, "process_template_response"):
                self._template_response_middleware.append(
                    self.adapt_method_mode(is_async, instance.process_template_response)
                )
            if hasattr(instance, "process_exception"):
                # Django runs exception hooks synchronously, as in its own chain.
                self._exception_middleware.append(self.adapt_method_mode(False, instance.process_exception))
            handler = convert_exception_to_response(instance)
            handler_is_async = middleware_is_async
        self._middleware_chain = self.adapt_method_mode(is_async, handler, handler_is_async)


class RuntimeApiStack:
    """First in MIDDLEWARE: the runtime API's lean stack. A request under
    `settings.RUNTIME_API_PREFIXES` (decisions, approval requests, sessions, tools, AuthZEN)
    or at one of `settings.PROBE_PATHS` (/healthz, /readyz), goes to a handler of its own
    (`RuntimeApiHandler`), whose middleware is
    `settings.RUNTIME_API_MIDDLEWARE` alone: the request id, its log record, the body limit, the security
    headers and Content-Length, the styled errors (503 when the database is down) and the
    sync stack. A bearer-token JSON call meets none of the page middleware (the content
    security policy, WhiteNoise, sessions, CSRF, authentication, messages, clickjacking,
    htmx, axes) nor any of their hooks. Pages take MIDDLEWARE, the whole chain.

    One way under every server: granian (wsgi.py), uvicorn (asgi.py, make run) and the test
    client all build MIDDLEWARE, so all dispatch here. Under ASGI both chains are built async,
    each switching to sync once, at its sync stack."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable) -> None:
        self.get_response = get_response
        self.prefixes = tuple(settings.RUNTIME_API_PREFIXES)
        self.probes = frozenset(settings.PROBE_PATHS)
        is_async = iscoroutinefunction(get_response)
        self.api_response = RuntimeApiHandler(is_async=is_async).respond
        if is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> HttpResponseBase | Awaitable[HttpResponseBase]:
        if request.path_info.startswith(self.prefixes) or request.path_info in self.probes:
            return self.api_response(request)
        return self.get_response(request)


class StyledErrorMiddleware:
    """A bare 405 (Django's method checks answer with an empty body) becomes the
    product's styled error page, or the API's JSON error body under the API's prefixes
    (/api/ and the AuthZEN endpoints).

    A view that meets an unreachable database (an OperationalError or InterfaceError,
    the pool's timeout included) answers a styled 503 with Retry-After, never a 500:
    `process_exception`. One raised by a middleware above this one (the session's read
    or save) reaches the 500 handler, which answers the same 503.

    Sync only, placed just above SyncStackMiddleware: no thread hop of its own.
    """

    sync_capable = True
    async_capable = False

    def __init__(self, get_response: Callable) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if response.status_code == 405 and not getattr(response, "streaming", False) and not response.content:
            from aimon_admin.core.views import method_not_allowed

            styled = method_not_allowed(request, response.get("Allow", ""))
            styled._has_been_logged = True  # type: ignore[attr-defined] # Django logged the bare one
            return styled
        return response

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        from aimon_admin.core.views import DATABASE_ERRORS, database_unavailable

        if isinstance(exception, DATABASE_ERRORS):
            logger.error("database unavailable: %s", exception)
            return database_unavailable(request)
        return None


class SyncStackMiddleware:
    """Last in MIDDLEWARE, and sync only: it makes Django run the whole middleware stack
    above it in sync mode, in one thread hop per request.

    Django's own middlewares are sync *and* async capable, but in async mode each one
    runs its hooks through `sync_to_async`, two thread hops apiece; with WhiteNoise
    (sync only) in the middle the stack also switched modes twice. Measured under ASGI:
    15 thread hops per request before, 3 after (benchmarks/skill_decisions.py).
    Async views (the approval long-poll) still run on the event loop, below this.
    """

    sync_capable = True
    async_capable = False

    def __init__(self, get_response: Callable) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)
