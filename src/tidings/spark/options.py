"""Options of the batch read `spark.read.format("tidings")` and of the streaming read
`spark.readStream.format("tidings")`, each parsed into one frozen value.

Spark hands a data source its options as a case-insensitive map of strings (`dict(options)` lower-
cases every key), so parsing works on lower-cased keys and every message names the option the way
the documentation spells it. Parsing is pure: no Spark, no broker, no clock. Everything a user can
get wrong is caught here, on the driver, with a ValueError naming the option, before a task starts.

Tick bounds are inclusive, as a user says "from 10:00 to 11:00"; the planner turns them into the
half-open `(after, end]` ranges the broker reads.
"""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from tidings.core.channels import validate_pattern
from tidings.core.event import (
    TICK_MAX,  # a tick is a Spark long
    datetime_to_tick,
)

PARTITIONS_MAX = 10_000

EVENTS_PER_TRIGGER_MAX = 10_000_000

_COMMON = ("broker", "pattern", "filter", "partitions", "failOnDataLoss", "credential", "tlsCa")
# lower-cased key -> the spelling used in messages and docs
_OPTION_NAMES = {
    name.lower(): name for name in (*_COMMON, "startTick", "endTick", "startTime", "endTime", "startingOffsets",
                                    "endingOffsets")
}
_STREAM_OPTION_NAMES = {
    name.lower(): name for name in (*_COMMON, "durableName", "startingOffsets", "maxEventsPerTrigger", "brokers",
                                    "maxPubendOutageMs", "idleAdvanceIntervalMs")
}
FAILOVER_BROKERS_MAX = 64  # the `brokers` option's addresses
PUBEND_OUTAGE_MS_MAX = 7 * 24 * 3600 * 1000  # a week: the broker forgets an away durable subscription then
IDLE_ADVANCE_INTERVAL_MS_DEFAULT = 5 * 60 * 1000
IDLE_ADVANCE_INTERVAL_MS_MAX = 3600 * 1000  # well below max_retain_ns (24 h), past which idle ticks may go early


@dataclass(frozen=True, slots=True)
class TickVector:
    """A batch read's startingOffsets or endingOffsets: a tick per pubend (a checkpoint token's
    vector), `default` for the pubends it does not name (None: no bound for them)."""

    default: int | None
    positions: Mapping[str, int]

    def get(self, pubend: str) -> int | None:
        return self.positions.get(pubend, self.default)


@dataclass(frozen=True, slots=True)
class ReadOptions:
    broker: str
    pattern: str
    filter: str | None
    start_tick: int | None  # inclusive; None: the oldest retained event
    end_tick: int | None  # inclusive; None: the durable tail when the read is planned
    partitions: int
    fail_on_data_loss: bool
    credential: str | None = None  # NAME:SECRET, for a broker with an auth file (docs/security.md)
    tls_ca: str | None = None  # connect with TLS, checking the broker against this CA file
    starting: TickVector | None = None  # startingOffsets: each pubend read after its tick
    ending: TickVector | None = None  # endingOffsets: each pubend read through its tick


def parse_read_options(options: Mapping[str, str], default_partitions: int = 2) -> ReadOptions:
    """Check and convert the user's options; raise ValueError naming the first bad one."""
    opts = _known(options, _OPTION_NAMES, _STREAM_OPTION_NAMES, "spark.readStream")
    broker = _broker(opts.get("broker"))
    pattern = _pattern(opts.get("pattern"))
    flt = _filter(opts.get("filter"))
    start_tick = _bound(opts, "startTick", "startTime")
    end_tick = _bound(opts, "endTick", "endTime")
    if start_tick is not None and end_tick is not None and start_tick > end_tick:
        raise ValueError(
            f"tidings: the start of the range (tick {start_tick}) is after its end (tick {end_tick}); "
            "check startTick/startTime and endTick/endTime"
        )
    starting = _offsets(opts.get("startingoffsets"), "startingOffsets", "earliest", "latest")
    ending = _offsets(opts.get("endingoffsets"), "endingOffsets", "latest", "earliest")
    for vector, name, bound in ((starting, "startingOffsets", "startTick/startTime"),
                                (ending, "endingOffsets", "endTick/endTime")):
        if vector is not None and (start_tick if name == "startingOffsets" else end_tick) is not None:
            raise ValueError(f'tidings: give option "{name}" or {bound}, not both')
    _check_order(starting, ending, start_tick, end_tick)
    return ReadOptions(
        broker=broker,
        pattern=pattern,
        filter=flt,
        start_tick=start_tick,
        end_tick=end_tick,
        partitions=_partitions(opts.get("partitions"), default_partitions),
        fail_on_data_loss=_boolean(opts.get("failondataloss"), "failOnDataLoss", default=True),
        credential=_credential(opts.get("credential")),
        tls_ca=opts.get("tlsca") or None,
        starting=starting,
        ending=ending,
    )


OFFSETS_FORMS = ('a checkpoint token (tk1.…), a streaming query\'s offset JSON, or JSON naming a tick per '
                 'pubend such as {"p3f2a09…": 1764000000123456}')


def _offsets(text: str | None, name: str, open_word: str, refused_word: str) -> TickVector | None:
    """startingOffsets / endingOffsets of a batch read: None for `open_word` (no bound), else the
    vector of a checkpoint token, a streaming offset's JSON or a JSON {pubend: tick}."""
    if text is None or text.strip().lower() == open_word:
        return None
    value = text.strip()
    # a streaming read without durableName is parsed as a batch read: say what the stream needs too
    hint = ('; a streaming read (spark.readStream) also takes "latest" or a time, and needs option "durableName"'
            if name == "startingOffsets" else "")
    if value.lower() == refused_word:
        raise ValueError(f'tidings: option "{name}" of a batch read cannot be "{refused_word}" (the read would '
                         f'hold nothing); give "{open_word}" or {OFFSETS_FORMS}{hint}')
    from tidings.core.durable.checkpoint import POSITIONS_MAX, Checkpoint  # noqa: PLC0415
    from tidings.spark.offsets import Offset, OffsetError  # noqa: PLC0415

    if value.startswith("tk"):
        try:
            token = Checkpoint.decode(value)
        except ValueError as exc:
            raise ValueError(f'tidings: option "{name}" is not a valid checkpoint token: {exc}') from None
        return TickVector(token.default, dict(token.positions))
    try:
        parsed = json.loads(value)
    except ValueError:
        raise ValueError(f'tidings: option "{name}" of a batch read must be "{open_word}" or {OFFSETS_FORMS}, got '
                         f"{text!r:.200}{hint}") from None
    if type(parsed) is dict and set(parsed) == {"default", "lost", "positions"}:
        try:
            offset = Offset.from_json(parsed)
        except OffsetError as exc:
            raise ValueError(f'tidings: option "{name}" is not a valid offset: {exc}') from None
        return TickVector(offset.default, dict(offset.positions))
    if type(parsed) is not dict or not parsed or len(parsed) > POSITIONS_MAX:
        raise ValueError(f'tidings: option "{name}" must be "{open_word}" or {OFFSETS_FORMS} (1 to '
                         f"{POSITIONS_MAX} pubends), got {text!r:.200}")
    for pubend, tick in parsed.items():
        if not pubend or type(tick) is not int or not 0 <= tick <= TICK_MAX:
            raise ValueError(f'tidings: option "{name}" maps each pubend to a tick (an integer from 0 to '
                             f"{TICK_MAX}), got {pubend!r}: {tick!r:.80}")
    return TickVector(None, dict(parsed))


def _check_order(starting: TickVector | None, ending: TickVector | None, start_tick: int | None,
                 end_tick: int | None) -> None:
    """No pubend may start after it ends (a position equal to the end reads nothing)."""
    after = starting or TickVector(None if start_tick is None else start_tick - 1, {})
    through = ending or TickVector(end_tick, {})
    for pubend in sorted({*after.positions, *through.positions, ""}):
        first, last = after.get(pubend) if pubend else after.default, through.get(pubend) if pubend else through.default
        if first is not None and last is not None and first > last:
            which = f"for pubend {pubend}" if pubend else "for the pubends they do not name"
            raise ValueError(f"tidings: the read would start after tick {first} and end at tick {last} {which}: "
                             "check startingOffsets/startTick/startTime against endingOffsets/endTick/endTime")


@dataclass(frozen=True, slots=True)
class StreamOptions:
    """The streaming read's options. `starting` is "latest", "earliest", a checkpoint token
    (`tk1.`...) or a tick: the query starts after it (a startingOffsets time, less one)."""

    broker: str
    pattern: str
    filter: str | None
    durable_name: str
    starting: str | int
    events_per_trigger_max: int | None
    partitions: int
    fail_on_data_loss: bool
    credential: str | None = None
    tls_ca: str | None = None
    failover: tuple[str, ...] = ()  # other brokers to plan from and to hold the durable subscription at
    pubend_outage_ms_max: int | None = None  # fail the query when a pubend is unreachable longer; None: never
    idle_advance_interval_ms: int = IDLE_ADVANCE_INTERVAL_MS_DEFAULT  # see stream.py, "No empty micro-batches"


def parse_stream_options(options: Mapping[str, str], default_partitions: int = 2) -> StreamOptions:
    """Check and convert the options of `spark.readStream.format("tidings")`; ValueError naming
    the first bad one."""
    opts = _known(options, _STREAM_OPTION_NAMES, _OPTION_NAMES, "spark.read")
    name = (opts.get("durablename") or "").strip()
    if not name or len(name.encode()) > 256:
        raise ValueError(
            'tidings: option "durableName" is required for a streaming read: 1 to 256 bytes naming this '
            "query's durable subscription at the broker (it pins the query's start and holds its events "
            'until Spark commits them), e.g. .option("durableName", "load-alerts")'
        )
    limit = opts.get("maxeventspertrigger")
    outage, idle = opts.get("maxpubendoutagems"), opts.get("idleadvanceintervalms")
    return StreamOptions(
        broker=_broker(opts.get("broker")),
        pattern=_pattern(opts.get("pattern")),
        filter=_filter(opts.get("filter")),
        durable_name=name,
        starting=_starting(opts.get("startingoffsets")),
        events_per_trigger_max=None if limit is None else _count(limit, "maxEventsPerTrigger", EVENTS_PER_TRIGGER_MAX),
        partitions=_partitions(opts.get("partitions"), default_partitions),
        fail_on_data_loss=_boolean(opts.get("failondataloss"), "failOnDataLoss", default=True),
        credential=_credential(opts.get("credential")),
        tls_ca=opts.get("tlsca") or None,
        failover=_brokers(opts.get("brokers")),
        pubend_outage_ms_max=None if outage is None else _count(outage, "maxPubendOutageMs", PUBEND_OUTAGE_MS_MAX),
        idle_advance_interval_ms=(IDLE_ADVANCE_INTERVAL_MS_DEFAULT if idle is None else
                                  _count(idle, "idleAdvanceIntervalMs", IDLE_ADVANCE_INTERVAL_MS_MAX)),
    )


def _brokers(text: str | None) -> tuple[str, ...]:
    """The `brokers` option: HOST:PORT,HOST:PORT (each checked as "broker" is)."""
    if text is None or not text.strip():
        return ()
    addresses = [a.strip() for a in text.split(",") if a.strip()]
    if len(addresses) > FAILOVER_BROKERS_MAX:
        raise ValueError(f'tidings: option "brokers" names at most {FAILOVER_BROKERS_MAX} brokers, '
                         f"got {len(addresses)}")
    try:
        return tuple(dict.fromkeys(_broker(a) for a in addresses))
    except ValueError:
        raise ValueError(f'tidings: option "brokers" must be HOST:PORT,HOST:PORT,..., got {text!r}') from None


def check_options(options: Mapping[str, str]) -> None:
    """What `load()` can check before it knows whether the read is a batch or a stream: every
    option, as the read its options belong to (both reads share most of them) parses it."""
    keys = {key.lower() for key in options}
    if keys <= _OPTION_NAMES.keys():
        parse_read_options(options)
    elif keys <= _STREAM_OPTION_NAMES.keys():
        parse_stream_options(options)
    else:
        _known(options, {**_OPTION_NAMES, **_STREAM_OPTION_NAMES}, {}, "")  # an unknown one
        batch = sorted(_OPTION_NAMES[k] for k in keys - _STREAM_OPTION_NAMES.keys())
        stream = sorted(_STREAM_OPTION_NAMES[k] for k in keys - _OPTION_NAMES.keys())
        raise ValueError(f"tidings: options {', '.join(batch)} are for spark.read and {', '.join(stream)} "
                         "for spark.readStream; a read takes one kind")


def _known(options: Mapping[str, str], names: Mapping[str, str], other: Mapping[str, str],
           other_kind: str) -> dict[str, str]:
    opts: dict[str, str] = {}
    for key, value in options.items():
        lowered = key.lower()
        if lowered not in names:
            if lowered in other:
                raise ValueError(f'tidings: option "{other[lowered]}" is an option of {other_kind}, not of this read')
            known = ", ".join(names.values())
            raise ValueError(f"tidings: unknown option {key!r}; known options: {known}")
        opts[lowered] = value
    return opts


def _starting(text: str | None) -> str | int:
    if text is None or text.strip().lower() == "latest":
        return "latest"
    value = text.strip()
    if value.lower() == "earliest":
        return "earliest"
    if value.startswith("tk"):
        from tidings.core.durable.checkpoint import Checkpoint  # noqa: PLC0415

        try:
            Checkpoint.decode(value)
        except ValueError as exc:
            raise ValueError(f'tidings: option "startingOffsets" is not a valid checkpoint token: {exc}') from None
        return value
    try:
        return max(0, _time(value, "startingOffsets") - 1)
    except ValueError:
        raise ValueError(
            'tidings: option "startingOffsets" must be "latest", "earliest", a checkpoint token (tk1.…) '
            f'or an ISO-8601 time such as "2026-11-22T10:00:00Z", got {text!r}'
        ) from None


def _count(text: str, name: str, most: int) -> int:
    try:
        count = int(text.strip(), 10)
    except ValueError:
        raise ValueError(f'tidings: option "{name}" must be an integer, got {text!r}') from None
    if not 1 <= count <= most:
        raise ValueError(f'tidings: option "{name}" must be between 1 and {most}, got {count}')
    return count


def _credential(value: str | None) -> str | None:
    if value is None or not value.strip():
        return None
    name, sep, secret = value.strip().partition(":")
    if not sep or not name or not secret:
        raise ValueError('tidings: option "credential" must be NAME:SECRET, as `tidings auth add` printed it')
    return value.strip()


def _broker(value: str | None) -> str:
    if value is None or not value.strip():
        raise ValueError('tidings: option "broker" is required, e.g. .option("broker", "127.0.0.1:7400")')
    value = value.strip()
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f'tidings: option "broker" must be HOST:PORT, got {value!r}')
    return value


def _pattern(value: str | None) -> str:
    if value is None:
        raise ValueError('tidings: option "pattern" is required, e.g. .option("pattern", "nodes/+/load")')
    try:
        return validate_pattern(value)
    except ValueError as exc:
        raise ValueError(f'tidings: option "pattern" is invalid: {exc}') from None


def _filter(value: str | None) -> str | None:
    if value is None or not value.strip():
        return None
    parse = _filter_parser()
    if parse is not None:
        try:
            parse(value)
        except ValueError as exc:
            raise ValueError(f'tidings: option "filter" is invalid: {exc}') from None
    return value


def _filter_parser() -> Callable[[str], object] | None:
    """The filter language's parser when it is installed; the broker checks filters in any case."""
    try:
        from tidings.core.filters import parse_filter  # noqa: PLC0415
    except ImportError:
        return None
    return parse_filter


def _bound(opts: Mapping[str, str], tick_name: str, time_name: str) -> int | None:
    tick_text = opts.get(tick_name.lower())
    time_text = opts.get(time_name.lower())
    if tick_text is not None and time_text is not None:
        raise ValueError(f'tidings: give option "{tick_name}" or "{time_name}", not both')
    if tick_text is not None:
        return _tick(tick_text, tick_name)
    if time_text is not None:
        return _time(time_text, time_name)
    return None


def _tick(text: str, name: str) -> int:
    try:
        tick = int(text.strip(), 10)
    except ValueError:
        raise ValueError(
            f'tidings: option "{name}" must be an integer tick (microseconds since the Unix epoch), '
            f"got {text!r}"
        ) from None
    if not 0 <= tick <= TICK_MAX:
        raise ValueError(f'tidings: option "{name}" must be between 0 and {TICK_MAX}, got {tick}')
    return tick


def _time(text: str, name: str) -> int:
    try:
        when = _dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f'tidings: option "{name}" must be an ISO-8601 time such as "2026-11-22T10:00:00Z", '
            f"got {text!r}"
        ) from None
    tick = datetime_to_tick(when)  # a time without an offset is taken as UTC
    if not 0 <= tick <= TICK_MAX:
        raise ValueError(f'tidings: option "{name}" must not be before 1970-01-01T00:00:00Z, got {text!r}')
    return tick


def _partitions(text: str | None, default: int) -> int:
    if text is None:
        return max(1, min(default, PARTITIONS_MAX))
    return _count(text, "partitions", PARTITIONS_MAX)


def _boolean(text: str | None, name: str, *, default: bool) -> bool:
    if text is None:
        return default
    lowered = text.strip().lower()
    if lowered == "true":
        return True
    if lowered == "false":
        return False
    raise ValueError(f'tidings: option "{name}" must be "true" or "false", got {text!r}')


ROWS_PER_PUBLISH_MAX = 10_000
ROWS_PER_PUBLISH_DEFAULT = 1000

_WRITE_OPTION_NAMES = {
    name.lower(): name
    for name in ("broker", "writeId", "credential", "tlsCa", "rowsPerPublish", "testOnlyFailFirstAttempt")
}

# options Spark hands every sink, which are Spark's own business
_SPARK_WRITE_OPTIONS = frozenset({"checkpointlocation", "path", "queryname"})


@dataclass(frozen=True, slots=True)
class WriteOptions:
    """The sink's options (`df.write` / `df.writeStream` `.format("tidings")`)."""

    broker: str
    write_id: str | None  # names a batch write's rows (producer.py); None: drawn once per job, or the query's id
    rows_per_publish: int
    credential: str | None = None
    tls_ca: str | None = None
    fail_first_attempt: bool = False  # tests only: a task's first attempt fails after its first publish


def parse_write_options(options: Mapping[str, str], *, streaming: bool) -> WriteOptions:
    """Check and convert the sink's options; ValueError naming the first bad one."""
    from tidings.spark.producer import check_write_id  # noqa: PLC0415

    reads = {**_OPTION_NAMES, **_STREAM_OPTION_NAMES}
    for key in options:
        if key.lower() in reads and key.lower() not in _WRITE_OPTION_NAMES:
            raise ValueError(f'tidings: option "{reads[key.lower()]}" is an option of the tidings read, not of the '
                             "sink (which takes broker, writeId, credential, tlsCa, rowsPerPublish)")
    opts = _known({k: v for k, v in options.items() if k.lower() not in _SPARK_WRITE_OPTIONS},
                  _WRITE_OPTION_NAMES, {}, "")
    write_id = opts.get("writeid")
    if write_id is not None and streaming:
        raise ValueError('tidings: option "writeId" is for df.write; a streaming query\'s rows are named by its '
                         "query id, which its checkpoint keeps")
    rows = opts.get("rowsperpublish")
    return WriteOptions(
        broker=_broker(opts.get("broker")),
        write_id=None if write_id is None else check_write_id(write_id),
        rows_per_publish=ROWS_PER_PUBLISH_DEFAULT if rows is None else _count(rows, "rowsPerPublish",
                                                                               ROWS_PER_PUBLISH_MAX),
        credential=_credential(opts.get("credential")),
        tls_ca=opts.get("tlsca") or None,
        fail_first_attempt=_boolean(opts.get("testonlyfailfirstattempt"), "testOnlyFailFirstAttempt", default=False),
    )
