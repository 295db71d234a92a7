"""Reading bags batch by batch, damaged files included (rbd_deriv.replay.storage).

Bags are written by rosbags, then cut or overwritten with random bytes. The expectations are computed from
the original file: where each message's bytes lie (the messages are unique, so ``bytes.find`` locates
them), which records or pages the damage touches. Every message outside the damage must come back
byte for byte, and the count of lost messages must be exact.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np
import pytest
from rosbags.highlevel import AnyReader
from rosbags.rosbag2 import CompressionFormat, CompressionMode, StoragePlugin, Writer

from rbd_deriv.replay import bagio, storage, synthetic
from rbd_deriv.replay.storage import BagError, BagSource

JOINTS = ["joint1", "joint2", "joint3"]
COUNT = 3000
RECORD_HEAD = 31  # mcap message record: opcode, length, channel, sequence, log time, publish time


@pytest.fixture(scope="module")
def store():
    return bagio.package_typestore()


def _raws(store, count: int = COUNT) -> List[bytes]:
    stamps = 10**18 + np.arange(count) * 1_000_000
    values = np.arange(count, dtype=float)[:, None] * np.ones(3)
    return [r.tobytes() for r in synthetic.joint_state_rows(store, JOINTS, stamps, values, values, values)]


def _write(path: Path, store, storage_id: str, raws: List[bytes], zstd: bool = False) -> Path:
    """A bag of ``raws`` on /joint_states received at 1, 2, 3... ms; returns its data file."""
    plugin = {"mcap": StoragePlugin.MCAP, "sqlite3": StoragePlugin.SQLITE3}[storage_id]
    writer = Writer(path, version=9, storage_plugin=plugin)
    if zstd:
        writer.set_compression(CompressionMode.STORAGE, CompressionFormat.ZSTD)
    with writer:
        connection = writer.add_connection("/joint_states", bagio.JOINT_STATE_TYPE, typestore=store)
        for k, raw in enumerate(raws):
            writer.write(connection, (k + 1) * 1_000_000, raw)
    return next(p for p in path.iterdir() if p.suffix in (".mcap", ".db3"))


def _read_all(path: Path, topics=("/joint_states",)) -> Tuple[BagSource, List[bytes], List[int]]:
    source = BagSource(path)
    raws, times = [], []
    for batch in source.read(list(topics), batch=500):
        raws.extend(batch.message(i) for i in range(len(batch)))
        times.extend(batch.bag_ns.tolist())
    return source, raws, times


def _index(raws: List[bytes]) -> Dict[bytes, int]:
    return {raw: k for k, raw in enumerate(raws)}


@pytest.mark.parametrize("storage_id, zstd", [("mcap", False), ("mcap", True), ("sqlite3", False)])
def test_every_message_comes_back_as_rosbags_reads_it(tmp_path, store, storage_id, zstd):
    raws = _raws(store)
    _write(tmp_path / "bag", store, storage_id, raws, zstd)
    source, got, times = _read_all(tmp_path / "bag")
    with AnyReader([tmp_path / "bag"]) as reader:
        expected = [(t, bytes(raw)) for _, t, raw in reader.messages()]
    assert list(zip(times, got)) == expected
    assert source.damage == [] and source.lost("/joint_states", len(got)) == 0
    assert source.topics["/joint_states"].msgtype == bagio.JOINT_STATE_TYPE
    assert source.topics["/joint_states"].count == COUNT


def test_sqlite_pages_read_directly_give_what_sqlite_gives(tmp_path, store):
    # The page reader serves when SQLite refuses a file; on an intact file both must agree row for row.
    raws = _raws(store)
    data = _write(tmp_path / "bag", store, "sqlite3", raws)
    direct = storage._SqliteFile(data)
    direct.topics()
    direct.sql_error = "not used in this test"
    damage: List[storage.Damage] = []
    rows = []
    for topic_ids, bag_ns, buffer, offsets, sizes in direct.rows({1}, damage, 700, COUNT):
        rows.extend((int(t), bytes(buffer[o : o + s])) for t, o, s in zip(bag_ns, offsets, sizes))
    assert rows == [((k + 1) * 1_000_000, raw) for k, raw in enumerate(raws)]
    assert damage == []


@pytest.mark.parametrize("fraction", [0.05, 0.5, 0.93])
def test_cut_mcap_gives_every_message_before_the_cut(tmp_path, store, fraction):
    raws = _raws(store)
    data = _write(tmp_path / "bag", store, "mcap", raws)
    content = data.read_bytes()
    cut = int(len(content) * fraction)
    data.write_bytes(content[:cut])
    whole = sum(content.find(raw) + len(raw) <= cut for raw in raws)
    source, got, times = _read_all(tmp_path / "bag")
    assert got == raws[:whole] and times == [(k + 1) * 1_000_000 for k in range(whole)]
    assert source.lost("/joint_states", len(got)) == COUNT - whole
    assert len(source.damage) == 1 and source.damage[0].resume is None
    assert source.damage[0].after_ns == (whole * 1_000_000 if whole else None)


@pytest.mark.parametrize("fraction", [0.05, 0.5, 0.93])
def test_cut_sqlite_gives_every_row_of_the_pages_before_the_cut(tmp_path, store, fraction):
    raws = _raws(store)
    data = _write(tmp_path / "bag", store, "sqlite3", raws)
    content = data.read_bytes()
    page = int.from_bytes(content[16:18], "big")
    cut = int(len(content) * fraction)
    data.write_bytes(content[:cut])
    # Rows stored in the pages that are still whole.
    kept = [k for k, raw in enumerate(raws) if content.find(raw) + len(raw) <= cut - cut % page]
    source, got, times = _read_all(tmp_path / "bag")
    assert got == [raws[k] for k in kept] and times == [(k + 1) * 1_000_000 for k in kept]
    assert source.lost("/joint_states", len(got)) == COUNT - len(kept)
    assert sum(event.lost_rows for event in source.damage) == COUNT - len(kept)
    assert all("malformed" in event.what for event in source.damage)


def _overwrite(data: Path, content: bytes, start: int, size: int, seed: int = 0) -> None:
    noise = np.random.default_rng(seed).bytes(size)
    data.write_bytes(content[:start] + noise + content[start + size :])


@pytest.mark.parametrize("where", [0.3, 0.6, 0.85])
def test_garbage_in_an_mcap_chunk_loses_only_the_messages_it_covers(tmp_path, store, where):
    raws = _raws(store)
    data = _write(tmp_path / "bag", store, "mcap", raws)
    content = data.read_bytes()
    start, size = int(len(content) * where), 4096
    _overwrite(data, content, start, size)
    offsets = [content.find(raw) for raw in raws]
    touched = {k for k, o in enumerate(offsets) if o - RECORD_HEAD < start + size and o + len(raws[k]) > start}
    source, got, _ = _read_all(tmp_path / "bag")
    index = _index(raws)
    recovered = [index.get(raw) for raw in got]
    # Nothing in the file tells whether the damage began inside the message just before the first
    # unreadable record: that one is dropped with it. Every other message comes back, intact.
    assert None not in recovered
    assert set(range(COUNT)) - touched - {min(touched) - 1} <= set(recovered) <= set(range(COUNT)) - touched
    assert source.lost("/joint_states", len(got)) == COUNT - len(got)
    assert sum(event.lost for event in source.damage) == COUNT - len(got) > 0
    event = source.damage[0]
    assert event.offset <= start + size and event.resume is not None and event.resume >= start


def test_garbage_over_a_chunk_header_loses_only_the_messages_it_covers(tmp_path, store):
    raws = _raws(store, 20_000)  # rosbags writes chunks of 1 MiB: several of them
    data = _write(tmp_path / "bag", store, "mcap", raws)
    content = data.read_bytes()
    offsets = np.array([content.find(raw) for raw in raws])
    # A chunk starts where the records stop being contiguous: chunk header and message indexes in between.
    breaks = np.flatnonzero(offsets[1:] - offsets[:-1] != len(raws[0]) + RECORD_HEAD) + 1
    first = int(breaks[0])
    chunk_start = offsets[first] - RECORD_HEAD - (9 + 40)  # record head, chunk fields (no compression)
    assert content[chunk_start] == 0x06
    _overwrite(data, content, chunk_start, 64)
    # The chunk's length is gone, but its records still follow one another: read on from the first whole one.
    touched = {k for k, o in enumerate(offsets) if o - RECORD_HEAD < chunk_start + 64 and o + len(raws[k]) > chunk_start}
    assert touched == {first}
    source, got, _ = _read_all(tmp_path / "bag")
    assert got == raws[:first] + raws[first + 1 :]
    assert [event.lost for event in source.damage] == [1]
    assert source.damage[0].after_ns == first * 1_000_000 and source.damage[0].before_ns == (first + 2) * 1_000_000


def test_garbage_over_an_sqlite_page_loses_its_rows_only(tmp_path, store):
    raws = _raws(store)
    data = _write(tmp_path / "bag", store, "sqlite3", raws)
    content = data.read_bytes()
    page = int.from_bytes(content[16:18], "big")
    pages = np.array([content.find(raw) // page for raw in raws])
    victim = int(pages[COUNT // 2])
    _overwrite(data, content, victim * page, page)
    on_victim = set(np.flatnonzero(pages == victim).tolist())
    source, got, _ = _read_all(tmp_path / "bag")
    assert got == [raw for k, raw in enumerate(raws) if k not in on_victim]
    assert source.lost("/joint_states", len(got)) == len(on_victim)
    assert [event.lost_rows for event in source.damage] == [len(on_victim)]
    first = min(on_victim)
    assert source.damage[0].after_ns == first * 1_000_000 and source.damage[0].before_ns == (max(on_victim) + 2) * 1_000_000


def test_unaligned_garbage_in_sqlite_keeps_every_untouched_page(tmp_path, store):
    raws = _raws(store)
    data = _write(tmp_path / "bag", store, "sqlite3", raws)
    content = data.read_bytes()
    page = int.from_bytes(content[16:18], "big")
    start, size = len(content) // 2 + 1234, 4096
    _overwrite(data, content, start, size, seed=3)
    offsets = [content.find(raw) for raw in raws]
    damaged_pages = set(range(start // page, (start + size - 1) // page + 1))
    untouched = {k for k, o in enumerate(offsets) if o // page not in damaged_pages}
    source, got, _ = _read_all(tmp_path / "bag")
    index = _index(raws)
    recovered = [index.get(raw) for raw in got]
    assert untouched <= set(recovered)
    assert source.lost("/joint_states", len(got)) == COUNT - len(got)


def test_a_lone_cut_file_without_metadata(tmp_path, store):
    raws = _raws(store)
    data = _write(tmp_path / "bag", store, "mcap", raws)
    content = data.read_bytes()
    lone = tmp_path / "lone.mcap"
    lone.write_bytes(content[: len(content) // 2])
    source, got, _ = _read_all(lone)
    assert source.topics["/joint_states"].msgtype == bagio.JOINT_STATE_TYPE
    assert got == raws[: len(got)] and len(got) > 0
    # Neither metadata.yaml nor the mcap summary survives to say how many messages there were.
    assert source.topics["/joint_states"].count is None and source.lost("/joint_states", len(got)) is None


def test_compressed_mcap_cut_mid_chunk_gives_what_decompresses(tmp_path, store):
    raws = _raws(store)
    data = _write(tmp_path / "bag", store, "mcap", raws, zstd=True)
    content = data.read_bytes()
    data.write_bytes(content[: len(content) // 2])
    source, got, _ = _read_all(tmp_path / "bag")
    assert 0 < len(got) < COUNT and got == raws[: len(got)]
    assert source.lost("/joint_states", len(got)) == COUNT - len(got)


def test_files_that_are_not_bags(tmp_path):
    with pytest.raises(BagError, match="bag not found"):
        BagSource(tmp_path / "absent")
    junk = tmp_path / "junk.db3"
    junk.write_bytes(b"not a database at all")
    with pytest.raises(BagError, match="storage"):
        BagSource(junk)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(BagError, match="neither metadata.yaml"):
        BagSource(empty)
