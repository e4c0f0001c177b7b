"""Every paper template renders to the paper's prompt text (compared with the seeds' own text).

These comparisons collapse whitespace: the papers' extracted text lost its line breaks, so it
cannot say where they were. Layout is checked byte for byte against the official code, whose
strings are exact, in test_official_fidelity.py.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from capjudge.prompts import (
    LLAVA_V1_SYSTEM,
    TemplateError,
    get_method,
    get_template,
    list_methods,
    register_template,
)

SEEDS = Path(__file__).resolve().parents[2] / "shared" / "seeds"


def norm(text: str) -> str:
    return " ".join(text.split())


def seed_text(prefix: str) -> str:
    files = sorted(SEEDS.glob(f"{prefix}_*.txt"))
    if not files:
        # CI always has ../shared beside the clone: there a missing seed is a failure, not a skip.
        if os.environ.get("CI"):
            pytest.fail(f"seed {prefix} not found under {SEEDS}")
        pytest.skip(f"seed {prefix} not found under {SEEDS}")
    # The seeds keep the papers' thin spaces (U+2009) inside some prompt lines.
    return files[0].read_text(encoding="utf-8").replace("\u2009", " ")


def table5_row(label: str) -> str:
    """One row of seed 001's Table 5 (the prompt after the method label)."""
    text = seed_text("001")
    table = text[text.index("Table 5:") :]
    for line in table.splitlines():
        if line.startswith(label + " "):
            return line[len(label) + 1 :].strip()
    raise AssertionError(f"row {label!r} not in Table 5")


def test_vanilla_matches_table5() -> None:
    assert norm(get_template("vanilla").render(caption="{caption}")) == norm(table5_row("Vanilla"))


def test_reference_matches_table5() -> None:
    rendered = get_template("reference").render(caption="{caption}", references=["{references}"])
    assert norm(rendered) == norm(table5_row("Reference"))


def test_description_and_visce2_steps_match_table5() -> None:
    assert norm(get_template("description_context").render()) == norm(table5_row("Description - Step 1"))
    assert norm(get_template("visce2_context").render()) == norm(table5_row("VisCE2- Step 1"))
    step2 = table5_row("Description - Step 2 VisCE2- Step 2")
    for name in ("description_score", "visce2_score"):
        assert norm(get_template(name).render(caption="{caption}", context="{context}")) == norm(step2)


def fleur_fragments() -> list[str]:
    """The FLEUR prompt as seed 004 prints it (Sec. 3.1), from its LaTeX-flattened lines."""
    text = seed_text("004")
    base = re.search(r"1\)\{ (Your task is to evaluate.*?\(Print Real Number Score ONLY\))", text).group(1)
    criteria = re.search(r"2\)\{ (Grading Criteria:.*?clearly describes the image\.)", text).group(1)
    assert "Caption: {caption}" in text and "Score(Choose a rating from 0.0 to 1.0):" in text
    return [base, criteria, "Caption: {caption}", "Score(Choose a rating from 0.0 to 1.0):"]


def test_fleur_matches_seed_004() -> None:
    rendered = get_template("fleur").render(caption="{caption}")
    assert norm(rendered) == norm(" ".join(fleur_fragments()))


def test_ref_fleur_matches_seed_004() -> None:
    text = seed_text("004")
    sec = text[text.index("3.3 RefFLEUR") : text.index("3.4 Prompt for Explanation")]
    rendered = norm(get_template("ref_fleur").render(caption="{candidate caption}", references=["{reference caption set}"]))
    # The paper prints only the changed parts (the rest is FLEUR's, shown as '...').
    for line in sec.splitlines():
        line = line.strip()
        if line.startswith(("Your task", "1.0:", "Reference Captions:", "Candidate Caption:", "{candidate caption}")):
            assert norm(line) in rendered, line
    fleur_criteria = fleur_fragments()[1]
    assert norm(fleur_criteria) in rendered
    assert rendered.index("Reference Captions:") < rendered.index("Candidate Caption:")


def test_explain_follow_up_is_the_papers() -> None:
    text = seed_text("004")
    assert "“Why? Tell me the reason.”" in text
    assert get_template("fleur_explain").render() == "Why? Tell me the reason."


def test_listwise_matches_seed_002_fig4() -> None:
    text = seed_text("002")
    start = text.index("I will give you a picture and some descriptions.")
    fig = text[start : text.index("Figure 4: The prompt of the GPT-4V evaluator.")]
    names = re.findall(r"^\s*\d\. (\{.*\})\s*$", fig, flags=re.M)
    assert len(names) == 8
    rendered = get_template("listwise").render(captions=names)
    assert norm(rendered) == norm(fig.replace(", 6: score, 7: score, 8: score}", ", 6: score, 7: score, 8: score}"))


def test_gpt4v_templates_use_seed_003_terms() -> None:
    text = norm(seed_text("003"))
    phrase = "which of the two candidate answers is better, or whether the two answers are of equal quality"
    assert phrase in text
    pair = norm(get_template("gpt4v_pairwise").render(caption_a="X", caption_b="Y"))
    assert phrase in pair
    for label in ("Answer 1", "Answer 2", "Tie"):
        assert label in text and label in pair
    assert pair.index("Answer 1: X") < pair.index("Answer 2: Y")
    grade = norm(get_template("gpt4v_grade").render(caption="X"))
    assert "scale of 100" in text and "0-100" in grade and "Caption: X" in grade


def test_every_method_renders_and_has_a_source() -> None:
    expected = {"vanilla", "reference", "description", "visce2", "fleur", "ref-fleur", "gpt4v-grade", "gpt4v-pairwise", "listwise"}
    assert expected <= set(list_methods())
    for name in list_methods():
        m = get_method(name)
        assert m.paper, name
        assert len(m.template_hash) == 16
        for tpl in m.templates():
            assert tpl.source.lstrip().startswith("{#"), f"{tpl.name}: header comment naming the paper"
    assert get_method("fleur").system == LLAVA_V1_SYSTEM
    assert get_method("visce2").two_step and get_method("description").two_step
    assert get_method("FLEUR").name == "fleur"  # names are case-insensitive
    assert get_method("ref_fleur").name == "ref-fleur"


def test_code_variants_are_the_repositorys_prompt() -> None:
    text = get_template("visce2_score_code").render(caption="CAP", context="CTX")
    assert text.startswith("\nOn a precise scale")
    assert "Candidate caption:\nCandidate:\nCAP\n\n" in text
    assert "Visual Context:\nCTX\n\n" in text


def test_user_templates_are_sandboxed_and_strict(tmp_path) -> None:
    tpl = register_template("mine", "Rate {{ caption }} from 0 to 100.", overwrite=True)
    assert tpl.sandboxed and tpl.render(caption="a cat") == "Rate a cat from 0 to 100."
    f = tmp_path / "t.j2"
    f.write_text("Caption: {{ caption }} / refs: {{ references | join('; ') }}")
    tpl2 = register_template("from-file", path=f, overwrite=True)
    assert tpl2.render(caption="c", references=["a", "b"]) == "Caption: c / refs: a; b"
    evil = register_template("evil", "{{ caption.__class__.__mro__[1].__subclasses__() }}", overwrite=True)
    with pytest.raises(TemplateError):
        evil.render(caption="x")
    with pytest.raises(TemplateError):
        register_template("broken", "{% if %}", overwrite=True)
    with pytest.raises(TemplateError, match="needs a variable"):
        get_template("fleur").render()
    with pytest.raises(ValueError, match="already exists"):
        register_template("fleur", "x")
