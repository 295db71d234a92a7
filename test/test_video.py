"""Tests of rbd_deriv.demo.video: a run's video rendered offscreen from recorded states.

Oracles: MuJoCo's segmentation rendering (which pixels show a robot geom), the GIF's frame count read back with
Pillow, the interpolation of known signals. The rendering tests run only where MuJoCo can render offscreen with
EGL (tried first); the rest runs everywhere.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import rbd_deriv as rd
from rbd_deriv.demo import video
from rbd_deriv.testing.robots import EXAMPLE_ROBOTS

pytest.importorskip("mujoco")
Image = pytest.importorskip("PIL.Image")

SOLO = str(EXAMPLE_ROBOTS["solo12"])
#: solo12 standing (knees bent), its 12 joints in model order.
SOLO_STANDING = np.array([0.0, 0.8, -1.6, 0.0, 0.8, -1.6, 0.0, -0.8, 1.6, 0.0, -0.8, 1.6])


@pytest.fixture(scope="module")
def egl():
    """Skip unless MuJoCo renders offscreen here (MUJOCO_GL as the demo sets it)."""
    env = dict(os.environ)
    env.setdefault("MUJOCO_GL", "egl")
    probe = ("import mujoco; r = mujoco.Renderer(mujoco.MjModel.from_xml_string('<mujoco/>'), 8, 8); "
             "r.render(); r.close()")
    child = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60)
    if child.returncode != 0:
        lines = child.stderr.strip().splitlines() or [f"exit {child.returncode}"]
        pytest.skip(f"MuJoCo cannot render offscreen with MUJOCO_GL={env['MUJOCO_GL']}: {lines[-1]}")


def render(tmp_path, name, urdf, joint_names, stamps, positions, duration, base_stamps=None, base_poses=None):
    """Render into tmp_path/<name>.gif; (frames (k, h, w, 3), robot pixels (k,), GIF frame count)."""
    gif, frames = tmp_path / f"{name}.gif", tmp_path / f"{name}.npz"
    assert video.write_run_video(gif, urdf, joint_names, stamps, positions, duration, base_stamps, base_poses,
                                 width=160, height=120, frames_path=frames)
    with np.load(frames) as saved, Image.open(gif) as image:
        return saved["frames"], saved["robot_pixels"], image.n_frames


def test_solo12_is_followed_and_drawn_with_its_meshes(egl, tmp_path):
    """30 frames of solo12: the legs swing for 15, then the base jumps 23 m away and the legs swing again. The
    frames away from the jump (farther than half the camera's smoothing window) show the robot's meshes (the only
    robot geoms in the scene) in about as many pixels, near or far: the camera follows the base; frames differ
    where the legs moved."""
    model = rd.load_urdf(SOLO, floating_base=True)
    names = list(model.actuated_joint_names)
    duration = 29 / video.FPS
    stamps = np.linspace(0.0, duration, 291)
    swing = 0.4 * np.sin(2 * np.pi * stamps / (15 / video.FPS))
    positions = SOLO_STANDING + swing[:, None]
    poses = np.tile([0.0, 0.0, 0.25, 0.0, 0.0, 0.0, 1.0], (len(stamps), 1))
    poses[stamps > 14.5 / video.FPS, 0:2] = [20.0, -12.0]
    frames, robot, count = render(tmp_path, "solo", SOLO, names, stamps, positions, duration, stamps, poses)
    assert count == len(frames) == 30
    pixels = frames.shape[1] * frames.shape[2]
    near, far = robot[:9], robot[21:]  # the camera settled: more than half its window from the jump
    assert (near > 0.03 * pixels).all() and (far > 0.03 * pixels).all(), robot
    assert far.mean() == pytest.approx(near.mean(), rel=0.3), robot
    assert np.abs(frames[1].astype(int) - frames[3]).sum(axis=2).astype(bool).mean() > 0.005
    # Frames 15 apart at the same posture, the camera settled near and far (trailing the base by its slack, 3 cm,
    # far), show the robot about the same.
    np.testing.assert_allclose(robot[6:9], robot[21:24], rtol=0.1)


def test_the_arm_moves_in_its_video(egl, tmp_path):
    arm = str(rd.bundled_urdf("rbd_arm7"))
    names = list(rd.load_urdf(arm).joint_names)
    duration = 4 / video.FPS
    stamps = np.linspace(0.0, duration, 5)
    positions = np.outer(np.linspace(0.0, 1.2, 5), np.ones(len(names)))
    frames, robot, count = render(tmp_path, "arm", arm, names, stamps, positions, duration)
    assert count == len(frames) == 5
    assert (robot > 0.02 * frames.shape[1] * frames.shape[2]).all(), robot
    assert all(np.abs(frames[i].astype(int) - frames[i + 1]).sum(axis=2).astype(bool).mean() > 0.005
               for i in range(4))


def test_a_video_that_cannot_be_rendered_costs_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MUJOCO_GL", "no-such-backend")
    assert not video.write_run_video(tmp_path / "x.gif", SOLO, ["FL_HAA"], [0.0], [[0.0]], 1.0, [0.0],
                                     [[0, 0, 0.3, 0, 0, 0, 1]])
    assert not video.write_run_video(tmp_path / "y.gif", SOLO, ["FL_HAA"], [], np.zeros((0, 1)), 1.0)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and all(line.startswith("video not written to") for line in lines), lines
    assert "MUJOCO_GL=no-such-backend" in lines[0] and "no state was recorded" in lines[1]
    assert not (tmp_path / "x.gif").exists()


def test_mp4_without_ffmpeg_falls_back_to_a_gif(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(video, "_ffmpeg", lambda: None)
    frames = [np.full((12, 16, 3), value, dtype=np.uint8) for value in (0, 120, 240)]
    written = video.write_frames(tmp_path / "run.mp4", frames)
    assert written == tmp_path / "run.gif" and "writing the GIF" in capsys.readouterr().out
    with Image.open(written) as image:
        assert image.n_frames == 3 and image.info["duration"] == 40


def test_camera_follows_the_base_smoothed():
    """A base at constant speed is followed exactly (a centred average of a line), its first and last positions
    held past the ends; a bounce shorter than the window is averaged away; the look-at point is halfway down. With
    a slack, the camera stays still through what is left of the bounce, and trails the walk by the slack."""
    fps, window = 10.0, 0.5  # 5 frames
    poses = np.zeros((20, 7))
    poses[:, 0] = np.arange(20) * 0.1
    poses[:, 2] = 0.3 + 0.02 * (-1) ** np.arange(20)
    targets = video.camera_targets(poses, fps, window)
    np.testing.assert_allclose(targets[2:-2, 0], poses[2:-2, 0], atol=1e-12)
    assert targets[0, 0] == pytest.approx((0.0 * 3 + 0.1 + 0.2) / 5)
    bounce = np.where(np.arange(2, 18) % 2, -0.002, 0.002)  # +-0.02 m, a fifth of it left, halved
    np.testing.assert_allclose(targets[2:-2, 2], 0.5 * 0.3 + bounce, atol=1e-12)
    # With a slack of 0.01 m what is left of the bounce (+-0.002 m) leaves the camera still; a walk moves it, 0.01 m
    # behind.
    bouncing, walking = poses.copy(), poses.copy()
    bouncing[:, 0], walking[:, 2] = 0.0, 0.3
    assert np.ptp(video.camera_targets(bouncing, fps, window, slack=0.01)[2:-2], axis=0).max() == 0.0
    trailing = video.camera_targets(walking, fps, window, slack=0.01)
    np.testing.assert_allclose(trailing[4:-2, 0], walking[4:-2, 0] - 0.01, atol=1e-12)


def test_states_are_interpolated_onto_the_frames():
    times = video.frame_times(1.0, 4.0)
    np.testing.assert_allclose(times, [0.0, 0.25, 0.5, 0.75, 1.0])
    joints = video.states_at(times, np.array([0.0, 0.5]), np.array([[0.0, 1.0], [1.0, 3.0]]))
    np.testing.assert_allclose(joints, [[0, 1], [0.5, 2], [1, 3], [1, 3], [1, 3]])
    # A quarter turn about z, its second sample recorded with the opposite sign: the same rotation.
    half = np.sin(np.pi / 4)
    poses = np.array([[0, 0, 0, 0, 0, 0, 1.0], [2, 0, 0, 0, 0, -half, -half]])
    middle = video.poses_at(np.array([0.5]), np.array([0.0, 1.0]), poses)[0]
    np.testing.assert_allclose(middle, [1, 0, 0, 0, 0, np.sin(np.pi / 8), np.cos(np.pi / 8)], atol=1e-12)


def test_video_path_is_beside_the_plot_unless_chosen(tmp_path):
    from pathlib import Path

    assert video.video_path(None, Path("out/run.png")) == Path("out/run.gif")
    assert video.video_path("a.mp4", Path("run.png")) == Path("a.mp4")
    assert video.video_path("none", Path("run.png")) is None and video.video_path("", Path("run.png")) is None
