"""Text cleaning shared by the corpus extractors: markup to plain text, whitespace and Unicode
normalisation, junk filtering and the keys used for deduplication and the train/validation split.

Every function here is pure (text in, text out) so the tests can check it on small fixtures.
"""
import hashlib
import html
import html.parser
import re
import unicodedata

# --- normalisation ---------------------------------------------------------------------------

_SPACES = re.compile(r"[ \t\u00a0\u2000-\u200a\u202f\u205f\u3000]+")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b\u200e\u200f\ufeff\ufffd]")


def normalize(text):
    """NFC, Unix newlines, no control characters, runs of spaces made one, no trailing spaces,
    at most one blank line in a row, no blank lines at either end. Indentation at the start of
    a line is kept (code and verse depend on it)."""
    text = unicodedata.normalize("NFC", text.replace("\r\n", "\n").replace("\r", "\n"))
    text = text.replace("\t", "    ")
    text = _CONTROL.sub("", text)
    lines = []
    for line in text.split("\n"):
        indent = len(line) - len(line.lstrip(" \u00a0"))
        lines.append(" " * indent + _SPACES.sub(" ", line[indent:]).rstrip())
    text = "\n".join(lines)
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip("\n")


def reflow(text):
    """Joins the wrapped lines of each paragraph (blocks separated by blank lines) into one line,
    dropping the wrap indentation. Blocks whose lines start with a list marker or sense number
    keep those lines apart."""
    out = []
    for block in re.split(r"\n\s*\n", text):
        lines = [l.strip() for l in block.split("\n") if l.strip()]
        joined = []
        for line in lines:
            starts_item = re.match(r"(\d+\.|\([a-z0-9]+\)|[-*\u2022]|Syn\.|Note:)\s", line)
            if joined and not starts_item:
                joined[-1] += " " + line
            else:
                joined.append(line)
        if joined:
            out.append("\n".join(joined))
    return "\n\n".join(out)


# --- junk ------------------------------------------------------------------------------------

def letter_share(text):
    """The share of a text's non-space characters that are letters."""
    chars = [c for c in text if not c.isspace()]
    if not chars:
        return 0.0
    return sum(c.isalpha() for c in chars) / len(chars)


def drop_junk_paragraphs(text, min_letter_share=0.5):
    """Removes paragraphs that are mostly symbols or digits (tables, rules, ASCII art): those of
    more than 40 characters with fewer than min_letter_share letters."""
    keep = [p for p in text.split("\n\n") if len(p) <= 40 or letter_share(p) >= min_letter_share]
    return "\n\n".join(keep)


# --- deduplication and split -----------------------------------------------------------------

def near_key(text):
    """A key equal for texts that differ only in case, punctuation, digits' spacing or white
    space: the SHA-256 of the lower-cased words."""
    words = re.findall(r"\w+", text.lower())
    return hashlib.sha256(" ".join(words).encode()).hexdigest()


def is_validation(doc_id, per_mille=15):
    """Deterministic split by document id: about per_mille/1000 of the ids are validation."""
    h = int.from_bytes(hashlib.sha256(doc_id.encode()).digest()[:8], "big")
    return h % 1000 < per_mille


class Deduper:
    """Drops documents seen before (near_key of the whole text) and, inside documents, paragraphs
    of 80 characters or more seen before in any document (boilerplate repeated across pages).
    Order matters: the first occurrence stays."""

    def __init__(self):
        self.docs = set()
        self.paragraphs = set()

    def add(self, text):
        """Returns the text with repeated paragraphs removed, or None for a repeated document."""
        key = near_key(text)
        if key in self.docs:
            return None
        self.docs.add(key)
        kept = []
        for para in text.split("\n\n"):
            if len(para) >= 80:
                pkey = near_key(para)
                if pkey in self.paragraphs:
                    continue
                self.paragraphs.add(pkey)
            kept.append(para)
        return "\n\n".join(kept)


# --- HTML ------------------------------------------------------------------------------------

_BLOCK = {"p", "div", "section", "article", "table", "tr", "ul", "ol", "dl", "dt", "dd", "li", "br",
          "h1", "h2", "h3", "h4", "h5", "h6", "pre", "blockquote", "hr", "figure", "caption", "title",
          "td", "th"}
_SKIP_TAGS = {"script", "style", "head", "nav", "footer", "header", "noscript", "svg", "button", "form"}
_VOID = {"br", "hr", "img", "meta", "link", "input", "area", "base", "col", "wbr", "source"}


class _HtmlText(html.parser.HTMLParser):
    def __init__(self, skip_classes):
        super().__init__(convert_charrefs=True)
        self.skip_classes = skip_classes
        self.out = []
        self.stack = []  # (tag, skipping) for open elements
        self.skip_depth = 0
        self.pre = 0

    def _skips(self, tag, attrs):
        if tag in _SKIP_TAGS:
            return True
        a = dict(attrs)
        classes = set((a.get("class") or "").split())
        return bool(classes & self.skip_classes) or a.get("role") == "navigation"

    def handle_starttag(self, tag, attrs):
        if tag in _VOID:
            if tag in ("br", "hr") and not self.skip_depth:
                self.out.append("\n")
            return
        skipping = self.skip_depth > 0 or self._skips(tag, attrs)
        self.stack.append((tag, skipping))
        if skipping:
            self.skip_depth += 1
            return
        if tag == "pre":
            self.pre += 1
        if tag in _BLOCK:
            self.out.append("\n\n")
        if tag == "li":
            self.out.append("- ")
        if tag in ("td", "th"):
            self.out.append(" ")

    def handle_endtag(self, tag):
        if tag in _VOID:
            return
        # pop to the matching open tag (tolerates unclosed <p>, <li>)
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i][0] == tag:
                for t, skipping in self.stack[i:]:
                    if skipping:
                        self.skip_depth -= 1
                    elif t == "pre":
                        self.pre -= 1
                del self.stack[i:]
                break
        if not self.skip_depth and tag in _BLOCK:
            self.out.append("\n\n")

    def handle_data(self, data):
        if self.skip_depth:
            return
        if not self.pre:
            data = re.sub(r"\s+", " ", data)
        else:
            data = data.replace("\n", "\u2028")  # protected from paragraph joining below
        self.out.append(data)


def html_to_text(page, skip_classes=frozenset()):
    """Plain text of an HTML page: block elements become paragraphs, list items "- " lines,
    preformatted text keeps its lines; scripts, styles, navigation and elements carrying one of
    skip_classes are dropped."""
    p = _HtmlText(set(skip_classes))
    p.feed(page)
    p.close()
    text = "".join(p.out)
    paras = [re.sub(r" *\n *", " ", para).strip() for para in re.split(r"\n\s*\n", text)]
    paras = [x for x in paras if x]
    for i in range(len(paras) - 1):  # a list item's marker before its first paragraph
        if paras[i] == "-":
            paras[i], paras[i + 1] = "", "- " + paras[i + 1]
    text = "\n\n".join(x for x in paras if x)
    return html.unescape(text).replace("\u2028", "\n")


# --- man pages (groff output) -----------------------------------------------------------------

def man_sections(text):
    """Splits rendered man page text into {SECTION NAME: body}. Section headings are the lines
    in capitals at the left margin (NAME, SYNOPSIS, DESCRIPTION, ...)."""
    sections, name, body = {}, None, []
    for line in text.split("\n"):
        if re.fullmatch(r"[A-Z][A-Z0-9 ,&/()-]*", line.strip()) and not line.startswith(" "):
            if name:
                sections[name] = "\n".join(body).strip("\n")
            name, body = line.strip(), []
        elif name:
            body.append(line)
    if name:
        sections[name] = "\n".join(body).strip("\n")
    return sections


def dedent(text):
    """Removes the indentation common to all non-blank lines."""
    lines = text.split("\n")
    indents = [len(l) - len(l.lstrip(" ")) for l in lines if l.strip()]
    cut = min(indents) if indents else 0
    return "\n".join(l[cut:] for l in lines)
