"""Authentication on the client port: who a request is made as (a `Principal`), from a bearer token of the tokens
file or of another realm (authenticators.py), or from a client certificate's subject."""
