"""Talking to the other nodes: the transport, chunked transfers, transport authentication and TLS."""
