"""The models' config.json as vLLM reads it (`model_configs.yaml`, keyed like models.yaml): what the engine check
hands vLLM, and the sizes start-up facts are checked against (the attention heads a tensor-parallel rank holds)."""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any

from stackpin.yamlio import load_data


@cache
def _configs() -> dict[str, Any]:
    data: dict[str, Any] = load_data(resources.files(__package__).joinpath("model_configs.yaml").read_text("utf-8"))
    return data


def model_config(key: str) -> dict[str, Any] | None:
    """The config.json of catalog model `key`, None when the catalog has none."""
    entry = _configs().get(key)
    return None if entry is None else dict(entry["config"])


def attention_heads(key: str) -> int | None:
    """num_attention_heads of model `key` (of its text_config, which vLLM flattens), None when unknown."""
    config = model_config(key)
    if config is None:
        return None
    text = config.get("text_config", config)
    heads = text.get("num_attention_heads", config.get("num_attention_heads"))
    return heads if isinstance(heads, int) else None
