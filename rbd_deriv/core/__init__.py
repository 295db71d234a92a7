"""The compiled core: URDF -> model, the rigid-body algorithms, and how Python calls them.

Modules in the order they build on one another (each imports only modules above it):

* ``constants``: tolerances and tunable values.
* ``urdf``: URDF -> tree description (pure Python).
* ``layout``: the flat arrays a model is made of and the regions of a workspace, with their views.
* ``model``: :class:`Model` and :class:`Data`, :func:`load_urdf`.
* ``spatial``: 6-vector and inertia algebra (compiled helpers).
* ``calling``: the kernel calling convention: status codes, input checks, argument specs, registration of a
  kernel (its C entry and Python callable), the status-to-exception map.
* ``batch``: one registered kernel at K states, on the extension's threads.
* ``kinematics``, ``configuration``: the world-frame forward pass; the configuration manifold.
* ``rnea``, ``crba``, ``aba``, ``minverse``, ``rnea_derivatives``, ``aba_derivatives``, ``linearization``: one
  algorithm family each: its kernels, their registration, its public functions (single and batched).
* ``frames``: frame placements, Jacobians, velocities, accelerations and their derivatives; centre of mass.
* ``contact``: rigid contacts and impulses, their derivatives, and the public ``linearize`` and
  ``linearize_batch``: ``linearization``'s without contacts, the contact step with ``contacts=``.
* ``soles``: a foot's sole from its URDF collision geometry, added to a model as a frame (pure Python).

Adding an algorithm is adding a module: kernels, ``register(kernel, spec)``, a public function, and
``run_batch`` for its batch version. The public names are re-exported by :mod:`rbd_deriv`.
"""
