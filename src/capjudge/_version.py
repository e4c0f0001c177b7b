"""capjudge's version, in one place: the package, the reports and the cache read it from here."""

__version__ = "0.1.0"
