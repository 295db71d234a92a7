"""Rosbag replay evaluation: run the dynamics pipeline over recorded robot data.

- :mod:`~rbd_deriv.replay.cli`: ``bag-eval``, the offline evaluation of a rosbag2 (mcap or sqlite3).
- :mod:`~rbd_deriv.replay.live`: ``bag-play``, publishing a bag's topics into running nodes (needs rclpy,
  imported only there).
- :mod:`~rbd_deriv.replay.bagio` reads bags into arrays, :mod:`~rbd_deriv.replay.signals` handles stamps,
  gaps and the acceleration estimate, :mod:`~rbd_deriv.replay.evaluate` computes,
  :mod:`~rbd_deriv.replay.report` summarizes and plots, :mod:`~rbd_deriv.replay.outbag` writes the
  results as a bag; :mod:`~rbd_deriv.replay.cdr` encodes and decodes fixed-shape messages in bulk.

Nothing here imports rclpy except :mod:`~rbd_deriv.replay.live`.
"""
