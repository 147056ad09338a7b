"""Recipes on the client: each is one module of flows with a blocking and an asyncio class
(docs/applications.md, "How the client is built, and adding a call or a recipe")."""

from coordinated.client.errors import LockTimeout
from coordinated.client.recipes.election import AsyncLeaderElection, LeaderElection
from coordinated.client.recipes.lock import AsyncLock, Lock

__all__ = ["AsyncLeaderElection", "AsyncLock", "LeaderElection", "Lock", "LockTimeout"]
