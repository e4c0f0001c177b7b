"""Rank captioning models by pairwise battles judged by a VLM (``capjudge arena``).

>>> from capjudge.arena import run_arena
>>> res = run_arena({"ours": "ours.jsonl", "blip2": "blip2.jsonl"}, backend="openai:gpt-4o",
...                 baseline="blip2", out="battles.jsonl")                 # doctest: +SKIP
>>> res.leaderboard.entries[0]["model"], res.leaderboard.entries[0]["ci"]   # doctest: +SKIP

Modules, one job each: :mod:`~capjudge.arena.load` (the models' captions, matched by id or image),
:mod:`~capjudge.arena.battles` (which battles, who is shown first, judging them with resume),
:mod:`~capjudge.arena.ranking` (win rate, Bradley-Terry, Elo, bootstrap CIs, length check),
:mod:`~capjudge.arena.run` (:func:`run_arena`), :mod:`~capjudge.arena.report` (the HTML page),
:mod:`~capjudge.arena.formats` (how its numbers are shown), :mod:`~capjudge.arena.caparena`
(CapArena-Auto's protocol, :func:`run_caparena`) and :mod:`~capjudge.arena.caparena_files`
(CapArena's battle files, scored as ``caparena_auto_scores.py``); the subcommand is
:mod:`capjudge.cli.arena`. Nothing heavy is imported until used.
"""

from __future__ import annotations

from capjudge.core.lazyexport import lazy_attributes

_LAZY = {
    "run_arena": "capjudge.arena.run",
    "rank_file": "capjudge.arena.run",
    "ArenaResult": "capjudge.arena.run",
    "ArenaInputError": "capjudge.arena.load",
    "Leaderboard": "capjudge.arena.ranking",
    "rank": "capjudge.arena.ranking",
    "fit_bradley_terry": "capjudge.arena.ranking",
    "elo_ratings": "capjudge.arena.ranking",
    "run_caparena": "capjudge.arena.caparena",
    "load_assignments": "capjudge.arena.caparena",
    "CapArenaResult": "capjudge.arena.caparena",
}

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY)
