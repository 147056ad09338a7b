"""Recipes on the client: each is one module of flows with a blocking and an asyncio class
(docs/applications.md, "How the client is built, and adding a call or a recipe")."""
