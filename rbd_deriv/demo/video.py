"""A video of a demo's run, rendered offscreen by MuJoCo after the run from the states it recorded.

The demo keeps the robot's joint positions (joint_states) and, on a floating base, its base pose (odometry);
:func:`write_run_video` saves them and renders them in a child process (``python -m rbd_deriv.demo.video
STATES OUTPUT``), so that MuJoCo's OpenGL context (EGL unless ``MUJOCO_GL`` says otherwise: no display needed)
never touches the demo's own process. A video that cannot be made costs one line; the run's result stands.

The scene (:class:`RunScene`): the robot with its URDF visuals (:mod:`rbd_deriv.sim.visuals`), a checkered
floor of squares sized to the robot, a sky, a light from above (no shadows: without a GPU they cost more than
the rest of a frame). The camera looks at the base (halfway down to the floor, the feet in view; a fixed-base
robot: at its centre of mass in the first frame) from a fixed azimuth, elevation and a distance proportional to
the robot's size, and follows the base, smoothed (:data:`CAMERA_WINDOW`, :data:`CAMERA_SLACK`). The states are
interpolated onto the frame times (:data:`FPS` per second of the run), the run's time is written in a corner.

Formats: GIF (Pillow, the default); MP4 (H.264) when the path ends in ``.mp4`` and ``ffmpeg`` is on the PATH,
else the GIF beside it, said so.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

__all__ = ["AZIMUTH", "CAMERA_SLACK", "CAMERA_WINDOW", "DISTANCE", "ELEVATION", "FIXED_DISTANCE", "FPS", "HEIGHT",
           "WIDTH", "RunScene", "camera_targets", "frame_times", "main", "poses_at", "run_video", "states_at",
           "video_path", "write_frames", "write_run_video"]

#: Frames per second of the run [1/s] and the frame size [pixel].
FPS = 25.0
WIDTH, HEIGHT = 480, 360
#: The camera: azimuth and elevation [deg], distance in multiples of the robot's size (MuJoCo's ``stat.extent``)
#: for a floating base and a fixed one (whose size is its reach: it is seen from closer).
AZIMUTH, ELEVATION, DISTANCE, FIXED_DISTANCE = 135.0, -25.0, 2.0, 1.4
#: The camera follows the base's position averaged over this window [s] centred on each frame, and stays still
#: while that average is within CAMERA_SLACK robot sizes of where it looks (then trails it by as much): smooth,
#: and still on a robot trotting in place, whose frames then differ only where it moves (7.5-8 kB a frame of
#: GIF down to 5 for solo12 trotting in place; 9-10 kB walking).
CAMERA_WINDOW, CAMERA_SLACK = 0.5, 0.05
#: Fog from and to these distances from the camera, in robot sizes (MuJoCo's ``stat.extent``).
FOG_START, FOG_END = 2.5, 6.0
#: Colours of a GIF's palette (fewer make a smaller file: 64 keep the meshes' shading).
PALETTE = 64
#: Seconds of rendering allowed per frame before the child process is stopped (plus a minute to start).
SECONDS_PER_FRAME = 1.0


def video_path(argument: Optional[str], output: Path) -> Optional[Path]:
    """The video's path of ``--video`` (``argument``): None for the default, beside the PNG ``output`` with the
    same stem and ``.gif``; ``"none"`` or empty: no video (None)."""
    if argument is None:
        return output.with_suffix(".gif")
    if argument.strip().lower() in ("", "none"):
        return None
    return Path(argument)


def frame_times(duration: float, fps: float = FPS) -> np.ndarray:
    """The frames' times (k,) [s] from 0 to ``duration`` [s], ``fps`` per second (at least one frame)."""
    return np.arange(max(1, int(math.floor(duration * fps + 1e-6)) + 1)) / fps  # 29 / 25 s at 25 fps: 30 frames


def states_at(times: np.ndarray, stamps: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Linear interpolation (k, d) of ``values`` (n, d) recorded at increasing ``stamps`` (n,) [s] at ``times``
    (k,) [s], held at the first and last values outside them."""
    values = np.asarray(values, dtype=float).reshape(len(stamps), -1)
    return np.stack([np.interp(times, stamps, column) for column in values.T], axis=1)


def poses_at(times: np.ndarray, stamps: np.ndarray, poses: np.ndarray) -> np.ndarray:
    """Base poses (k, 7) (position [m], quaternion x, y, z, w) at ``times`` [s] from ``poses`` (n, 7) recorded at
    ``stamps`` (n,) [s]: positions interpolated linearly, quaternions normalized linearly (each sample's sign
    chosen against the previous one first, since q and -q are the same rotation)."""
    poses = np.array(poses, dtype=float).reshape(len(stamps), 7)
    quaternions = poses[:, 3:7]
    flips = np.cumprod(np.where(np.einsum("ij,ij->i", quaternions[1:], quaternions[:-1]) < 0.0, -1.0, 1.0))
    quaternions[1:] *= flips[:, None]
    result = states_at(times, stamps, poses)
    result[:, 3:7] /= np.linalg.norm(result[:, 3:7], axis=1, keepdims=True)
    return result


def camera_targets(poses: np.ndarray, fps: float = FPS, window: float = CAMERA_WINDOW, slack: float = 0.0
                   ) -> np.ndarray:
    """The camera's look-at points (k, 3) [m] for the base poses (k, 7) of k frames at ``fps`` [1/s]: the base's
    position averaged over ``window`` [s] centred on each frame (the first and last positions repeated past the
    ends), halfway down to the floor (the feet in view); a point moves only when that average is more than
    ``slack`` [m] away from it, and then to ``slack`` from it."""
    positions = np.asarray(poses, dtype=float)[:, 0:3]
    half = max(0, int(round(window * fps / 2)))
    padded = np.concatenate([np.repeat(positions[:1], half, axis=0), positions,
                             np.repeat(positions[-1:], half, axis=0)])
    sums = np.cumsum(np.vstack([np.zeros((1, 3)), padded]), axis=0)
    averages = (sums[2 * half + 1:] - sums[:-2 * half - 1]) / (2 * half + 1) * [1.0, 1.0, 0.5]
    targets, current = np.empty_like(averages), averages[0].copy()
    for i, average in enumerate(averages):
        away = float(np.linalg.norm(average - current))
        if away > slack:
            current += (average - current) * (1.0 - slack / away)
        targets[i] = current
    return targets


def _floor_cell(size: float) -> float:
    """The floor's checker square [m] for a robot of ``size`` [m]: the power of two times 0.125 m nearest
    half its size."""
    return 0.125 * 2.0 ** max(0, round(math.log2(max(size / 2, 0.125) / 0.125)))


class RunScene:
    """A robot's MuJoCo model with its visuals, a floor, a sky and a light, drawn offscreen.

    Needs MuJoCo imported with a working OpenGL backend (``MUJOCO_GL``, :func:`main` sets ``egl`` if unset).

    Args:
        urdf: URDF path.
        floating_base: The robot's base moves (its pose is given per frame).
        joint_names: The joints whose positions are given per frame, in that order.
        width, height: Frame size [pixel].

    Attributes:
        size: The robot's size [m] (MuJoCo's ``stat.extent`` of the robot alone).
        visuals: The visual geoms added and the meshes skipped (:class:`~rbd_deriv.sim.visuals.Visuals`).

    Raises:
        ModelError: MuJoCo cannot load the robot, or a joint is not in it.
    """

    def __init__(self, urdf: str, floating_base: bool, joint_names: Sequence[str], width: int = WIDTH,
                 height: int = HEIGHT) -> None:
        import mujoco

        from rbd_deriv.exceptions import ModelError
        from rbd_deriv.sim.mujoco_plant import robot_spec

        self._mujoco = mujoco
        spec, self.visuals = robot_spec(mujoco, urdf, floating_base)
        self.size = float(spec.compile().stat.extent)
        self._add_surroundings(spec, self.size)
        spec.visual.global_.offwidth, spec.visual.global_.offheight = max(width, 640), max(height, 480)
        self.model = spec.compile()
        self.data = mujoco.MjData(self.model)
        self.floating_base = bool(floating_base)
        addresses = []
        for name in joint_names:
            joint = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_JOINT, name)
            if joint < 0:
                raise ModelError(f"joint {name!r} of the recorded states is not in the robot", joint=name)
            addresses.append(self.model.jnt_qposadr[joint])
        self._joints = np.array(addresses, dtype=np.int64)
        self._center: Optional[np.ndarray] = None  # a fixed base's: its centre of mass in the first frame
        self.renderer = mujoco.Renderer(self.model, height, width)
        self.renderer.scene.flags[mujoco.mjtRndFlag.mjRND_FOG] = True
        self.camera = mujoco.MjvCamera()
        self.camera.type = mujoco.mjtCamera.mjCAMERA_FREE
        self.camera.azimuth, self.camera.elevation = AZIMUTH, ELEVATION
        self.camera.distance = (DISTANCE if floating_base else FIXED_DISTANCE) * self.size

    def _add_surroundings(self, spec: Any, size: float) -> None:
        mujoco = self._mujoco
        sky = spec.add_texture()
        sky.name, sky.type = "sky", mujoco.mjtTexture.mjTEXTURE_SKYBOX
        sky.builtin = mujoco.mjtBuiltin.mjBUILTIN_GRADIENT
        sky.rgb1, sky.rgb2, sky.width, sky.height = [0.75, 0.85, 0.95], [0.95, 0.95, 0.95], 64, 64
        checker = spec.add_texture()
        checker.name, checker.type = "floor", mujoco.mjtTexture.mjTEXTURE_2D
        checker.builtin, checker.width, checker.height = mujoco.mjtBuiltin.mjBUILTIN_CHECKER, 64, 64
        checker.rgb1, checker.rgb2 = [0.55, 0.6, 0.65], [0.45, 0.5, 0.55]
        material = spec.add_material()
        material.name = "floor"
        material.textures[int(mujoco.mjtTextureRole.mjTEXROLE_RGB)] = "floor"
        material.texuniform = True
        cell = _floor_cell(size)
        material.texrepeat = [1.0 / (2 * cell), 1.0 / (2 * cell)]  # a texture holds 2 x 2 squares
        floor = spec.worldbody.add_geom()
        floor.name, floor.type, floor.material = "video_floor", mujoco.mjtGeom.mjGEOM_PLANE, "floor"
        floor.size = [0.0, 0.0, 1.0]
        floor.contype, floor.conaffinity = 0, 0
        light = spec.worldbody.add_light()
        light.name, light.type = "sun", mujoco.mjtLightType.mjLIGHT_DIRECTIONAL
        light.pos, light.dir, light.castshadow = [0.0, 0.0, 10.0], [0.3, 0.2, -1.0], False
        light.diffuse, light.ambient = [0.6, 0.6, 0.6], [0.2, 0.2, 0.2]
        spec.visual.headlight.diffuse, spec.visual.headlight.ambient = [0.5, 0.5, 0.5], [0.35, 0.35, 0.35]
        # Fog from FOG_START to FOG_END robot sizes [stat.extent]: the far floor, whose squares the pixels cannot
        # resolve, fades into the sky instead of flickering (and the GIF stays small).
        spec.visual.map.fogstart, spec.visual.map.fogend = FOG_START, FOG_END
        spec.visual.rgba.fog = [0.85, 0.9, 0.95, 1.0]

    def render(self, joints: np.ndarray, base_pose: Optional[np.ndarray] = None, segmentation: bool = False,
               lookat: Optional[np.ndarray] = None) -> np.ndarray:
        """One frame (height, width, 3) uint8 of the robot at joint positions ``joints`` (nj,) [rad, m] and, on a
        floating base, base pose ``base_pose`` (7,) (position [m], quaternion x, y, z, w), the camera looking at
        ``lookat`` (3,) [m] (default: the base halfway down to the floor; a fixed base: its centre of mass in the
        first frame). ``segmentation``: instead, (height, width) bool, the pixels where the robot is seen."""
        mujoco = self._mujoco
        self.data.qpos[self._joints] = joints
        if self.floating_base:
            self.data.qpos[0:3] = base_pose[0:3]
            self.data.qpos[3:7] = np.roll(base_pose[3:7], 1)  # (w, x, y, z) in MuJoCo
        mujoco.mj_kinematics(self.model, self.data)
        if lookat is not None:
            self.camera.lookat[:] = lookat
        elif self.floating_base:  # halfway down from the base to the floor: the feet in view
            self.camera.lookat[:] = self.data.xpos[1] * [1.0, 1.0, 0.5]
        else:
            if self._center is None:
                mujoco.mj_comPos(self.model, self.data)
                self._center = self.data.subtree_com[0].copy()
            self.camera.lookat[:] = self._center
        if segmentation:
            self.renderer.enable_segmentation_rendering()
        self.renderer.update_scene(self.data, self.camera)
        frame = self.renderer.render()
        if not segmentation:
            return frame
        self.renderer.disable_segmentation_rendering()
        geoms = (frame[..., 1] == int(mujoco.mjtObj.mjOBJ_GEOM)) & (frame[..., 0] >= 0)
        return geoms & (self.model.geom_bodyid[np.maximum(frame[..., 0], 0)] > 0)

    def close(self) -> None:
        """Free the renderer's OpenGL context."""
        self.renderer.close()


def _stamp(frame: np.ndarray, text: str) -> np.ndarray:
    from PIL import Image, ImageDraw

    image = Image.fromarray(frame)
    draw = ImageDraw.Draw(image)
    draw.rectangle((4, 4, 8 + 7 * len(text), 20), fill=(255, 255, 255))
    draw.text((7, 6), text, fill=(0, 0, 0))
    return np.asarray(image)


def _ffmpeg() -> Optional[str]:
    """The ffmpeg executable on the PATH, None if there is none."""
    return shutil.which("ffmpeg")


def write_frames(path: Path, frames: Sequence[np.ndarray], fps: float = FPS) -> Path:
    """Write ``frames`` (each (height, width, 3) uint8) as a video at ``fps`` [1/s]; the path written.

    ``.mp4``: through ffmpeg (H.264) when one is found, else the GIF beside it (same stem), said on stdout. Any
    other suffix: a GIF (Pillow), looping, one palette of PALETTE colours for all frames, no dithering (a
    frame the same as the one before lengthens it).
    """
    path = Path(path)
    if path.suffix.lower() == ".mp4":
        ffmpeg = _ffmpeg()
        if ffmpeg is not None:
            height, width = frames[0].shape[:2]
            command = [ffmpeg, "-loglevel", "error", "-y", "-f", "rawvideo", "-pix_fmt", "rgb24", "-s",
                       f"{width}x{height}", "-r", f"{fps:g}", "-i", "-", "-c:v", "libx264", "-pix_fmt", "yuv420p",
                       "-vf", "pad=ceil(iw/2)*2:ceil(ih/2)*2", str(path)]
            done = subprocess.run(command, input=b"".join(np.ascontiguousarray(f).tobytes() for f in frames),
                                  capture_output=True)
            if done.returncode != 0:
                lines = done.stderr.decode(errors="replace").strip().splitlines() or [f"exit {done.returncode}"]
                raise RuntimeError(f"ffmpeg could not write {path}: {lines[-1]}")
            return path
        path = path.with_suffix(".gif")
        print(f"no ffmpeg on the PATH for an MP4 (apt install ffmpeg): writing the GIF {path} instead", flush=True)
    from PIL import Image

    # One palette for the whole video, from up to eight frames spread over it.
    samples = np.concatenate(list(frames[::max(1, len(frames) // 8)]), axis=0)
    palette = Image.fromarray(samples).quantize(colors=PALETTE, method=Image.Quantize.MEDIANCUT)
    images = [Image.fromarray(f).quantize(palette=palette, dither=Image.Dither.NONE) for f in frames]
    images[0].save(path, save_all=True, append_images=images[1:], duration=int(round(1000.0 / fps)), loop=0)
    return path


def _render(states: dict, output: Path, frames_path: Optional[Path]) -> None:
    """Render the saved ``states`` (:func:`write_run_video`'s file) into ``output``; with ``frames_path``, also
    save the frames and the robot's pixel count per frame there (npz: ``frames``, ``robot_pixels``)."""
    scene = RunScene(str(states["urdf"]), bool(states["floating_base"]), [str(n) for n in states["joint_names"]],
                     int(states["width"]), int(states["height"]))
    if scene.visuals.note:
        print(scene.visuals.note, flush=True)
    fps = float(states["fps"])
    times = frame_times(float(states["duration"]), fps)
    joints = states_at(times, states["stamps"], states["positions"])
    poses = targets = [None] * len(times)
    if scene.floating_base:
        poses = poses_at(times, states["base_stamps"], states["base_poses"])
        targets = camera_targets(poses, fps, slack=CAMERA_SLACK * scene.size)
    began = time.perf_counter()
    frames, robot_pixels = [], []
    try:
        for t, q, pose, target in zip(times, joints, poses, targets):
            frames.append(_stamp(scene.render(q, pose, lookat=target), f"t = {t:5.2f} s"))
            if frames_path is not None:
                robot_pixels.append(int(scene.render(q, pose, segmentation=True, lookat=target).sum()))
    finally:
        scene.close()
    per_frame = (time.perf_counter() - began) / len(frames)
    written = write_frames(output, frames, fps)
    if frames_path is not None:
        np.savez_compressed(frames_path, frames=np.stack(frames), robot_pixels=np.array(robot_pixels))
    print(f"video written to {written.resolve()} ({len(frames)} frames at {fps:g} fps, "
          f"{frames[0].shape[1]}x{frames[0].shape[0]}, {written.stat().st_size / 1e6:.1f} MB; "
          f"{per_frame * 1e3:.0f} ms per frame to render)", flush=True)


def write_run_video(path: Path, urdf: str, joint_names: Sequence[str], stamps: np.ndarray, positions: np.ndarray,
                    duration: float, base_stamps: Optional[np.ndarray] = None,
                    base_poses: Optional[np.ndarray] = None, fps: float = FPS, width: int = WIDTH,
                    height: int = HEIGHT, frames_path: Optional[Path] = None) -> bool:
    """Render a run's video into ``path`` in a child process (see the module); whether it was written. Never
    raises: a failure (no OpenGL, no state recorded) prints one line.

    Args:
        path: The video file (``.gif``, or ``.mp4``: see :func:`write_frames`).
        urdf: The robot's URDF path.
        joint_names: The joints of ``positions``' columns.
        stamps: (n,) [s] from the run's start; positions: (n, nj) [rad, m] joint positions.
        duration: The run's length [s]: the frames cover [0, duration].
        base_stamps, base_poses: Floating base: (m,) [s] and (m, 7) the base's pose (position [m], quaternion
            x, y, z, w); None for a fixed base.
        fps: Frames per second [1/s]; width, height: frame size [pixel].
        frames_path: Also save the frames and the robot's pixel count per frame there (npz, for tests).
    """
    stamps, positions = np.asarray(stamps, dtype=float), np.asarray(positions, dtype=float)
    floating = base_stamps is not None
    if len(stamps) == 0 or (floating and len(base_stamps) == 0):
        print(f"video not written to {path}: no state was recorded", flush=True)
        return False
    env = dict(os.environ)
    env.setdefault("MUJOCO_GL", "egl")
    with tempfile.TemporaryDirectory(prefix="rbd_deriv_video_") as folder:
        states = Path(folder) / "states.npz"
        np.savez(states, urdf=str(urdf), floating_base=floating, joint_names=np.array(list(joint_names), dtype=str),
                 stamps=stamps, positions=positions.reshape(len(stamps), -1), duration=float(duration), fps=fps,
                 width=width, height=height, base_stamps=np.asarray(base_stamps if floating else [], dtype=float),
                 base_poses=np.asarray(base_poses if floating else np.zeros((0, 7)), dtype=float))
        command = [sys.executable, "-m", "rbd_deriv.demo.video", str(states), str(path)]
        if frames_path is not None:
            command += ["--frames", str(frames_path)]
        timeout = 60.0 + SECONDS_PER_FRAME * len(frame_times(duration, fps))
        try:
            child = subprocess.run(command, env=env, stdout=None, stderr=subprocess.PIPE, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            print(f"video not written to {path}: rendering took over {timeout:.0f} s", flush=True)
            return False
    if child.returncode != 0:
        lines = [line for line in child.stderr.splitlines() if line.strip()]
        reason = lines[-1] if lines else f"the renderer exited with {child.returncode}"
        print(f"video not written to {path} (MUJOCO_GL={env['MUJOCO_GL']}): {reason}", flush=True)
        return False
    return True


def run_video(path: Optional[Path], urdf: str, joint_names: Sequence[str], joints: Sequence[tuple], start: float,
              duration: float, base: Optional[Sequence[tuple]] = None) -> bool:
    """A demo's video (:func:`write_run_video`) of what its recorder kept; whether it was written (nothing is
    done for ``path`` None: ``--video none``).

    Args:
        path: The video file, or None.
        urdf: The robot's URDF path.
        joint_names: The joints of the recorded positions.
        joints: (stamp [s], positions (nj,) [rad, m], ...) per joint_states message, on the demo's clock.
        start: The run's start [s] on that clock; duration: its length [s].
        base: Floating base: (stamp [s], pose (7,): position [m], quaternion x, y, z, w) per odometry message.
    """
    if path is None:
        return False
    stamps = np.array([sample[0] for sample in joints], dtype=float) - start
    positions = np.array([sample[1] for sample in joints], dtype=float).reshape(len(stamps), len(joint_names))
    base_stamps = base_poses = None
    if base is not None:
        base_stamps = np.array([sample[0] for sample in base], dtype=float) - start
        base_poses = np.array([sample[1] for sample in base], dtype=float).reshape(len(base_stamps), 7)
    print(f"rendering the video ({len(frame_times(duration))} frames) ...", flush=True)
    return write_run_video(path, urdf, joint_names, stamps, positions, duration, base_stamps, base_poses)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """The child process of :func:`write_run_video`: ``STATES OUTPUT [--frames FRAMES]``; 1 with one line on
    stderr when it cannot render."""
    parser = argparse.ArgumentParser(prog="python -m rbd_deriv.demo.video", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("states", help="the run's states (npz, written by write_run_video)")
    parser.add_argument("output", help="the video (.gif, or .mp4 with ffmpeg)")
    parser.add_argument("--frames", default=None, help="also save the frames here (npz)")
    arguments = parser.parse_args(argv)
    os.environ.setdefault("MUJOCO_GL", "egl")  # before MuJoCo is imported: offscreen, no display needed
    try:
        with np.load(arguments.states) as states:
            _render(dict(states), Path(arguments.output), Path(arguments.frames) if arguments.frames else None)
    except Exception as error:  # noqa: BLE001 - one line for the demo, whatever failed
        print(f"{type(error).__name__}: {error}".replace("\n", " "), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
