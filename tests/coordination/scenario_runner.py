"""Readable scenario scripts for the simulator, in the style of etcd-io/raft's testdata/*.txt.

A script is a list of commands, each followed by `----` and the output it must print, then a blank line:

    cluster nodes=3
    ----
    leader node1 term 2 version 4

Commands (a NODE is `node<i>`, `leader`, `follower` (the first live node that is not the leader) or an
alias set with `name`):

    cluster nodes=N [seed=S]        form a cluster and wait until it settles
    name NODE ALIAS                 remember a node under another name
    status                          every node: mode, master, term, applied version
    config                          the master's voting configuration, by node name
    run DURATION                    let virtual time pass (500ms, 30s, 2m)
    isolate NODE [blackhole]        cut a node off from all others
    heal                            restore every link
    add                             start one more (master-eligible) node, which joins the cluster
    crash NODE / restart NODE       stop a node (its disk survives) / start it again
    lose NODE                       its disk is lost for good: it starts again empty, as a new node (a new id)
    put NODE KEY VALUE [session=S]  a client write through NODE, waited for (ephemeral in session S)
    get NODE KEY                    a client read through NODE, waited for
    barrier NODE                    a linearizable read barrier through NODE: the master's committed version
    session NODE S ttl=DURATION     create a TTL session through NODE, known as S from then on
    keepalive NODE S                a keepalive of session S through NODE: the time it has left
    sessions NODE                   the sessions in NODE's applied state, with their checkpointed TTL
    exclude NODE                    add a voting config exclusion for NODE, through the master
    history NODE [sessions]         NODE's history events since the last `history NODE` (only the sessions')
    logs TEXT...                    the nodes' log lines that contain TEXT, since the last `logs`
    uuid                            the cluster UUID of every live node's applied state (U1, U2, ... in order seen)

Run one script with `pytest tests/coordination/test_scenario_scripts.py -k NAME`; with --rewrite (or REWRITE=1) the
expected outputs are rewritten from what the simulator prints (review the diff before committing it).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from coordinated.coordination.client import ClientRequest, ClientResult, ClusterError, Committed, ReadValue, SessionInfo
from coordinated.coordination.context import Mode
from coordinated.coordination.requests.cluster import AddVotingConfigExclusions
from coordinated.coordination.requests.keys import KvGet, KvPut, ReadBarrier
from coordinated.coordination.requests.sessions import SessionCreate, SessionKeepAlive
from coordinated.simulation.cluster import SimNode, SimulatedCluster
from coordinated.simulation.network import Link

SECOND = 1000


@dataclass
class Case:
    command: str
    expected: str
    line: int


def parse_script(text: str) -> list[Case]:
    cases: list[Case] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        if not line.strip() or line.startswith("#"):
            index += 1
            continue
        start = index
        if index + 1 >= len(lines) or lines[index + 1] != "----":
            raise ValueError(f"line {start + 1}: a command must be followed by a line '----'")
        index += 2
        output: list[str] = []
        while index < len(lines) and lines[index].strip():
            output.append(lines[index])
            index += 1
        cases.append(Case(line.strip(), "\n".join(output), start + 1))
    return cases


def format_script(cases: list[tuple[Case, str]], header: str) -> str:
    blocks = [f"{case.command}\n----\n{output}\n" for case, output in cases]
    return header + "\n".join(blocks)


def duration_ms(text: str) -> int:
    match = re.fullmatch(r"(\d+)(ms|s|m)", text)
    if not match:
        raise ValueError(f"not a duration: {text}")
    return int(match.group(1)) * {"ms": 1, "s": SECOND, "m": 60 * SECOND}[match.group(2)]


@dataclass
class ScenarioRunner:
    cluster: SimulatedCluster | None = None
    aliases: dict[str, SimNode] = field(default_factory=dict)
    sessions: dict[str, str] = field(default_factory=dict)  # session alias -> id
    history_seen: dict[int, int] = field(default_factory=dict)
    lost: dict[str, str] = field(default_factory=dict)  # the ids of nodes whose disk was lost -> "NAME(lost)"
    logs_seen: int = 0
    uuids: dict[str, str] = field(default_factory=dict)  # cluster UUID -> U1, U2, ...

    def run(self, command: str) -> str:
        verb, *args = command.split()
        handler: Callable[[list[str]], str] | None = getattr(self, f"do_{verb}", None)
        if handler is None:
            raise ValueError(f"unknown command [{verb}]")
        return handler(args)

    @property
    def sim(self) -> SimulatedCluster:
        assert self.cluster is not None, "start with `cluster nodes=N`"
        return self.cluster

    def node(self, name: str) -> SimNode:
        sim = self.sim
        if name in self.aliases:
            return self.aliases[name]
        if name == "leader":
            leader = sim.leader()
            assert leader is not None, "no single leader now"
            return leader
        if name == "follower":
            leader = sim.leader()
            return next(node for node in sim.nodes if node.alive and node is not leader)
        return sim.node_by_name(name)

    def _request(self, node: SimNode, request: ClientRequest) -> ClientResult:
        results: list[ClientResult] = []
        self.sim.submit(node.index, request, on_done=results.append)
        assert self.sim.run_until(lambda: bool(results), 11 * SECOND)
        return results[0]

    @staticmethod
    def _result(result: ClientResult) -> str:
        if isinstance(result, Committed):
            return f"committed term {result.term} version {result.version}"
        if isinstance(result, ReadValue):
            value = repr(result.value) if result.found else "(none)"
            return f"value {value} term {result.term} version {result.version}"
        assert isinstance(result, ClusterError)
        return f"error {result.status} {result.type}"

    def do_cluster(self, args: list[str]) -> str:
        options = dict(arg.split("=") for arg in args)
        self.cluster = SimulatedCluster(int(options.get("seed", "1")), int(options["nodes"]))
        assert self.sim.run_until(self.sim.settled, 30 * SECOND), "the cluster did not form"
        leader = self.node("leader").running()
        return f"leader {self.node('leader').name} term {leader.current_term} version {leader.applied_state.version}"

    def do_name(self, args: list[str]) -> str:
        node, alias = self.node(args[0]), args[1]
        self.aliases[alias] = node
        return f"{alias} is {node.name}"

    def do_status(self, args: list[str]) -> str:
        lines = []
        for node in self.sim.nodes:
            if not node.alive:
                lines.append(f"{node.name} down")
                continue
            core = node.running()
            master = core.applied_state.master_node
            master_name = next((n.name for n in self.sim.nodes if n.node.id == master), "none")
            mode = core.mode.value if isinstance(core.mode, Mode) else str(core.mode)
            lines.append(
                f"{node.name} {mode} master {master_name} term {core.current_term} version {core.applied_state.version}"
            )
        return "\n".join(lines)

    def do_config(self, args: list[str]) -> str:
        state = self.node("leader").running().applied_state
        names = {**self.lost, **{node.node.id: node.name for node in self.sim.nodes}}
        return " ".join(sorted(names.get(node_id, node_id) for node_id in state.last_committed_config.node_ids))

    def do_run(self, args: list[str]) -> str:
        self.sim.run_for(duration_ms(args[0]))
        return "ok"

    def do_isolate(self, args: list[str]) -> str:
        node = self.node(args[0])
        link = Link.BLACKHOLE if args[1:] == ["blackhole"] else Link.DISCONNECTED
        self.sim.network.isolate(node.address, self.sim.addresses(), link)
        return f"{node.name} isolated"

    def do_heal(self, args: list[str]) -> str:
        self.sim.network.heal()
        return "ok"

    def do_add(self, args: list[str]) -> str:
        return f"{self.sim.add_node().name} started"

    def do_crash(self, args: list[str]) -> str:
        node = self.node(args[0])
        self.sim.crash(node.index)
        return f"{node.name} down"

    def do_restart(self, args: list[str]) -> str:
        node = self.node(args[0])
        self.sim.start_node(node.index)
        return f"{node.name} started"

    def do_lose(self, args: list[str]) -> str:
        node = self.node(args[0])
        self.lost[node.node.id] = f"{node.name}(lost)"
        self.sim.lose_data(node.index)
        return f"{node.name} started empty, as a new node"

    def do_put(self, args: list[str]) -> str:
        options = dict(arg.split("=") for arg in args[3:])
        session = self.sessions[options["session"]] if "session" in options else None
        return self._result(self._request(self.node(args[0]), KvPut(args[1], args[2], session=session)))

    def do_session(self, args: list[str]) -> str:
        options = dict(arg.split("=") for arg in args[2:])
        result = self._request(self.node(args[0]), SessionCreate(ttl_ms=duration_ms(options["ttl"])))
        if not isinstance(result, SessionInfo):
            return self._result(result)
        self.sessions[args[1]] = result.id
        return f"session {args[1]} ttl {result.ttl_ms}ms version {result.version}"

    def do_keepalive(self, args: list[str]) -> str:
        result = self._request(self.node(args[0]), SessionKeepAlive(self.sessions[args[1]]))
        if not isinstance(result, SessionInfo):
            return self._result(result)
        return f"session {args[1]} renewed: {result.remaining_ms}ms left, version {result.version}"

    def do_sessions(self, args: list[str]) -> str:
        state = self.node(args[0]).running().applied_state
        names = {session_id: alias for alias, session_id in self.sessions.items()}
        lines = []
        for session_id, session in sorted(state.sessions.items(), key=lambda item: names.get(item[0], item[0])):
            record = "whole ttl" if session.remaining_ms is None else f"{session.remaining_ms}ms left"
            keys = sorted(key for key, owner in state.kv_sessions.items() if owner == session_id)
            lines.append(f"{names.get(session_id, session_id)} ttl {session.ttl_ms}ms checkpoint {record} keys {keys}")
        return "\n".join(lines) or "(none)"

    def do_get(self, args: list[str]) -> str:
        return self._result(self._request(self.node(args[0]), KvGet(args[1])))

    def do_barrier(self, args: list[str]) -> str:
        return self._result(self._request(self.node(args[0]), ReadBarrier()))

    def do_exclude(self, args: list[str]) -> str:
        excluded = self.node(args[0])
        return self._result(self._request(self.node("leader"), AddVotingConfigExclusions(node_names=(excluded.name,))))

    def do_logs(self, args: list[str]) -> str:
        text = " ".join(args)
        logs = self.sim.logs[self.logs_seen :]
        self.logs_seen = len(self.sim.logs)
        return (
            "\n".join(f"{name} {level}: {message}" for _, name, level, message in logs if text in message) or "(none)"
        )

    def do_uuid(self, args: list[str]) -> str:
        lines = []
        for node in self.sim.nodes:
            if node.alive:
                uuid = node.running().applied_state.cluster_uuid
                lines.append(f"{node.name} {self.uuids.setdefault(uuid, f'U{len(self.uuids) + 1}')}")
        return "\n".join(lines)

    def do_history(self, args: list[str]) -> str:
        node = self.node(args[0])
        seen = self.history_seen.get(node.index, 0)
        events = node.history[seen:]
        self.history_seen[node.index] = len(node.history)
        if args[1:] == ["sessions"]:
            events = [event for event in events if event.get("session")]
        names = {n.node.id: n.name for n in self.sim.nodes}
        lines = []
        for event in events:
            line = (
                f"joined term {event['term']}" if event["type"] == "term" else f"{event['type']} term {event['term']}"
            )
            if event["version"] is not None:
                line += f" version {event['version']}"
            if event["quorum"] is not None:
                line += " quorum " + ",".join(sorted(names.get(i, i) for i in event["quorum"]))
            if event.get("session"):
                session = next((alias for alias, id_ in self.sessions.items() if id_ == event["session"]), "?")
                line += f" session {session}"
            if event.get("reason"):
                line += f" ({event['reason']})"
            lines.append(line)
        return "\n".join(lines) or "(none)"


def run_script(path: Path) -> tuple[str, str]:
    """(the script as written, the script with the outputs the simulator printed)."""
    text = path.read_text()
    header = "".join(f"{line}\n" for line in text.splitlines() if line.startswith("#"))
    header += "\n" if header else ""
    runner = ScenarioRunner()
    cases = parse_script(text)
    outputs = [(case, runner.run(case.command)) for case in cases]
    return text, format_script(outputs, header)
