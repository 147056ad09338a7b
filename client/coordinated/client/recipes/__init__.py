"""Recipes on the client: each is one module of flows with a blocking and an asyncio class
(docs/applications.md, "Adding a call or a recipe")."""
