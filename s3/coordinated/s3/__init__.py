"""The S3 client the archive and the snapshot repositories share, and its settings."""
