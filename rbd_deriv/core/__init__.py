"""The compiled core: URDF -> Model, the rigid-body algorithms and their calling convention."""
