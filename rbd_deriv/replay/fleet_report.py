"""The fleet report: ``index.html`` (one static page, images beside it), ``fleet.json``, ``bags.csv``, ``timing.json``.

Everything that varies from run to run (compute time per message, wall time, memory, attempts, the engine)
is in ``timing.json``, in ``timing_*.png`` and in the page between the ``<!-- timing:begin -->`` and
``<!-- timing:end -->`` comments. The rest (``fleet.json``, ``bags.csv``, ``group_*.png`` and the page outside
those comments) depends only on the bags and the options, byte for byte, whichever engine evaluated them.
"""

from __future__ import annotations

import csv
import datetime
import html
import io
import json
import math
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from rbd_deriv.replay.fleet import FAILURE_REASONS
from rbd_deriv.replay.report import write_json

__all__ = ["write_report", "TIMING_BEGIN", "TIMING_END", "group_plot", "timing_plot", "bags_csv"]

TIMING_BEGIN = "<!-- timing:begin -->"
TIMING_END = "<!-- timing:end -->"


def _slug(key: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in key) or "group"


def _utc(stamp_ns: Optional[int]) -> str:
    if stamp_ns is None:
        return ""
    moment = datetime.datetime.fromtimestamp(stamp_ns * 1e-9, tz=datetime.timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def _figure(rows: int, height: float) -> Any:
    # The figure API with the Agg canvas, as the bag report does: no GUI backend, no pyplot state.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(10, height))
    FigureCanvasAgg(figure)
    return figure, figure.subplots(rows, 1, sharex=True, squeeze=False)[:, 0]


def _dates(stamps: Sequence[int]) -> List[datetime.datetime]:
    return [datetime.datetime.fromtimestamp(s * 1e-9, tz=datetime.timezone.utc).replace(tzinfo=None) for s in stamps]


def _save(figure: Any, path: Path) -> None:
    figure.subplots_adjust(left=0.1, right=0.8, top=0.94, bottom=0.1, hspace=0.15)
    # No date or software version in the file: the same data gives the same bytes.
    figure.savefig(path, dpi=80, metadata={"Software": None})


def group_plot(key: str, group: Dict[str, Any], rows: Dict[int, Dict[str, Any]], path: Path) -> None:
    """PNG of one group over time, one point per bag at its start: residual RMS and p99 of |residual| per
    joint (outlier bags circled), the worst cond(M), and the messages evaluated, refused and lost."""
    figure, axes = _figure(4, 11)
    members = [rows[n] for n in group["bag_numbers"]]
    times = _dates([row["start_ns"] for row in members])
    for name, joint in group["per_joint"].items():
        having = [(t, row) for t, row in zip(times, members) if name in row["per_joint"]]
        t = [item[0] for item in having]
        rms = [item[1]["per_joint"][name]["residual_rms"] for item in having]
        p99 = [item[1]["per_joint"][name]["abs_residual_percentiles"]["p99"] for item in having]
        line = axes[0].plot(t, rms, marker="o", markersize=3, linewidth=0.8, label=name)[0]
        axes[1].plot(t, p99, marker="o", markersize=3, linewidth=0.8, color=line.get_color())
        flagged = [(ti, value) for (ti, row), value in zip(having, rms) if name in row.get("outlier_joints", [])]
        if flagged:
            axes[0].plot([f[0] for f in flagged], [f[1] for f in flagged], linestyle="none", marker="o", markersize=10,
                         markerfacecolor="none", markeredgecolor="tab:red", markeredgewidth=1.5)
    axes[0].set_ylabel("residual RMS\n[N m or N]")
    axes[0].set_title(f"{key}: one point per bag (red circles: outliers)")
    axes[0].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    axes[1].set_ylabel("p99 |residual|\n[N m or N]")
    axes[2].semilogy(times, [row["condition_max"] for row in members], marker="o", markersize=3, linewidth=0.8)
    axes[2].set_ylabel("worst cond(M)")
    # Plain tick labels: the default 10^k labels go through mathtext, slower than the rest of the figure.
    from matplotlib.ticker import FuncFormatter, NullFormatter

    axes[2].yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axes[2].yaxis.set_minor_formatter(NullFormatter())
    evaluated = np.array([row["messages"]["evaluated"] for row in members], dtype=float)
    refused = np.array([row["messages"]["rejected"] for row in members], dtype=float)
    lost = np.array([row["messages"].get("lost_to_damage") or 0 for row in members], dtype=float)
    axes[3].plot(times, evaluated, marker="o", markersize=3, linewidth=0.8, label="evaluated")
    axes[3].plot(times, refused, marker="s", markersize=3, linewidth=0.8, label="refused")
    axes[3].plot(times, lost, marker="x", markersize=4, linewidth=0.8, label="lost to damage")
    axes[3].set_ylabel("messages")
    axes[3].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    axes[3].set_xlabel("bag start (UTC)")
    for axis in axes:
        axis.grid(True, alpha=0.3)
    figure.autofmt_xdate()
    _save(figure, path)


def timing_plot(key: str, group: Dict[str, Any], rows: Dict[int, Dict[str, Any]], timing: Dict[int, Dict[str, Any]],
                path: Path) -> None:
    """PNG of the batched compute time per message [us] of each bag of a group (p50 and p99)."""
    figure, axes = _figure(1, 3.5)
    members = [n for n in group["bag_numbers"] if timing.get(n, {}).get("compute_us_p50") is not None]
    times = _dates([rows[n]["start_ns"] for n in members])
    axes[0].plot(times, [timing[n]["compute_us_p50"] for n in members], marker="o", markersize=3, label="p50")
    axes[0].plot(times, [timing[n]["compute_us_p99"] for n in members], marker="^", markersize=3, label="p99")
    axes[0].set_ylabel("compute per message [us]")
    axes[0].set_title(f"{key}: batched compute time per message, per bag")
    axes[0].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    axes[0].grid(True, alpha=0.3)
    figure.autofmt_xdate()
    _save(figure, path)


def _number(value: Any) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return ""
    return repr(value) if isinstance(value, float) else str(value)


def bags_csv(fleet: Dict[str, Any]) -> str:
    """One row per bag: where it is, whether it was evaluated (else why not), counts, cond(M), RMS per joint."""
    joints: List[str] = []
    for row in fleet["bags"]:
        joints.extend(name for name in row.get("per_joint", {}) if name not in joints)
    header = ["number", "bag", "folder", "robot", "ok", "reason", "detail", "start_utc", "start_ns", "duration_s",
              "messages", "evaluated", "refused", "lost_to_damage", "damage_events", "condition_max", "outlier_joints"]
    header += [f"rms:{name}" for name in joints]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    for row in fleet["bags"]:
        messages = row.get("messages", {})
        line = [row["number"], row["bag"], row["folder"], row["robot"], int(row["ok"]), row["reason"], row["detail"],
                _utc(row.get("start_ns")), _number(row.get("start_ns")), _number(row.get("duration_s")),
                _number(messages.get("total")), _number(messages.get("evaluated")), _number(messages.get("rejected")),
                _number(messages.get("lost_to_damage")), _number(row.get("damage_events")),
                _number(row.get("condition_max")), " ".join(row.get("outlier_joints", []))]
        per_joint = row.get("per_joint", {})
        line += [_number(per_joint[name]["residual_rms"]) if name in per_joint else "" for name in joints]
        writer.writerow(line)
    return buffer.getvalue()


def _g(value: Any, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{value:.{digits}g}" if isinstance(value, float) else str(value)


def _table(header: Sequence[str], lines: Sequence[Sequence[str]], numeric: range = range(1, 11)) -> str:
    """An HTML table; the cells already escaped; columns in ``numeric`` right-aligned."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = []
    for line in lines:
        cells = "".join(f"<td class='n'>{c}</td>" if i in numeric else f"<td>{c}</td>" for i, c in enumerate(line))
        body.append(f"<tr>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _link(target: str, text: str) -> str:
    return f"<a href='{html.escape(target, quote=True)}'>{html.escape(text)}</a>" if target else html.escape(text)


_STYLE = """body{font-family:sans-serif;margin:2em;max-width:1100px;color:#222}
table{border-collapse:collapse;margin:0.5em 0 1.5em}th,td{border:1px solid #ccc;padding:2px 6px;font-size:13px}
th{background:#f0f0f0}td.n{text-align:right;font-variant-numeric:tabular-nums}img{max-width:100%}
.bad{color:#b00}.note{color:#555;font-size:13px}section{margin-bottom:2em}"""


def _page(fleet: Dict[str, Any], images: Dict[str, str], timing_html: str, status: str) -> str:
    totals = fleet["totals"]
    parts = [
        "<!DOCTYPE html>", "<html><head><meta charset='utf-8'><title>Fleet evaluation</title>",
        f"<style>{_STYLE}</style></head><body>",
        "<h1>Fleet evaluation</h1>",
        f"<p>{totals['bags']} bags: {totals['evaluated']} evaluated ({totals['messages_evaluated']} joint_states "
        f"messages), {totals['failed']} not evaluated. Groups by {html.escape(fleet['group_by'])}; a bag stands out "
        f"on a joint when its residual RMS exceeds the group's median + {fleet['outlier_k']:g} MAD. {html.escape(status)}</p>",
        f"<p>Files: {_link('fleet.json', 'fleet.json')} (everything below), {_link('bags.csv', 'bags.csv')} (one row "
        f"per bag), {_link('timing.json', 'timing.json')} (timings of this run).</p>",
        "<p class='note'>Residual = RNEA(q, v, a_estimated) - recorded effort [N m, or N for prismatic joints]. "
        "RMS, mean, std, max and counts are exact merges of the bags' sums; percentiles of |residual| come from "
        "merged logarithmic histograms (within 0.12 %).</p>",
    ]
    for key, group in fleet["groups"].items():
        parts.append(f"<section><h2>{html.escape(key)}</h2>")
        parts.append(f"<p>{len(group['bags'])} bags of {html.escape(', '.join(group['robots']))}, from "
                     f"{_utc(group['first_start_ns'])} to {_utc(group['last_start_ns'])} UTC. Messages: "
                     f"{group['messages']['evaluated']} evaluated, {group['messages']['rejected']} refused "
                     f"{html.escape(json.dumps(group['messages']['rejected_by_reason']))}, "
                     f"{group['messages']['lost_to_damage']} lost to damage ({group['damaged_bags']} damaged bags). "
                     f"Worst cond(M) {_g(group['condition']['max'])} in {html.escape(group['condition']['max_bag'])} "
                     f"at {_g(group['condition']['max_at_s'])} s (p50 {_g(group['condition']['p50'])}).</p>")
        lines = []
        for name, joint in group["per_joint"].items():
            percentiles = joint["abs_residual_percentiles"]
            outliers = ", ".join(html.escape(bag) for bag in joint["outlier_bags"]) or "none"
            lines.append([html.escape(name), str(joint["bags"]), str(joint["samples"]), _g(joint["residual_rms"]),
                          _g(joint["residual_mean"]), _g(joint["residual_std"]), _g(percentiles["p50"]),
                          _g(percentiles["p90"]), _g(percentiles["p99"]), _g(joint["residual_max_abs"]),
                          _g(joint["outlier_threshold_rms"]), f"<span class='bad'>{outliers}</span>"])
        parts.append(_table(["joint", "bags", "samples", "RMS", "mean", "std", "p50 |r|", "p90 |r|", "p99 |r|",
                             "max |r|", "outlier above", "outlier bags"], lines, numeric=range(1, 11)))
        parts.append(f"<img src='{html.escape(images[key], quote=True)}' alt='{html.escape(key)} over time'>")
        parts.append("</section>")
    parts.append("<section><h2>Bags</h2>")
    lines = []
    for row in fleet["bags"]:
        messages = row.get("messages", {})
        state = "evaluated" if row["ok"] else f"<span class='bad'>{html.escape(row['reason'])}</span>"
        links = _link(row.get("summary", ""), "summary") + (" " + _link(row["plot"], "plot") if row.get("plot") else "")
        lines.append([html.escape(row["bag"]), html.escape(row["robot"]), state, _utc(row.get("start_ns")),
                      _g(row.get("duration_s")), _g(messages.get("evaluated")), _g(messages.get("rejected")),
                      _g(messages.get("lost_to_damage")), html.escape(" ".join(row.get("outlier_joints", []))),
                      links if row["ok"] else html.escape(row["detail"])])
    parts.append(_table(["bag", "robot", "state", "start (UTC)", "duration [s]", "evaluated", "refused", "lost",
                         "outlier joints", "details"], lines, numeric=range(4, 8)))
    if fleet["failures"]:
        parts.append("<h3>Not evaluated</h3>")
        parts.append(_table(["reason", "bags", "meaning"], [[html.escape(reason), str(count),
                                                           html.escape(FAILURE_REASONS.get(reason, ""))]
                                                          for reason, count in fleet["failures"].items()], numeric=range(1, 2)))
    parts.append("</section>")
    parts.append(TIMING_BEGIN)
    parts.append(timing_html)
    parts.append(TIMING_END)
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _timing_section(timing: Dict[str, Any], images: Dict[str, str]) -> str:
    run = timing["run"]
    parts = ["<section><h2>Timing of this run</h2>",
             f"<p>Engine {html.escape(str(run.get('engine')))}, {run.get('workers')} workers; wall time "
             f"{_g(run.get('wall_s'))} s; load average before {_g(run.get('load_before'))}.</p>"]
    lines = [[html.escape(key), _g(values.get("p50")), _g(values.get("p99")), _g(values.get("max"))]
             for key, values in timing["compute_per_message_us"].items()]
    parts.append(_table(["group", "compute per message p50 [us]", "p99 [us]", "max [us]"], lines))
    for key, image in images.items():
        parts.append(f"<img src='{html.escape(image, quote=True)}' alt='compute time of {html.escape(key)}'>")
    lines = [[html.escape(bag["bag"]), _g(bag["process_s"]), _g(bag["evaluation_s"]), str(bag["attempts"]),
              _g(bag["peak_rss_mb"])] for bag in timing["bags"]]
    parts.append(_table(["bag", "task wall [s]", "bag-eval wall [s]", "attempts", "worker peak RSS [MB]"], lines))
    parts.append("</section>")
    return "\n".join(parts)


def write_report(out_dir: Path, fleet: Dict[str, Any], timing: Dict[str, Any], status: str = "") -> Path:
    """Write the report's files into ``out_dir``; returns the page's path.

    Args:
        fleet: From :func:`rbd_deriv.replay.fleet.merge` (with ``inputs`` and ``options`` added).
        timing: From :func:`rbd_deriv.replay.fleet.merge_timing` with ``run`` (engine, workers, wall time).
        status: A sentence for the page's head, e.g. that the run was interrupted.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json(fleet, out_dir / "fleet.json")
    (out_dir / "bags.csv").write_text(bags_csv(fleet))
    write_json(timing, out_dir / "timing.json")
    rows = {row["number"]: row for row in fleet["bags"]}
    timing_rows = {bag["number"]: bag for bag in timing["bags"]}
    images: Dict[str, str] = {}
    timing_images: Dict[str, str] = {}
    for key, group in fleet["groups"].items():
        images[key] = f"group_{_slug(key)}.png"
        group_plot(key, group, rows, out_dir / images[key])
        timing_images[key] = f"timing_{_slug(key)}.png"
        timing_plot(key, group, rows, timing_rows, out_dir / timing_images[key])
    page = out_dir / "index.html"
    page.write_text(_page(fleet, images, _timing_section(timing, timing_images), status))
    return page
