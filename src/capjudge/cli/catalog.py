"""``capjudge methods`` and ``capjudge judges``: the judging methods and the judge presets."""

from __future__ import annotations

import argparse
from typing import Any

from capjudge.cli.aliases import add_format
from capjudge.core.errors import EXIT_OK


def register(sub: Any) -> None:
    """Add ``methods`` and ``judges`` to an argparse subparsers object."""
    p = sub.add_parser("methods", help="list the judging methods: source, decoding, parsing, options")
    add_format(p, help="table (default) or json: one JSON object per method", json_alias=True)
    p.set_defaults(func=cmd_methods)

    p = sub.add_parser("judges", help="list the judge presets: chat format, system policy, image tokens, padding, dtype, backends")
    add_format(p, help="table (default) or json: one JSON object per preset", json_alias=True)
    p.set_defaults(func=cmd_judges)


def _method_rows() -> list[dict[str, Any]]:
    from capjudge.judges.answers import PARSERS
    from capjudge.prompts.registry import get_method, list_methods
    from capjudge.prompts.sources import SOURCES

    rows = []
    for name in list_methods():
        m = get_method(name)
        src = SOURCES[m.source]
        rows.append(
            {
                "method": name,
                "kind": m.kind,
                "scale": "verdict" if m.pairwise else f"{m.scale[0]:g}-{m.scale[1]:g}",
                "steps": 2 if m.two_step else 1,
                "references": m.needs_references,
                "smoothing": m.smoothing,
                "parse": PARSERS[m.parser].label,
                "decoding": m.decoding(),
                "options": m.option_defaults(),
                "source": src.short,
                "where": m.paper,
                "source_title": src.title,
                "source_url": src.url,
                "description": m.description,
                "paper_judge": m.paper_judge.as_row() if m.paper_judge is not None else None,
            }
        )
    return rows


def cmd_methods(args: argparse.Namespace) -> int:
    """``capjudge methods``."""
    import json

    rows = _method_rows()
    if args.format == "json":
        for row in rows:
            print(json.dumps(row, ensure_ascii=False))
        return EXIT_OK
    # Plain lines, never shortened: full names at any terminal width, also when piped.
    width = max(len(r["method"]) for r in rows)
    for r in rows:
        what = [r["kind"], "verdict A, B or tie" if r["kind"] == "pairwise" else f"scale {r['scale']}"]
        if r["steps"] == 2:
            what.append("two steps")
        if r["references"]:
            what.append("needs references")
        if r["smoothing"]:
            what.append("smoothed")
        print(f"{r['method']:<{width}}  {', '.join(what)}")
        pad = " " * (width + 2)
        print(f"{pad}source:   {r['source']}, {r['where']}")
        print(f"{pad}decoding: {r['decoding']}; parse: {r['parse']}")
        if r["options"]:
            print(f"{pad}options:  {'; '.join(_option_text(k, v) for k, v in r['options'].items())}")
        if r["paper_judge"]:
            print(f"{pad}judge:    {_judge_text(r['paper_judge'])}")
    print()
    print("Sources:")
    seen: dict[str, str] = {}
    for r in rows:
        if r["source_url"]:
            seen.setdefault(r["source"], f"{r['source_title']}, {r['source_url']}")
    for short, cite in seen.items():
        print(f"  {short}: {cite}")
    print("Method options: --method-option KEY=VALUE; every method also takes temperature=T.")
    print("judge: the judge behind the paper's numbers; without --backend, score / compare / arena run it (another judge's numbers are not directly comparable).")
    return EXIT_OK


_OPTION_VALUE = {"vqa_dir": "DIR"}
"""How ``capjudge methods`` names the value of a method option that takes any text."""


def _option_text(name: str, default: Any) -> str:
    """One method option as ``capjudge methods`` shows it: its values (``score=plain|expected``,
    ``vqa_dir=DIR``) and its default (an empty one as ``(none)``)."""
    from capjudge.prompts.registry import OPTION_CHOICES

    values = "|".join(OPTION_CHOICES[name]) if name in OPTION_CHOICES else _OPTION_VALUE.get(name, "VALUE")
    shown = default if default not in (None, "") else "(none)"
    return f"{name}={values}, default {shown}"


def _judge_text(judge: dict[str, Any]) -> str:
    """A method's paper judge as ``capjudge methods`` shows it: the model, how the paper served it,
    where its code names it, and the default ``--backend`` (or that there is none)."""
    default = f"default --backend {judge['default_backend']}" if judge["default_backend"] else "no default --backend (give one)"
    return f"the paper's: {judge['model']}, {judge['served']} ({judge['where']}); {default}"


# --------------------------------------------------------------------------------------- judges
def cmd_judges(args: argparse.Namespace) -> int:
    """``capjudge judges``."""
    import json

    from capjudge.backends.presets import METHOD_SYSTEM, list_presets

    presets = list_presets()
    if args.format == "json":
        for preset in presets:
            print(json.dumps(preset.as_row(), ensure_ascii=False))
        return EXIT_OK
    # Plain lines, never shortened (as `capjudge methods`).
    width = max(len(p.name) for p in presets)
    for p in presets:
        system = {METHOD_SYSTEM: "method's sentence", None: "model's default"}.get(p.default_system, repr(p.default_system))
        print(f"{p.name:<{width}}  {p.family}")
        pad = " " * (width + 2)
        print(f"{pad}chosen for: {p.detected_by or 'model_type ' + ', '.join(p.model_types)}; backends: {', '.join(p.backends)}")
        print(f"{pad}chat {p.chat_format}, system {p.system_policy} ({system}), images {p.image_tokens}, pad_square {str(p.pad_square).lower()}, GPU dtype {p.dtype}")
        if p.notes:
            print(f"{pad}{p.notes}")
    print()
    print("hf: models choose their preset from config.json (model_type) unless --judge names one; --backend-opt")
    print("chat_format=, system_policy=, pad_square=, dtype= override single settings. llamacpp: models choose")
    print("their prompt format from the GGUF headers; --judge sets it (prompt_format) and the system default.")
    print("API servers apply the model's own chat template: presets do not apply to them.")
    return EXIT_OK
