"""How the pages show a run's end (the runs table's status cell, the job page's panel at the top) and its summary line.

A failed run shows its exception's class and message (and on its page the trace lines that
name the user's code), a lost one when its driver was last heard from, a stopped or finished
one when it ended. Class, message and trace come from the job and are hostile text: they go
into the page as text children of Dash components (React escapes them), never as markup.
"""
from __future__ import annotations

from datetime import datetime, timezone

from dash import html

from collector.query.run_ends import STATUS_LIVE
from collector.query.series import START_TO_END, RunInfo
from collector.run_status import STATUS_FAILED, STATUS_FINISHED, STATUS_LOST, STATUS_STOPPED

JOB_END = "job-end"
#: Characters of a failure's message the runs table shows; the whole of it is the cell's tooltip.
MESSAGE_CHARS = 80
_ENDED = {STATUS_FINISHED: "finished", STATUS_STOPPED: "stopped", STATUS_FAILED: "failed"}


def utc(ns: int, with_date: bool = True) -> str:
    """Return a time in UTC as the pages show it ("2026-01-02 12:34:56", or just "12:34:56")."""
    return datetime.fromtimestamp(ns / 1e9, timezone.utc).strftime("%Y-%m-%d %H:%M:%S" if with_date else "%H:%M:%S")


def clip(text: str, chars: int = MESSAGE_CHARS) -> str:
    """Return `text` on one line, cut to `chars` characters with an ellipsis."""
    line = " ".join(text.split())
    return line if len(line) <= chars else line[:chars - 1].rstrip() + "…"


def lost_text(r: RunInfo) -> str:
    """Return what a lost run's cell says after its badge."""
    return f": no word from the driver since {utc(r.seen_ns, False)}" if r.seen_ns is not None else ": no word"


def end_text(r: RunInfo) -> str:
    """Return "stopped at 2026-… UTC" for an ended run ("" for one still live or without a recorded end)."""
    if r.status == STATUS_LOST:
        return f"lost{lost_text(r)} UTC" if r.seen_ns is not None else "lost"
    if r.status in _ENDED and r.ended_ns is not None:
        return f"{_ENDED[r.status]} at {utc(r.ended_ns)} UTC"
    return ""


def status_cell(r: RunInfo) -> html.Span:
    """Return the runs table's status: a badge, and a failure's class and message or a lost run's last word."""
    badge = html.Span(r.status, className=f"status status-{r.status}")
    if r.status == STATUS_FAILED and r.error is not None:
        short_class = r.error.error_class.rsplit(".", 1)[-1]
        text = clip(f"{short_class}: {r.error.message}" if short_class else r.error.message)
        return html.Span([badge, html.Span(f" {text}", className="run-error", title=r.error.short)],
                         className="run-status")
    if r.status == STATUS_LOST:
        return html.Span([badge, html.Span(lost_text(r), className="run-lost")], className="run-status",
                         title="the run said it was running, then nothing more came: its driver was killed or lost")
    title = end_text(r)
    return html.Span([badge], className="run-status", title=title) if title else badge


def end_panel(r: RunInfo | None) -> list:
    """Return the job page's panel on how the run ended (nothing while it is live)."""
    if r is None or r.status == STATUS_LIVE:
        return []
    if r.status == STATUS_FAILED:
        err = r.error
        body: list = [html.H3(["Failed", f" at {utc(r.ended_ns)} UTC" if r.ended_ns is not None else ""],
                              className="run-end-head")]
        if err is not None:
            body.append(html.P([html.Code(err.error_class, className="run-end-class") if err.error_class else "",
                                ": " if err.error_class else "", html.Span(err.message, className="run-end-message")],
                               className="run-end-reason", id=JOB_END + "-reason"))
            if err.trace:
                body += [html.P("where, in the job's own code:", className="note"),
                         html.Pre("\n".join(err.trace), className="run-end-trace", id=JOB_END + "-trace")]
        return [html.Div(body, className="run-end run-end-failed")]
    if r.status == STATUS_LOST:
        seen = f" since {utc(r.seen_ns)} UTC" if r.seen_ns is not None else ""
        return [html.Div([html.H3("Lost", className="run-end-head"),
                          html.P(f"No word from the driver{seen}: the run said it was running, then nothing more "
                                 "came (its driver was killed, ran out of memory or lost its host).",
                                 className="run-end-reason", id=JOB_END + "-reason")],
                         className="run-end run-end-lost")]
    text = end_text(r)
    return [html.Div(html.P(text[0].upper() + text[1:], className="run-end-reason", id=JOB_END + "-reason"),
                     className=f"run-end run-end-{r.status}")] if text else []


def summary(info: RunInfo, events: int, end_step: str) -> tuple[str, str, str]:
    """Return the page's summary line and its throughput and latency charts' titles, by what the run records.

    A run that times its events start-to-end counts them so; any other counts Spark's input rows
    and gives its last step's latency.
    """
    end = end_text(info) or info.status
    query = f"query {info.query_id} · " if info.query_id else ""
    if end_step == START_TO_END:
        return (f"{query}{events:,} events start-to-end in the range · {info.events:,} in the whole run · {end}",
                "Throughput (start-to-end, per pipeline)", "Start-to-end latency (max over workers)")
    return (f"{query}{info.events:,} input rows in the whole run · "
            + (f"{events:,} through step {end_step} in the range · " if events else "") + end,
            f"Throughput (step {end_step}, per query)", f"Latency of step {end_step} (max over workers)")
