"""Vectorised CDR encoding and decoding of messages whose layout does not change.

A 1 kHz bag holds tens of thousands of messages of one shape: the same joint names, the same frame id,
arrays of the same lengths. Only the numbers differ. Decoding or encoding them one by one through the
generic serializer costs 15 to 40 us each, more than the dynamics themselves. Here the byte layout of
one message is worked out once (where each number sits, which bytes are lengths and text), and then all
messages of that shape are decoded or encoded at once with numpy slicing.

The layout follows the plain CDR rules used by ROS 2 (XCDR1): a 4-byte encapsulation header, then every
primitive aligned to its own size (relative to the end of the header), strings and sequences as a
``uint32`` count followed by their elements, fixed arrays without a count, nested messages inlined.

Correctness rests on the generic serializer of ``rosbags``: :func:`fixed_layout` builds the layout from a
message that rosbags itself serialized (the template bytes), :func:`encode_batch` starts from those
bytes, and :func:`decode_batch` only accepts a raw message whose text and count bytes equal the
template's. Anything else is left to the generic path by the caller.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np

from rosbags.interfaces import Nodetype

__all__ = ["FixedLayout", "NumericField", "fixed_layout", "layout_of_raw", "decode_batch", "decode_block", "encode_batch"]

# Byte size (and CDR alignment) of each primitive, with the little-endian numpy dtype that reads it.
_PRIMITIVES: Dict[str, Tuple[int, str]] = {
    "bool": (1, "u1"),
    "byte": (1, "u1"),
    "char": (1, "u1"),
    "int8": (1, "i1"),
    "uint8": (1, "u1"),
    "int16": (2, "<i2"),
    "uint16": (2, "<u2"),
    "int32": (4, "<i4"),
    "uint32": (4, "<u4"),
    "int64": (8, "<i8"),
    "uint64": (8, "<u8"),
    "float32": (4, "<f4"),
    "float64": (8, "<f8"),
}

_HEADER_BYTES = 4
_CDR_LITTLE_ENDIAN = b"\x00\x01"


@dataclass(frozen=True)
class NumericField:
    """Where one numeric field (scalar or array) sits in the serialized message.

    Attributes:
        path: Field names from the message root, e.g. ``("header", "stamp", "sec")``.
        offset: Byte offset from the start of the raw message (encapsulation header included).
        dtype: Little-endian numpy dtype string of one element.
        count: Number of elements (1 for a scalar).
    """

    path: Tuple[str, ...]
    offset: int
    dtype: str
    count: int

    @property
    def nbytes(self) -> int:
        return np.dtype(self.dtype).itemsize * self.count


@dataclass
class FixedLayout:
    """Byte layout of every message that shares the template's text, lengths and counts.

    Attributes:
        typename: ROS type name, e.g. ``sensor_msgs/msg/JointState``.
        template: Raw bytes of the message the layout was built from [size].
        fields: Every numeric field, in serialization order.
        structural: Boolean mask [size], True on the bytes that must equal the template's for a raw
            message to share this layout (encoding marker, counts, string bytes). Padding and numbers
            are False.
    """

    typename: str
    template: np.ndarray
    fields: List[NumericField]
    structural: np.ndarray
    _by_path: Dict[Tuple[str, ...], NumericField] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._by_path = {f.path: f for f in self.fields}

    @property
    def size(self) -> int:
        return int(self.template.size)

    def field(self, *path: str) -> NumericField:
        """The numeric field at ``path``; KeyError naming the path when the message has none."""
        try:
            return self._by_path[tuple(path)]
        except KeyError:
            raise KeyError(f"{self.typename} has no numeric field {'.'.join(path)}") from None


class _LayoutBuilder:
    """Walks a message instance along its type description, recording offsets as rosbags writes them."""

    def __init__(self, typestore: Any) -> None:
        self.typestore = typestore
        self.pos = 0  # relative to the end of the encapsulation header, where CDR alignment is counted
        self.fields: List[NumericField] = []
        self.structural: List[Tuple[int, int]] = []  # (start, stop) relative to the header end

    def _align(self, alignment: int) -> None:
        self.pos = (self.pos + alignment - 1) & -alignment

    def _mark(self, nbytes: int) -> None:
        self.structural.append((self.pos, self.pos + nbytes))
        self.pos += nbytes

    def _count(self) -> None:
        self._align(4)
        self._mark(4)

    def _string(self, text: str) -> None:
        self._count()
        self._mark(len(text.encode()) + 1)

    def _numbers(self, path: Tuple[str, ...], basetype: str, count: int) -> None:
        size, dtype = _PRIMITIVES[basetype]
        if count == 0:
            return
        self._align(size)
        self.fields.append(NumericField(path, self.pos + _HEADER_BYTES, dtype, count))
        self.pos += size * count

    def message(self, value: Any, typename: str, path: Tuple[str, ...]) -> None:
        _, fielddescs = self.typestore.fielddefs[typename]
        for name, desc in fielddescs:
            self.value(getattr(value, name), desc, path + (name,))

    def value(self, value: Any, desc: Tuple[Any, Any], path: Tuple[str, ...]) -> None:
        kind, detail = desc
        if kind == Nodetype.NAME:
            self.message(value, detail, path)
        elif kind == Nodetype.BASE:
            basetype = detail[0]
            if basetype == "string":
                self._string(value)
            elif basetype in _PRIMITIVES:
                self._numbers(path, basetype, 1)
            else:
                raise TypeError(f"no fixed layout for primitive {basetype!r} at {'.'.join(path)}")
        elif kind in (Nodetype.ARRAY, Nodetype.SEQUENCE):
            element, _ = detail
            if kind == Nodetype.SEQUENCE:
                self._count()
            if element[0] == Nodetype.BASE and element[1][0] in _PRIMITIVES:
                self._numbers(path, element[1][0], len(value))
            else:
                for index, item in enumerate(value):
                    self.value(item, element, path + (str(index),))
        else:
            raise TypeError(f"unknown field kind {kind!r} at {'.'.join(path)}")


def fixed_layout(typestore: Any, message: Any, typename: str) -> FixedLayout:
    """Layout of every message with the same text, lengths and counts as ``message``.

    Args:
        typestore: rosbags Typestore that knows ``typename``.
        message: A rosbags message instance of that type, the template.
        typename: ROS type name.

    Returns:
        The layout, with the template serialized by rosbags (little endian).
    """
    raw = bytes(typestore.serialize_cdr(message, typename, little_endian=True))
    builder = _LayoutBuilder(typestore)
    builder.message(message, typename, ())
    if builder.pos + _HEADER_BYTES != len(raw):
        raise AssertionError(
            f"layout of {typename} ends at {builder.pos + _HEADER_BYTES} bytes, rosbags wrote {len(raw)}"
        )
    structural = np.zeros(len(raw), dtype=bool)
    structural[:2] = True  # encapsulation kind; bytes 2-3 are options that writers may set freely
    for start, stop in builder.structural:
        structural[start + _HEADER_BYTES : stop + _HEADER_BYTES] = True
    template = np.frombuffer(raw, dtype=np.uint8).copy()
    return FixedLayout(typename, template, builder.fields, structural)


def layout_of_raw(typestore: Any, raw: bytes, typename: str) -> FixedLayout:
    """Layout of the messages shaped like the recorded message ``raw``.

    Some middlewares pad a message to a multiple of 4 bytes and leave padding bytes unset, so the
    recorded bytes may differ from what rosbags writes back. The layout keeps the recorded length and
    ignores the trailing bytes and the padding.

    Raises:
        ValueError: ``raw`` is not little-endian CDR or its text and counts disagree with its own decoding.
    """
    if not is_little_endian_cdr(raw):
        raise ValueError(f"{typename} message is not little-endian CDR")
    layout = fixed_layout(typestore, typestore.deserialize_cdr(raw, typename), typename)
    recorded = np.frombuffer(bytes(raw), dtype=np.uint8)
    if recorded.size < layout.size:
        raise ValueError(f"{typename} message is {recorded.size} bytes, its content needs {layout.size}")
    structural = np.zeros(recorded.size, dtype=bool)
    structural[: layout.size] = layout.structural
    if not np.array_equal(recorded[structural], layout.template[layout.structural]):
        raise ValueError(f"{typename} message bytes disagree with its decoding")
    return FixedLayout(typename, recorded.copy(), layout.fields, structural)


def _stack(raws: Sequence[bytes], size: int) -> np.ndarray:
    return np.frombuffer(b"".join(raws), dtype=np.uint8).reshape(len(raws), size)


def decode_batch(
    layout: FixedLayout, raws: Sequence[bytes], paths: Sequence[Tuple[str, ...]]
) -> Tuple[np.ndarray, Dict[Tuple[str, ...], np.ndarray]]:
    """Read the numeric fields ``paths`` of every raw message that matches ``layout``.

    Args:
        layout: Layout from :func:`fixed_layout`.
        raws: Serialized messages [K] (bytes-like).
        paths: Numeric fields to read.

    Returns:
        ``(matched, values)``: ``matched`` [K] bool, True for the messages that share the layout;
        ``values[path]`` is an array [M, count] (float64 for floating types, int64 otherwise) over the
        M matched messages in order. Unmatched messages must go through the generic decoder.
    """
    matched = np.zeros(len(raws), dtype=bool)
    same_size = np.fromiter((len(r) == layout.size for r in raws), dtype=bool, count=len(raws))
    candidates = np.flatnonzero(same_size)
    block = _stack([raws[i] for i in candidates], layout.size) if candidates.size else np.zeros((0, layout.size), np.uint8)
    agrees, values = decode_block(layout, block, paths)
    matched[candidates[agrees]] = True
    return matched, values


def decode_block(
    layout: FixedLayout, block: np.ndarray, paths: Sequence[Tuple[str, ...]]
) -> Tuple[np.ndarray, Dict[Tuple[str, ...], np.ndarray]]:
    """:func:`decode_batch` for messages of the layout's size already stacked as rows of ``block`` [K, size].

    Returns:
        ``(matched [K] bool, values)`` as :func:`decode_batch`.
    """
    mask = layout.structural
    matched = np.all(block[:, mask] == layout.template[mask], axis=1) if block.shape[0] else np.zeros(0, dtype=bool)
    block = block[matched] if not matched.all() else block
    values: Dict[Tuple[str, ...], np.ndarray] = {}
    for path in paths:
        spec = layout.field(*path)
        raw = np.ascontiguousarray(block[:, spec.offset : spec.offset + spec.nbytes])
        numbers = raw.view(spec.dtype).reshape(block.shape[0], spec.count)
        kind = np.float64 if np.dtype(spec.dtype).kind == "f" else np.int64
        values[tuple(path)] = numbers.astype(kind)
    return matched, values


def encode_batch(layout: FixedLayout, values: Dict[Tuple[str, ...], np.ndarray]) -> np.ndarray:
    """Serialize K messages of the template's shape with new numbers.

    Args:
        layout: Layout from :func:`fixed_layout`.
        values: For each numeric path to change, an array [K, count] (or [K] for scalars). Fields not
            given keep the template's value.

    Returns:
        Array [K, size] of uint8; row k is the raw message k, ready for a bag writer.
    """
    if not values:
        raise ValueError("encode_batch needs at least one field to set")
    count = None
    for path, array in values.items():
        rows = np.asarray(array).shape[0]
        if count is None:
            count = rows
        elif rows != count:
            raise ValueError(f"field {'.'.join(path)} has {rows} rows, expected {count}")
    assert count is not None
    block = np.tile(layout.template, (count, 1))
    for path, array in values.items():
        spec = layout.field(*path)
        typed = np.asarray(array).reshape(count, spec.count).astype(spec.dtype, casting="unsafe")
        block[:, spec.offset : spec.offset + spec.nbytes] = typed.view(np.uint8).reshape(count, spec.nbytes)
    return block


def is_little_endian_cdr(raw: bytes) -> bool:
    """True when ``raw`` starts with the plain little-endian CDR encapsulation marker."""
    return bytes(raw[:2]) == _CDR_LITTLE_ENDIAN
