"""The node's data directory: the state store, its durable files and group commit."""
