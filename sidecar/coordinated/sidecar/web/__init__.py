"""The HTTP API: handlers, their types, the OpenAPI document, the server and HTTPS, access tokens."""
