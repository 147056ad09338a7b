"""One reconcile pass of a CoordinatedCluster, as ordered steps (Elastic ECK's driver with its results).

`driver.py` runs the steps in order; each is `async def step(ctx) -> StepResult` in a file of its own concern:

1. `security`: the CA, the pods' certificates and the role tokens (renewed even while paused);
2. `observe`: the StatefulSets, pods, claims and sidecars, and the planner's single next action;
3. `bootstrap`: the annotations that pin the bootstrap list, record the cluster UUID and hibernation;
4. `children`: every child object, applied (the StatefulSets at the planned size);
5. `membership`: voting exclusions, pod restarts, and the members that lost their data;
6. `volumes`: growing the data volumes;
7. `status`: the placement conditions, the Events of changes, and the status subresource;
8. `snapshots`: the restore of spec.restoreFrom, then snapshots as scheduled or requested.

A step returns the conditions it found, the Events to post and why the cluster is not converged yet (its
requeue); what later steps need it leaves in the pass's `Context`. Nothing is kept between passes: every pass
re-reads the cluster, so an operator restarted after any step picks up exactly where it was.
"""
