"""Drop-in shapes of the Azure "RAG chat" splitter (``prepdocslib.textsplitter``).

Code written against that module runs unchanged after an import change::

    from chunking.compat.azure import Page, SentenceTextSplitter
    splitter = SentenceTextSplitter(max_tokens_per_section=500)
    splitter.max_section_length = 800          # honoured on the next call
    for chunk in splitter.split_pages([Page(0, 0, "Some text. More text.")]):
        print(chunk.page_num, chunk.text)

The work is done by chunkyard's ``sentence`` strategy in ``reference_mode`` (its
module docstring lists what that mode reproduces) and by ``simple``'s slicing,
with the slice index reported as ``page_num`` as the reference does. The output
is byte-identical to the reference's 2025 ``SentenceTextSplitter`` on the seed's
examples and the corpus PDFs (``tests/chunking/test_compat_azure_reference_outputs.py``)
except where the reference scrambles text: when a fragment carried across a page
break does not fit, the reference trims it and puts the rest before it; chunkyard
carries it whole and in order. The midpoint overlap of a boundary-less run is taken
once (the reference compounds it per recursion level). Token counts are
``len(cl100k_base.encode(text))`` from the offline encoding, and text containing
``<|endoftext|>`` is counted as ordinary text instead of raising.
"""

from __future__ import annotations

from abc import ABC
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Iterator

from chunking.model import Page as ModelPage
from chunking.model import ParsedDocument
from chunking.segmenter import CJK_SENTENCE_ENDINGS as _CJK_SENTENCE_ENDINGS
from chunking.segmenter import CJK_WORD_BREAKS as _CJK_WORD_BREAKS
from chunking.segmenter import STANDARD_SENTENCE_ENDINGS as _STANDARD_SENTENCE_ENDINGS
from chunking.segmenter import STANDARD_WORD_BREAKS as _STANDARD_WORD_BREAKS
from chunking.strategies.sentence import SentenceConfig, chunk_sentence, split_oversized
from chunking.strategies.simple import slice_spans
from chunking.tokenizers import Tokenizer

ENCODING_MODEL = "text-embedding-ada-002"  # cl100k_base
DEFAULT_OVERLAP_PERCENT = 10
DEFAULT_SECTION_LENGTH = 1000
STANDARD_SENTENCE_ENDINGS: list[str] = list(_STANDARD_SENTENCE_ENDINGS)
CJK_SENTENCE_ENDINGS: list[str] = list(_CJK_SENTENCE_ENDINGS)
STANDARD_WORD_BREAKS: list[str] = list(_STANDARD_WORD_BREAKS)
CJK_WORD_BREAKS: list[str] = list(_CJK_WORD_BREAKS)

__all__ = [
    "CJK_SENTENCE_ENDINGS",
    "CJK_WORD_BREAKS",
    "Chunk",
    "DEFAULT_OVERLAP_PERCENT",
    "DEFAULT_SECTION_LENGTH",
    "ENCODING_MODEL",
    "Page",
    "STANDARD_SENTENCE_ENDINGS",
    "STANDARD_WORD_BREAKS",
    "SentenceTextSplitter",
    "SimpleTextSplitter",
    "SplitPage",
    "TextSplitter",
]


@dataclass
class Page:
    """One page of input: ``page_num`` is 0-based, ``offset`` its char offset in the document."""

    page_num: int
    offset: int
    text: str
    images: list[Any] = field(default_factory=list)
    tables: list[Any] = field(default_factory=list)


@dataclass
class Chunk:
    """One output chunk and the page that owns it."""

    page_num: int
    text: str
    images: list[Any] = field(default_factory=list)


SplitPage = Chunk  # the name in older versions of the reference


class TextSplitter(ABC):
    """Splits a list of pages into smaller chunks."""

    def split_pages(self, pages: list[Page]) -> Iterator[Chunk]:
        raise NotImplementedError


class SentenceTextSplitter(TextSplitter):
    """Sentence-aware, page-aware splitter: chunkyard's ``sentence`` strategy."""

    def __init__(self, max_tokens_per_section: int = 500) -> None:
        self.sentence_endings: list[str] = STANDARD_SENTENCE_ENDINGS + CJK_SENTENCE_ENDINGS
        self.word_breaks: list[str] = STANDARD_WORD_BREAKS + CJK_WORD_BREAKS
        self.max_section_length = DEFAULT_SECTION_LENGTH
        # Plain attributes the reference sets here and never reads again (its look-ahead
        # overlap is ``max_section_length * semantic_overlap_percent / 100`` at each call):
        # kept, settable, for code that reads or sets them.
        self.sentence_search_limit = 100
        self.max_tokens_per_section = max_tokens_per_section
        self.section_overlap = int(self.max_section_length * DEFAULT_OVERLAP_PERCENT / 100)
        self.semantic_overlap_percent = DEFAULT_OVERLAP_PERCENT

    def config(self) -> SentenceConfig:
        """The strategy config the current attribute values stand for."""
        return SentenceConfig(
            max_tokens_per_section=self.max_tokens_per_section,
            max_section_length=self.max_section_length,
            semantic_overlap_percent=self.semantic_overlap_percent,
            sentence_endings=tuple(self.sentence_endings),
            word_breaks=tuple(self.word_breaks),
            reference_mode=True,
        )

    def split_pages(self, pages: Iterable[Page]) -> Iterator[Chunk]:
        # A page without text (None) is a blank page, as the reference reads ``page.text or ""``.
        pages = [page if page.text is not None else replace(page, text="") for page in pages]
        doc = _document(pages)
        by_number = {p.page_num: p for p in pages}
        for chunk in chunk_sentence(doc, self.config(), _tokenizer()):
            page_num = chunk.metadata["page_num"]
            yield Chunk(page_num=page_num, text=chunk.text, images=_images_in(by_number.get(page_num), chunk.text))

    def split_page_by_max_tokens(self, page_num: int, text: str) -> Iterator[Chunk]:
        """The recursive split of one over-cap span, pieces within ``max_tokens_per_section``."""
        for start, end in split_oversized(text, _tokenizer(), self.config()):
            yield Chunk(page_num=page_num, text=text[start:end])


class SimpleTextSplitter(TextSplitter):
    """Fixed-length slices, blind to content (used for JSON): chunkyard's ``simple``."""

    def __init__(self, max_object_length: int = 1000) -> None:
        self.max_object_length = max_object_length

    def split_pages(self, pages: Iterable[Page]) -> Iterator[Chunk]:
        """As the reference: ``page_num`` is the slice's index (0 when the text is one slice),
        not the page its characters come from (the ``simple`` strategy reports that)."""
        doc = _document(list(pages))
        for start, end in slice_spans(doc.text, self.max_object_length):
            yield Chunk(page_num=start // self.max_object_length, text=doc.text[start:end])


def _document(pages: list[Page]) -> ParsedDocument:
    """The pages as one document; offsets are recomputed from the texts, as the reference joins them."""
    model_pages, offset = [], 0
    for page in pages:
        if not isinstance(page.text, str):
            raise TypeError(f"Page {page.page_num}: text must be str, got {type(page.text).__name__}")
        model_pages.append(ModelPage(page_num=page.page_num, char_offset=offset, text=page.text))
        offset += len(page.text)
    return ParsedDocument(doc_id="azure-compat", text="".join(p.text for p in pages), pages=model_pages)


def _images_in(page: Page | None, text: str) -> list[Any]:
    """The page's images whose placeholder (a ``<figure ...>`` tag) appears in the chunk."""
    if page is None:
        return []
    found = []
    for image in page.images:
        placeholder = getattr(image, "placeholder", None)
        if placeholder is None and isinstance(image, dict):
            placeholder = image.get("placeholder")
        if placeholder and placeholder in text:
            found.append(image)
    return found


def _tokenizer() -> Tokenizer:
    from chunking import default_tokenizer

    return default_tokenizer("cl100k_base")
