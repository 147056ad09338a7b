"""Application features on top of the cluster state: watches, listings, hooks and snapshots."""
