"""The simulator's own parts: the world's ordering, the disk's crash semantics, the network's streams."""

from __future__ import annotations

import pytest

from tidings.core.inputs import LogState
from tidings.core.units import MILLISECOND_NS
from tidings.core.wire.frames import FrameDecoder, frame
from tidings.sim.disk import SURVIVE_ALL, SURVIVE_NONE, SURVIVE_PREFIX, Disk
from tidings.sim.network import Endpoint, LatencyModel, Listener, Network, Socket
from tidings.sim.world import World

# ---- world ---------------------------------------------------------------------------------------


def test_actions_run_in_time_order_and_ties_in_scheduling_order():
    world = World(1)
    ran: list[str] = []
    world.call_at(20, ran.append, "t20")
    world.call_at(10, ran.append, "t10-first")
    world.call_at(10, ran.append, "t10-second")
    world.call_at(0, lambda: world.call_soon(ran.append, "soon-after-t0"))
    world.call_at(0, ran.append, "t0")
    world.run()
    assert ran == ["t0", "soon-after-t0", "t10-first", "t10-second", "t20"]
    assert world.now == 20 and world.idle


def test_cancelled_actions_do_not_run_and_the_past_is_closed():
    world = World(1)
    ran: list[int] = []
    timer = world.call_at(5, ran.append, 5)
    world.call_at(6, ran.append, 6)
    timer.cancel()
    world.run()
    assert ran == [6]
    with pytest.raises(ValueError):
        world.call_at(3, ran.append, 3)


def test_run_is_bounded_by_virtual_time_and_by_steps():
    world = World(1)
    ran: list[int] = []
    for t in range(10):
        world.call_at(t * 100, ran.append, t)
    assert world.run(until_ns=450) == 5
    assert world.now == 450 and ran == [0, 1, 2, 3, 4]
    assert world.run(steps_max=2) == 2
    assert ran[-1] == 6
    assert world.run_until(lambda: len(ran) == 9, deadline_ns=10_000)
    assert not world.run_until(lambda: False, deadline_ns=10_000)
    assert world.idle


def test_randomness_is_seeded_per_world_and_per_component():
    a, b, c = World(7), World(7), World(8)
    assert [a.rng.random() for _ in range(3)] == [b.rng.random() for _ in range(3)]
    assert a.derive_rng("disk").random() == b.derive_rng("disk").random()
    assert a.derive_rng("disk").random() != a.derive_rng("network").random()
    assert a.derive_rng("disk").random() != c.derive_rng("disk").random()


def test_trace_digest_depends_on_every_line():
    a, b = World(1), World(1)
    for w in (a, b):
        w.trace("n", "x", 1, "y")
    assert a.trace_digest() == b.trace_digest()
    b.trace("n", "x", 2)
    assert a.trace_digest() != b.trace_digest()
    assert list(b.trace_tail) == ["0 n x 1 y", "0 n x 2"]


# ---- disk ----------------------------------------------------------------------------------------


class DiskOwner:
    def __init__(self, disk: Disk) -> None:
        self.synced: list[tuple[int, int, LogState]] = []
        self.reads: list[tuple[int, list[tuple[int, bytes]]]] = []
        self.disk = disk
        disk.attach(self.on_synced, self.on_read)

    def on_synced(self, token: int, state: LogState) -> None:
        self.synced.append((self.disk.world.now, token, state))

    def on_read(self, reader: int, records: list[tuple[int, bytes]], state: LogState,
                span: tuple[int, bytes] | None) -> None:
        self.reads.append((reader, records))


def recs(*ticks: int) -> list[tuple[int, bytes]]:
    return [(t, b"r%d" % t) for t in ticks]


def test_appended_records_are_volatile_until_the_sync_completes():
    world = World(3)
    disk = Disk(world)
    owner = DiskOwner(disk)
    disk.append(recs(1, 2))
    assert disk.volatile_count == 2 and disk.durable_count == 0
    disk.sync(1)
    assert disk.syncing
    world.run()
    assert disk.durable_records() == recs(1, 2)
    assert [(token, st.last_tick, st.record_count) for _, token, st in owner.synced] == [(1, 2, 2)]


def test_one_sync_covers_every_append_issued_before_it_started():
    world = World(3)
    disk = Disk(world, sync_ns_min=MILLISECOND_NS, sync_ns_max=MILLISECOND_NS)
    owner = DiskOwner(disk)
    disk.append(recs(1))
    disk.sync(1)  # starts at once
    disk.append(recs(2))
    disk.sync(2)
    disk.append(recs(3))
    disk.sync(3)  # 2 and 3 wait behind the running sync, then one sync takes both
    world.run()
    assert [(t, token) for t, token, _ in owner.synced] == [(MILLISECOND_NS, 1), (2 * MILLISECOND_NS, 3)]
    assert disk.syncs == 2 and disk.durable_records() == recs(1, 2, 3)


def test_a_release_while_a_sync_is_in_flight_makes_only_what_the_sync_covered_durable():
    """The sync counts its records when it starts; a release that drops durable records before it
    ends must not shift that count onto records appended after the sync started."""
    world = World(3)
    disk = Disk(world, sync_ns_min=MILLISECOND_NS, sync_ns_max=MILLISECOND_NS)
    DiskOwner(disk)
    disk.append(recs(1, 2))
    disk.sync(1)
    world.run()
    disk.append(recs(3))
    disk.sync(2)  # covers 3
    disk.release(2)  # while it is in flight
    disk.append(recs(4))  # after it started: volatile until the next sync
    world.run()
    assert disk.durable_records() == recs(1, 2, 3) and disk.volatile_count == 1
    disk.sync(3)
    world.run()
    assert disk.durable_records() == recs(1, 2, 3, 4) and disk.volatile_count == 0


@pytest.mark.parametrize("survive", [SURVIVE_NONE, SURVIVE_PREFIX, SURVIVE_ALL])
def test_a_crash_keeps_the_durable_log_and_at_most_a_prefix_of_the_unsynced_tail(survive):
    kept_counts = set()
    for seed in range(40):
        world = World(seed)
        disk = Disk(world)
        owner = DiskOwner(disk)
        disk.append(recs(1, 2))
        disk.sync(1)
        world.run()
        disk.append(recs(3, 4))
        disk.sync(2)  # running
        disk.append(recs(5, 6))  # queued behind it: lost whatever survives
        disk.sync(3)
        world.run(until_ns=world.now + disk.sync_ns_min - 1)
        kept = disk.crash(survive)
        world.run()
        assert owner.synced[-1][1] == 1, "a sync cut by the crash must never be reported"
        ticks = [t for t, _ in disk.records]
        assert ticks == [1, 2, 3, 4][: 2 + kept], "what survives is a prefix, never a gap"
        assert disk.durable_count == len(ticks) and disk.state().last_tick == ticks[-1]
        kept_counts.add(kept)
    assert kept_counts == {SURVIVE_NONE: {0}, SURVIVE_PREFIX: {0, 1, 2}, SURVIVE_ALL: {2}}[survive]


def test_reads_answer_after_through_and_max_bytes_with_at_least_one_record():
    world = World(3)
    disk = Disk(world)
    owner = DiskOwner(disk)
    disk.append([(10, b"x" * 5), (20, b"y" * 5), (30, b"z" * 5), (40, b"w" * 5)])
    disk.read(1, after=10, through=30, max_bytes=100)
    disk.read(2, after=0, through=40, max_bytes=12)
    disk.read(3, after=0, through=40, max_bytes=1)
    disk.read(4, after=40, through=40, max_bytes=100)
    disk.read(5, after=15, through=19, max_bytes=100)
    world.run()
    got = {reader: [t for t, _ in records] for reader, records in owner.reads}
    assert got == {1: [20, 30], 2: [10, 20], 3: [10], 4: [], 5: []}


def test_a_crash_cancels_reads_in_flight():
    world = World(3)
    disk = Disk(world)
    owner = DiskOwner(disk)
    disk.append(recs(1))
    disk.read(1, 0, 1, 100)
    disk.crash(SURVIVE_ALL)
    world.run()
    assert owner.reads == []


# ---- network -------------------------------------------------------------------------------------


class Recorder(Endpoint):
    def __init__(self, name: str) -> None:
        self.name = name
        self.sock: Socket | None = None
        self.data: list[bytes] = []
        self.events: list[str] = []

    def connection_made(self, sock: Socket) -> None:
        self.sock = sock
        self.events.append("made")

    def connection_refused(self, address: str) -> None:
        self.events.append("refused")

    def data_received(self, sock: Socket, data: bytes) -> None:
        self.data.append(data)

    def connection_lost(self, sock: Socket, reset: bool) -> None:
        self.events.append("reset" if reset else "eof")

    def pause_writing(self, sock: Socket) -> None:
        self.events.append("pause")

    def resume_writing(self, sock: Socket) -> None:
        self.events.append("resume")


class RecordingListener(Listener):
    def __init__(self) -> None:
        self.accepted: list[Recorder] = []

    def accept(self, sock: Socket) -> Endpoint:
        server = Recorder(f"server-{len(self.accepted)}")
        server.sock = sock
        self.accepted.append(server)
        return server


def connected_pair(seed: int, **net_args):
    world = World(seed)
    net = Network(world, LatencyModel(100_000, 200_000), **net_args)
    listener = RecordingListener()
    net.listen("srv", listener)
    client = Recorder("client")
    net.connect("srv", client, server_rate_bytes_per_s=net_args.get("rate_bytes_per_s"))
    world.run()
    assert client.events == ["made"]
    return world, net, client, listener.accepted[0]


def test_a_stream_arrives_in_order_split_and_coalesced_at_random_boundaries():
    writes = [bytes([i % 251]) * (1 + (i * 37) % 700) for i in range(200)]
    splits = coalesced = 0
    for seed in range(5):
        world, _, client, server = connected_pair(seed, chunk_bytes_max=512)
        for i, w in enumerate(writes):
            world.call_at(world.now + (i // 10) * 1000, server.sock.write, w)
        world.run()
        assert b"".join(client.data) == b"".join(writes)
        boundaries = set()
        pos = 0
        for w in writes:
            pos += len(w)
            boundaries.add(pos)
        chunk_ends = set()
        pos = 0
        for chunk in client.data:
            pos += len(chunk)
            chunk_ends.add(pos)
        splits += len(chunk_ends - boundaries)  # a chunk ended inside a write
        coalesced += len(boundaries - chunk_ends)  # a write boundary fell inside a chunk
    assert splits > 100 and coalesced > 100


def test_frames_survive_any_chunking():
    frames = [frame(bytes([i]) * (i * 13 % 300)) for i in range(150)]
    for seed in range(5):
        world, _, client, server = connected_pair(seed, chunk_bytes_max=64)
        for f in frames:
            server.sock.write(f)
        world.run()
        decoder = FrameDecoder(1 << 20)
        bodies = [b for chunk in client.data for b in decoder.feed(chunk)]
        assert bodies == [f[4:] for f in frames]


def test_a_slow_reader_pauses_the_writer_at_the_high_mark_and_resumes_it_at_the_low_mark():
    world, _, client, server = connected_pair(1, rate_bytes_per_s=10_000, chunk_bytes_max=256)
    server.sock.set_write_buffer_limits(high=1000, low=250)
    server.sock.write(b"a" * 900)
    assert server.events == []
    server.sock.write(b"b" * 200)
    assert server.events == ["pause"] and server.sock.buffered_bytes == 1100
    world.run(until_ns=world.now + 50 * MILLISECOND_NS)  # 10 kB/s: ~500 bytes gone
    assert server.events == ["pause"]
    world.run()
    assert server.events == ["pause", "resume"]
    assert b"".join(client.data) == b"a" * 900 + b"b" * 200
    assert world.now > 100 * MILLISECOND_NS  # 1100 bytes at 10 kB/s


def test_close_delivers_everything_then_end_of_stream():
    world, _, client, server = connected_pair(2, chunk_bytes_max=100)
    server.sock.write(b"x" * 1000)
    server.sock.close()
    server.sock.write(b"dropped")
    world.run()
    assert b"".join(client.data) == b"x" * 1000
    assert client.events == ["made", "eof"] and server.events == ["eof"]


def test_a_reset_drops_bytes_in_flight_and_the_peer_hears_it():
    world, _, client, server = connected_pair(2, chunk_bytes_max=100)
    server.sock.write(b"x" * 10_000)
    world.run(steps_max=3)
    server.sock.abort(notify_self=False)
    world.run()
    assert len(b"".join(client.data)) < 10_000
    assert client.events == ["made", "reset"] and server.events == []


def test_connecting_where_nobody_listens_is_refused():
    world = World(1)
    net = Network(world)
    client = Recorder("client")
    net.connect("nowhere", client)
    world.run()
    assert client.events == ["refused"]


# ---- the runtime stays deterministic -------------------------------------------------------------

# storage/record.py's pure `encode`, so that a simulated span is byte for byte what the real log
# serves (its file scanner, which reads with os.pread, is never used by the simulator)
LOG_FORMAT = {"tidings.storage.record"}
FORBIDDEN = {"asyncio", "socket", "selectors", "threading", "time", "os", "uuid", "secrets",
             "subprocess", "multiprocessing", "concurrent", "signal"}


def test_the_simulator_imports_no_io_threads_or_clocks():
    import ast
    from pathlib import Path

    import tidings.sim

    offenders = {}
    for path in sorted(Path(tidings.sim.__file__).parent.glob("*.py")):
        roots = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                roots.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                roots.add(node.module)
        bad = {r for r in roots if r.split(".")[0] in FORBIDDEN or r.startswith(("tidings.aio", "tidings.storage"))}
        bad -= LOG_FORMAT  # the disk model answers span reads in the log's own record format
        if bad:
            offenders[path.name] = sorted(bad)
    assert offenders == {}
