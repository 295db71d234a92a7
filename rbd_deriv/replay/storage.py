"""The messages of a rosbag2 recording, read in batches in the order they were written, damaged files included.

A recording can be longer than memory, and a recorder killed mid-write or a bad disk leaves files that the
storage libraries refuse whole. This module reads the two rosbag2 storages itself, one batch at a time, and
keeps every message it can read:

- **mcap**: the records are walked from the start of the file (MCAP specification, "Records"), chunk by
  chunk, without needing the summary at its end. Where a record is unreadable (bytes overwritten,
  impossible lengths) the reader looks for the next record that is consistent with what follows it and
  carries on from there; where the file ends early, the end of the last chunk is read as far as it goes.
  The message index records that follow each chunk say how many messages the chunk held, which counts
  the messages lost in a damaged chunk exactly.
- **sqlite3**: rows are read through SQLite in id order. When SQLite refuses the file (a cut file is
  "malformed" as a whole), the table pages are read directly (SQLite file format, "B-tree pages" and
  "Record format"), which recovers every row of every intact page. rosbag2 numbers rows 1, 2, 3... so
  the missing ids count the lost rows.

Messages come in file order, which is the order a recorder received them. Each batch holds the raw CDR
bytes of up to a few thousand messages in one buffer, with offsets, so that messages of one shape can be
decoded together (:mod:`rbd_deriv.replay.cdr`) without one Python object per message.
"""

from __future__ import annotations

import os
import sqlite3
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Callable, Dict, Iterator, List, Optional, Sequence, Set, Tuple

import numpy as np

from rbd_deriv.exceptions import RbdDerivError

__all__ = ["BagError", "Damage", "RawBatch", "TopicInfo", "BagSource"]

_MCAP_MAGIC = b"\x89MCAP0\r\n"
_SQLITE_MAGIC = b"SQLite format 3\x00"

# MCAP opcodes (specification, "Records").
_HEADER, _FOOTER, _SCHEMA, _CHANNEL, _MESSAGE, _CHUNK, _MESSAGE_INDEX = 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07
_DATA_END = 0x0F
_KNOWN_OPCODES = frozenset(range(0x01, 0x10))
# Records a data section holds; the others belong to the summary.
_DATA_OPCODES = frozenset({_SCHEMA, _CHANNEL, _MESSAGE, _CHUNK, _MESSAGE_INDEX, 0x09, 0x0C, _DATA_END})
_CHUNK_OPCODES = frozenset({_SCHEMA, _CHANNEL, _MESSAGE})
_MESSAGE_HEAD = 22  # channel id u16, sequence u32, log time u64, publish time u64

_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_RECORD_HEAD = struct.Struct("<BQ")
_MESSAGE_KEY = struct.Struct("<H4xQ")  # channel id, (sequence skipped), log time
_CHUNK_HEAD = struct.Struct("<QQQII")  # start, end, uncompressed size, crc, compression name length

# Times are int64 nanoseconds downstream; a larger log time can only be damage.
_MAX_TIME = 2**63 - 1
# Bytes read at a time while looking for the next readable record after damage.
_SEARCH_WINDOW = 1 << 20


class BagError(RbdDerivError):
    """A bag cannot be used: missing, unreadable, or without the topic asked for.

    Attributes:
        path: The bag path.
        topic: The topic concerned, or None.
    """

    def __init__(self, message: str, path: Optional[os.PathLike] = None, topic: Optional[str] = None) -> None:
        super().__init__(message)
        self.path = path
        self.topic = topic


@dataclass(frozen=True)
class TopicInfo:
    """One recorded topic.

    Attributes:
        name: Topic name.
        msgtype: ROS type name, e.g. ``sensor_msgs/msg/JointState``.
        count: Messages the bag says it holds on this topic (metadata.yaml or the mcap statistics), None
            when it does not say (a lone damaged file).
        latched: Recorded with transient-local durability (``/robot_description``).
    """

    name: str
    msgtype: str
    count: Optional[int] = None
    latched: bool = False


@dataclass
class Damage:
    """A stretch of a file that could not be read.

    Attributes:
        file: The storage file.
        offset: Byte where the damage starts (mcap); None for sqlite3, where rows are counted by id.
        resume: Byte where reading resumed, None when nothing after it could be read.
        what: What was found there.
        lost: Messages lost there on the topics being read, when the file says how many (mcap message
            indexes); rows lost of any topic for sqlite3 (``lost_rows``); None when unknown.
        lost_rows: sqlite3 only: ids missing from the row sequence, of any topic.
        after_ns: Bag time [ns] of the last message read before the damage, None if none.
        before_ns: Bag time [ns] of the first message read after it, None if none.
    """

    file: str
    offset: Optional[int]
    resume: Optional[int]
    what: str
    lost: Optional[int] = None
    lost_rows: Optional[int] = None
    after_ns: Optional[int] = None
    before_ns: Optional[int] = None

    def as_dict(self) -> Dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class RawBatch:
    """Raw messages in file order: message ``i`` is ``buffer[offset[i] : offset[i] + size[i]]``.

    Attributes:
        topic: Index of each message's topic in the list given to :meth:`BagSource.read` [k].
        bag_ns: Time the recorder received each message [k] in [ns] (int64).
        buffer: The bytes (uint8).
        offset: Start of each message in ``buffer`` [k] (int64).
        size: Length of each message [k] (int64).
    """

    topic: np.ndarray
    bag_ns: np.ndarray
    buffer: np.ndarray
    offset: np.ndarray
    size: np.ndarray

    def __len__(self) -> int:
        return int(self.bag_ns.size)

    def message(self, i: int) -> bytes:
        start = int(self.offset[i])
        return self.buffer[start : start + int(self.size[i])].tobytes()

    def block(self, rows: np.ndarray, size: int) -> np.ndarray:
        """The messages ``rows``, all ``size`` bytes long, as one array [len(rows), size] (uint8)."""
        index = self.offset[rows][:, None] + np.arange(size)
        return self.buffer[index]

    def select(self, mask: np.ndarray) -> "RawBatch":
        return RawBatch(self.topic[mask], self.bag_ns[mask], self.buffer, self.offset[mask], self.size[mask])

    @staticmethod
    def from_messages(topic: Sequence[int], bag_ns: Sequence[int], raws: Sequence[bytes]) -> "RawBatch":
        sizes = np.fromiter((len(r) for r in raws), dtype=np.int64, count=len(raws))
        offsets = np.zeros(len(raws), dtype=np.int64)
        np.cumsum(sizes[:-1], out=offsets[1:])
        buffer = np.frombuffer(b"".join(raws), dtype=np.uint8)
        return RawBatch(np.asarray(topic, dtype=np.int16), np.asarray(bag_ns, dtype=np.int64), buffer, offsets, sizes)


class _Collector:
    """Turns messages found one by one into batches, and dates the damage between them."""

    def __init__(self, damage: List[Damage]) -> None:
        self.damage = damage
        self.last_ns: Optional[int] = None
        self._open: List[Damage] = []

    def note(self, event: Damage) -> None:
        event.after_ns = self.last_ns
        self.damage.append(event)
        self._open.append(event)

    def seen(self, bag_ns: np.ndarray) -> None:
        if bag_ns.size:
            for event in self._open:
                event.before_ns = int(bag_ns[0])
            self._open.clear()
            self.last_ns = int(bag_ns[-1])

    def note_within(self, events: List[Tuple[Damage, int]], bag_ns: np.ndarray) -> None:
        """Date damage met inside a batch: ``(event, i)`` where message ``i`` of ``bag_ns`` is the first after it."""
        before = self.last_ns
        self.seen(bag_ns)
        for event, i in events:
            event.after_ns = int(bag_ns[i - 1]) if i > 0 else before
            self.damage.append(event)
            if i < bag_ns.size:
                event.before_ns = int(bag_ns[i])
            else:
                self._open.append(event)


# ----------------------------------------------------------------------------------------------- mcap


def _read_at(stream: BinaryIO, offset: int, size: int) -> bytes:
    stream.seek(offset)
    return stream.read(size)


def _string(buffer: bytes, pos: int) -> Tuple[str, int]:
    (length,) = _U32.unpack_from(buffer, pos)
    end = pos + 4 + length
    if end > len(buffer):
        raise ValueError("string runs past its record")
    return bytes(buffer[pos + 4 : end]).decode(), end


def _qos_latched(metadata: bytes) -> bool:
    # Channel metadata: a map of strings, rosbag2 keeps the QoS profiles as YAML text under one key.
    pos = 0
    while pos < len(metadata):
        key, pos = _string(metadata, pos)
        value, pos = _string(metadata, pos)
        if key == "offered_qos_profiles":
            return "transient_local" in value.lower() or "durability: 1" in value
    return False


@dataclass
class _Channel:
    topic: str
    msgtype: str
    latched: bool


def _decompressor(compression: str) -> Callable[[bytes], bytes]:
    """A function returning as much of a compressed chunk as can be decompressed (all of it when whole)."""
    if compression == "":
        return lambda data: data
    if compression == "zstd":
        try:
            from compression import zstd  # type: ignore[import-not-found]
        except ImportError:
            from backports import zstd  # type: ignore[import-not-found, no-redef]

        return lambda data: zstd.ZstdDecompressor().decompress(data)
    if compression == "lz4":
        from lz4.frame import LZ4FrameDecompressor  # type: ignore[import-untyped]

        return lambda data: LZ4FrameDecompressor().decompress(data)
    raise ValueError(f"unknown chunk compression {compression!r}")


class _McapFile:
    """One mcap file, walked record by record (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.stream: BinaryIO = open(path, "rb")
        self.size = os.fstat(self.stream.fileno()).st_size
        head = self.stream.read(8)
        if head != _MCAP_MAGIC:
            self.close()
            raise BagError(f"{path} is not an mcap file (its first bytes are {head!r})", path)
        self.channels: Dict[int, _Channel] = {}
        self.data_start = self._skip_header()
        self.data_end, self.statistics = self._read_summary()

    def close(self) -> None:
        self.stream.close()

    def _skip_header(self) -> int:
        head = _read_at(self.stream, 8, 9)
        if len(head) == 9 and head[0] == _HEADER:
            (length,) = _U64.unpack_from(head, 1)
            if 17 + length <= self.size:
                return 17 + length
        return 8  # a damaged header: the walk finds the first readable record

    def _read_summary(self) -> Tuple[int, Optional[Dict[int, int]]]:
        """End of the data section and the per-channel message counts, when the footer is intact."""
        if self.size < 8 + 37:
            return self.size, None
        tail = _read_at(self.stream, self.size - 37, 37)
        if tail[-8:] != _MCAP_MAGIC or tail[0] != _FOOTER:
            return self.size, None
        (summary_start,) = _U64.unpack_from(tail, 9)
        if not summary_start or not self.data_start <= summary_start <= self.size - 37:
            return self.size, None
        summary = _read_at(self.stream, summary_start, self.size - 37 - summary_start)
        counts: Optional[Dict[int, int]] = None
        pos = 0
        try:
            while pos + 9 <= len(summary):
                op, length = _RECORD_HEAD.unpack_from(summary, pos)
                body = summary[pos + 9 : pos + 9 + length]
                if op == _CHANNEL:
                    self._add_channel(body)
                elif op == 0x0B and len(body) >= 46:  # statistics
                    (size,) = _U32.unpack_from(body, 42)
                    pairs = body[46 : 46 + size]
                    counts = {cid: count for cid, count in struct.iter_unpack("<HQ", pairs)}
                pos += 9 + length
        except (struct.error, ValueError, UnicodeDecodeError):
            return self.size, None
        return summary_start, counts

    def _add_channel(self, body: bytes) -> None:
        (channel_id,) = _U16.unpack_from(body, 0)
        topic, pos = _string(body, 4)
        _, pos = _string(body, pos)  # message encoding
        (size,) = _U32.unpack_from(body, pos)
        latched = _qos_latched(bytes(body[pos + 4 : pos + 4 + size]))
        self.channels[channel_id] = _Channel(topic, "", latched)

    def _add_schema_and_channel(self, op: int, body: bytes, schemas: Dict[int, str]) -> None:
        if op == _SCHEMA:
            (schema_id,) = _U16.unpack_from(body, 0)
            name, _ = _string(body, 2)
            schemas[schema_id] = name
            return
        (channel_id,) = _U16.unpack_from(body, 0)
        (schema_id,) = _U16.unpack_from(body, 2)
        self._add_channel(body)
        channel = self.channels[channel_id]
        self.channels[channel_id] = _Channel(channel.topic, schemas.get(schema_id, ""), channel.latched)

    def topics(self) -> Dict[str, TopicInfo]:
        """Topics of the channel records (the summary's, else a walk of the whole file)."""
        if not self.channels or not all(c.msgtype for c in self.channels.values()):
            for _ in self.walk(set(), [], 1 << 30):
                pass
        counts = self.statistics or {}
        found: Dict[str, TopicInfo] = {}
        for channel_id, channel in self.channels.items():
            count = counts.get(channel_id) if self.statistics is not None else None
            previous = found.get(channel.topic)
            if previous is not None and previous.count is not None and count is not None:
                count += previous.count
            found[channel.topic] = TopicInfo(channel.topic, channel.msgtype, count, channel.latched)
        return found

    # ---------------------------------------------------------------------------------------- walking
    def walk(self, wanted: Set[str], damage: List[Damage], batch: int) -> Iterator[Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
        """Yield ``(channel_ids, bag_ns, buffer, offsets, sizes)`` for the messages on ``wanted`` topics."""
        schemas: Dict[int, str] = {}
        collector = _Collector(damage)
        # Messages parsed per channel in the last chunk, and the damage met in it, for the message indexes.
        chunk_parsed: Dict[int, int] = {}
        chunk_damage: Optional[Damage] = None
        loose: List[Tuple[int, int, bytes, int]] = []  # messages outside chunks (and where they end), batched here
        pos = self.data_start
        end = self.data_end
        while pos < end:
            head = _read_at(self.stream, pos, 9)
            op = head[0] if head else -1
            length = _U64.unpack_from(head, 1)[0] if len(head) == 9 else -1
            if op == _DATA_END:
                break
            if len(head) < 9 or op not in _DATA_OPCODES or pos + 9 + length > end:
                if len(head) == 9 and op == _CHUNK and pos + 9 + length > self.size:
                    # The file ends inside this chunk: read what it has.
                    body = _read_at(self.stream, pos + 9, end - pos - 9)
                    result = self._chunk(body, pos, wanted, schemas, collector, partial=True)
                    if result is not None:
                        yield result
                    collector.note(Damage(str(self.path), pos, None, f"the file ends inside a chunk at byte {end} "
                                          f"({pos + 9 + length - end} bytes of it missing)"))
                    break
                resume = self._next_record(pos + 1, end)
                cut = len(head) < 9 or (pos + 9 + length > self.size and resume is None)
                if loose and not cut and loose[-1][3] == pos:
                    loose.pop()  # as in a chunk: the message just before the damage may end in it
                what = "the file ends inside a record" if cut else f"unreadable bytes (record type {op:#04x}, length {length})"
                event = Damage(str(self.path), pos, resume, what)
                collector.note(event)
                chunk_parsed, chunk_damage = {}, event
                if resume is None:
                    break
                pos = resume
                continue
            body = _read_at(self.stream, pos + 9, length)
            if op == _CHUNK:
                if loose:
                    yield self._loose(loose, collector)
                result = self._chunk(body, pos, wanted, schemas, collector)
                chunk_damage = collector.damage[-1] if collector.damage and collector.damage[-1].offset >= pos else None
                chunk_parsed = {}
                if result is not None:
                    ids, counts = np.unique(result[0], return_counts=True)
                    chunk_parsed = dict(zip(ids.tolist(), counts.tolist()))
                    yield result
            elif op == _MESSAGE_INDEX and len(body) >= 6:
                (channel_id,) = _U16.unpack_from(body, 0)
                (size,) = _U32.unpack_from(body, 2)
                channel = self.channels.get(channel_id)
                missing = size // 16 - chunk_parsed.get(channel_id, 0)
                if channel is not None and channel.topic in wanted and missing > 0:
                    if chunk_damage is None:
                        chunk_damage = Damage(str(self.path), pos, pos, "a chunk holds fewer messages than its index lists")
                        collector.note(chunk_damage)
                    chunk_damage.lost = (chunk_damage.lost or 0) + missing
            elif op == _MESSAGE and length >= _MESSAGE_HEAD:
                channel_id, log_time = _MESSAGE_KEY.unpack_from(body, 0)
                channel = self.channels.get(channel_id)
                if channel is not None and channel.topic in wanted and log_time <= _MAX_TIME:
                    # After damage inside a chunk, its records are read as if they stood alone: they count
                    # against the chunk's message index that follows.
                    chunk_parsed[channel_id] = chunk_parsed.get(channel_id, 0) + 1
                    loose.append((channel_id, log_time, body[_MESSAGE_HEAD:], pos + 9 + length))
                    if len(loose) >= batch:
                        yield self._loose(loose, collector)
            elif op in (_SCHEMA, _CHANNEL):
                try:
                    self._add_schema_and_channel(op, body, schemas)
                except (struct.error, ValueError, UnicodeDecodeError):
                    collector.note(Damage(str(self.path), pos, pos + 9 + length, "unreadable schema or channel record"))
            pos += 9 + length
        if loose:
            yield self._loose(loose, collector)

    def _loose(self, loose: List[Tuple[int, int, bytes, int]], collector: _Collector) -> Tuple[np.ndarray, ...]:
        ids = np.array([m[0] for m in loose], dtype=np.int64)
        batch = RawBatch.from_messages(np.zeros(len(loose)), [m[1] for m in loose], [m[2] for m in loose])
        loose.clear()
        collector.seen(batch.bag_ns)
        return ids, batch.bag_ns, batch.buffer, batch.offset, batch.size

    def _chunk(self, body: bytes, pos: int, wanted: Set[str], schemas: Dict[int, str], collector: _Collector,
               partial: bool = False) -> Optional[Tuple[np.ndarray, ...]]:
        """Messages on ``wanted`` topics of one chunk record (``body`` follows the record head at ``pos``)."""
        try:
            _, _, uncompressed, crc, name_length = _CHUNK_HEAD.unpack_from(body, 0)
            compression = bytes(body[32 : 32 + name_length]).decode()
            (stored,) = _U64.unpack_from(body, 32 + name_length)
            records = body[40 + name_length :]
            if not partial and stored != len(records):
                raise ValueError(f"its records field says {stored} bytes, the record holds {len(records)}")
            data = _decompressor(compression)(bytes(records))
        except Exception as err:  # noqa: BLE001 - corrupt compressed data raises the codec's own errors
            collector.note(Damage(str(self.path), pos, pos + 9 + len(body), f"unreadable chunk: {err}"))
            return None
        if not partial and len(data) != uncompressed:
            collector.note(Damage(str(self.path), pos, pos + 9 + len(body),
                                  f"chunk decompresses to {len(data)} bytes, not {uncompressed}"))
        elif not partial and crc and zlib.crc32(data) != crc:
            # The content changed after it was written; its records are still read and checked one by one
            # (and each message's layout by the decoder), but numbers inside a message cannot be checked.
            collector.note(Damage(str(self.path), pos, pos + 9 + len(body), "chunk checksum mismatch"))
        buffer = data
        found: List[Tuple[int, int, int, int]] = []
        events: List[Tuple[Damage, int]] = []
        inner = 0
        while inner < len(buffer):
            stop, error = self._records(buffer, inner, wanted, schemas, found)
            if error is None:
                break
            resume = _next_inner_record(buffer, stop + 1, self.channels)
            if partial and resume is None:
                break  # the cut end of the chunk: reported by the caller
            if found and found[-1][2] + found[-1][3] == stop:
                # The damage may have begun inside the message just before: its length was intact but
                # its last bytes may not be. Nothing tells, so it goes with the damage.
                found.pop()
            # Offsets inside an uncompressed chunk map to the file; inside a compressed one, the chunk's start.
            where = pos + 9 + 40 + name_length + stop if not compression else pos
            events.append((Damage(str(self.path), where, None if resume is None else where + resume - stop,
                                  f"inside a chunk at byte {stop} of its {len(buffer)}: {error}"), len(found)))
            if resume is None:
                break
            inner = resume
        table = np.array(found, dtype=np.int64).reshape(-1, 4)
        collector.note_within(events, table[:, 1])
        if not found:
            return None
        array = np.frombuffer(buffer, dtype=np.uint8)
        return table[:, 0], table[:, 1], array, table[:, 2], table[:, 3]

    def _records(self, buffer: bytes, pos: int, wanted: Set[str], schemas: Dict[int, str],
                 found: List[Tuple[int, int, int, int]]) -> Tuple[int, Optional[str]]:
        """Walk the records of a chunk from ``pos``; returns where it stopped and why (None: the end)."""
        end = len(buffer)
        channels = self.channels
        wanted_ids = {cid for cid, c in channels.items() if c.topic in wanted}
        unpack_head = _RECORD_HEAD.unpack_from
        unpack_key = _MESSAGE_KEY.unpack_from
        append = found.append
        while pos < end:
            if end - pos < 9:
                return pos, "a record is cut"
            op, length = unpack_head(buffer, pos)
            body = pos + 9
            stop = body + length
            if stop > end or op not in _CHUNK_OPCODES:
                return pos, f"record type {op:#04x} of length {length}"
            if op == _MESSAGE:
                if length < _MESSAGE_HEAD:
                    return pos, f"a message record of {length} bytes"
                channel_id, log_time = unpack_key(buffer, body)
                if log_time > _MAX_TIME:
                    return pos, f"a message record stamped {log_time} ns"
                if channel_id in wanted_ids:
                    append((channel_id, log_time, body + _MESSAGE_HEAD, length - _MESSAGE_HEAD))
            else:
                try:
                    self._add_schema_and_channel(op, buffer[body:stop], schemas)
                except (struct.error, ValueError, UnicodeDecodeError):
                    return pos, "an unreadable schema or channel record"
                wanted_ids = {cid for cid, c in channels.items() if c.topic in wanted}
            pos = stop
        return pos, None

    def _next_record(self, start: int, end: int) -> Optional[int]:
        """First offset from ``start`` where a data-section record begins that is followed by another one
        (or by the end of the data); None when there is none."""
        window_start = start
        while window_start < end:
            window = _read_at(self.stream, window_start, min(_SEARCH_WINDOW, end - window_start))
            if not window:
                return None
            index = 0
            while index < len(window):
                candidates = [window.find(bytes([op]), index) for op in (_CHUNK, _MESSAGE_INDEX, _MESSAGE, _DATA_END)]
                candidates = [c for c in candidates if c >= 0]
                if not candidates:
                    break
                found = min(candidates)
                offset = window_start + found
                if self._plausible(offset, end):
                    return offset
                index = found + 1
            window_start += len(window)
        return None

    def _plausible(self, offset: int, end: int) -> bool:
        head = _read_at(self.stream, offset, 9)
        if len(head) < 9:
            return False
        op, length = _RECORD_HEAD.unpack_from(head, 0)
        if op == _DATA_END:
            return length == 4
        following = offset + 9 + length
        if following > end:
            return False
        if op == _CHUNK:
            body = _read_at(self.stream, offset + 9, 48)
            if len(body) < 40:
                return False
            name_length = _U32.unpack_from(body, 28)[0]
            if name_length > 8 or 40 + name_length > length:
                return False
            if body[32 : 32 + name_length] not in (b"", b"lz4", b"zstd"):
                return False
            if _U64.unpack_from(_read_at(self.stream, offset + 9 + 32 + name_length, 8), 0)[0] != length - 40 - name_length:
                return False
        elif op == _MESSAGE:
            if length < _MESSAGE_HEAD or _U16.unpack_from(_read_at(self.stream, offset + 9, 2), 0)[0] not in self.channels:
                return False
        elif op == _MESSAGE_INDEX:
            body = _read_at(self.stream, offset + 9, 6)
            if len(body) < 6 or _U16.unpack_from(body, 0)[0] not in self.channels or _U32.unpack_from(body, 2)[0] != length - 6:
                return False
        if following == end:
            return True
        after = _read_at(self.stream, following, 9)
        if len(after) < 9:
            return False
        next_op, next_length = _RECORD_HEAD.unpack_from(after, 0)
        return next_op in _KNOWN_OPCODES and following + 9 + next_length <= self.size


def _next_inner_record(buffer: bytes, start: int, channels: Dict[int, _Channel]) -> Optional[int]:
    """First message record in a chunk from ``start`` that ends where another record or the chunk ends."""
    end = len(buffer)
    index = start
    while True:
        found = buffer.find(b"\x05", index)
        if found < 0 or found + 9 + _MESSAGE_HEAD > end:
            return None
        (length,) = _U64.unpack_from(buffer, found + 1)
        following = found + 9 + length
        if length >= _MESSAGE_HEAD and following <= end and _U16.unpack_from(buffer, found + 9)[0] in channels:
            if following == end:
                return found
            if following + 9 <= end:
                next_op, next_length = _RECORD_HEAD.unpack_from(buffer, following)
                if next_op in _CHUNK_OPCODES and following + 9 + next_length <= end:
                    return found
        index = found + 1


# --------------------------------------------------------------------------------------------- sqlite3


def _varint(page: bytes, pos: int) -> Tuple[int, int]:
    """SQLite variable-length integer at ``pos``: (value, next position)."""
    value = 0
    for i in range(8):
        byte = page[pos + i]
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value, pos + i + 1
    return (value << 8) | page[pos + 8], pos + 9


_INT_SIZES = {1: 1, 2: 2, 3: 3, 4: 4, 5: 6, 6: 8}


def _decode_record(payload: bytes) -> List[Any]:
    """Columns of an SQLite record (format: header of serial types, then the values)."""
    header_size, pos = _varint(payload, 0)
    types = []
    while pos < header_size:
        serial, pos = _varint(payload, pos)
        types.append(serial)
    values: List[Any] = []
    body = header_size
    for serial in types:
        if serial == 0:
            values.append(None)
        elif serial in _INT_SIZES:
            size = _INT_SIZES[serial]
            values.append(int.from_bytes(payload[body : body + size], "big", signed=True))
            body += size
        elif serial == 7:
            values.append(struct.unpack_from(">d", payload, body)[0])
            body += 8
        elif serial in (8, 9):
            values.append(serial - 8)
        elif serial >= 12:
            size = (serial - 12) // 2
            chunk = payload[body : body + size]
            if len(chunk) != size:
                raise ValueError("record runs past its cell")
            values.append(bytes(chunk) if serial % 2 == 0 else bytes(chunk).decode("utf-8", "replace"))
            body += size
        else:
            raise ValueError(f"serial type {serial}")
    return values


class _SqliteFile:
    """One rosbag2 sqlite3 file: SQL while SQLite accepts it, the raw pages after (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        with open(path, "rb") as stream:
            head = stream.read(100)
        if not head.startswith(_SQLITE_MAGIC):
            raise BagError(f"{path} is not an sqlite3 file", path)
        size = int.from_bytes(head[16:18], "big")
        self.page_size = 65536 if size == 1 else size if size >= 512 and size & (size - 1) == 0 else 4096
        self.usable = self.page_size - head[20]
        self.file_size = path.stat().st_size
        self._topics: Optional[Dict[int, Tuple[str, str, bool]]] = None
        self.sql_error: Optional[str] = None

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True)

    def topics(self) -> Dict[int, Tuple[str, str, bool]]:
        """Topic id -> (name, type, latched)."""
        if self._topics is not None:
            return self._topics
        try:
            connection = self._connect()
            try:
                columns = [row[1] for row in connection.execute("PRAGMA table_info(topics)")]
                qos = "offered_qos_profiles" if "offered_qos_profiles" in columns else "''"
                rows = connection.execute(f"SELECT id, name, type, {qos} FROM topics").fetchall()
            finally:
                connection.close()
            self._topics = {int(r[0]): (r[1], r[2], "transient_local" in str(r[3]).lower() or "durability: 1" in str(r[3])) for r in rows}
        except sqlite3.DatabaseError as err:
            self.sql_error = str(err)
            self._topics = self._raw_topics()
        return self._topics

    # ------------------------------------------------------------------------------------ raw pages
    def _page(self, stream: BinaryIO, number: int) -> Optional[bytes]:
        page = _read_at(stream, (number - 1) * self.page_size, self.page_size)
        return page if len(page) == self.page_size else None

    def _raw_table_rows(self, stream: BinaryIO, root: int, depth: int = 0) -> Iterator[Tuple[int, List[Any]]]:
        """Rows of the table whose b-tree starts at page ``root``, walking the tree (small tables)."""
        page = self._page(stream, root)
        if page is None or depth > 20:
            return
        header = 100 if root == 1 else 0
        kind = page[header]
        count = int.from_bytes(page[header + 3 : header + 5], "big")
        if kind == 0x05:
            pointers = header + 12
            for i in range(count):
                cell = int.from_bytes(page[pointers + 2 * i : pointers + 2 * i + 2], "big")
                yield from self._raw_table_rows(stream, int.from_bytes(page[cell : cell + 4], "big"), depth + 1)
            yield from self._raw_table_rows(stream, int.from_bytes(page[header + 8 : header + 12], "big"), depth + 1)
        elif kind == 0x0D:
            yield from self._leaf_rows(stream, page, header)

    def _leaf_rows(self, stream: BinaryIO, page: bytes, header: int) -> Iterator[Tuple[int, Optional[List[Any]]]]:
        """``(rowid, columns)`` of each cell of a table leaf page; columns None for a cell that cannot be read.

        Raises:
            ValueError: The page's cell pointers are unusable.
        """
        count = int.from_bytes(page[header + 3 : header + 5], "big")
        pointers = header + 8
        if pointers + 2 * count > len(page):
            raise ValueError("cell pointer array runs past the page")
        for i in range(count):
            cell = int.from_bytes(page[pointers + 2 * i : pointers + 2 * i + 2], "big")
            if not pointers + 2 * count <= cell < len(page) - 2:
                yield -1, None
                continue
            try:
                payload_size, pos = _varint(page, cell)
                rowid, pos = _varint(page, pos)
                yield rowid, _decode_record(self._payload(stream, page, pos, payload_size))
            except (ValueError, IndexError, struct.error):
                yield -1, None

    def _payload(self, stream: BinaryIO, page: bytes, pos: int, size: int) -> bytes:
        """A cell's payload, following its overflow pages (SQLite file format, "Cell payload overflow")."""
        usable = self.usable
        most = usable - 35
        if size <= most:
            if pos + size > len(page):
                raise ValueError("cell runs past the page")
            return page[pos : pos + size]
        least = ((usable - 12) * 32 // 255) - 23
        local = least + (size - least) % (usable - 4)
        if local > most:
            local = least
        parts = [page[pos : pos + local]]
        following = int.from_bytes(page[pos + local : pos + local + 4], "big")
        remaining = size - local
        while remaining > 0:
            overflow = self._page(stream, following) if following else None
            if overflow is None:
                raise ValueError("overflow page missing")
            parts.append(overflow[4 : 4 + min(remaining, usable - 4)])
            remaining -= usable - 4
            following = int.from_bytes(overflow[:4], "big")
        return b"".join(parts)

    def _raw_topics(self) -> Dict[int, Tuple[str, str, bool]]:
        topics: Dict[int, Tuple[str, str, bool]] = {}
        try:
            with open(self.path, "rb") as stream:
                roots = {}
                for _, values in self._raw_table_rows(stream, 1):
                    if values is not None and len(values) >= 4 and values[0] == "table" and isinstance(values[3], int):
                        roots[values[1]] = values[3]
                if "topics" not in roots:
                    raise ValueError("no topics table in the schema")
                for rowid, values in self._raw_table_rows(stream, roots["topics"]):
                    if values is not None and len(values) >= 4 and all(isinstance(v, str) for v in values[1:4]):
                        qos = str(values[4]) if len(values) > 4 else ""
                        topics[rowid] = (values[1], values[2], "transient_local" in qos.lower() or "durability: 1" in qos)
        except (ValueError, IndexError, struct.error) as err:
            raise BagError(f"cannot read the topics of {self.path}: {err} (SQLite: {self.sql_error})", self.path) from err
        return topics

    # ------------------------------------------------------------------------------------ messages
    def rows(self, wanted: Set[int], damage: List[Damage], batch: int, expected_rows: Optional[int]) -> Iterator[Tuple[np.ndarray, ...]]:
        """Yield ``(topic_ids, bag_ns, buffer, offsets, sizes)`` for the rows of the ``wanted`` topic ids."""
        collector = _Collector(damage)
        sequence = _RowSequence(self, damage)
        if self.sql_error is None:
            try:
                for ids, times, result in self._sql_rows(wanted, batch):
                    sequence.check(ids, times)
                    if result is not None:
                        collector.seen(result[1])
                        yield result
            except sqlite3.DatabaseError as err:
                self.sql_error = str(err)
        if self.sql_error is not None:
            for ids, times, result in self._raw_rows(wanted, batch, sequence.last_id, expected_rows):
                sequence.check(ids, times)
                if result is not None:
                    collector.seen(result[1])
                    yield result
        sequence.finish(expected_rows)

    def _sql_rows(self, wanted: Set[int], batch: int) -> Iterator[Tuple[np.ndarray, np.ndarray, Optional[Tuple[np.ndarray, ...]]]]:
        marks = ",".join(str(int(t)) for t in sorted(wanted)) or "NULL"
        # Every row's id and time (to find missing rows), the data only of the rows wanted.
        query = (f"SELECT id, topic_id, timestamp, CASE WHEN topic_id IN ({marks}) THEN data END FROM messages "
                 "WHERE id > ? ORDER BY id LIMIT ?")
        connection = self._connect()
        try:
            last = 0
            while True:
                rows = connection.execute(query, (last, batch)).fetchall()
                if not rows:
                    return
                ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
                times = np.fromiter((r[2] for r in rows), dtype=np.int64, count=len(rows))
                last = int(ids[-1])
                yield ids, times, _batch_of([r for r in rows if r[3] is not None])
        finally:
            connection.close()

    def _raw_rows(self, wanted: Set[int], batch: int, after_id: int,
                  last_id: Optional[int] = None) -> Iterator[Tuple[np.ndarray, np.ndarray, Optional[Tuple[np.ndarray, ...]]]]:
        """Message rows with ids above ``after_id`` (and up to ``last_id``, the number of rows the bag
        says it has, when known: a larger id is a damaged cell) from every readable table leaf page, in
        page order."""
        pages = self.file_size // self.page_size
        rows: List[Tuple[int, int, int, Optional[bytes]]] = []
        with open(self.path, "rb") as stream:
            for number in range(2, pages + 1):
                page = self._page(stream, number)
                if page is None or page[0] != 0x0D:
                    continue
                try:
                    cells = list(self._leaf_rows(stream, page, 0))
                except (ValueError, IndexError, struct.error):
                    continue  # a damaged page: its rows show up as missing ids
                for rowid, values in cells:
                    if values is None:
                        continue  # an unreadable cell: its row shows up as a missing id
                    # A rosbag2 message row: id (stored as NULL, it is the rowid), topic id, timestamp, data.
                    if len(values) != 4 or values[0] is not None or not isinstance(values[1], int) \
                            or not isinstance(values[2], int) or not isinstance(values[3], bytes):
                        break  # a page of another table
                    if rowid > after_id and (last_id is None or rowid <= last_id):
                        rows.append((rowid, values[1], values[2], values[3] if values[1] in wanted else None))
                if len(rows) >= batch:
                    yield _sorted_rows(rows)
                    rows = []
        if rows:
            yield _sorted_rows(rows)


def _batch_of(rows: Sequence[Tuple[int, int, int, bytes]]) -> Optional[Tuple[np.ndarray, ...]]:
    if not rows:
        return None
    raw = RawBatch.from_messages([r[1] for r in rows], [r[2] for r in rows], [r[3] for r in rows])
    return raw.topic.astype(np.int64), raw.bag_ns, raw.buffer, raw.offset, raw.size


def _sorted_rows(rows: List[Tuple[int, int, int, Optional[bytes]]]) -> Tuple[np.ndarray, np.ndarray, Optional[Tuple[np.ndarray, ...]]]:
    rows.sort(key=lambda r: r[0])
    ids = np.array([r[0] for r in rows], dtype=np.int64)
    times = np.array([r[2] for r in rows], dtype=np.int64)
    return ids, times, _batch_of([r for r in rows if r[3] is not None])


class _RowSequence:
    """Finds the rows missing from the id sequence 1, 2, 3... of a rosbag2 sqlite3 file."""

    def __init__(self, source: _SqliteFile, damage: List[Damage]) -> None:
        self.source = source
        self.damage = damage
        self.last_id = 0
        self.last_ns: Optional[int] = None

    def _missing(self, first: int, stop: int, before_ns: Optional[int]) -> None:
        error = self.source.sql_error
        self.damage.append(Damage(
            str(self.source.path), None, None,
            f"rows {first} to {stop - 1} unreadable" + (f" (SQLite: {error})" if error else ""),
            lost_rows=stop - first, after_ns=self.last_ns, before_ns=before_ns))

    def check(self, ids: np.ndarray, times: np.ndarray) -> None:
        """Note the holes before and within ``ids`` (increasing row ids) with their ``times`` [ns]."""
        if ids.size == 0:
            return
        previous = np.concatenate(([self.last_id], ids[:-1]))
        for i in np.flatnonzero(ids > previous + 1):
            self.last_ns = int(times[i - 1]) if i > 0 else self.last_ns
            self._missing(int(previous[i]) + 1, int(ids[i]), int(times[i]))
        self.last_id = max(self.last_id, int(ids[-1]))
        self.last_ns = int(times[-1])

    def finish(self, expected_rows: Optional[int]) -> None:
        """The rows after the last one read, up to the number the bag's metadata gives."""
        if expected_rows is not None and expected_rows > self.last_id:
            self._missing(self.last_id + 1, expected_rows + 1, None)


# ------------------------------------------------------------------------------------------ the bag


def _load_metadata(path: Path) -> Dict[str, Any]:
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    try:
        document = YAML(typ="safe").load(path.read_text())
        return document["rosbag2_bagfile_information"]
    except (YAMLError, OSError, KeyError, TypeError) as err:
        raise BagError(f"cannot read {path}: {type(err).__name__}: {err}", path.parent) from err


def _latched_profiles(profiles: Any) -> bool:
    text = str(profiles).lower()
    return "transient_local" in text or "durability: 1" in text


class BagSource:
    """A rosbag2 recording: a folder with ``metadata.yaml`` (one or more files), or a single .mcap/.db3 file.

    Args:
        path: The bag.

    Raises:
        BagError: Nothing there, an unreadable metadata.yaml, a storage other than mcap and sqlite3, or a
            file that is neither.
    """

    def __init__(self, path: os.PathLike) -> None:
        self.path = Path(path)
        if not self.path.exists():
            raise BagError(f"bag not found: {self.path}", self.path)
        self.metadata: Optional[Dict[str, Any]] = None
        if self.path.is_dir():
            meta = self.path / "metadata.yaml"
            if meta.exists():
                self.metadata = _load_metadata(meta)
                mode = str(self.metadata.get("compression_mode", "") or "").lower()
                if mode == "file":
                    raise BagError(f"{self.path} is compressed file by file; decompress it first "
                                   "(ros2 bag decompress, or zstd -d on each file)", self.path)
                try:
                    names = [Path(p).name for p in self.metadata["relative_file_paths"]]
                    self.storage = str(self.metadata["storage_identifier"])
                except KeyError as err:
                    raise BagError(f"{meta} lacks the key {err}", self.path) from err
                self.files = [self.path / name for name in names]
                absent = [str(f) for f in self.files if not f.exists()]
                if absent:
                    raise BagError(f"bag files missing: {absent}", self.path)
            else:
                self.files = sorted(self.path.glob("*.mcap")) or sorted(self.path.glob("*.db3"))
                if not self.files:
                    raise BagError(f"{self.path} holds neither metadata.yaml nor .mcap/.db3 files", self.path)
                self.storage = "mcap" if self.files[0].suffix == ".mcap" else "sqlite3"
        else:
            self.files = [self.path]
            with open(self.path, "rb") as stream:
                head = stream.read(16)
            self.storage = "mcap" if head.startswith(_MCAP_MAGIC) else "sqlite3" if head == _SQLITE_MAGIC else ""
        if self.storage not in ("mcap", "sqlite3"):
            raise BagError(f"cannot open bag {self.path}: storage {self.storage or 'unknown'!r} "
                           "(mcap and sqlite3 are read)", self.path)
        self.damage: List[Damage] = []
        self._topics: Optional[Dict[str, TopicInfo]] = None

    @property
    def topics(self) -> Dict[str, TopicInfo]:
        """Every topic, by name."""
        if self._topics is None:
            self._topics = self._find_topics()
        return self._topics

    def _find_topics(self) -> Dict[str, TopicInfo]:
        stored: Dict[str, TopicInfo] = {}
        # An mcap without its summary would be walked whole for its channels: metadata.yaml says it all.
        files = [] if self.metadata is not None and self.storage == "mcap" else self.files
        for path in files:
            for name, info in self._file_topics(path).items():
                previous = stored.get(name)
                if previous is None:
                    stored[name] = info
                elif previous.count is not None and info.count is not None:
                    stored[name] = TopicInfo(name, previous.msgtype or info.msgtype, previous.count + info.count, previous.latched)
        if self.metadata is None:
            return stored
        # metadata.yaml is what the recorder wrote at the end: the authority on counts and types.
        found: Dict[str, TopicInfo] = {}
        for entry in self.metadata.get("topics_with_message_count", []) or []:
            meta = entry.get("topic_metadata", {})
            name = meta.get("name", "")
            found[name] = TopicInfo(name, meta.get("type", ""), int(entry.get("message_count", 0)),
                                    _latched_profiles(meta.get("offered_qos_profiles", "")))
        for name, info in stored.items():
            found.setdefault(name, info)
        return found

    def _file_topics(self, path: Path) -> Dict[str, TopicInfo]:
        if self.storage == "mcap":
            mcap = _McapFile(path)
            try:
                return mcap.topics()
            finally:
                mcap.close()
        sql = _SqliteFile(path)
        return {name: TopicInfo(name, msgtype, None, latched) for name, msgtype, latched in sql.topics().values()}

    def read(self, topics: Sequence[str], batch: int = 4096) -> Iterator[RawBatch]:
        """Messages on ``topics``, in file order, in batches of about ``batch`` (a chunk of mcap can be more).

        Damage met on the way is listed in :attr:`damage` (reset at each call) and does not stop the
        reading.

        Raises:
            BagError: A file cannot be opened at all.
        """
        self.damage = []
        names = list(topics)
        index = {name: i for i, name in enumerate(names)}
        for path in self.files:
            if self.storage == "mcap":
                yield from self._read_mcap(path, index, batch)
            else:
                yield from self._read_sqlite(path, index, batch)

    def _read_mcap(self, path: Path, index: Dict[str, int], batch: int) -> Iterator[RawBatch]:
        mcap = _McapFile(path)
        try:
            for channel_ids, bag_ns, buffer, offsets, sizes in mcap.walk(set(index), self.damage, batch):
                lookup = {cid: index[c.topic] for cid, c in mcap.channels.items() if c.topic in index}
                topic = np.array([lookup[int(c)] for c in channel_ids], dtype=np.int16) if len(lookup) > 1 \
                    else np.full(channel_ids.size, next(iter(lookup.values())), dtype=np.int16)
                yield RawBatch(topic, bag_ns, buffer, offsets, sizes)
        finally:
            mcap.close()

    def _read_sqlite(self, path: Path, index: Dict[str, int], batch: int) -> Iterator[RawBatch]:
        sql = _SqliteFile(path)
        topics = sql.topics()
        wanted = {tid: index[name] for tid, (name, _, _) in topics.items() if name in index}
        expected = None
        if self.metadata is not None and len(self.files) == 1:
            expected = self.metadata.get("message_count")
        for topic_ids, bag_ns, buffer, offsets, sizes in sql.rows(set(wanted), self.damage, batch, expected):
            topic = np.array([wanted[int(t)] for t in topic_ids], dtype=np.int16)
            yield RawBatch(topic, bag_ns, buffer, offsets, sizes)

    def lost(self, topic: str, read: int) -> Optional[int]:
        """Messages of ``topic`` the bag says it holds but that could not be read, given ``read`` were."""
        info = self.topics.get(topic)
        if info is None or info.count is None:
            return None
        return max(0, info.count - read)
