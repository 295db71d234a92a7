"""Batched algorithms (rbd_deriv.core.batch and the batch functions of the algorithm modules): each row equals
the single call on the same state, byte for byte (a batch runs the single call's C entry once per state)."""

from __future__ import annotations

import numpy as np

import rbd_deriv as rd

BATCH = 5


def _batch(case, count=BATCH):
    states = case.states("batch", count)
    return tuple(np.array([s[k] for s in states]) for k in range(3))


# batch function, single function, names of its outputs (one array each, or a tuple).
PAIRS = (
    ("rnea_batch", "rnea", ("tau",)),
    ("aba_batch", "aba", ("ddq",)),
    ("rnea_derivatives_batch", "rnea_derivatives", ("dtau_dq", "dtau_dv", "M")),
    ("aba_derivatives_batch", "aba_derivatives", ("dddq_dq", "dddq_dv", "Minv")),
)


def _check(case):
    model = case.model
    data = model.create_data()
    Q, V, U = _batch(case)
    for batch_name, single_name, outputs in PAIRS:
        batched = getattr(rd, batch_name)(model, Q, V, U)
        batched = batched if isinstance(batched, tuple) else (batched,)
        assert len(batched) == len(outputs)
        for k in range(BATCH):
            single = getattr(rd, single_name)(model, data, Q[k], V[k], U[k])
            single = single if isinstance(single, tuple) else (single,)
            for output, many, one in zip(outputs, batched, single):
                assert many.shape == (BATCH,) + one.shape
                np.testing.assert_array_equal(many[k], one, err_msg=f"{batch_name} {output}[{k}]")

    dt = 0.01
    A, B, X_next = rd.linearize_batch(model, Q, V, U, dt)
    assert A.shape == (BATCH, 2 * model.nv, 2 * model.nv)
    assert B.shape == (BATCH, 2 * model.nv, model.nv)
    assert X_next.shape == (BATCH, model.nq + model.nv)
    for k in range(BATCH):
        single_A, single_B = rd.linearize(model, data, Q[k], V[k], U[k], dt)
        np.testing.assert_array_equal(A[k], single_A, err_msg=f"linearize_batch A[{k}]")
        np.testing.assert_array_equal(B[k], single_B, err_msg=f"linearize_batch B[{k}]")
        np.testing.assert_array_equal(X_next[k], data.x_next, err_msg=f"linearize_batch x_next[{k}]")


def test_batch_equals_loop(any_robot):
    _check(any_robot)


def test_batch_with_armature_equals_loop(armature_robot):
    _check(armature_robot)


def test_batch_outputs_are_fresh_arrays(small_robot):
    model = small_robot.model
    Q, V, U = _batch(small_robot)
    first = rd.rnea_batch(model, Q, V, U)
    kept = first.copy()
    second = rd.rnea_batch(model, Q[::-1].copy(), V[::-1].copy(), U[::-1].copy())
    assert not np.shares_memory(first, second)
    np.testing.assert_array_equal(first, kept)


def test_batch_of_one_and_non_contiguous_inputs(small_robot):
    model = small_robot.model
    data = model.create_data()
    Q, V, U = _batch(small_robot, 6)
    single = rd.rnea_batch(model, Q[:1], V[:1], U[:1])
    assert single.shape == (1, model.nv)
    np.testing.assert_array_equal(single[0], rd.rnea(model, data, Q[0], V[0], U[0]))
    strided = rd.aba_batch(model, Q[::2], V[::2], U[::2])
    contiguous = rd.aba_batch(model, Q[::2].copy(), V[::2].copy(), U[::2].copy())
    np.testing.assert_array_equal(strided, contiguous)


def test_workspaces_are_reused_and_never_shared(small_robot):
    """A batch call takes its workspaces from the model's pool and gives them back: later calls reuse them
    (no new allocation), and calls running at once from several threads each get their own set (their
    results equal the same calls made one after another)."""
    import threading

    from rbd_deriv.core import batch
    model = small_robot.model
    Q, V, U = _batch(small_robot, 8)
    expected = [rd.aba_derivatives_batch(model, Q, V, U)]
    pool = batch._POOLS[model]
    sets = sorted(id(w) for w in pool)  # the order of equal-sized sets changes as they are taken and given back
    for _ in range(3):
        rd.rnea_batch(model, Q, V, U)
    assert sorted(id(w) for w in batch._POOLS[model]) == sets

    results, errors = {}, []

    def run(key):
        try:
            for _ in range(20):
                results[key] = rd.aba_derivatives_batch(model, Q, V, U)
        except Exception as err:  # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    for result in results.values():
        for got, want in zip(result, expected[0]):
            np.testing.assert_array_equal(got, want)


def test_threads_change_nothing_in_the_results(small_robot):
    """The same batch on the calling thread alone and shared with the workers: the same bytes in every
    output, whichever thread took which state."""
    import numba

    model = small_robot.model
    Q, V, U = _batch(small_robot, 17)
    previous = numba.get_num_threads()
    results = {}
    try:
        for threads in (1, numba.config.NUMBA_NUM_THREADS):
            numba.set_num_threads(threads)
            results[threads] = [
                rd.rnea_batch(model, Q, V, U), rd.aba_batch(model, Q, V, U),
                *rd.rnea_derivatives_batch(model, Q, V, U), *rd.aba_derivatives_batch(model, Q, V, U),
                *rd.linearize_batch(model, Q, V, U, 0.01)]
    finally:
        numba.set_num_threads(previous)
    serial, shared = results.values()
    for one, many in zip(serial, shared):
        np.testing.assert_array_equal(one, many)


def test_a_bad_state_is_named_whichever_thread_meets_it(small_robot):
    """NaN in states 11 and 5 of 16: the error names state 5, the first one, with the argument."""
    import pytest

    model = small_robot.model
    Q, V, U = _batch(small_robot, 16)
    V[11, 0] = np.nan
    U[5, -1] = np.inf
    for function in (rd.aba_derivatives_batch, rd.rnea_derivatives_batch):
        with pytest.raises(rd.InputError, match="state 5 of 16") as info:
            function(model, Q, V, U)
        assert info.value.argument in ("A", "TAU")


def test_read_only_and_strided_states_are_taken(small_robot):
    """Read-only states are read in place; strided and unaligned ones are copied; all give the contiguous
    result."""
    model = small_robot.model
    Q, V, U = _batch(small_robot, 12)
    expected = rd.linearize_batch(model, Q[::2].copy(), V[::2].copy(), U[::2].copy(), 0.01)
    frozen = [x[::2].copy() for x in (Q, V, U)]
    for x in frozen:
        x.flags.writeable = False
    unaligned = []
    for x in (Q[::2], V[::2], U[::2]):
        raw = np.zeros(x.nbytes + 1, dtype=np.uint8)
        view = np.frombuffer(raw.data, dtype=np.float64, count=x.size, offset=1).reshape(x.shape)
        view[...] = x
        assert not view.flags.aligned
        unaligned.append(view)
    for states in (frozen, (Q[::2], V[::2], U[::2]), unaligned):
        got = rd.linearize_batch(model, *states, 0.01)
        for a, b in zip(got, expected):
            np.testing.assert_array_equal(a, b)
