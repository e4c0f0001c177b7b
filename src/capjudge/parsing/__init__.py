"""Parsing judge answers: scores, pairwise verdicts and listwise score lists."""

from capjudge.parsing.lists import parse_score_list
from capjudge.parsing.scores import ScoreParse, parse_score, parse_score_details
from capjudge.parsing.verdicts import Verdict, VerdictParse, parse_verdict, parse_verdict_details

__all__ = [
    "ScoreParse",
    "Verdict",
    "VerdictParse",
    "parse_score",
    "parse_score_details",
    "parse_score_list",
    "parse_verdict",
    "parse_verdict_details",
]
