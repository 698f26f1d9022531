"""Embedding text with context: the pure builder, and the rows the embeddings asset embeds."""

import hashlib

from fixture_store import DOCS
from resources.store import StoredChunk
from search.context import document_title, embedding_text, with_context


def test_embedding_text_prepends_title_and_heading_path():
    assert embedding_text("Body.", title="Guide", heading_path=["Setup", "Linux"]) == "Guide > Setup > Linux\n\nBody."
    # A first heading equal to the title is not repeated; blank parts and extra spaces go.
    assert embedding_text("Body.", title="Guide", heading_path=["Guide", " ", "Run  it"]) == "Guide > Run it\n\nBody."
    assert embedding_text("Body.") == "Body."


def test_document_title_is_the_first_heading_else_the_file_stem():
    assert document_title("  Getting started ", "getting-started.md", "getting-started.md") == "Getting started"
    assert document_title(None, "notes/field-guide.txt", "notes/field-guide.txt") == "field-guide"


def test_with_context_changes_the_embedded_text_and_its_hash_not_the_stored_chunk(store):
    rows = [StoredChunk(*r) for r in [(0, DOCS["boats.txt"].split("\n\n")[0], "sha-of-chunk", 10, 0, 80)]]
    [row] = with_context(store, "boats.txt", "para", rows)
    assert row.text == "boats > Top\n\n" + rows[0].text
    assert row.text_sha256 == hashlib.sha256(row.text.encode()).hexdigest() != rows[0].text_sha256
    assert (row.chunk_index, row.char_start, row.char_end) == (0, 0, 80)
    assert store.load_chunks("boats.txt", "para")[0].text == rows[0].text  # the store is untouched
