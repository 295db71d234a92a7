"""Memory layout (rbd_deriv.core.layout): the model's row 0, the workspace regions and the Data views of them."""

from __future__ import annotations

import numpy as np

import rbd_deriv as rd
from rbd_deriv.core.layout import (
    MI_NJ,
    MI_NQTOT,
    MI_NVTOT,
    MI_OFFSETS,
    MI_WORKSPACE,
    REGION_INDEX,
    REGIONS,
    region_shape,
    region_sizes,
)


def test_regions_tile_the_workspace_and_data_views_them(any_robot):
    model = any_robot.model
    data = model.create_data()
    nj, nv, nq = model.njoints, model.nv, model.nq
    assert (model.mi[0, MI_NJ], model.mi[0, MI_NVTOT], model.mi[0, MI_NQTOT]) == (nj, nv, nq)
    offset = 0
    for k, (name, dims, size) in enumerate(region_sizes(nj, nv, nq)):
        assert model.mi[0, MI_OFFSETS + k] == offset, name
        assert dims == region_shape(name, nj, nv, nq)
        view = getattr(data, "_" + name if name.startswith("zero_") else name)
        assert view.shape == dims, name
        assert np.shares_memory(view, data.ws[offset : offset + size])
        offset += size
    assert offset == model.mi[0, MI_WORKSPACE] == model.workspace_size == data.ws.shape[0]
    assert [name for name, _ in REGIONS] == list(REGION_INDEX)


def test_results_are_read_only_views_of_the_regions_the_kernels_write(small_robot):
    data = small_robot.model.create_data()
    for name in ("tau", "M", "Minv", "dtau_dq", "dddq_dv", "A", "x_next", "oMi"):
        public, written = getattr(data, name), data.output(name)
        assert not public.flags.writeable and written.flags.writeable
        assert np.shares_memory(public, written) and public.shape == written.shape


def test_no_kernel_writes_the_zero_inputs(small_robot):
    """The zero regions stand for "no velocity" and "no force" in every call: after every public function
    they are still zero, and the universe placement still the identity."""
    model = small_robot.model
    data = model.create_data()
    q, v = model.neutral_configuration, np.ones(model.nv)
    for call in (lambda: rd.forward_kinematics(model, data, q), lambda: rd.rnea(model, data, q, v, v),
                 lambda: rd.nonlinear_effects(model, data, q, v), lambda: rd.gravity_torques(model, data, q),
                 lambda: rd.crba(model, data, q), lambda: rd.aba(model, data, q, v, v),
                 lambda: rd.minverse(model, data, q), lambda: rd.rnea_derivatives(model, data, q, v, v),
                 lambda: rd.aba_derivatives(model, data, q, v, v), lambda: rd.linearize(model, data, q, v, v, 0.01)):
        call()
        assert not data._zero_nv.any() and not data._zero_fext.any()
        np.testing.assert_array_equal(data.oMi[0], np.eye(4))
