"""Apps in a session's main1 (docs/apps.md): starting them and their state (:mod:`.state`),
the links into them (:mod:`.links`)."""
