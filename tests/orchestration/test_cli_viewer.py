"""The chunk viewer: the HTML's segments tile the text, name the right chunks, mark overlaps, escape everything."""

from html.parser import HTMLParser

from chunking import chunk_text
from chunking.tokenizers import CharTokenizer
from orchestration.viewer import ViewChunk, render_viewer, safe_name, segments, viewer_path

CHAR = CharTokenizer()


class Columns(HTMLParser):
    """strategy -> list of (start, end, chunk ids, title, text) of its segments; also every <script> body."""

    def __init__(self):
        super().__init__()
        self.columns: dict[str, list] = {}
        self.scripts: list[str] = []
        self._strategy = None
        self._segment = None
        self._in_script = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "section":
            self._strategy = attrs["data-strategy"]
            self.columns[self._strategy] = []
        elif tag == "span" and "data-start" in attrs:
            ids = tuple(int(i) for i in attrs["data-chunks"].split())
            self._segment = [int(attrs["data-start"]), int(attrs["data-end"]), ids, attrs["title"], ""]
            self.columns[self._strategy].append(self._segment)
        elif tag == "script":
            self._in_script = True
            self.scripts.append("")

    def handle_endtag(self, tag):
        if tag == "span":
            self._segment = None
        elif tag == "script":
            self._in_script = False

    def handle_data(self, data):
        if self._in_script:
            self.scripts[-1] += data
        elif self._segment is not None:
            self._segment[4] += data


def parse(page: str) -> Columns:
    parser = Columns()
    parser.feed(page)
    parser.close()
    return parser


def test_segments_tile_the_text_and_list_covering_chunks():
    chunks = [ViewChunk(0, 0, 10, 10), ViewChunk(1, 6, 20, 14), ViewChunk(2, 22, 30, 8)]
    pieces = segments(32, chunks)
    assert [(p.start, p.end, p.chunks) for p in pieces] == [
        (0, 6, (0,)), (6, 10, (0, 1)), (10, 20, (1,)), (20, 22, ()), (22, 30, (2,)), (30, 32, ()),
    ]


def test_page_shows_each_strategy_side_by_side_with_exact_offsets_and_overlaps():
    text = " ".join(f"Sentence {i} is here." for i in range(60))
    by_strategy = {}
    for name, config in (("recursive", {"chunk_token_size": 120, "chunk_overlap_token_size": 30}),
                         ("sentence_window", {"chunk_size": 100, "overlap": 40})):
        chunks = chunk_text(text, strategy=name, tokenizer=CHAR, **config)
        by_strategy[name] = [ViewChunk(i, c.char_start, c.char_end, c.token_count, 0, 0, ("Intro", "Part 1"))
                             for i, c in enumerate(chunks)]
    page = parse(render_viewer("notes/a.txt", text, by_strategy))
    assert list(page.columns) == ["recursive", "sentence_window"]
    for name, chunks in by_strategy.items():
        column = page.columns[name]
        assert "".join(seg[4] for seg in column) == text  # segments tile the text, in order
        assert [seg[0] for seg in column[1:]] == [seg[1] for seg in column[:-1]]
        for start, end, ids, title, body in column:
            assert body == text[start:end]
            assert ids == tuple(c.index for c in chunks if c.char_start <= start and end <= c.char_end)
            if len(ids) > 1:
                assert title.startswith("overlap of chunk")
            elif ids:
                chunk = chunks[ids[0]]
                assert title == (f"chunk {chunk.index}: {chunk.token_count} tokens, chars {chunk.char_start}-"
                                 f"{chunk.char_end}, page 1, heading: Intro > Part 1")
        # The overlaps the strategy made are exactly the segments covered twice.
        overlapped = sum(end - start for start, end, ids, _, _ in column if len(ids) > 1)
        expected = sum(max(0, a.char_end - b.char_start) for a, b in zip(chunks, chunks[1:]))
        assert overlapped == expected > 0


def test_hostile_document_text_and_names_are_escaped():
    text = 'Hi <script>alert("x")</script> & <img src=x onerror=alert(1)> "quoted"'
    chunks = [ViewChunk(0, 0, len(text), 20, 0, 1, ('<b>"head"</b>',))]
    html_page = render_viewer('<script>doc</script>', text, {"re<cursive": chunks})
    assert "<script>alert" not in html_page and "<img" not in html_page and "<b>" not in html_page
    page = parse(html_page)
    assert len(page.scripts) == 1 and "alert" not in page.scripts[0]  # only the page's own script
    (column,) = page.columns.values()
    assert list(page.columns) == ["re<cursive"]
    assert "".join(seg[4] for seg in column) == text  # the text survives escaping unchanged
    assert column[0][3].endswith('pages 1-2, heading: <b>"head"</b>')


def test_viewer_path_is_one_safe_file_per_document_beside_the_database(tmp_path):
    db = tmp_path / "data" / "chunkyard.duckdb"
    a, b = viewer_path(db, "notes/x,y.txt"), viewer_path(db, "notes/x_y.txt")
    assert a.parent == (tmp_path / "data" / "viewer").resolve() and a.suffix == ".html"
    assert a != b and "/" not in safe_name("../../etc/passwd") and not safe_name("../x").startswith(".")
