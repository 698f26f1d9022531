"""Resources: offline tokenizer loading and its error, embedding-model facts."""

import pytest

from chunking.tokenizers import TokenizerUnavailableError
from resources.tokenizer import TokenizerResource


def test_tokenizer_resource_loads_cl100k_offline():
    tokenizer = TokenizerResource().get_tokenizer()
    assert tokenizer.count("hello world") == 2
    assert tokenizer.count("a <|endoftext|> b") > 3  # special-token text counts as ordinary text


def test_unavailable_encoding_is_a_clear_error_naming_what_is_missing(monkeypatch):
    monkeypatch.delenv("TIKTOKEN_CACHE_DIR", raising=False)
    monkeypatch.delenv("DATA_GYM_CACHE_DIR", raising=False)
    with pytest.raises(TokenizerUnavailableError, match=r"'o200k_base'.*o200k_base_offline.*ships: cl100k_base"):
        TokenizerResource(encoding="o200k_base").get_tokenizer()
    with pytest.raises(TokenizerUnavailableError, match="no_such_encoding"):
        TokenizerResource(encoding="no_such_encoding").get_tokenizer()
