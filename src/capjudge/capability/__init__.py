"""CAPability's released judge outputs read as ``eval.py`` reads them (:mod:`.results`)."""

from capjudge.capability.results import ResultsError, capability_results, format_results

__all__ = ["ResultsError", "capability_results", "format_results"]
