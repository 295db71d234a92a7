"""A rosbag2 bag in mcap storage, written a block of messages at a time.

The evaluation writes three or four messages per recorded message, hundreds of thousands of them; a writer
that builds each message record one by one in Python spends more time there than the dynamics take. Here a
block of K messages of fixed sizes becomes one mcap chunk built with numpy: the message records of all
topics side by side, row after row, followed by the message index of each channel. The file follows the
MCAP specification (records Header, Schema, Channel, Chunk, Message Index, Data End, the summary with
Statistics and Chunk Index records, Summary Offsets, Footer), with the ``ros2`` profile rosbag2 uses
(``ros2msg`` schemas, ``cdr`` message encoding, the QoS profiles as channel metadata), and the bag
folder gets the ``metadata.yaml`` of rosbag2 format version 9.
"""

from __future__ import annotations

import io
import os
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np

__all__ = ["McapBagWriter"]

_MAGIC = b"\x89MCAP0\r\n"
_HEADER, _FOOTER, _SCHEMA, _CHANNEL, _MESSAGE, _CHUNK, _MESSAGE_INDEX = 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07
_CHUNK_INDEX, _STATISTICS, _SUMMARY_OFFSET, _DATA_END = 0x08, 0x0B, 0x0E, 0x0F
_MESSAGE_HEAD = 31  # opcode, record length, channel id, sequence, log time, publish time

# The numpy layout of a message record's head (little endian, unaligned).
_HEAD = np.dtype([("op", "u1"), ("length", "<u8"), ("channel", "<u2"), ("sequence", "<u4"),
                  ("log_time", "<u8"), ("publish_time", "<u8")])


def _string(text: str) -> bytes:
    data = text.encode()
    return struct.pack("<I", len(data)) + data


def _record(op: int, body: bytes) -> bytes:
    return struct.pack("<BQ", op, len(body)) + body


@dataclass
class _Channel:
    id: int
    schema_id: int
    topic: str
    msgtype: str
    qos: List[Dict[str, Any]]
    digest: str
    count: int = 0
    record: bytes = b""


@dataclass
class _ChunkIndex:
    start: int
    end: int
    offset: int
    length: int
    index_offsets: Dict[int, int]
    index_length: int
    size: int


@dataclass
class _Totals:
    first: int = 2**63 - 1
    last: int = 0
    chunks: List[_ChunkIndex] = field(default_factory=list)


class McapBagWriter:
    """A new rosbag2 bag folder holding one mcap file.

    Args:
        path: Bag folder to create (must not exist).
        library: Written in the mcap header.

    Raises:
        OSError: The folder cannot be created.
    """

    def __init__(self, path: os.PathLike, library: str = "rbd_deriv") -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=False)
        self.file = self.path / f"{self.path.name}.mcap"
        self.stream = open(self.file, "xb")
        self.stream.write(_MAGIC + _record(_HEADER, _string("ros2") + _string(library)))
        self.schemas: Dict[str, Tuple[int, bytes]] = {}
        self.channels: List[_Channel] = []
        self.totals = _Totals()
        self.closed = False

    def add_connection(self, topic: str, msgtype: str, typestore: Any, qos: Sequence[Dict[str, Any]] = ()) -> int:
        """Declare a topic; returns its channel id.

        Args:
            topic: Topic name.
            msgtype: ROS type name known to ``typestore``.
            typestore: rosbags type store (message definition and type hash).
            qos: Offered QoS profiles in rosbag2's version 9 form (``rosbags.rosbag2.metadata.dump_qos_v9``).
        """
        from ruamel.yaml import YAML

        if msgtype not in self.schemas:
            definition, _ = typestore.generate_msgdef(msgtype, ros_version=2)
            schema_id = len(self.schemas) + 1
            body = struct.pack("<H", schema_id) + _string(msgtype) + _string("ros2msg") + _string(definition)
            record = _record(_SCHEMA, body)
            self.schemas[msgtype] = (schema_id, record)
            self.stream.write(record)
        text = io.StringIO()
        yaml = YAML(typ="safe")
        yaml.default_flow_style = False
        yaml.dump(list(qos), text)
        metadata = _string("offered_qos_profiles") + _string(text.getvalue().strip() if qos else "")
        channel = _Channel(len(self.channels) + 1, self.schemas[msgtype][0], topic, msgtype, list(qos),
                           typestore.hash_rihs01(msgtype))
        body = struct.pack("<HH", channel.id, channel.schema_id) + _string(topic) + _string("cdr") \
            + struct.pack("<I", len(metadata)) + metadata
        channel.record = _record(_CHANNEL, body)
        self.stream.write(channel.record)
        self.channels.append(channel)
        return channel.id

    def write_block(self, parts: Sequence[Tuple[int, np.ndarray]], log_time: np.ndarray) -> None:
        """Write K messages on each of several channels as one chunk.

        Args:
            parts: ``(channel id, rows)`` with rows [K, size] (uint8) the serialized messages; message k of
                every part is written at ``log_time[k]``, the parts side by side in the given order.
            log_time: Receive time of each row [K] in [ns].
        """
        log_time = np.asarray(log_time, dtype=np.uint64)
        k = log_time.size
        if k == 0:
            return
        sizes = [rows.shape[1] for _, rows in parts]
        widths = [_MESSAGE_HEAD + size for size in sizes]
        row = sum(widths)
        block = np.empty((k, row), dtype=np.uint8)
        offsets: Dict[int, np.ndarray] = {}
        column = 0
        for (channel_id, rows), width, size in zip(parts, widths, sizes):
            channel = self.channels[channel_id - 1]
            head = np.empty(k, dtype=_HEAD)
            head["op"] = _MESSAGE
            head["length"] = width - 9
            head["channel"] = channel_id
            head["sequence"] = (channel.count + np.arange(k)) & 0xFFFFFFFF
            head["log_time"] = log_time
            head["publish_time"] = log_time
            block[:, column : column + _MESSAGE_HEAD] = head.view(np.uint8).reshape(k, _MESSAGE_HEAD)
            block[:, column + _MESSAGE_HEAD : column + width] = rows
            offsets[channel_id] = np.arange(k, dtype=np.uint64) * row + column
            channel.count += k
            column += width
        records = block.reshape(-1)
        start, end = int(log_time.min()), int(log_time.max())
        chunk_body = struct.pack("<QQQI", start, end, records.size, zlib.crc32(records)) + _string("") \
            + struct.pack("<Q", records.size)
        chunk_offset = self.stream.tell()
        self.stream.write(struct.pack("<BQ", _CHUNK, len(chunk_body) + records.size) + chunk_body)
        self.stream.write(records)
        chunk_length = self.stream.tell() - chunk_offset
        index_offsets: Dict[int, int] = {}
        for channel_id, offset in offsets.items():
            index_offsets[channel_id] = self.stream.tell()
            entries = np.empty((k, 2), dtype="<u8")
            entries[:, 0] = log_time
            entries[:, 1] = offset
            self.stream.write(struct.pack("<BQHI", _MESSAGE_INDEX, 6 + entries.nbytes, channel_id, entries.nbytes))
            self.stream.write(entries)
        index_length = self.stream.tell() - chunk_offset - chunk_length
        self.totals.first = min(self.totals.first, start)
        self.totals.last = max(self.totals.last, end)
        self.totals.chunks.append(_ChunkIndex(start, end, chunk_offset, chunk_length, index_offsets, index_length,
                                              records.size))

    def close(self) -> Dict[str, int]:
        """Write the summary, the footer and ``metadata.yaml``; returns the message count per topic."""
        stream = self.stream
        stream.write(_record(_DATA_END, struct.pack("<I", 0)))
        summary_start = stream.tell()
        groups: List[Tuple[int, int, int]] = []

        def group(op: int, records: Sequence[bytes]) -> None:
            if records:
                begin = stream.tell()
                for record in records:
                    stream.write(record)
                groups.append((op, begin, stream.tell() - begin))

        group(_SCHEMA, [record for _, record in self.schemas.values()])
        group(_CHANNEL, [channel.record for channel in self.channels])
        counts = b"".join(struct.pack("<HQ", c.id, c.count) for c in self.channels)
        total = sum(c.count for c in self.channels)
        first = self.totals.first if total else 0
        statistics = struct.pack("<QHIIIIQQ", total, len(self.schemas), len(self.channels), 0, 0,
                                 len(self.totals.chunks), first, self.totals.last) + struct.pack("<I", len(counts)) + counts
        group(_STATISTICS, [_record(_STATISTICS, statistics)])
        group(_CHUNK_INDEX, [self._chunk_index(chunk) for chunk in self.totals.chunks])
        offsets_start = stream.tell()
        for op, begin, length in groups:
            stream.write(_record(_SUMMARY_OFFSET, struct.pack("<BQQ", op, begin, length)))
        stream.write(_record(_FOOTER, struct.pack("<QQI", summary_start, offsets_start, 0)) + _MAGIC)
        stream.close()
        self._write_metadata(total)
        self.closed = True
        return {c.topic: c.count for c in self.channels}

    @staticmethod
    def _chunk_index(chunk: _ChunkIndex) -> bytes:
        offsets = b"".join(struct.pack("<HQ", cid, offset) for cid, offset in chunk.index_offsets.items())
        body = struct.pack("<QQQQ", chunk.start, chunk.end, chunk.offset, chunk.length) \
            + struct.pack("<I", len(offsets)) + offsets + struct.pack("<Q", chunk.index_length) + _string("") \
            + struct.pack("<QQ", chunk.size, chunk.size)
        return _record(_CHUNK_INDEX, body)

    def _write_metadata(self, total: int) -> None:
        from ruamel.yaml import YAML

        first = self.totals.first if total else 0
        duration = max(0, self.totals.last - first) if total else 0
        information = {
            "version": 9,
            "storage_identifier": "mcap",
            "relative_file_paths": [self.file.name],
            "duration": {"nanoseconds": duration},
            "starting_time": {"nanoseconds_since_epoch": first},
            "message_count": total,
            "topics_with_message_count": [
                {"topic_metadata": {"name": c.topic, "type": c.msgtype, "serialization_format": "cdr",
                                    "offered_qos_profiles": c.qos, "type_description_hash": c.digest},
                 "message_count": c.count}
                for c in self.channels
            ],
            "compression_format": "",
            "compression_mode": "",
            "files": [{"path": self.file.name, "starting_time": {"nanoseconds_since_epoch": first},
                       "duration": {"nanoseconds": duration}, "message_count": total}],
            "custom_data": None,
            "ros_distro": "rbd_deriv",
        }
        yaml = YAML(typ="safe")
        yaml.default_flow_style = False
        with open(self.path / "metadata.yaml", "w") as stream:
            yaml.dump({"rosbag2_bagfile_information": information}, stream)

    def abort(self) -> None:
        """Close the file as it is (no summary, no metadata.yaml): a reader sees a cut recording."""
        if not self.closed:
            self.stream.close()
            self.closed = True
