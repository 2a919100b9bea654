"""The console's HTML pages, rendered on the server from the dicts of
`sluice.console.queries` and `sluice.groups.describe_group`.

Every value that comes from Kafka (topic and group names, keys, values, headers, hosts,
client ids) is HTML-escaped, and quoted where it goes into a URL; the pages carry no
inline script (the lag chart's script is /static/console.js), so a Content-Security-
Policy of 'self' holds.
"""

from __future__ import annotations

import datetime as dt
import html
from urllib.parse import quote

from sluice.groups import INACTIVE_STATES, assignment_text

__all__ = ["error_page", "group_page", "groups_page", "overview_page", "quotas_page", "reset_plan_page",
           "topic_page", "topics_page"]


def e(value) -> str:
    """Escaped text of a value; None shows as "-"."""
    return "-" if value is None else html.escape(str(value), quote=True)


def u(segment: str) -> str:
    """A path segment, percent-quoted (a group name may hold "/" or "?")."""
    return quote(segment, safe="")


def _numbers(values) -> str:
    return e(",".join(str(v) for v in values)) if values else "-"


def _layout(title: str, body: str, cluster_id: str | None = None) -> bytes:
    cluster = f'<span class="cluster">cluster {e(cluster_id)}</span>' if cluster_id else ""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>{e(title)} · Sluice console</title>
<link rel="stylesheet" href="/static/console.css">
</head><body>
<header><a class="brand" href="/">Sluice console</a><a href="/">Overview</a>
<a href="/topics">Topics</a><a href="/groups">Consumer groups</a><a href="/quotas">Quotas</a>{cluster}</header>
<main>
{body}
</main>
<script src="/static/console.js"></script>
</body></html>
""".encode("utf-8")


def _badges(item: dict) -> str:
    badges = []
    if item.get("internal"):
        badges.append('<span class="badge internal">internal</span>')
    if item.get("under_replicated"):
        badges.append(f'<span class="badge under-replicated">{item["under_replicated"]} '
                      f'under-replicated</span>')
    if item.get("offline"):
        badges.append(f'<span class="badge offline">{item["offline"]} offline</span>')
    return "".join(badges)


def _time(ms: int | None) -> str:
    if ms is None or ms < 0:
        return "-"
    moment = dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{ms % 1000:03d}Z"


def _bytes(shown: dict | None) -> str:
    if shown is None:
        return '<span class="muted">null</span>'
    more = f' <span class="muted">… ({shown["size"]} bytes)</span>' if shown["truncated"] else ""
    kind = " hex" if shown["encoding"] == "hex" else ""
    prefix = "0x" if shown["encoding"] == "hex" else ""
    return f'<span class="bytes{kind}">{prefix}{e(shown["text"])}</span>{more}'


_CONTROLLER = '<span class="badge controller">controller</span>'


def _headers(headers: list[dict]) -> str:
    return "<br>".join(f"{e(h['key'])}: {_bytes(h['value'])}" for h in headers) or "-"


def overview_page(cluster: dict) -> bytes:
    rows = "".join(
        f'<tr><td class="num">{b["id"]}</td><td>{e(b["host"])}:{b["port"]}</td><td>{e(b["rack"])}</td>'
        f'<td>{_CONTROLLER if b["controller"] else ""}</td></tr>'
        for b in cluster["brokers"])
    health = (f'{cluster["topic_count"]} topics, {cluster["partition_count"]} partitions'
              f'{_badges(cluster)}')
    body = f"""<h1>Cluster {e(cluster["cluster_id"])}</h1>
<p>Controller: {e(cluster["controller_id"])} · {health}</p>
<h2>Brokers</h2>
<table id="brokers"><tr><th>ID</th><th>Address</th><th>Rack</th><th></th></tr>{rows}</table>"""
    return _layout("Overview", body, cluster["cluster_id"])


def topics_page(topics: list[dict], cluster_id: str | None) -> bytes:
    rows = "".join(
        f'<tr class="{_worst(t)}"><td><a href="/topics/{u(t["name"])}">{e(t["name"])}</a>{_badges(t)}</td>'
        f'<td class="num">{t["partition_count"]}</td>'
        f'<td class="num">{e(t["replication_factor"])}</td></tr>'
        for t in topics)
    body = f"""<h1>Topics</h1>
<table id="topics"><tr><th>Topic</th><th>Partitions</th><th>Replication factor</th></tr>{rows}</table>"""
    return _layout("Topics", body, cluster_id)


def _worst(topic: dict) -> str:
    return "offline" if topic["offline"] else "under-replicated" if topic["under_replicated"] else ""


def topic_page(topic: dict, messages: dict, cluster_id: str | None) -> bytes:
    # The columns of a reassignment, when one moves a partition of the topic.
    moving = any(p["adding_replicas"] or p["removing_replicas"] for p in topic["partitions"])
    partitions = "".join(
        f'<tr class="{p["status"] if p["status"] != "ok" else ""}" data-partition="{p["partition"]}">'
        f'<td class="num">{p["partition"]}</td><td class="num">{e(p["leader"])}</td>'
        f'<td>{_numbers(p["replicas"])}</td><td>{_numbers(p["isr"])}</td>'
        f'<td class="num">{e(p["log_start_offset"])}</td><td class="num">{e(p["log_end_offset"])}</td>'
        + (f'<td>{_numbers(p["adding_replicas"])}</td><td>{_numbers(p["removing_replicas"])}</td>'
           f'<td class="num">{e(p["bytes_left"])}</td>' if moving else "")
        + f'<td>{"" if p["status"] == "ok" else e(p["status"])}</td></tr>'
        for p in topic["partitions"])
    moving_headers = "<th>Adding replicas</th><th>Removing replicas</th><th>Bytes left</th>" if moving else ""
    shown = messages["messages"]
    rows = "".join(
        f'<tr><td class="num">{m["partition"]}</td><td class="num">{m["offset"]}</td>'
        f'<td>{_time(m["timestamp"])}</td><td>{_bytes(m["key"])}</td><td>{_bytes(m["value"])}</td>'
        f'<td>{_headers(m["headers"])}</td></tr>'
        for m in shown)
    selected = messages["partition"]
    choices = "".join(
        f'<option value="{p["partition"]}"{" selected" if selected == p["partition"] else ""}>'
        f'{p["partition"]}</option>' for p in topic["partitions"])
    unavailable = (f'<p class="muted">Partitions without a leader, not read: '
                   f'{_numbers(messages["unavailable_partitions"])}</p>'
                   if messages["unavailable_partitions"] else "")
    body = f"""<h1>Topic {e(topic["name"])}{_badges(topic)}</h1>
<p>Topic id: {e(topic["topic_id"])} · {topic["partition_count"]} partitions ·
replication factor {e(topic["replication_factor"])}</p>
<h2>Partitions</h2>
<table id="partitions"><tr><th>Partition</th><th>Leader</th><th>Replicas</th><th>ISR</th>
<th>Log start offset</th><th>Log end offset</th>{moving_headers}<th>Status</th></tr>{partitions}</table>
<h2>Recent messages</h2>
<form method="get" action="/topics/{u(topic["name"])}">
<label>Partition <select name="partition"><option value="">all (merged)</option>{choices}</select></label>
<label>Last <input type="number" name="limit" min="1" max="500" value="{messages["limit"]}"></label>
<button type="submit">Show</button></form>
{unavailable}
<table id="messages"><tr><th>Partition</th><th>Offset</th><th>Timestamp (UTC)</th><th>Key</th>
<th>Value</th><th>Headers</th></tr>{rows}</table>
{"" if shown else '<p class="muted">No messages.</p>'}"""
    return _layout(f"Topic {topic['name']}", body, cluster_id)


def groups_page(groups: list[dict], cluster_id: str | None) -> bytes:
    rows = "".join(
        f'<tr><td><a href="/groups/{u(g["group"])}">{e(g["group"])}</a></td><td>{e(g["state"])}</td>'
        f'<td class="num">{e(g["members"])}</td><td>{e(g["protocol_type"])}</td>'
        f'<td class="num">{e(g["coordinator"])}</td></tr>'
        for g in groups)
    body = f"""<h1>Consumer groups</h1>
<table id="groups"><tr><th>Group</th><th>State</th><th>Members</th><th>Protocol type</th>
<th>Coordinator</th></tr>{rows}</table>
{"" if groups else '<p class="muted">No groups.</p>'}"""
    return _layout("Consumer groups", body, cluster_id)


def _entity_name(name: str | None) -> str:
    """A user or client id of a quota entity: None is the default, "" not part of it."""
    return "&lt;default&gt;" if name is None else e(name) if name else '<span class="muted">any</span>'


def _quota_value(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}" if value == int(value) else f"{value:,.2f}"


def quotas_page(quotas: dict, cluster_id: str | None) -> bytes:
    throttled = "".join(
        f'<tr><td class="num">{t["broker"]}</td><td>{e(t["quota_type"])}</td>'
        f'<td>{_entity_name(t["user"])}</td><td>{_entity_name(t["client_id"])}</td>'
        f'<td class="num">{_quota_value(t["measured"])} {e(t["unit"])}</td>'
        f'<td class="num">{_quota_value(t["quota"])}</td><td class="num">{t["throttle_time_ms"]:,.0f}</td></tr>'
        for t in quotas["throttled"])
    if quotas["metrics_port"] is None:
        throttled_part = ('<p class="muted" id="throttled">Start the console with --metrics-port (the brokers\' '
                          'metrics.port) to see the clients they throttle.</p>')
    else:
        unreadable = "".join(f'<p class="muted">Broker {u["broker"]}: its metrics cannot be read ({e(u["error"])})</p>'
                             for u in quotas["unreadable"])
        throttled_part = (f'<table id="throttled"><tr><th>Broker</th><th>Quota</th><th>User</th><th>Client id</th>'
                          f'<th>Measured</th><th>Quota value</th><th>Throttle time (ms, average)</th></tr>'
                          f'{throttled}</table>{unreadable}'
                          + ("" if throttled else '<p class="muted">No client is throttled.</p>'))
    configured = "".join(
        f'<tr><td>{_entity_name(q["user"])}</td><td>{_entity_name(q["client_id"])}</td>'
        f'<td>{e(", ".join(f"{k}={_quota_value(v)}" for k, v in q["quotas"].items()))}</td></tr>'
        for q in quotas["set"])
    body = f"""<h1>Client quotas</h1>
<h2>Throttled clients</h2>
<p class="muted">Throttled over the brokers' quota windows: each entity's measured rate (bytes a
second, percent of a request handler's time, or controller mutation tokens left) beside its quota,
and the average throttle time its clients were given.</p>
{throttled_part}
<h2>Quotas set</h2>
<table id="quotas"><tr><th>User</th><th>Client id</th><th>Quotas</th></tr>{configured}</table>
{"" if configured else '<p class="muted">No quotas are set.</p>'}"""
    return _layout("Client quotas", body, cluster_id)


def group_page(group: dict, *, lag_interval_ms: int, reset_form: str, notice: str | None,
               cluster_id: str | None) -> bytes:
    name = group["group"]
    consumer = group["type"] == "consumer"  # KIP-848's protocol: members have epochs and targets
    members = "".join(
        f'<tr><td>{e(m["member_id"])}</td><td>{e(m["client_id"])}</td><td>{e(m["host"])}</td>'
        + (f'<td class="num">{m["member_epoch"]}</td>' if consumer else "")
        + f'<td>{_assignment(m["assignment"])}</td>'
        + (f'<td>{_assignment(m["target_assignment"])}</td>' if consumer else "") + '</tr>'
        for m in group["members"])
    offsets = "".join(
        f'<tr><td><a href="/topics/{u(o["topic"])}">{e(o["topic"])}</a></td>'
        f'<td class="num">{o["partition"]}</td><td class="num">{e(o["current_offset"])}</td>'
        f'<td class="num">{e(o["log_end_offset"])}</td><td class="num">{e(o["lag"])}</td>'
        f'<td>{e(o["client_id"])}</td></tr>'
        for o in group["offsets"])
    coordinator = group["coordinator"]
    if members:
        heads = ("<th>Member epoch</th><th>Assigned partitions</th><th>Target partitions</th>" if consumer
                 else "<th>Assigned partitions</th>")
        members = (f'<table id="members"><tr><th>Member id</th><th>Client id</th><th>Host</th>'
                   f'{heads}</tr>{members}</table>')
    else:
        members = '<p class="muted" id="members">No active members.</p>'
    body = f"""<h1>Consumer group {e(name)}</h1>
{f'<p class="notice">{e(notice)}</p>' if notice else ""}
<p>State: <strong id="group-state">{e(group["state"])}</strong> · <span id="group-type">{e(group["type"])}</span>
group, {(f'assignor {e(group["protocol"])} · group epoch {group["group_epoch"]} · assignment epoch '
         f'{group["assignment_epoch"]}') if consumer else f'protocol {e(group["protocol_type"])}/{e(group["protocol"])}'}
· coordinator {coordinator["id"]}
({e(coordinator["host"])}:{coordinator["port"]}) · total lag <strong id="total-lag">{group["total_lag"]}</strong></p>
<h2>Members</h2>
{members}
<h2>Offsets and lag</h2>
<p class="muted" id="offsets-as-of">As of {dt.datetime.now(dt.timezone.utc).strftime("%H:%M:%S")} UTC, when
this page loaded (reload for the current offsets); the chart below follows the lag live.</p>
<table id="offsets"><tr><th>Topic</th><th>Partition</th><th>Committed offset</th><th>Log end offset</th>
<th>Lag</th><th>Consumer</th></tr>{offsets}</table>
<h2>Lag over time</h2>
<div id="lag-chart" data-url="/api/groups/{u(name)}/lag" data-interval-ms="{lag_interval_ms}"></div>
<div id="lag-legend"></div>
<p class="muted" id="lag-status">Loading lag samples…</p>
{reset_form}"""
    return _layout(f"Group {name}", body, cluster_id)


def _assignment(assignment: list[dict] | None) -> str:
    if assignment is None:
        return '<span class="muted">?</span>'
    return e(assignment_text(assignment)) or "-"


def reset_form(group: dict, csrf: str) -> str:
    """The first step of an offset reset: choose partitions and target, see the plan."""
    name = group["group"]
    if group["state"] not in INACTIVE_STATES:
        return ('<h2>Reset offsets</h2><p class="muted" id="reset-unavailable">Offsets can only be '
                'reset while the group has no active members: stop its consumers first.</p>')
    topics = sorted({o["topic"] for o in group["offsets"]})
    scopes = "".join(f'<option value="{e(t)}">topic {e(t)}</option>' for t in topics)
    return f"""<h2>Reset offsets</h2>
<form class="reset" id="reset-form" method="post" action="/groups/{u(name)}/reset">
<input type="hidden" name="csrf" value="{e(csrf)}">
<label>Partitions <select name="scope"><option value="">every partition with a committed offset</option>{scopes}</select></label>
<label><input type="radio" name="target" value="earliest" checked> earliest</label>
<label><input type="radio" name="target" value="latest"> latest</label>
<label><input type="radio" name="target" value="offset"> offset
<input type="number" name="offset" min="0" value="0"></label>
<button type="submit" id="reset-plan">Show the plan</button>
</form>"""


def reset_plan_page(group: str, rows: list[dict], confirm: dict[str, str],
                    cluster_id: str | None) -> bytes:
    table = "".join(
        f'<tr><td>{e(r["topic"])}</td><td class="num">{r["partition"]}</td>'
        f'<td class="num">{e(r["current_offset"])}</td><td class="num">{r["new_offset"]}</td></tr>'
        for r in rows)
    hidden = "".join(f'<input type="hidden" name="{e(k)}" value="{e(v)}">' for k, v in confirm.items())
    body = f"""<h1>Reset the offsets of group {e(group)}?</h1>
<p>Dry run: nothing has changed yet. Confirm to commit these offsets.</p>
<table id="plan"><tr><th>Topic</th><th>Partition</th><th>Committed offset</th><th>New offset</th></tr>{table}</table>
<form method="post" action="/groups/{u(group)}/reset/confirm" id="confirm-form">{hidden}
<button type="submit" id="reset-confirm">Commit these offsets</button>
<a href="/groups/{u(group)}">Cancel</a></form>"""
    return _layout(f"Reset {group}", body, cluster_id)


def error_page(status: int, message: str, cluster_id: str | None = None) -> bytes:
    body = f'<h1>Error {status}</h1><p class="error" id="error">{e(message)}</p>'
    return _layout(f"Error {status}", body, cluster_id)
