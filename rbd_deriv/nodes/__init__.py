"""ROS 2 nodes of rbd_deriv: thin wrappers wiring topics, parameters and services to the library.

Only this subpackage (and the benchmarks that drive it) imports rclpy.
"""
