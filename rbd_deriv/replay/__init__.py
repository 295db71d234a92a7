"""Rosbag replay evaluation: run the dynamics pipeline over recorded robot data, at any length.

- :mod:`~rbd_deriv.replay.cli`: ``bag-eval``, the offline evaluation of a rosbag2 (mcap or sqlite3).
- :mod:`~rbd_deriv.replay.fleet_cli`: ``fleet-eval``, many bags evaluated as ``bag-eval`` does on a local
  process pool or on Ray (:mod:`~rbd_deriv.replay.fleet`) and merged into one report
  (:mod:`~rbd_deriv.replay.fleet_report`).
- :mod:`~rbd_deriv.replay.live`: ``bag-play``, publishing a bag's topics into running nodes, with ``/clock``
  (needs rclpy, imported only there).
- :mod:`~rbd_deriv.replay.storage` reads the messages of a bag in batches, damaged files included;
  :mod:`~rbd_deriv.replay.bagio` decodes them into arrays (:mod:`~rbd_deriv.replay.cdr` encodes and
  decodes fixed-shape messages in bulk); :mod:`~rbd_deriv.replay.signals` handles stamps, gaps, the
  acceleration estimate and the base state over the stream; :mod:`~rbd_deriv.replay.evaluate` computes
  chunk by chunk into running statistics (:mod:`~rbd_deriv.replay.stats`);
  :mod:`~rbd_deriv.replay.report` summarizes and plots; :mod:`~rbd_deriv.replay.outbag` writes the
  results as a bag (mcap through :mod:`~rbd_deriv.replay.mcapwriter`).

Nothing here imports rclpy except :mod:`~rbd_deriv.replay.live`.
"""
