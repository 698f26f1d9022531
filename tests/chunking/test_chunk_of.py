"""``Chunk.of(values)`` is ``Chunk(**values)``: same validator, same result, same errors; and
``Chunk.many(values)`` is ``Chunk.of`` of each."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from chunking.model import Chunk

VALUES = [
    {"text": "abc", "char_start": 0, "char_end": 3, "token_count": 1},
    {"text": "é😀", "char_start": 4, "char_end": 6, "token_count": 2, "page_start": 1, "page_end": 2, "verbatim": False,
     "metadata": {"page_num": 1, "overlap_chars": 5}},
    {"text": "x", "char_start": "7", "char_end": 8.0, "token_count": True, "heading_path": ("A", "B"), "block_ids": ["b1"]},
]


@pytest.mark.parametrize("values", VALUES)
def test_of_builds_the_chunk_the_constructor_builds(values):
    built, made = Chunk(**values), Chunk.of(dict(values))
    assert type(made) is Chunk
    assert made == built
    assert made.model_dump() == built.model_dump()
    assert made.model_fields_set == built.model_fields_set  # what model_dump(exclude_unset=True) reads
    assert made.model_copy(update={"page_start": 3}).page_start == 3


def test_many_builds_the_chunks_of_builds_one_by_one():
    made = Chunk.many([dict(values) for values in VALUES])
    built = [Chunk.of(dict(values)) for values in VALUES]
    assert [type(chunk) for chunk in made] == [Chunk] * len(VALUES)
    assert made == built
    assert [chunk.model_fields_set for chunk in made] == [chunk.model_fields_set for chunk in built]
    assert Chunk.many([]) == []


BAD = [
        {"text": None, "char_start": 0, "char_end": 1, "token_count": 1},
        {"text": "a", "char_start": "x", "char_end": 1, "token_count": 1},
        {"text": "a", "char_start": 0, "char_end": 1},
        {"text": "a", "char_start": 0, "char_end": 1, "token_count": 1, "metadata": {1: "not a str key"}},
        {"text": "a", "char_start": 0, "char_end": 1, "token_count": 1, "heading_path": "not a list"},
]


@pytest.mark.parametrize("bad", BAD)
def test_of_rejects_what_the_constructor_rejects(bad):
    with pytest.raises(ValidationError) as by_constructor:
        Chunk(**bad)
    with pytest.raises(ValidationError) as by_of:
        Chunk.of(dict(bad))
    assert by_of.value.errors() == by_constructor.value.errors()


@pytest.mark.parametrize("bad", BAD)
def test_many_rejects_what_of_rejects_at_the_chunk_s_index(bad):
    with pytest.raises(ValidationError) as by_of:
        Chunk.of(dict(bad))
    with pytest.raises(ValidationError) as by_many:
        Chunk.many([dict(VALUES[0]), dict(bad)])
    assert by_many.value.errors() == [{**error, "loc": (1, *error["loc"])} for error in by_of.value.errors()]
