"""slurmpre's version, read by the package, the CLI, the templates and the build."""

__version__ = "0.1.0"
