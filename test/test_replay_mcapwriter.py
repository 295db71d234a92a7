"""The chunk-at-a-time mcap bag writer (rbd_deriv.replay.mcapwriter), read back by rosbags and by our reader."""

from __future__ import annotations

import numpy as np
import pytest
from rosbags.highlevel import AnyReader
from rosbags.interfaces import QosDurability

from rbd_deriv.replay import bagio
from rbd_deriv.replay.mcapwriter import McapBagWriter
from rbd_deriv.replay.storage import BagSource

LATCHED = [{
    "history": "keep_last", "depth": 1, "reliability": "reliable", "durability": "transient_local",
    "deadline": {"sec": 0, "nsec": 0}, "lifespan": {"sec": 0, "nsec": 0}, "liveliness": "automatic",
    "liveliness_lease_duration": {"sec": 0, "nsec": 0}, "avoid_ros_namespace_conventions": False,
}]


@pytest.fixture(scope="module")
def store():
    return bagio.package_typestore()


def _strings(store, texts):
    return [bytes(store.serialize_cdr(store.types[bagio.STRING_TYPE](data=t), bagio.STRING_TYPE)) for t in texts]


def _block(raws):
    return np.frombuffer(b"".join(raws), dtype=np.uint8).reshape(len(raws), -1)


def _bag_of(path, store, raws):
    """A bag of ``raws`` on /a, 1 ns apart; returns the writer, not yet closed."""
    writer = McapBagWriter(path)
    channel = writer.add_connection("/a", bagio.STRING_TYPE, store)
    writer.write_block([(channel, _block(raws))], 10**18 + np.arange(len(raws)))
    return writer


def _messages(source):
    return [batch.message(i) for batch in source.read(["/a"]) for i in range(len(batch))]


def test_blocks_read_back_by_rosbags_and_by_our_reader(tmp_path, store):
    writer = McapBagWriter(tmp_path / "bag")
    a = writer.add_connection("/a", bagio.STRING_TYPE, store)
    b = writer.add_connection("/b", bagio.STRING_TYPE, store)
    latched = writer.add_connection("/robot_description", bagio.STRING_TYPE, store, LATCHED)
    first = _strings(store, [f"a{k:04d}" for k in range(300)])
    second = _strings(store, [f"bb{k:04d}" for k in range(300)])
    times = 10**18 + np.arange(300) * 1_000_000
    writer.write_block([(latched, _block(_strings(store, ["<robot/>"])))], times[:1] - 1)
    writer.write_block([(a, _block(first[:120])), (b, _block(second[:120]))], times[:120])
    writer.write_block([(a, _block(first[120:])), (b, _block(second[120:]))], times[120:])
    assert writer.close() == {"/a": 300, "/b": 300, "/robot_description": 1}

    expected = [(int(times[0] - 1), "/robot_description", _strings(store, ["<robot/>"])[0])]
    for k in range(300):
        expected += [(int(times[k]), "/a", first[k]), (int(times[k]), "/b", second[k])]
    with AnyReader([tmp_path / "bag"]) as reader:
        # rosbags reads through the summary (chunk indexes, message indexes, statistics).
        counts = {c.topic: c.msgcount for c in reader.connections}
        got = [(t, c.topic, bytes(raw)) for c, t, raw in reader.messages()]
        latched_qos = [c.ext.offered_qos_profiles for c in reader.connections if c.topic == "/robot_description"][0]
    assert counts == {"/a": 300, "/b": 300, "/robot_description": 1}
    assert sorted(got) == sorted(expected)
    assert latched_qos[0].durability == QosDurability.TRANSIENT_LOCAL

    source = BagSource(tmp_path / "bag")  # walks the records from the start instead
    assert source.topics["/robot_description"].latched and not source.topics["/a"].latched
    read = []
    for batch in source.read(["/robot_description", "/a", "/b"]):
        names = ["/robot_description", "/a", "/b"]
        read += [(int(batch.bag_ns[i]), names[batch.topic[i]], batch.message(i)) for i in range(len(batch))]
    assert read == expected and source.damage == []


def test_chunks_carry_a_checksum_that_the_reader_checks(tmp_path, store):
    raws = _strings(store, [f"value {k:05d}" for k in range(1000)])
    _bag_of(tmp_path / "bag", store, raws).close()
    data = tmp_path / "bag" / "bag.mcap"
    content = bytearray(data.read_bytes())
    where = content.find(raws[500])
    content[where + 8] ^= 0xFF  # one character of one message
    data.write_bytes(bytes(content))
    source = BagSource(tmp_path / "bag")
    got = _messages(source)
    # Records and layouts are intact, so every message is read; the mismatch is reported.
    assert len(got) == 1000 and got[500] != raws[500]
    assert [event.what for event in source.damage] == ["chunk checksum mismatch"]


def test_an_aborted_bag_reads_as_a_cut_recording(tmp_path, store):
    raws = _strings(store, [f"m{k:02d}" for k in range(50)])
    _bag_of(tmp_path / "bag", store, raws).abort()
    assert not (tmp_path / "bag" / "metadata.yaml").exists()
    source = BagSource(tmp_path / "bag")
    got = _messages(source)
    assert got == raws and source.lost("/a", len(got)) is None
    assert source.damage == []
