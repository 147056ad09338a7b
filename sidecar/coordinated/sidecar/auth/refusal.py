"""What a realm answers for a credential it recognised and refused (auth/authenticators.py re-exports it): its own
module, so that a realm module and the realm chain that registers it need not import each other."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Refused:
    """A credential that a realm recognised and refused: the reason of the 401 (never the credential)."""

    reason: str
