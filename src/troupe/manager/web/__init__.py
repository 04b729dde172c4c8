"""The web UI the manager serves at ``/`` (see docs/webui.md): server-rendered pages, a little
plain JavaScript, and third-party browser files committed under ``static/vendor``.

Kept import-free: :mod:`.pages` imports ``deps`` and is loaded by ``create_app``; nothing
outside this package but ``create_app`` imports it (import-linter contracts in pyproject.toml).
"""
