"""The evaluation report: a JSON summary, a short text for the terminal, and a PNG over time."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np

from rbd_deriv.replay.evaluate import Evaluation, percentiles, residual_statistics

__all__ = ["summarize", "write_json", "format_text", "plot"]


def _overall_residual(per_joint: Dict[str, Dict[str, float]], evaluation: Evaluation) -> Optional[Dict[str, float]]:
    if not per_joint:
        return None
    mask = evaluation.effort_mask
    residual = evaluation.residual[mask]
    tau = evaluation.tau[mask]
    energy = float(np.sum(tau**2))
    return {
        "residual_rms": float(np.sqrt(np.mean(residual**2))),
        "effort_rms": float(np.sqrt(np.mean(tau**2))),
        "explained": 1.0 - float(np.sum(residual**2)) / energy if energy > 0 else float("nan"),
    }


def summarize(
    evaluation: Evaluation,
    model: Any,
    bag: os.PathLike,
    half_window: int,
    outputs: Optional[Dict[str, Any]] = None,
    wall_s: Optional[Dict[str, float]] = None,
) -> Dict[str, Any]:
    """Everything the report says, as a JSON-ready dictionary (units in the key names)."""
    series = evaluation.series
    rejections = series.rejections
    per_joint = residual_statistics(evaluation)
    stamps = evaluation.stamp_ns
    duration = float((stamps[-1] - stamps[0]) * 1e-9) if stamps.size else 0.0
    condition = evaluation.condition
    worst = int(np.argmax(condition)) if condition.size else 0
    wall = dict(evaluation.wall_s)
    wall.update(wall_s or {})
    total_wall = float(sum(wall.values()))
    summary: Dict[str, Any] = {
        "bag": str(bag),
        "topic": series.topic,
        "robot": getattr(model, "name", ""),
        "nq": int(model.nq),
        "nv": int(model.nv),
        "floating_base": bool(model.has_floating_base),
        "messages": {
            "total": len(series),
            "evaluated": int(evaluation.rows.size),
            "rejected": rejections.rejected,
            "rejected_by_reason": rejections.counts(),
            "first_of_each_reason": {k: rejections.examples[k] for k in rejections.counts()},
        },
        "ignored_joints": series.ignored_joints,
        "time_base": evaluation.stamp_source,
        "duration_s": duration,
        "median_step_ms": evaluation.segments.median_step_ns * 1e-6,
        "gaps": evaluation.segments.gaps,
        "segments": len(evaluation.segments.bounds),
        "dt_s": evaluation.dt,
        "acceleration_estimate": {
            "method": "local least-squares quadratic fit of recorded velocities over 2h+1 messages, slope at each stamp",
            "half_window_h": half_window,
        },
        "timing": {
            "batched_compute_per_message_us": percentiles(evaluation.chunk_us),
            "single_call_latency_us": percentiles(evaluation.latency_us),
            "single_call_samples": int(evaluation.latency_us.size),
            "per_message_work": "RNEA(q,v,a), RNEA(q,v,0), linearization (A, B, x+), M^-1",
            "wall_s": wall,
            "total_wall_s": total_wall,
        },
        "residual": None,
        "mass_matrix_condition": {
            **percentiles(condition),
            "min": float(condition.min()) if condition.size else float("nan"),
            "max_at_s": float((stamps[worst] - stamps[0]) * 1e-9) if condition.size else float("nan"),
        },
        "outputs": outputs or {},
    }
    if per_joint:
        summary["residual"] = {
            "definition": "RNEA(q, v, a_estimated) - recorded effort [N m or N]",
            "explained_definition": "1 - sum(residual^2) / sum(effort^2)",
            "per_joint": per_joint,
            "overall": _overall_residual(per_joint, evaluation),
        }
    return summary


def _clean(value: Any) -> Any:
    # JSON has no NaN: write null so that every JSON reader accepts the file.
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def write_json(summary: Dict[str, Any], path: os.PathLike) -> None:
    Path(path).write_text(json.dumps(_clean(summary), indent=2) + "\n")


def format_text(summary: Dict[str, Any]) -> str:
    """A few lines for the terminal: counts, timing, residuals, conditioning."""
    messages = summary["messages"]
    timing = summary["timing"]
    batched = timing["batched_compute_per_message_us"]
    single = timing["single_call_latency_us"]
    lines: List[str] = [
        f"bag {summary['bag']}  topic {summary['topic']}  robot {summary['robot']} (nq {summary['nq']}, nv {summary['nv']})",
        f"messages: {messages['total']} read, {messages['evaluated']} evaluated, {messages['rejected']} rejected"
        + (f" {messages['rejected_by_reason']}" if messages["rejected"] else ""),
        f"duration {summary['duration_s']:.3f} s, median step {summary['median_step_ms']:.3f} ms, "
        f"{summary['gaps']} gaps, time base {summary['time_base']}",
        f"compute per message, batched: p50 {batched['p50']:.2f} us  p99 {batched['p99']:.2f} us",
        f"compute per message, one call at a time ({timing['single_call_samples']} samples): "
        f"p50 {single['p50']:.2f} us  p99 {single['p99']:.2f} us",
        "wall time: " + ", ".join(f"{k} {v:.2f} s" for k, v in timing["wall_s"].items())
        + f"  (total {timing['total_wall_s']:.2f} s)",
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
    lines.append(
        f"cond(M): p50 {condition['p50']:.4g}  max {condition['max']:.4g} at {condition['max_at_s']:.3f} s"
    )
    return "\n".join(lines)


def plot(evaluation: Evaluation, path: os.PathLike, title: str = "", max_points: int = 2000) -> None:
    """PNG with the torque residuals, compute time and cond(M) along the recording.

    Long recordings are drawn from at most ``max_points`` per curve, keeping each bucket's extreme so
    that spikes stay visible.
    """
    # The figure API with the Agg canvas directly: pyplot costs a second of imports and a GUI backend.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    stamps = evaluation.stamp_ns
    time_s = (stamps - stamps[0]) * 1e-9 if stamps.size else stamps.astype(float)
    figure = Figure(figsize=(10, 8))
    FigureCanvasAgg(figure)
    axes = figure.subplots(3, 1, sharex=True)
    residual = evaluation.residual
    drawn = False
    for column, name in enumerate(evaluation.velocity_names):
        mask = evaluation.effort_mask[:, column]
        if mask.any():
            t, r = _extremes(time_s[mask], residual[mask, column], max_points)
            axes[0].plot(t, r, linewidth=0.7, label=name)
            drawn = True
    axes[0].set_ylabel("RNEA(q,v,a) - effort\n[N m or N]")
    axes[0].set_title(title or "torque residual")
    if drawn:
        axes[0].legend(fontsize=7, ncol=4, loc="upper right")
    else:
        axes[0].text(0.5, 0.5, "no efforts recorded", transform=axes[0].transAxes, ha="center")
    if evaluation.chunk_rows.size:
        # One step per chunk, drawn to the end of the recording.
        edges = np.append(time_s[evaluation.chunk_rows], time_s[-1])
        axes[1].step(edges, np.append(evaluation.chunk_us, evaluation.chunk_us[-1]), where="post", label="batched, per message")
    if evaluation.latency_rows.size:
        axes[1].plot(time_s[evaluation.latency_rows], evaluation.latency_us, ".", markersize=2, label="one call at a time")
    # Log scale: a preempted call takes milliseconds and would flatten everything else.
    axes[1].set_yscale("log")
    axes[1].set_ylabel("compute time [us]")
    axes[1].legend(fontsize=7, loc="upper right")
    t, c = _extremes(time_s, evaluation.condition, max_points)
    axes[2].semilogy(t, c, linewidth=0.7)
    axes[2].set_ylabel("cond(M)")
    axes[2].set_xlabel(f"time [s] ({evaluation.stamp_source} stamps)")
    for axis in axes:
        axis.grid(True, alpha=0.3)
    # Fixed margins: tight_layout measures every label and costs as much as drawing the figure.
    figure.subplots_adjust(left=0.1, right=0.98, top=0.95, bottom=0.07, hspace=0.12)
    figure.savefig(path, dpi=90)


def _extremes(time_s: np.ndarray, values: np.ndarray, max_points: int) -> tuple:
    """Thin a curve to about ``max_points`` by keeping the largest-magnitude sample of each bucket."""
    if values.size <= max_points:
        return time_s, values
    buckets = int(math.ceil(values.size / max_points))
    usable = (values.size // buckets) * buckets
    shaped = values[:usable].reshape(-1, buckets)
    pick = np.argmax(np.abs(np.nan_to_num(shaped)), axis=1) + np.arange(shaped.shape[0]) * buckets
    return time_s[pick], values[pick]
