"""The sidecar: the asyncio/aiohttp shell that runs the sans-IO coordination core as a networked node."""
