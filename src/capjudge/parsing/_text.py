"""Renamed :mod:`capjudge.parsing.text`; kept only until judges/judge.py imports the new path."""

from capjudge.parsing.text import clean as clean
from capjudge.parsing.text import coerce_text as coerce_text
