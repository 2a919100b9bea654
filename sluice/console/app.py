"""The console's routes: each HTTP request (broker.http) becomes one page or JSON answer.

    GET  /                         brokers, controller, cluster id
    GET  /topics, /topics/T        topics; a topic's partitions and recent messages
                                   (?partition=P&limit=N)
    GET  /groups, /groups/G        groups; a group's members, offsets, lag and lag chart
    GET  /quotas                   client quotas set, and the clients each broker
                                   throttles now (sluice.console.quotas)
    POST /groups/G/reset           the plan of an offset reset (a dry run)
    POST /groups/G/reset/confirm   commit a plan shown before
    GET  /api/cluster, /api/topics, /api/topics/T, /api/topics/T/messages,
         /api/groups, /api/groups/G, /api/groups/G/lag, /api/quotas      the same as JSON
    GET  /static/console.css, /static/console.js

The console only reads, unless started with `allow_offset_reset`; without it both reset
POSTs answer 403. A reset takes two POSTs: the first shows the plan (the shared
planning of `sluice groups reset-offsets`), the second carries that plan and a token
over it (HMAC with a key of this process, valid for `PLAN_LIFETIME` seconds), so only
a plan the console itself computed and showed is committed; the group must still have
no active members then. Every form carries this process's CSRF token, checked on POST.

A console bound to a loopback address answers only requests whose Host header names a
loopback address or localhost (403 otherwise): a web page whose DNS name is rebound to
127.0.0.1 reaches the port, but never with its own name accepted.

Cluster failures answer a readable page (or JSON {"error": ...}): 404 for an unknown
topic or group, 502 when the cluster cannot be reached or answers with an error, 504
on a timeout, 409 when a reset is refused; never a traceback.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import logging
import secrets
import time
from urllib.parse import parse_qsl, quote, unquote

from sluice_client import AsyncClient, ClientError
from wire.error_codes import ErrorCode
from wire.errors import KafkaError
from broker.http import HttpRequest, HttpResponse

from sluice.common import CommandError
from sluice.console import pages, queries
from sluice.console.quotas import client_quotas
from sluice.console.assets import SCRIPT, STYLESHEET
from sluice.console.lag import LagHistory, LagSampler
from sluice.groups import ResetPlan, ResetTarget, describe_group, execute_reset, plan_reset

__all__ = ["ConsoleApp", "PLAN_LIFETIME"]

log = logging.getLogger("sluice.console")

PLAN_LIFETIME = 600  # seconds a shown reset plan may be confirmed
DEFAULT_RECENT = 20

_HTML = "text/html; charset=utf-8"
_JSON = "application/json"
_PAGE_HEADERS = [("content-security-policy", "default-src 'self'; frame-ancestors 'none'"),
                 ("x-content-type-options", "nosniff"), ("referrer-policy", "no-referrer"),
                 ("cache-control", "no-store")]
_NOT_FOUND_CODES = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.GROUP_ID_NOT_FOUND)


class HttpError(Exception):
    """A request refused with `status` and a message for the user."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class ConsoleApp:
    def __init__(self, client: AsyncClient, history: LagHistory, sampler: LagSampler, *,
                 lag_interval_ms: int, allow_offset_reset: bool = False,
                 loopback_only: bool = True, metrics_port: int | None = None):
        """`metrics_port`: the brokers' metrics.port, where the throttled clients are read."""
        self.client = client
        self.history = history
        self.sampler = sampler
        self.lag_interval_ms = lag_interval_ms
        self.allow_offset_reset = allow_offset_reset
        self.loopback_only = loopback_only
        self.metrics_port = metrics_port
        self.csrf_token = secrets.token_urlsafe(32)
        self._plan_key = secrets.token_bytes(32)

    @property
    def cluster_id(self) -> str | None:
        return self.client.cached_metadata.cluster_id

    async def handle(self, request: HttpRequest) -> HttpResponse:
        path = request.path.strip("/")
        parts = [unquote(part) for part in path.split("/")] if path else []
        api = bool(parts) and parts[0] == "api"
        if self.loopback_only and not names_loopback(request.headers.get("host", "")):
            return self._error(403, "this console answers requests addressed to 127.0.0.1 or "
                                    "localhost only", api)
        try:
            return await self._route(request, parts)
        except HttpError as exc:
            return self._error(exc.status, str(exc), api)
        except queries.NotFound as exc:
            return self._error(404, str(exc), api)
        except CommandError as exc:  # the group planning's refusals
            return self._error(404 if request.method == "GET" else 409, str(exc), api)
        except KafkaError as exc:
            if exc.code in _NOT_FOUND_CODES:
                return self._error(404, str(exc), api)
            return self._error(502, f"the cluster answered with an error: {exc}", api)
        except ClientError as exc:
            return self._error(502, f"cannot reach the cluster: {exc}", api)
        except TimeoutError:
            return self._error(504, "the cluster did not answer in time", api)
        except OSError as exc:
            return self._error(502, f"cannot reach the cluster: {exc}", api)

    async def _route(self, request: HttpRequest, parts: list[str]) -> HttpResponse:
        method, query = request.method, request.query
        match method, parts:
            case "GET", []:
                return _page(pages.overview_page(await queries.cluster_overview(self.client)))
            case "GET", ["topics"]:
                return _page(pages.topics_page(await queries.topics_overview(self.client),
                                               self.cluster_id))
            case "GET", ["topics", topic]:
                detail = await queries.topic_detail(self.client, topic)
                messages = await queries.recent_messages(self.client, topic, *_recent_args(query))
                return _page(pages.topic_page(detail, messages, self.cluster_id))
            case "GET", ["groups"]:
                return _page(pages.groups_page(await queries.groups_overview(self.client),
                                               self.cluster_id))
            case "GET", ["groups", group]:
                document = await describe_group(self.client, group)
                form = pages.reset_form(document, self.csrf_token) if self.allow_offset_reset else ""
                notice = "Committed the new offsets." if query.get("reset") == "done" else None
                return _page(pages.group_page(document, lag_interval_ms=self.lag_interval_ms,
                                              reset_form=form, notice=notice,
                                              cluster_id=self.cluster_id))
            case "GET", ["quotas"]:
                return _page(pages.quotas_page(await client_quotas(self.client, self.metrics_port),
                                               self.cluster_id))
            case "POST", ["groups", group, "reset"]:
                return await self._plan_reset(group, self._form(request))
            case "POST", ["groups", group, "reset", "confirm"]:
                return await self._confirm_reset(group, self._form(request))
            case "GET", ["api", "cluster"]:
                return _json(await queries.cluster_overview(self.client))
            case "GET", ["api", "topics"]:
                return _json({"topics": await queries.topics_overview(self.client)})
            case "GET", ["api", "topics", topic]:
                return _json(await queries.topic_detail(self.client, topic))
            case "GET", ["api", "topics", topic, "messages"]:
                return _json(await queries.recent_messages(self.client, topic, *_recent_args(query)))
            case "GET", ["api", "groups"]:
                return _json({"groups": await queries.groups_overview(self.client)})
            case "GET", ["api", "groups", group]:
                return _json(await describe_group(self.client, group))
            case "GET", ["api", "groups", group, "lag"]:
                return _json({"group": group, "interval_ms": self.lag_interval_ms,
                              "samples": [s.to_json() for s in self.history.samples(group)],
                              "error": self.sampler.last_error})
            case "GET", ["api", "quotas"]:
                return _json(await client_quotas(self.client, self.metrics_port))
            case "GET", ["static", "console.css"]:
                return HttpResponse(200, STYLESHEET.encode(), "text/css; charset=utf-8",
                                    [("cache-control", "no-cache")])
            case "GET", ["static", "console.js"]:
                return HttpResponse(200, SCRIPT.encode(), "text/javascript; charset=utf-8",
                                    [("cache-control", "no-cache")])
        raise HttpError(404 if method in ("GET", "POST") else 405, f"no such page: {request.path}")

    # -- offset reset ------------------------------------------------------------------
    def _form(self, request: HttpRequest) -> dict[str, str]:
        """The POSTed form, once the reset is allowed and its CSRF token is this process's."""
        if not self.allow_offset_reset:
            raise HttpError(403, "offset reset is disabled: start the console with "
                                 "--allow-offset-reset to allow it")
        try:
            form = dict(parse_qsl(request.body.decode("utf-8"), keep_blank_values=True))
        except UnicodeDecodeError:
            raise HttpError(400, "the form is not UTF-8") from None
        if not _same(form.get("csrf", ""), self.csrf_token):
            raise HttpError(403, "the form's CSRF token is missing or stale: reload the page")
        return form

    async def _plan_reset(self, group: str, form: dict[str, str]) -> HttpResponse:
        scope = form.get("scope", "")
        topics = [(scope, None)] if scope else None
        choice = form.get("target")
        if choice == "earliest":
            target = ResetTarget(earliest=True)
        elif choice == "latest":
            target = ResetTarget(latest=True)
        elif choice == "offset":
            offset = form.get("offset", "").strip()
            if not _is_number(offset):
                raise HttpError(400, f"the offset must be a number >= 0, not {offset!r}")
            target = ResetTarget(offset=int(offset))
        else:
            raise HttpError(400, "choose a target: earliest, latest or offset")
        plan = await plan_reset(self.client, group, topics, target)
        planned = json.dumps([[t, p, o] for (t, p), o in sorted(plan.new_offsets.items())],
                             separators=(",", ":"))
        expires = str(int(time.time()) + PLAN_LIFETIME)
        confirm = {"csrf": self.csrf_token, "plan": planned, "expires": expires,
                   "token": self._plan_token(group, planned, expires)}
        return _page(pages.reset_plan_page(group, plan.rows(), confirm, self.cluster_id))

    async def _confirm_reset(self, group: str, form: dict[str, str]) -> HttpResponse:
        planned, expires = form.get("plan", ""), form.get("expires", "")
        if not _same(form.get("token", ""), self._plan_token(group, planned, expires)):
            raise HttpError(403, "this reset was not planned by this console: show the plan again")
        if not _is_number(expires) or int(expires) < time.time():
            raise HttpError(409, "the plan is too old: show the plan again")
        offsets = {(t, p): o for t, p, o in json.loads(planned)}
        await execute_reset(self.client, ResetPlan(group, {}, offsets))
        log.info("reset the offsets of group %r: %s", group, planned)
        back = f"/groups/{quote(group, safe='')}?reset=done"
        return HttpResponse(303, b"", _HTML, [("location", back)])

    def _plan_token(self, group: str, planned: str, expires: str) -> str:
        message = json.dumps([group, planned, expires]).encode("utf-8")
        return hmac.new(self._plan_key, message, hashlib.sha256).hexdigest()

    def _error(self, status: int, message: str, api: bool) -> HttpResponse:
        if api:
            return _json({"error": message}, status)
        return _page(pages.error_page(status, message, self.cluster_id), status)


def names_loopback(host: str) -> bool:
    """Whether a Host header ("127.0.0.1:8080", "localhost", "[::1]:8080") names this
    machine's loopback."""
    name = host.strip().lower()
    if name.startswith("["):
        name = name[1:].partition("]")[0]
    elif name.count(":") == 1:
        name = name.partition(":")[0]
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _recent_args(query: dict[str, str]) -> tuple[int, int | None]:
    """(limit, partition) of ?limit=N&partition=P."""
    limit_text = query.get("limit", "").strip() or str(DEFAULT_RECENT)
    partition_text = query.get("partition", "").strip()
    if not _is_number(limit_text) or not 1 <= int(limit_text) <= queries.MAX_RECENT:
        raise HttpError(400, f"limit must be a number from 1 to {queries.MAX_RECENT}")
    if partition_text and not _is_number(partition_text):
        raise HttpError(400, "partition must be a number >= 0")
    return int(limit_text), int(partition_text) if partition_text else None


def _is_number(text: str) -> bool:
    """ASCII digits only (str.isdigit also accepts digits int() refuses, such as "²")."""
    return text.isascii() and text.isdigit() and len(text) <= 19


def _same(given: str, expected: str) -> bool:
    """A constant-time comparison of a token from a form (any text) with ours."""
    return hmac.compare_digest(given.encode("utf-8"), expected.encode("utf-8"))


def _page(body: bytes, status: int = 200) -> HttpResponse:
    return HttpResponse(status, body, _HTML, list(_PAGE_HEADERS))


def _json(document, status: int = 200) -> HttpResponse:
    return HttpResponse(status, json.dumps(document).encode("utf-8"), _JSON,
                        [("cache-control", "no-store"), ("x-content-type-options", "nosniff")])
