"""lxcfix: find, prove and safely repair broken device passthrough in LXC containers."""

__version__ = "0.1.0"
