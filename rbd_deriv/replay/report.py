"""The evaluation report: a JSON summary, a short text for the terminal, and a PNG over time."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np

from rbd_deriv.replay.evaluate import Evaluation, residual_statistics

__all__ = ["summarize", "write_json", "format_text", "plot", "ACCELERATION_NOTES"]

ACCELERATION_NOTES = {
    "central": "local least-squares quadratic fit of the recorded velocities over 2h+1 messages, slope at each "
               "stamp; exact when v is quadratic in time, error about v''' dt^2 / 6 (h = 1) on smooth motion",
    "forward": "(v[i+1] - v[i]) / (t[i+1] - t[i]); exact for data from a semi-implicit Euler integrator "
               "(v[i+1] = v[i] + dt ddq[i]); the last message of each segment is set aside (segment_end)",
}

# The plot's residual axis ignores samples beyond this quantile of |residual| when they stand far out.
_SCALE_QUANTILE = 0.999
_SPIKE_FACTOR = 4.0
_GAPS_DRAWN = 200


def _overall_residual(evaluation: Evaluation) -> Optional[Dict[str, float]]:
    residual, effort = evaluation.residual, evaluation.effort
    if residual is None or not residual.count.any():
        return None
    count = float(residual.count.sum())
    squares = float(residual.sum_squares.sum())
    energy = float(effort.sum_squares.sum())
    return {
        "residual_rms": math.sqrt(squares / count),
        "effort_rms": math.sqrt(energy / count),
        "explained": 1.0 - squares / energy if energy > 0 else float("nan"),
    }


def _seconds(value: Optional[int], origin: Optional[int]) -> Optional[float]:
    return None if value is None or origin is None else (value - origin) * 1e-9


def _damage(evaluation: Evaluation) -> Dict[str, Any]:
    events = []
    for event in evaluation.damage:
        entry = event.as_dict()
        entry["file"] = os.path.basename(entry["file"])
        # Receive times, on the report's time axis (from the first message's stamp).
        for key in ("after", "before"):
            value = entry[f"{key}_ns"]
            entry[f"{key}_s"] = None if value is None else float(evaluation.seconds(np.array([value]))[0])
        events.append(entry)
    return {"events": events, "lost_messages": evaluation.lost}


def summarize(
    evaluation: Evaluation,
    model: Any,
    bag: os.PathLike,
    outputs: Optional[Dict[str, Any]] = None,
    wall_s: Optional[Dict[str, float]] = None,
) -> Dict[str, Any]:
    """Everything the report says, as a JSON-ready dictionary (units in the key names)."""
    survey = evaluation.survey
    rejections = evaluation.rejections
    config = evaluation.config
    per_joint = residual_statistics(evaluation)
    duration = _seconds(evaluation.last_ns, evaluation.first_ns) or 0.0
    gaps = [{"after_s": float(evaluation.seconds(g.after_ns)), "before_s": float(evaluation.seconds(g.before_ns)),
             "length_s": (g.before_ns - g.after_ns) * 1e-9} for g in evaluation.gaps]
    estimate: Dict[str, Any] = {"method": config.acceleration, "description": ACCELERATION_NOTES[config.acceleration]}
    if config.acceleration == "central":
        estimate["half_window_h"] = config.half_window
    summary: Dict[str, Any] = {
        "bag": str(bag),
        "topic": evaluation.topic,
        "robot": getattr(model, "name", ""),
        "nq": int(model.nq),
        "nv": int(model.nv),
        "floating_base": bool(model.has_floating_base),
        "messages": {
            "total": evaluation.messages,
            "evaluated": evaluation.evaluated,
            "rejected": rejections.rejected,
            "rejected_by_reason": rejections.counts(),
            "first_of_each_reason": {k: rejections.examples[k] for k in rejections.counts()},
            "lost_to_damage": evaluation.lost,
        },
        "damage": _damage(evaluation),
        "ignored_joints": evaluation.ignored_joints,
        "time_base": survey.stamp_source,
        "duration_s": duration,
        "median_step_ms": survey.median_step_ns * 1e-6,
        "median_step_exact": survey.median_exact,
        "gaps": evaluation.gap_count,
        "gap_list": gaps,
        "segments": evaluation.segments,
        "dt_s": evaluation.dt,
        "acceleration_estimate": estimate,
        "timing": {
            "batched_compute_per_message_us": evaluation.batched_us.percentiles(),
            "single_call_latency_us": _percentiles(evaluation.latency_us),
            "single_call_samples": int(evaluation.latency_us.size),
            "per_message_work": "RNEA(q,v,a), RNEA(q,v,0), linearization (A, B, x+), M^-1",
            "wall_s": dict(wall_s or evaluation.wall_s),
        },
        "residual": None,
        "mass_matrix_condition": {
            **evaluation.condition.percentiles(),
            "min": evaluation.condition_min if evaluation.evaluated else float("nan"),
            "max": evaluation.condition_max if evaluation.evaluated else float("nan"),
            "max_at_s": evaluation.condition_max_t,
            "quantile_resolution": "percentiles within 0.12 % (logarithmic histogram); min and max exact",
        },
        "outputs": outputs or {},
    }
    if per_joint:
        summary["residual"] = {
            "definition": "RNEA(q, v, a_estimated) - recorded effort [N m or N]",
            "explained_definition": "1 - sum(residual^2) / sum(effort^2)",
            "per_joint": per_joint,
            "overall": _overall_residual(evaluation),
        }
    return summary


def _percentiles(values: np.ndarray) -> Dict[str, float]:
    if values.size == 0:
        return {key: float("nan") for key in ("p50", "p90", "p99", "max", "mean")}
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    return {"p50": float(p50), "p90": float(p90), "p99": float(p99), "max": float(values.max()), "mean": float(values.mean())}


def _clean(value: Any) -> Any:
    # JSON has no NaN: write null so that every JSON reader accepts the file.
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, np.generic):
        return _clean(value.item())
    return value


def write_json(summary: Dict[str, Any], path: os.PathLike) -> None:
    Path(path).write_text(json.dumps(_clean(summary), indent=2) + "\n")


def format_text(summary: Dict[str, Any]) -> str:
    """A few lines for the terminal: counts, damage, timing, residuals, conditioning."""
    messages = summary["messages"]
    timing = summary["timing"]
    batched = timing["batched_compute_per_message_us"]
    single = timing["single_call_latency_us"]
    wall = timing["wall_s"]
    lines: List[str] = [
        f"bag {summary['bag']}  topic {summary['topic']}  robot {summary['robot']} (nq {summary['nq']}, nv {summary['nv']})",
        f"messages: {messages['total']} read, {messages['evaluated']} evaluated, {messages['rejected']} rejected"
        + (f" {messages['rejected_by_reason']}" if messages["rejected"] else ""),
    ]
    damage = summary["damage"]
    if damage["events"] or damage["lost_messages"]:
        lost = damage["lost_messages"]
        lines.append(f"damaged bag: {len(damage['events'])} unreadable stretch(es); "
                     + (f"{lost} joint_states messages listed by the bag could not be read" if lost is not None
                        else "the bag does not say how many messages it held"))
        for event in damage["events"][:10]:
            where = f"byte {event['offset']}" if event["offset"] is not None else "rows"
            lost_here = event["lost"] if event["lost"] is not None else event.get("lost_rows")
            after, before = event["after_s"], event["before_s"]
            when = (f" after {after:.3f} s" if after is not None else " at the start") \
                + (f", reading again from {before:.3f} s" if before is not None else ", nothing readable after")
            lines.append(f"  {event['file']} {where}{when}: {event['what']}"
                         + (f"; {lost_here} lost" if lost_here is not None else ""))
    lines += [
        f"duration {summary['duration_s']:.3f} s, median step {summary['median_step_ms']:.3f} ms, "
        f"{summary['gaps']} gaps, time base {summary['time_base']}, acceleration {summary['acceleration_estimate']['method']}",
        f"compute per message, batched: p50 {batched['p50']:.2f} us  p99 {batched['p99']:.2f} us",
        f"compute per message, one call at a time ({timing['single_call_samples']} samples): "
        f"p50 {single['p50']:.2f} us  p99 {single['p99']:.2f} us",
        "wall time: " + ", ".join(f"{k} {v:.2f} s" for k, v in wall.items() if k != "total")
        + (f"  (total {wall['total']:.2f} s)" if "total" in wall else ""),
    ]
    for reason, example in messages["first_of_each_reason"].items():
        lines.append(f"  {reason}: {example}")
    if summary["ignored_joints"]:
        lines.append(f"joints not in the model, ignored: {summary['ignored_joints']}")
    residual = summary["residual"]
    if residual is None:
        lines.append("residual: no efforts recorded")
    else:
        overall = residual["overall"]
        lines.append(
            f"torque residual RMS {overall['residual_rms']:.4g} (effort RMS {overall['effort_rms']:.4g}), "
            f"explained {100 * overall['explained']:.4f} %"
        )
        lines.append(f"  {'joint':<20} {'rms':>10} {'mean':>10} {'max|r|':>10} {'effort rms':>11} {'explained':>10}")
        for name, row in residual["per_joint"].items():
            lines.append(
                f"  {name:<20} {row['residual_rms']:10.4g} {row['residual_mean']:10.4g} {row['residual_max_abs']:10.4g} "
                f"{row['effort_rms']:11.4g} {100 * row['explained']:9.3f}%"
            )
    condition = summary["mass_matrix_condition"]
    lines.append(f"cond(M): p50 {condition['p50']:.4g}  max {condition['max']:.4g} at {condition['max_at_s']:.3f} s")
    return "\n".join(lines)


def residual_limit(evaluation: Evaluation) -> Optional[float]:
    """Half-height of the residual axis when a few spikes would otherwise flatten the plot, else None."""
    residual = evaluation.residual
    if residual is None or not residual.count.any():
        return None
    typical = evaluation.residual_magnitude.quantile(_SCALE_QUANTILE)
    largest = float(np.max(np.where(residual.count > 0, residual.max_abs, 0.0)))
    if not typical > 0 or largest <= _SPIKE_FACTOR * typical:
        return None
    return 1.5 * typical


def plot(evaluation: Evaluation, path: os.PathLike, title: str = "") -> Any:
    """PNG with the torque residuals, compute time and cond(M) along the recording.

    Each curve is drawn from its envelope (:class:`~rbd_deriv.replay.stats.Envelope`): the minimum and
    maximum of every bucket, so spikes stay visible however long the recording. When a few samples stand
    far above the bulk of the residuals, the residual axis is scaled to the bulk and the samples beyond
    are marked at its edge, with the largest value written on the plot. Gaps are shaded.

    Returns:
        The matplotlib Figure (already saved).
    """
    # The figure API with the Agg canvas directly: pyplot costs a second of imports and a GUI backend.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter, NullFormatter

    figure = Figure(figsize=(10, 8))
    FigureCanvasAgg(figure)
    axes = figure.subplots(3, 1, sharex=True)
    drawn = False
    limit = residual_limit(evaluation)
    curve = evaluation.residual_curve
    for column, name in enumerate(evaluation.velocity_names):
        if evaluation.residual is None or evaluation.residual.count[column] == 0:
            continue
        t, r = curve.curve(column)
        line = axes[0].plot(t, np.clip(r, -limit, limit) if limit else r, linewidth=0.7, label=name)[0]
        if limit:
            beyond = np.abs(r) > limit
            axes[0].plot(t[beyond], np.sign(r[beyond]) * limit, linestyle="none", marker="^", markersize=4,
                         color=line.get_color())
        drawn = True
    axes[0].set_ylabel("RNEA(q,v,a) - effort\n[N m or N]")
    axes[0].set_title(title or "torque residual")
    if drawn:
        axes[0].legend(fontsize=7, ncol=4, loc="upper right")
        if limit:
            residual = evaluation.residual
            worst = int(np.argmax(np.where(residual.count > 0, residual.max_abs, -np.inf)))
            axes[0].set_ylim(-1.05 * limit, 1.05 * limit)
            axes[0].text(0.01, 0.03, f"scaled to the bulk of the residuals; markers at the edge stand for larger values "
                         f"(largest |r| = {residual.max_abs[worst]:.3g} on {evaluation.velocity_names[worst]} at "
                         f"{residual.max_at[worst]:.3f} s)", transform=axes[0].transAxes, fontsize=7)
    else:
        axes[0].text(0.5, 0.5, "no efforts recorded", transform=axes[0].transAxes, ha="center")
    t, c = evaluation.chunk_us.curve(0)
    if t.size:
        axes[1].step(t, c, where="post", label="batched, per message")
    if evaluation.latency_us.size:
        axes[1].plot(evaluation.latency_t, evaluation.latency_us, ".", markersize=2, label="one call at a time")
    # Log scale: a preempted call takes milliseconds and would flatten everything else.
    axes[1].set_yscale("log")
    axes[1].set_ylabel("compute time [us]")
    axes[1].legend(fontsize=7, loc="upper right")
    t, c = evaluation.condition_curve.curve(0)
    axes[2].semilogy(t, c, linewidth=0.7)
    axes[2].set_ylabel("cond(M)")
    axes[2].set_xlabel(f"time [s] from the first message ({evaluation.survey.stamp_source} stamps)"
                       + (f"; {evaluation.gap_count} gaps shaded" if evaluation.gap_count else ""))
    for gap in evaluation.gaps[:_GAPS_DRAWN]:
        start, stop = evaluation.seconds(np.array([gap.after_ns, gap.before_ns]))
        for axis in axes:
            axis.axvspan(start, stop, color="tab:red", alpha=0.15, linewidth=0)
    # Plain tick labels on the log axes: the default 10^k labels go through mathtext, which takes longer
    # than drawing everything else.
    for axis in axes[1:]:
        axis.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
        axis.yaxis.set_minor_formatter(NullFormatter())
    for axis in axes:
        axis.grid(True, alpha=0.3)
    # Fixed margins: tight_layout measures every label and costs as much as drawing the figure.
    figure.subplots_adjust(left=0.1, right=0.98, top=0.95, bottom=0.07, hspace=0.12)
    figure.savefig(path, dpi=90)
    return figure
