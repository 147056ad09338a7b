"""Synthetic, valid-by-construction histories (docs/protocol.md) for tests and the benchmark.

`HistoryBuilder` records the events of a small cluster step by step (elections, publications, commits,
restarts); tests drive it directly to craft exact scenarios, including invalid ones. `generate` drives it
with a seeded random schedule: elections and master changes, failed publications whose state a later
master re-publishes under its own term (uncommitted intermediate states), lagging nodes that skip
applied versions, nodes that restart with their seq continuing, and events before bootstrap with
cluster_uuid "_na_". Lines are formatted by hand, without a dict per event, because the benchmark
writes millions of them.
"""

from __future__ import annotations

import json
import os
import random
import re
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import click

UNBOOTSTRAPPED = "_na_"

# (node, JSON line without newline)
Sink = Callable[[str, str], None]


@dataclass(frozen=True)
class State:
    term: int
    version: int
    state_uuid: str
    parent_uuid: str | None
    master: str
    last_committed_config: tuple[str, ...]
    last_accepted_config: tuple[str, ...]


_SEQ = re.compile(r'"seq":(\d+)')


def seq_of(line: str) -> int:
    found = _SEQ.search(line)
    return int(found.group(1)) if found else 0


def _q(value: str | None) -> str:
    if value is None:
        return "null"
    if value.isascii() and '"' not in value and "\\" not in value:
        return '"' + value + '"'
    return json.dumps(value)


class HistoryBuilder:
    """Records per-node event streams. It does not enforce the protocol: tests use it to break it too."""

    def __init__(
        self,
        nodes: Sequence[str],
        cluster_uuid: str,
        *,
        sink: Sink | None = None,
        on_restart: Callable[[str], None] | None = None,
        start_ts: float = 1_700_000_000.0,
        extra_fields: bool = False,
        seed: int = 0,
    ) -> None:
        self.nodes = list(nodes)
        self.cluster_uuid = cluster_uuid
        self.config: tuple[str, ...] = tuple(sorted(self.nodes))
        self.ts = start_ts
        self.seq = dict.fromkeys(self.nodes, 0)
        self.term = dict.fromkeys(self.nodes, 0)
        self.accepted: dict[str, State | None] = dict.fromkeys(self.nodes)
        self.applied: dict[str, State | None] = dict.fromkeys(self.nodes)
        self.bootstrapped = dict.fromkeys(self.nodes, False)
        self.lines: dict[str, list[str]] = {n: [] for n in self.nodes}
        self.restarts: list[tuple[str, int]] = []  # (node, first seq after the restart)
        self._sink = sink
        self._on_restart = on_restart
        self._extra = extra_fields
        self._rng = random.Random(f"states-{seed}")  # independent of the caller's draws
        self._json_ids: dict[tuple[str, ...] | None, str] = {None: "null"}

    # -- low level ---------------------------------------------------------------------------------

    def tick(self, seconds: float) -> None:
        self.ts += seconds

    def new_uuid(self) -> str:
        return str(uuid.UUID(int=self._rng.getrandbits(128), version=4))

    def _ids(self, ids: tuple[str, ...] | None) -> str:
        text = self._json_ids.get(ids)
        if text is None:
            text = "[" + ",".join(_q(i) for i in ids or ()) + "]"
            self._json_ids[ids] = text
        return text

    def emit(
        self,
        node: str,
        type_: str,
        term: int,
        state: State | None = None,
        *,
        quorum: tuple[str, ...] | None = None,
        seq: int | None = None,
        cluster_uuid: str | None = None,
        extra: str = "",
    ) -> None:
        """Append one event to `node`'s history; `seq` and `cluster_uuid` override the natural ones; `extra`
        is more fields, as JSON members (`"a":1,"b":2`)."""
        if seq is None:
            seq = self.seq[node] + 1
        self.seq[node] = max(self.seq[node], seq)
        if cluster_uuid is None:
            cluster_uuid = self.cluster_uuid if self.bootstrapped[node] else UNBOOTSTRAPPED
        if state is None:
            tail = (
                '"version":null,"state_uuid":null,"parent_uuid":null,"master":null,'
                '"last_committed_config":null,"last_accepted_config":null,"quorum":null'
            )
        else:
            tail = (
                f'"version":{state.version},"state_uuid":{_q(state.state_uuid)},'
                f'"parent_uuid":{_q(state.parent_uuid)},"master":{_q(state.master)},'
                f'"last_committed_config":{self._ids(state.last_committed_config)},'
                f'"last_accepted_config":{self._ids(state.last_accepted_config)},'
                f'"quorum":{self._ids(quorum)}'
            )
        more = (f',"node_name":{_q(node.upper())}' if self._extra else "") + (f",{extra}" if extra else "")
        line = (
            f'{{"cluster_uuid":{_q(cluster_uuid)},"node":{_q(node)},"seq":{seq},"ts":{self.ts:.3f},'
            f'"type":"{type_}","term":{term},{tail}{more}}}'
        )
        if self._sink is None:
            self.lines[node].append(line)
        else:
            self._sink(node, line)

    # -- protocol steps (valid when called in a sensible order) -------------------------------------

    def start_term(self, term: int, nodes: Iterable[str]) -> None:
        for n in nodes:
            if term > self.term[n]:
                self.term[n] = term
                self.emit(n, "term", term)
                self.tick(0.001)

    def elect(self, master: str, term: int, voters: Iterable[str] = ()) -> None:
        self.start_term(term, [master, *voters])
        self.emit(master, "elected", term)
        self.tick(0.002)

    def make_state(
        self,
        master: str,
        *,
        parent: State | None = None,
        term: int | None = None,
        version: int | None = None,
        config: tuple[str, ...] | None = None,
        last_committed_config: tuple[str, ...] | None = None,
    ) -> State:
        """The next state `master` would publish: derived from its last-accepted state by default."""
        base = self.accepted[master] if parent is None else parent
        cfg = config or (base.last_accepted_config if base else self.config)
        return State(
            term=self.term[master] if term is None else term,
            version=(base.version + 1 if base else 1) if version is None else version,
            state_uuid=self.new_uuid(),
            parent_uuid=base.state_uuid if base else None,
            master=master,
            last_committed_config=last_committed_config or (base.last_accepted_config if base else self.config),
            last_accepted_config=cfg,
        )

    def accept(self, node: str, state: State) -> None:
        if self.term[node] < state.term:  # a (re)joining node adopts the master's term first
            self.start_term(state.term, [node])
        self.bootstrapped[node] = True
        self.accepted[node] = state
        self.emit(node, "accepted", state.term, state)
        self.tick(0.001)

    def commit(self, node: str, state: State, quorum: tuple[str, ...] | None = None) -> None:
        self.emit(node, "committed", state.term, state, quorum=quorum)
        self.tick(0.001)

    def apply(self, node: str, state: State) -> None:
        self.applied[node] = state
        self.emit(node, "applied", state.term, state)
        self.tick(0.001)

    def publish(
        self,
        master: str,
        followers: Sequence[str],
        *,
        state: State | None = None,
        commit: bool = True,
        appliers: Iterable[str] | None = None,
    ) -> State:
        """One two-phase publication. `followers` ack; `appliers` (default: all) apply after commit."""
        state = state or self.make_state(master)
        self.accept(master, state)
        for f in followers:
            self.accept(f, state)
        if not commit:
            return state
        self.tick(0.004)
        self.commit(master, state, tuple(sorted({master, *followers})))
        for f in followers:
            self.commit(f, state)
        apply_set = set(followers if appliers is None else appliers)
        for f in followers:
            if f in apply_set:
                self.apply(f, state)
        if appliers is None or master in apply_set:
            self.apply(master, state)  # the master applies last
        return state

    def step_down(self, master: str) -> None:
        self.emit(master, "stepped_down", self.term[master])
        self.tick(0.001)

    def stop(self, node: str) -> None:
        """A graceful stop: the node records `stopped` in its current term (a process restart may follow)."""
        self.emit(node, "stopped", self.term[node], extra='"reason":"graceful stop"')
        self.tick(0.001)

    def restart(self, node: str) -> None:
        """A process restart: persisted term, accepted state and seq survive; the applied state does not."""
        self.applied[node] = None
        self.restarts.append((node, self.seq[node] + 1))
        if self._on_restart is not None:
            self._on_restart(node)

    def retention_cut(self, node: str, first_kept_seq: int) -> None:
        """What the node's retention does: its events before `first_kept_seq` are deleted (only without a sink),
        after a `retention_cut` event that restates its marks."""
        accepted = self.accepted[node]
        marks = (accepted.term, accepted.version) if accepted else (0, 0)
        self.emit(
            node,
            "retention_cut",
            self.term[node],
            extra=f'"first_kept_seq":{first_kept_seq},"marks_term":{self.term[node]},'
            f'"marks_accepted":[{marks[0]},{marks[1]}]',
        )
        self.tick(0.001)
        self.lines[node] = [line for line in self.lines[node] if seq_of(line) >= first_kept_seq]

    def events(self) -> list[dict[str, object]]:
        """Every recorded event as a dict (only when no sink was given)."""
        return [json.loads(line) for n in self.nodes for line in self.lines[n]]

    def write(self, directory: Path, *, segment_events: int = 1_000_000) -> list[Path]:
        """Write each node's recorded lines as segment files, starting a new segment at every restart."""
        writer = SegmentWriter(directory, segment_events=segment_events)
        starts = {(n, s) for n, s in self.restarts}
        for n in self.nodes:
            for line in self.lines[n]:
                if (n, seq_of(line)) in starts:
                    writer.rotate(n)
                writer(n, line)
        writer.close()
        return writer.paths


class SegmentWriter:
    """A sink writing `DIR/<node>/history-NNNNNN.jsonl`, rotating by size and on restarts."""

    def __init__(self, directory: Path, *, segment_events: int = 1_000_000) -> None:
        self.directory = directory
        self.segment_events = segment_events
        self.paths: list[Path] = []
        self._files: dict[str, tuple[object, int, int]] = {}  # node -> (file, segment no, lines)

    def _open(self, node: str, segment: int) -> None:
        path = self.directory / node / f"history-{segment:06d}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        self.paths.append(path)
        self._files[node] = (open(path, "w", buffering=1 << 20), segment, 0)  # noqa: SIM115

    def rotate(self, node: str) -> None:
        if node in self._files:
            fh, segment, _ = self._files[node]
            fh.close()  # type: ignore[attr-defined]
            self._open(node, segment + 1)

    def __call__(self, node: str, line: str) -> None:
        entry = self._files.get(node)
        if entry is None:
            self._open(node, 1)
            entry = self._files[node]
        elif entry[2] >= self.segment_events:
            self.rotate(node)
            entry = self._files[node]
        fh, segment, count = entry
        fh.write(line + "\n")  # type: ignore[attr-defined]
        self._files[node] = (fh, segment, count + 1)

    def close(self) -> None:
        for fh, _, _ in self._files.values():
            fh.close()  # type: ignore[attr-defined]
        self._files.clear()


@dataclass
class SynthConfig:
    nodes: int = 5
    events: int = 2_000  # stop after the publication that reaches this many events
    seed: int = 0
    mean_term_length: int = 12  # publications per term
    p_failed_publish: float = 0.35  # a term ends with a publication that reaches no quorum
    p_crash: float = 0.3  # the master crashes (and restarts) instead of stepping down
    p_failed_election: float = 0.15  # a term is started but nobody wins it
    p_restart: float = 0.2  # per term, a follower goes down for a while and restarts
    p_miss: float = 0.02  # a follower misses one publication
    lagging: int = 1  # how many followers apply only every `lag_every`-th committed state
    lag_every: int = 4
    pre_bootstrap: bool = True
    extra_fields: bool = False
    cluster_uuid: str | None = None
    node_ids: list[str] = field(default_factory=list)


def generate(
    cfg: SynthConfig, sink: Sink | None = None, on_restart: Callable[[str], None] | None = None
) -> HistoryBuilder:
    """A valid history of one cluster; returns the builder (its `lines` hold the events if no sink)."""
    rng = random.Random(cfg.seed)
    nodes = cfg.node_ids or [f"node-{i}" for i in range(cfg.nodes)]
    cluster = cfg.cluster_uuid or str(uuid.UUID(int=rng.getrandbits(128), version=4))
    hb = HistoryBuilder(nodes, cluster, sink=sink, on_restart=on_restart, extra_fields=cfg.extra_fields, seed=cfg.seed)
    majority = len(nodes) // 2 + 1
    lagging = set(nodes[len(nodes) - cfg.lagging :]) if cfg.lagging else set()
    down: dict[str, int] = {}  # node -> publications left before it comes back
    events = 0

    def count_events() -> int:
        return sum(hb.seq.values())

    term = 0
    if not cfg.pre_bootstrap:
        hb.bootstrapped = dict.fromkeys(nodes, True)
    master = nodes[0]
    while events < cfg.events:
        live = [n for n in nodes if n not in down]
        term += 1
        if rng.random() < cfg.p_failed_election and term > 1:
            hb.start_term(term, rng.sample(live, k=max(1, len(live) // 2)))
            hb.tick(rng.uniform(0.5, 2.0))
            term += 1

        # The winner must hold the newest last-accepted state among a quorum of voters: pick among
        # the live nodes whose last-accepted (term, version) is no older than a quorum's.
        def key(n: str) -> tuple[int, int]:
            s = hb.accepted[n]
            return (s.term, s.version) if s else (0, 0)

        eligible = [n for n in live if sum(key(m) <= key(n) for m in live) >= majority]
        if not eligible:  # too many nodes down for an election: wait for them to come back
            down.clear()
            hb.tick(5.0)
            continue
        master = rng.choice(eligible)
        voters = [n for n in live if key(n) <= key(master)]
        hb.elect(master, term, voters)
        for n in live:
            hb.start_term(term, [n])

        publications = max(1, int(rng.expovariate(1 / cfg.mean_term_length)))
        failed = False
        for i in range(publications):
            for n in list(down):
                down[n] -= 1
                if down[n] <= 0:
                    del down[n]
            followers = [n for n in nodes if n != master and n not in down and rng.random() >= cfg.p_miss]
            last = i == publications - 1
            if last and rng.random() < cfg.p_failed_publish:
                # A publication that reaches fewer than a quorum: accepted by a few, never committed.
                few = rng.sample(followers, k=min(len(followers), rng.randint(0, majority - 2)))
                hb.publish(master, few, commit=False)
                failed = True
                break
            if len(followers) + 1 < majority:
                hb.publish(master, followers, commit=False)
                failed = True
                break
            state = hb.make_state(master)
            appliers = [f for f in followers if f not in lagging or state.version % cfg.lag_every == 0]
            hb.publish(master, followers, state=state, appliers=[*appliers, master])
            hb.tick(rng.uniform(0.05, 1.0))
            events = count_events()
            if events >= cfg.events:
                break
        if failed and rng.random() < cfg.p_crash:
            hb.restart(master)
            down[master] = rng.randint(1, 4)
        else:
            hb.step_down(master)
        if rng.random() < cfg.p_restart:
            candidates = [n for n in nodes if n != master and n not in down]
            if candidates and len(down) < len(nodes) - majority:
                victim = rng.choice(candidates)
                hb.restart(victim)
                down[victim] = rng.randint(1, 8)
        hb.tick(rng.uniform(1.0, 5.0))  # failover: fault detection plus election
        events = count_events()
    return hb


def write_history(cfg: SynthConfig, directory: Path, *, segment_events: int = 1_000_000) -> int:
    """Stream a generated history into per-node segment files; returns the number of events."""
    writer = SegmentWriter(directory, segment_events=segment_events)
    hb = generate(cfg, sink=writer, on_restart=writer.rotate)
    writer.close()
    return sum(hb.seq.values())


@click.command(help="write a synthetic valid history as JSONL segments")
@click.argument("directory", type=click.Path(path_type=Path))
@click.option("--events", type=int, default=10_000)
@click.option("--seed", type=int, default=0)
def main(directory: Path, events: int, seed: int) -> None:  # pragma: no cover - a convenience for trying the audit
    n = write_history(SynthConfig(events=events, seed=seed), directory)
    print(f"{n} events in {directory}{os.sep}")


if __name__ == "__main__":  # pragma: no cover
    main()
