"""The node's history of events: writing, reading, segments, retention, maintenance and the archive."""
