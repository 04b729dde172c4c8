"""The agent: one host's Docker engine, offered to the manager in process or over HTTP.

It knows only the shared :mod:`troupe.api` (wire models, errors, exec frames), never the
manager or the client; :class:`troupe.agent.docker_backend.DockerAgent` is its one entry.
"""
