"""Growing the data volumes in place when `spec.storage.size` is raised: pure decisions, no API calls.

A StatefulSet's claim template cannot change, and a claim only grows where its StorageClass allows it
(`allowVolumeExpansion: true`, and a provisioner or CSI driver that resizes). So, as Elastic's ECK does:

1. each data claim asks for the new size (the storage system grows the volume, usually online);
2. the StatefulSet is deleted with `propagationPolicy: Orphan`, which leaves its pods and claims running;
3. the next pass creates it again from the spec, with the new claim template, and it adopts the pods.

Where the class cannot expand, nothing is changed: the StatefulSet keeps its template and the `StorageSize`
condition says why. Shrinking is refused here, against the volumes' actual size (the bound claims' capacity):
a size that never took (a class that cannot expand, an expansion that failed) can be set back, and a claim
template left larger than the volumes by an expansion that never happened follows it back down.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal

from kubernetes.utils import parse_quantity

from coordinated.operator.observation import ClaimObservation, StatefulSetObservation
from coordinated.operator.status import Condition

CONDITION = "StorageSize"


@dataclass(frozen=True)
class VolumePlan:
    template_size: str  # what the StatefulSet's claim template says after this pass
    expand: tuple[str, ...] = ()  # claims to raise to the spec's size now
    recreate_statefulset: bool = False  # delete it (orphaning pods and claims) so that it comes back resized
    condition: Condition | None = None


def size_of(quantity: str | None) -> Decimal | None:
    if quantity is None:
        return None
    try:
        return Decimal(parse_quantity(quantity))  # type: ignore[no-untyped-call]
    except ValueError:
        return None


def plan_volumes(
    desired: str,
    statefulset: StatefulSetObservation | None,
    claims: Sequence[ClaimObservation],
    expandable: bool | None,
    class_name: str | None,
) -> VolumePlan:
    """`expandable`: whether the claims' StorageClass allows expansion (None: unknown, or no claim to grow)."""
    wanted = size_of(desired)
    template = statefulset.claim_size if statefulset is not None and statefulset.claim_size else None
    if wanted is None or (template is None and not claims):
        return VolumePlan(desired)  # a new cluster: its StatefulSet takes the spec's size as it is
    if template is None:
        template = desired  # the StatefulSet is being created again: with the spec's size
    current = size_of(template) or wanted
    bound = [(claim, size) for claim in claims if (size := size_of(claim.capacity)) is not None]
    largest = max(bound, key=lambda found: found[1], default=None)
    actual = largest[1] if largest is not None else current  # no claim bound yet: the template's size
    if wanted < actual:
        has = largest[0].capacity if largest is not None else template
        message = f"storage.size is {desired} but the volumes have {has}: a volume can grow, never shrink"
        return VolumePlan(template, condition=Condition(CONDITION, False, "ShrinkNotSupported", message))
    if wanted < current:
        # The claim template is larger than any volume (an expansion that never happened): it goes back.
        recreate = statefulset is not None and not statefulset.deleting
        message = f"re-creating the StatefulSet's claim template at {desired} (it says {template}; no volume grew)"
        return VolumePlan(template, (), recreate, Condition(CONDITION, False, "Resizing", message))
    short = [claim for claim in claims if (size_of(claim.requested) or wanted) < wanted]
    if (wanted > current or short) and expandable is False:
        storage_class = f"StorageClass {class_name}" if class_name else "the claims' StorageClass"
        message = (
            f"storage.size asks for {desired}, but {storage_class} does not allow volume expansion "
            f"(allowVolumeExpansion is not true): the volumes stay at {template} and nothing was changed. The "
            "expansion proceeds by itself once the class allows it (where its provisioner can resize)"
        )
        return VolumePlan(template, condition=Condition(CONDITION, False, "ExpansionNotSupported", message))
    expand = tuple(claim.name for claim in short)
    recreate = wanted > current and statefulset is not None and not statefulset.deleting
    failed = [f"{claim.name}: {claim.problem}" for claim in claims if claim.problem]
    if failed:
        message = f"expanding the volumes to {desired} failed: " + "; ".join(failed)
        condition = Condition(CONDITION, False, "ExpansionFailed", message)
    else:
        # Claims not bound yet are new ones (created at the template's size), not ones being expanded.
        waiting = [
            f"{claim.name} (has {claim.capacity})"
            for claim in claims
            if (capacity := size_of(claim.capacity)) is not None and capacity < wanted
        ]
        if waiting or wanted > current:
            detail = f"waiting for {', '.join(waiting)}" if waiting else "re-creating the StatefulSet's claim template"
            condition = Condition(CONDITION, False, "Expanding", f"expanding the volumes to {desired}: {detail}")
        else:
            condition = Condition(CONDITION, True, "AsRequested", f"every data volume has {desired}")
    return VolumePlan(template, expand, recreate, condition)


def class_to_check(
    desired: str, statefulset: StatefulSetObservation | None, claims: Sequence[ClaimObservation]
) -> str | None:
    """The StorageClass whose allowVolumeExpansion decides, when the spec asks for more than the volumes have."""
    wanted, template = size_of(desired), size_of(statefulset.claim_size if statefulset else None)
    if wanted is None or template is None:
        return None
    if wanted > template or any((size_of(claim.requested) or wanted) < wanted for claim in claims):
        return next((claim.storage_class for claim in claims if claim.storage_class), None)
    return None


def storage_condition(voters: VolumePlan, nonvoters: VolumePlan) -> Condition | None:
    """The one StorageSize condition for both pools (a status holds each condition type once).

    The voters' condition, unless the non-voters' volumes are not as asked: then theirs, and when both
    are not, the voters' reason with both messages.
    """
    mine, theirs = voters.condition, nonvoters.condition
    if theirs is None or theirs.status:
        return mine
    if mine is None or mine.status:
        return theirs
    return Condition(CONDITION, False, mine.reason, f"{mine.message}; non-voters: {theirs.message}")


# The Event sent when the StorageSize condition takes each reason (AsRequested only after an expansion).
EVENTS = {
    "Expanding": ("Normal", "ExpandingVolumes"),
    "AsRequested": ("Normal", "VolumesExpanded"),
    "ExpansionNotSupported": ("Warning", "VolumeExpansionNotSupported"),
    "ExpansionFailed": ("Warning", "VolumeExpansionFailed"),
    "ShrinkNotSupported": ("Warning", "VolumeShrinkNotSupported"),
    "Resizing": ("Normal", "ResizingClaimTemplate"),
}


def event_for(plan: VolumePlan, previous_reason: str | None) -> tuple[str, str, str] | None:
    """(type, reason, message) when the condition moved to another reason since the last status."""
    condition = plan.condition
    if condition is None or condition.reason == previous_reason:
        return None
    if condition.reason == "AsRequested" and previous_reason in (None, "AsRequested"):
        return None  # nothing was ever expanded
    if condition.reason == "AsRequested" and previous_reason in ("ExpansionNotSupported", "Resizing"):
        return "Normal", "VolumesAsRequested", condition.message  # set back to the size the volumes have
    event_type, reason = EVENTS[condition.reason]
    return event_type, reason, condition.message
