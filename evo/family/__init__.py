"""A kernel family: its manifest, parameter space, constraint expressions, headers and rendering."""
