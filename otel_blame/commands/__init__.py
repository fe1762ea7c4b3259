"""The commands: the top layer, which composes the others (nothing below imports from here)."""
