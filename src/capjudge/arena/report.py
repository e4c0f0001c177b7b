"""``capjudge arena --html``: the leaderboard, the length check and every battle, as one page of
the HTML report (:mod:`capjudge.report`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from capjudge.arena.formats import number as _n
from capjudge.arena.formats import percent as _p
from capjudge.report.model import Page, Section, StatTable
from capjudge.report.pages import thumb_cache
from capjudge.report.records import load_results_file, results_section


def arena_page(result: Any, battles_file: str | Path, *, images: str | Path | None = None, command: str = "") -> Page:
    """The page of an :class:`~capjudge.arena.run.ArenaResult` whose battles are in ``battles_file``."""
    d = result.to_dict()
    thumbs = thumb_cache(images, [battles_file])
    page = Page(title="capjudge arena: " + ", ".join(d["models"]), thumbs=thumbs, command=command)
    page.facts = [
        ("protocol", d["protocol"] + (f" against {d['baseline']}" if d["baseline"] else "")),
        ("judge", f"{d['method']} ({d['mode']}) on {d['backend']}"),
        ("battles won / tied / failed", f"{d['battles']['won']} / {d['battles']['ties']} / {d['battles']['failed']}"),
        ("images", str(d["images"]["in_arena"])),
        ("position flips", _p(d["position_flip_share"])),
    ]
    lc = any("lc_win_rate" in e for e in d["leaderboard"])
    header = ["#", "model", "BT", "95% CI", "win rate", "Elo", "battles", "W/L/T", "failed", "flips", "words", "missing"] + (["LC win rate"] if lc else [])
    rows = [
        [str(e["rank"]), e["model"], _n(e["bt"]), f"{_n(e['ci'][0])} - {_n(e['ci'][1])}", _p(e["win_rate"]), _n(e["elo"]), str(e["battles"]), f"{e['wins']}/{e['losses']}/{e['ties']}", str(e["failed"]), _p(e["position_flip_share"]), _n(e["mean_words"], 1), str(e["missing"])]
        + ([_p(e.get("lc_win_rate"))] if lc else [])
        for e in d["leaderboard"]
    ]
    board = Section("Leaderboard", stats=[StatTable("leaderboard", header, rows, note="BT: Bradley-Terry strength on the Elo scale (1000 + 400 theta / ln 10), 95% bootstrap CI over images; flips: battles whose two orders disagreed")])
    board.notes = list(d["notes"])
    length = d["length"]
    board.stats.append(
        StatTable(
            "caption length",
            ["word difference", "battles", "longer caption's win rate"],
            [[b["words"], str(b["battles"]), _p(b["longer_win_rate"])] for b in length["bins"]] + [["all", str(sum(b["battles"] for b in length["bins"])), _p(length["longer_win_rate"])]],
            note=f"{length['equal_length']} battle(s) of equal length",
        )
    )
    page.sections.append(board)
    page.sections.append(results_section(load_results_file(battles_file), thumbs, title="battles", table_id="battles"))
    return page
