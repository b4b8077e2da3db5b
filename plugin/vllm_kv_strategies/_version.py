"""The package version, in a module of its own so that any module can import
it without importing the package's ``__init__`` (no import back up the layers)."""

__version__ = "0.1.0"
