"""The manager's read side: every look-up and list that the API and the web pages show, and
the one rule of who sees which session (:func:`troupe.manager.reads.sessions.owner_scope`).

Routes (``routes/``) and pages (``web/``) both read through here, so a page shows what the
CLI shows; writes stay in ``life/`` and the registry. Modules: ``sessions`` (references,
look-ups, pages of the list), ``wire`` (stored rows -> wire models), ``agents`` (agents and
their images), ``folders``, ``users``.
"""
