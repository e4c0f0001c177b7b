"""Prompt templates (Jinja, one file each) and the registry of judging methods."""

from capjudge.prompts.registry import (
    LLAVA_V1_SYSTEM,
    Method,
    PromptTemplate,
    TemplateError,
    UnknownMethodError,
    get_method,
    get_template,
    list_methods,
    list_templates,
    register_method,
    register_template,
)

__all__ = [
    "LLAVA_V1_SYSTEM",
    "Method",
    "PromptTemplate",
    "TemplateError",
    "UnknownMethodError",
    "get_method",
    "get_template",
    "list_methods",
    "list_templates",
    "register_method",
    "register_template",
]
