"""What the core does with one type of client request, declared beside the type (Elasticsearch's `ActionType`
with its `TransportMasterNodeAction`): how the master checks it, where it runs, at which priority, and what it
changes in the next cluster state.

Every request runs on the master: a follower forwards it, and a node without a master refuses it
(client_requests.py). There it runs in one of two ways:

- `Runs.MASTER`: a master task, batched with the others into the next cluster state at the request's
  `priority`; its `execute` changes the batch's draft and gives its result (or None: it succeeds with the
  publication).
- `Runs.READ`: a read round, answered by `read` from the master's applied state once the master has confirmed
  with a quorum that it still leads; no publication.

A request that needs more than that (a wait before or after its task, a read round before a lease renewal) says
so in `on_master`, in terms of the `Master` it is given. There is no third, local way: a read of a node's own
applied state, however stale, is the shell's `local` read, not a request of the core.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from coordinated.coordination.batch_draft import Draft, Result
from coordinated.coordination.batch_writes import Writes
from coordinated.coordination.client import ClientRequest, ClientResult
from coordinated.coordination.master_service import Priority
from coordinated.coordination.settings import Settings
from coordinated.coordination.state import ClusterState

Q = TypeVar("Q", bound=ClientRequest[Any])
Reply = Callable[[ClientResult], None]


class Runs(enum.Enum):
    MASTER = "master"  # a master task: batched into the next cluster state
    READ = "read"  # a read round on the master: answered from its state once it has confirmed it leads


class Master(Protocol):
    """What a request's own procedure (`Action.on_master`) may do on the master."""

    @property
    def now(self) -> int: ...

    @property
    def state(self) -> ClusterState:
        """The master's newest accepted state."""

    def run(self, request: ClientRequest[Any], reply: Reply, deadline: int, source: str | None = None) -> None:
        """The request's default way: its task (under `source`, default its `describe`), or its read round."""

    def confirm(self, reply: Reply) -> None:
        """A read barrier: Committed with the master's applied state once it has confirmed that it leads."""

    def until_out_of_config(
        self, node_names: tuple[str, ...], node_ids: tuple[str, ...], reply: Reply, deadline: int
    ) -> None:
        """Committed once these excluded nodes have left both voting configurations."""

    def until_removed(self, then: Reply, deadline: int) -> None:
        """Committed once no excluded node is in the cluster."""

    def renew_session(self, session: str, arrived: int, reply: Reply) -> None:
        """Renew a TTL session's lease on this master (sessions.py)."""


def _no_problem(request: Any, state: ClusterState, settings: Settings) -> str | None:
    return None


@dataclass(frozen=True)
class Action(Generic[Q]):
    """Everything the core does with the requests of type `request`."""

    request: type[Q]
    runs: Runs
    # The master's check against its state and settings, whether the request was submitted on it or forwarded:
    # None when valid, else the reason of a 400. The API runs the same checks for a quick answer.
    validate: Callable[[Q, ClusterState, Settings], str | None] = _no_problem
    priority: Priority = Priority.NORMAL  # MASTER: of its task
    execute: Callable[[Q, Draft], Result] | None = None  # MASTER: its change to the batch's draft
    read: Callable[[Q, ClusterState], ClientResult] | None = None  # READ: its answer from the confirmed state
    on_master: Callable[[Q, Reply, int, Master], None] | None = None  # its own procedure (reply, deadline)
    # A result that changed nothing (a conflict, a missing key or session, a transaction that wrote nothing) is
    # answered only once the master has confirmed that it still leads, as a read would be.
    confirm_unwritten: bool = False
    # The values it writes, held to `cluster.metadata.max_value_size`; a request that has them is also held to
    # `cluster.metadata.max_state_size` when it grows the state.
    writes_values: Callable[[Q], Iterable[tuple[str, Any]]] | None = None
    # The new state's version is above this (a restore brings versions of its own), and the request publishes a
    # new state even when it changes nothing.
    version_floor: Callable[[Q], int] | None = None
    # The keys it changes if it changes any, when that is known without the state (an unconditional put or
    # delete names its key, a restore changes every key): a batch that changed one of them already leaves the
    # task for the next publication without running it (batch_writes). None: known only once it runs.
    writes_keys: Callable[[Q], Writes | None] | None = None
    describe: Callable[[Q], str] | None = None  # its task's source, for logs; default the type's name
    # The wire feature the request needs: refused until every node of the cluster has it. None: every version
    # of the wire that this release supports carries it.
    feature: str | None = None

    def __post_init__(self) -> None:
        name = self.request.__name__
        if self.runs is Runs.MASTER and (self.execute is None or self.read is not None):
            raise ValueError(f"{name}: a master task has an executor and no read answer")
        if self.runs is Runs.READ and (self.execute is not None or (self.read is None and self.on_master is None)):
            raise ValueError(f"{name}: a read round has a read answer (or a procedure of its own) and no executor")

    def source(self, request: Q) -> str:
        return self.describe(request) if self.describe is not None else type(request).__name__
