"""The table of backend kinds (capjudge.backends.kinds): one entry per registered kind, and the
places that decide by kind agree with it."""

from __future__ import annotations

import importlib
import warnings

import pytest

from capjudge.backends import kinds
from capjudge.backends.registry import check_backend, list_backends, register_backend


def test_every_registered_kind_has_an_entry_whose_module_and_class_exist() -> None:
    assert set(kinds.names()) >= {"hf", "llamacpp", "openai", "azure", "openai-compatible", "scripted"}
    assert set(list_backends()) <= set(kinds.names())
    for name in ("openai", "azure", "openai-compatible", "scripted"):
        entry = kinds.get(name)
        module, cls = entry.implementation.split(":")
        assert hasattr(importlib.import_module(module), cls)
        assert hasattr(importlib.import_module(entry.module), entry.factory.split(":")[1])


def test_the_properties_of_the_builtin_kinds() -> None:
    assert kinds.api_kinds() == ("openai", "azure", "openai-compatible")
    assert kinds.local_kinds() == ("hf", "llamacpp", "vllm") == kinds.preset_kinds()
    assert kinds.text_as_text_kinds() == ("hf", "llamacpp")  # a vLLM server renders and tokenizes the prompt itself
    assert kinds.batch_kinds() == kinds.api_kinds()
    assert (kinds.key_variable("openai"), kinds.key_variable("azure"), kinds.key_variable("openai-compatible")) == ("OPENAI_API_KEY", "AZURE_OPENAI_API_KEY", None)
    assert kinds.is_api(" OpenAI ") and not kinds.is_api("scripted") and not kinds.is_local("scripted")
    assert kinds.of_spec("hf:llava-hf/llava-1.5-7b-hf").extra == "hf"
    assert "pip install 'capjudge[llamacpp]'" in kinds.get("llamacpp").install_hint()
    unknown = kinds.get("nope")
    assert not (unknown.api or unknown.local or unknown.batch or unknown.presets or unknown.text_as_text)


def test_a_registered_kind_joins_the_table_with_every_property_off() -> None:
    register_backend("kinds-test", "capjudge.backends.scripted:from_spec")
    try:
        assert "kinds-test" in kinds.names() and not kinds.is_api("kinds-test")
    finally:
        kinds.KINDS.pop("kinds-test", None)


def test_the_openai_backend_kinds_come_from_the_table() -> None:
    from capjudge.backends.openai import KINDS

    assert kinds.api_kinds() == KINDS


@pytest.mark.parametrize("spec", ["scripted:0.5", "openai-compatible:http://127.0.0.1:9/v1#m"])
def test_estimate_by_sampling_is_accepted_for_every_kind_as_a_judge_option(spec: str) -> None:
    check_backend(spec, estimate_by_sampling="4")
    with pytest.raises(ValueError, match="estimate_by_sampling"):
        check_backend(spec, estimate_by_sampling="many")


def test_the_moved_sampling_names_warn_once() -> None:
    import capjudge.backends.openai as openai_backend

    try:
        importlib.import_module("capjudge.judges.sampling")
    except ImportError:
        pytest.skip("capjudge.judges.sampling is not there yet")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert openai_backend.estimate_by_sampling is importlib.import_module("capjudge.judges.sampling").estimate_by_sampling
    assert not caught or issubclass(caught[0].category, DeprecationWarning)
