"""troupe: cluster compute sessions on Docker."""

__version__ = "0.1.0"
