"""Apps in a session's main1 (docs/apps.md), served through the manager: starting them and
their state (:mod:`.state`), the one-time links into them (:mod:`.links`), the proxy on the
apps' own origins (:mod:`.proxy`)."""
