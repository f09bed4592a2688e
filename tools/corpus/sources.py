"""The corpus sources: one small extraction function per Debian package (or group of packages).

Each extractor yields (doc_id, text) pairs of raw-but-readable text; build_corpus.py normalises,
filters, deduplicates and splits them. Parsers of each file format are separate functions that
take the file's text, so the tests can run them on small fixtures without the packages.

SOURCES lists, per source, the packages it reads and the licence as read in each package's
copyright file (Debian main; every one DFSG-free).
"""
import glob
import gzip
import os
import re
import struct
import subprocess
import unicodedata
import xml.etree.ElementTree as ET
import zlib

import textclean

# --- dictd databases (dict-gcide, dict-devil, dict-jargon, dict-foldoc) ----------------------

_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def dictd_number(s):
    """dictd's index numbers: base 64, most significant digit first."""
    n = 0
    for c in s:
        n = n * 64 + _B64.index(c)
    return n


def dictd_entries(index_text, data):
    """(offset, headword, entry bytes) for each distinct entry of a dictd database, in data order. The
    index may list one entry under several headwords; the first is kept. Entries whose headword
    starts with "00-database" are the database's own description."""
    seen, out = set(), []
    for line in index_text.split("\n"):
        parts = line.split("\t")
        if len(parts) < 3 or parts[0].startswith("00-database") or parts[0].startswith("00database"):
            continue
        off, size = dictd_number(parts[1]), dictd_number(parts[2])
        if (off, size) in seen:
            continue
        seen.add((off, size))
        out.append((off, parts[0], data[off:off + size]))
    out.sort(key=lambda e: e[0])
    return out


def read_dictd(name):
    """The entries of /usr/share/dictd/NAME.{index,dict.dz} (dictzip is gzip-compatible)."""
    with open(f"/usr/share/dictd/{name}.index", encoding="utf-8", errors="replace") as f:
        index = f.read()
    with gzip.open(f"/usr/share/dictd/{name}.dict.dz") as f:
        data = f.read()
    return dictd_entries(index, data)


# GCIDE writes accented letters as [x^]-style codes: the common ones, then any other code is
# dropped (they occur almost only in pronunciations and etymologies, which are removed).
_GCIDE_MARKS = {"^": "\u0302", "'": "\u0301", "`": "\u0300", '"': "\u0308", "=": "\u0304",
                "~": "\u0303", "-": "\u0306", ".": "\u0307", ",": "\u0327"}
_GCIDE_WORDS = {"ae": "æ", "AE": "Æ", "oe": "œ", "OE": "Œ", "eth": "ð", "thorn": "þ", "imac": "ī",
                "deg": "°", "sect": "§", "root": "√", "ng": "ŋ", "yogh": "ȝ", "beta": "β",
                "alpha": "α", "gamma": "γ", "delta": "δ", "pi": "π", "mu": "μ", "frac12": "½",
                "frac14": "¼", "frac34": "¾", "pound": "£", "cent": "¢", "ldquo": "“", "rdquo": "”"}


def gcide_char(code):
    if code in _GCIDE_WORDS:
        return _GCIDE_WORDS[code]
    if len(code) == 2 and code[0] in _GCIDE_MARKS and code[1].isalpha():
        return unicodedata.normalize("NFC", code[1] + _GCIDE_MARKS[code[0]])
    if len(code) == 2 and code[1] in _GCIDE_MARKS and code[0].isalpha():
        return unicodedata.normalize("NFC", code[0] + _GCIDE_MARKS[code[1]])
    return None


def _drop_bracket_group(s, i):
    """Index just past the balanced [...] group starting at s[i] == '['."""
    depth = 0
    for j in range(i, len(s)):
        depth += {"[": 1, "]": -1}.get(s[j], 0)
        if depth == 0:
            return j + 1
    return len(s)


def clean_gcide(entry):
    """A GCIDE entry as plain text: "Headword, pos." then the senses, without pronunciations,
    etymologies, source tags ([1913 Webster]) or cross-reference braces."""
    entry = re.sub(r"\[([a-zA-Z^'`\"=~.,-]{2,7})\]",
                   lambda m: gcide_char(m.group(1)) if gcide_char(m.group(1)) is not None else "[" + m.group(1) + "]",
                   entry)
    entry = re.sub(r"\s*\[(?:[^\[\]\n]*(?:Webster|PJC|WordNet|Century|Suppl|RJC|Chambers|Johnson)[^\[\]\n]*)\]", "", entry)
    entry = re.sub(r"\\[^\\\n]*\\", "", entry)  # \Pro*nun"ci*a`tion\
    entry = re.sub(r"\s*\((?=[^()\n]*[\"`])[^()\s]*\)", "", entry)  # (pro*nun"ci*a`tion)
    # the etymology: the first bracket group of the entry's opening lines
    head_end = entry.find("\n\n") if "\n\n" in entry else len(entry)
    i = entry.find("[", 0, min(head_end, 400))
    if i >= 0:
        entry = entry[:i].rstrip() + " " + entry[_drop_bracket_group(entry, i):].lstrip(" ")
    entry = re.sub(r"\[[a-zA-Z^'`\"=~.,-]{2,7}\]", "", entry)
    entry = entry.replace("{", "").replace("}", "").replace("\\", "")
    entry = re.sub(r"\s+,", ",", entry)
    return textclean.reflow(entry)


def extract_gcide():
    for off, _, body in read_dictd("gcide"):  # one entry may carry several headwords: named by offset
        yield f"gcide:{off}", clean_gcide(body.decode("utf-8", "replace"))


def clean_dict_entry(entry):
    """A FOLDOC, Jargon File or Devil's Dictionary entry: braces of cross-references and FOLDOC's
    <category> tags removed, wrapped lines joined."""
    entry = re.sub(r"<[a-z][a-z ,/-]*>\s*", "", entry)
    entry = entry.replace("{", "").replace("}", "")
    return textclean.reflow(entry)


def extract_dictd(name):
    def extract():
        for _, head, body in read_dictd(name):
            yield f"{name}:{head}", clean_dict_entry(body.decode("utf-8", "replace"))
    return extract


# --- WordNet ---------------------------------------------------------------------------------

WORDNET_DIR = "/usr/share/wordnet"
_POS = {"n": "noun", "v": "verb", "a": "adjective", "s": "adjective", "r": "adverb"}


def wordnet_synsets(data_text):
    """The synsets of one WordNet data.* file: dicts with offset, pos, words (spaces for
    underscores, adjective markers removed), definition and examples."""
    out = []
    for line in data_text.split("\n"):
        if not line or line.startswith(" "):
            continue  # licence header
        fields, _, gloss = line.partition(" | ")
        f = fields.split()
        n_words = int(f[3], 16)
        words = [re.sub(r"\([a-z]+\)$", "", w).replace("_", " ") for w in f[4:4 + 2 * n_words:2]]
        parts = [p.strip() for p in gloss.strip().split(";")]
        definition = "; ".join(p for p in parts if not p.startswith('"'))
        # examples are quoted, some followed by their author: "...." - Name
        examples = [m.group(1) for m in (re.match(r'"([^"]+)"', p) for p in parts if p.startswith('"')) if m]
        out.append({"offset": f[0], "pos": _POS[f[2]], "words": words, "definition": definition.strip(),
                    "examples": examples})
    return out


def wordnet_text(s):
    text = f"{', '.join(s['words'])} ({s['pos']}): {s['definition']}"
    if s["examples"]:
        text += "\nFor example: " + " / ".join(f'"{e}"' for e in s["examples"])
    return text


def read_wordnet():
    for pos in ("noun", "verb", "adj", "adv"):
        with open(os.path.join(WORDNET_DIR, "data." + pos), encoding="utf-8", errors="replace") as f:
            for s in wordnet_synsets(f.read()):
                yield pos, s


def extract_wordnet():
    for pos, s in read_wordnet():
        yield f"wordnet:{pos}:{s['offset']}", wordnet_text(s)


# --- fortunes --------------------------------------------------------------------------------

FORTUNE_DIR = "/usr/share/games/fortunes"
# Files left out: pictures made of characters, and a file of untranslated foreign text.
FORTUNE_SKIP = {"art", "ascii-art", "translate-me"}


def split_fortunes(text):
    """The cookies of a fortune file: separated by lines holding a single %."""
    return [c.strip("\n") for c in re.split(r"^%$", text, flags=re.M) if c.strip()]


def fortune_files(packages):
    files = set()
    for pkg in packages:
        out = subprocess.run(["dpkg", "-L", pkg], capture_output=True, text=True, check=True).stdout
        for path in out.split("\n"):
            if path.startswith(FORTUNE_DIR + "/") and "." not in os.path.basename(path) and os.path.isfile(path):
                files.add(path)
    return sorted(f for f in files if os.path.basename(f) not in FORTUNE_SKIP)


def extract_fortunes(packages):
    def extract():
        for path in fortune_files(packages):
            with open(path, encoding="utf-8", errors="replace") as f:
                for i, cookie in enumerate(split_fortunes(f.read())):
                    yield f"fortune:{os.path.basename(path)}:{i}", cookie
    return extract


# --- the World English Bible (sword-text-web) ------------------------------------------------

SWORD_WEB = "/usr/share/sword/modules/texts/ztext/engWEB2015eb"


def osis_to_text(osis):
    """Plain text of OSIS markup: footnotes and cross-references dropped, paragraph and poetry
    line breaks kept, chapters split on their milestones. Returns [(chapter osisID, text)]."""
    osis = re.sub(r"<note\b.*?</note>", "", osis, flags=re.S)
    osis = re.sub(r"<title\b[^>]*>(.*?)</title>", r"\n\n\1\n\n", osis, flags=re.S)
    osis = re.sub(r"<div\b[^>]*type=\"x-p\"[^>]*/>", "\n\n", osis)
    osis = re.sub(r"<l\b[^>]*eID[^>]*/>", "\n", osis)
    chapters = re.split(r"<chapter\b[^>]*osisID=\"([^\"]+)\"[^>]*sID[^>]*/>", osis)
    out = []
    for i in range(1, len(chapters) - 1, 2):
        text = re.sub(r"<[^>]+>", "", chapters[i + 1])
        text = "\n".join(l.strip() for l in text.split("\n"))
        out.append((chapters[i], text))
    return out


def sword_books(prefix):
    """Decompressed book blocks of a sword zText testament (prefix "ot" or "nt")."""
    with open(f"{SWORD_WEB}/{prefix}.bzs", "rb") as f:
        index = f.read()
    with open(f"{SWORD_WEB}/{prefix}.bzz", "rb") as f:
        data = f.read()
    for k in range(len(index) // 12):
        off, size, _ = struct.unpack_from("<III", index, 12 * k)
        yield zlib.decompress(data[off:off + size]).decode("utf-8", "replace")


def extract_bible():
    for prefix in ("ot", "nt"):
        for book in sword_books(prefix):
            for chapter, text in osis_to_text(book):
                yield "web:" + chapter, text


# --- HTML manuals --------------------------------------------------------------------------

# Navigation, tables of contents and permalink markers of Sphinx and DocBook pages.
HTML_SKIP = frozenset({"navheader", "navfooter", "sphinxsidebar", "related", "footer", "headerlink", "toc",
                       "breadcrumbs", "highlight-none", "copyright", "legalnotice", "docnav",
                       "toc-backref", "navigation", "clearer", "d-none", "this-page-menu"})


def html_files(pattern, skip=()):
    """The files matching pattern, each once (a directory may be reachable through a link)."""
    files = {os.path.realpath(p) for p in glob.glob(pattern, recursive=True)}
    return [p for p in sorted(files) if not any(re.search(s, p) for s in skip)]


def extract_html(source, pattern, skip=()):
    def extract():
        for path in html_files(pattern, skip):
            with open(path, encoding="utf-8", errors="replace") as f:
                text = textclean.html_to_text(f.read(), HTML_SKIP)
            yield f"{source}:{os.path.relpath(path, os.path.dirname(pattern.split('*')[0]))}", text
    return extract


# --- GNOME help (Mallard XML) ----------------------------------------------------------------

_MAL = "{http://projectmallard.org/1.0/}"


def mallard_to_text(xml_text):
    """Plain text of a Mallard page: the title and the block elements' text, in order; the
    <info> header (credits, links, licence) left out."""
    root = ET.fromstring(xml_text)
    out = []

    def walk(el):
        tag = el.tag.replace(_MAL, "")
        if tag in ("info", "media", "comment"):
            return
        if tag in ("title", "p", "code", "screen", "desc", "item"):
            text = "".join(el.itertext()).strip()
            if text and tag in ("code", "screen"):
                out.append(text)
            elif text:
                out.append(("- " if tag == "item" else "") + re.sub(r"\s+", " ", text))
            return
        for child in el:
            walk(child)

    walk(root)
    return "\n\n".join(out)


def extract_gnome_help():
    for path in sorted(glob.glob("/usr/share/help/C/*/*.page")):
        with open(path, encoding="utf-8") as f:
            try:
                text = mallard_to_text(f.read())
            except ET.ParseError:
                continue  # pages that need XInclude processing to be well formed
        yield "gnome-help:" + os.path.relpath(path, "/usr/share/help/C"), text


# --- perl documentation (POD) ----------------------------------------------------------------

# Left out: change logs (perl*delta), the licences, and the table of contents.
PERLPOD_SKIP = (r"delta\.pod$", r"/perlartistic\.pod$", r"/perlgpl\.pod$", r"/perltoc\.pod$", r"/perlhist\.pod$")


def extract_perl_doc():
    for path in html_files("/usr/share/perl/5.*/pod/*.pod", PERLPOD_SKIP):
        text = subprocess.run(["pod2text", "--width=100000", "--loose", path], capture_output=True, text=True,
                              errors="replace").stdout
        yield "perldoc:" + os.path.basename(path), textclean.dedent(text)


# --- manual pages ------------------------------------------------------------------------------

MAN_RENDER = ["groff", "-Tutf8", "-mandoc", "-rLL=100000n", "-rHY=0", "-P-cbou"]


def render_man(source_bytes):
    """groff's plain-text rendering of a man page, every paragraph on one line; None for a page
    that only points at another (.so)."""
    if source_bytes.lstrip().startswith(b".so "):
        return None
    r = subprocess.run(MAN_RENDER, input=source_bytes, capture_output=True)
    return r.stdout.decode("utf-8", "replace")


def man_page_text(rendered):
    """The sections of a rendered page as plain text: headings kept, indentation removed, the
    running header and footer lines (the first and the last line with text) dropped."""
    lines = rendered.strip("\n").split("\n")
    sections = textclean.man_sections("\n".join(lines[1:-1]))
    parts = []
    for name, body in sections.items():
        body = textclean.dedent(body)
        parts.append(name + "\n\n" + re.sub(r"\n{3,}", "\n\n", body).strip())
    return "\n\n".join(parts)


def man_files(packages):
    files = set()
    for pkg in packages:
        out = subprocess.run(["dpkg", "-L", pkg], capture_output=True, text=True, check=True).stdout
        for path in out.split("\n"):
            if re.match(r"/usr/share/man/man[1-8]/[^/]+\.gz$", path) and os.path.isfile(path) \
                    and not os.path.islink(path):
                files.add(path)
    return sorted(files)


def man_page(path):
    """(id, name, section, text) of one installed page, or None."""
    with gzip.open(path) as f:
        rendered = render_man(f.read())
    if not rendered:
        return None
    base = os.path.basename(path)[:-3]
    name, _, section = base.rpartition(".")
    return f"man:{base}", name, section, man_page_text(rendered)


def extract_man(packages):
    def extract():
        for path in man_files(packages):
            page = man_page(path)
            if page:
                yield page[0], page[3]
    return extract


# --- the source table ------------------------------------------------------------------------

MAN_PACKAGES = ["manpages", "manpages-dev", "coreutils", "findutils", "grep", "sed", "tar", "gzip", "bzip2",
                "xz-utils", "diffutils", "util-linux", "procps", "bash", "less", "man-db", "dpkg", "apt",
                "openssh-client", "rsync", "curl", "wget", "git-man", "make", "file", "psmisc"]
FORTUNE_PACKAGES = ["fortunes", "fortunes-min", "fortunes-bofh-excuses"]

# name, packages, licence (as read in /usr/share/doc/PKG/copyright), kind, extractor, min chars
SOURCES = [
    ("wordnet", ["wordnet-base"], "WordNet 3.0 licence (permissive, BSD-like)", "dictionary",
     extract_wordnet, 20),
    ("gcide", ["dict-gcide"], "GPL-2+ (GCIDE, from Webster's 1913 and WordNet)", "dictionary", extract_gcide, 40),
    ("devil", ["dict-devil"], "public domain (Ambrose Bierce, The Devil's Dictionary, 1911)", "literature",
     extract_dictd("devil"), 40),
    ("jargon", ["dict-jargon"], "public domain (Jargon File 4.4.7)", "dictionary", extract_dictd("jargon"), 40),
    ("foldoc", ["dict-foldoc"], "GFDL-1.1+ with no invariant sections (FOLDOC)", "dictionary",
     extract_dictd("foldoc"), 40),
    ("fortunes", FORTUNE_PACKAGES, "BSD-3-clause (fortune-mod cookie files); public domain (BOFH excuses)",
     "literature", extract_fortunes(FORTUNE_PACKAGES), 20),
    ("bible-web", ["sword-text-web"], "public domain (World English Bible text); GPL-2+ (packaging)",
     "literature", extract_bible, 200),
    ("python-doc", ["python3.11-doc"], "PSF-2.0 (Python documentation)", "manual",
     extract_html("python-doc", "/usr/share/doc/python3.11/html/**/*.html",
                  (r"/_sources/", r"/genindex", r"/py-modindex", r"/search\.html", r"/index\.html",
                   r"/contents\.html", r"/whatsnew/changelog\.html",
                   r"/download\.html", r"/copyright\.html", r"/license\.html", r"/bugs\.html")), 200),
    ("debian-reference", ["debian-reference-en"], "GPL-2+", "manual",
     extract_html("debian-reference", "/usr/share/debian-reference/*.en.html", (r"/index\.en",)), 200),
    ("debian-handbook", ["debian-handbook"], "GPL-2+ or CC-BY-SA-3.0", "manual",
     extract_html("debian-handbook", "/usr/share/doc/debian-handbook/html/en-US/*.html", (r"/index\.html",)), 200),
    ("debian-faq", ["debian-faq"], "verbatim and modified copies permitted (Debian FAQ licence, DFSG-free)",
     "manual", extract_html("debian-faq", "/usr/share/doc/debian/FAQ/*.en.html", (r"/index\.en",)), 200),
    ("debian-history", ["debian-history"], "GPL-2+", "manual",
     extract_html("debian-history", "/usr/share/doc/debian-history/docs/*.en.html", (r"/index\.en",)), 200),
    ("developers-reference", ["developers-reference"], "GPL-2", "manual",
     extract_html("developers-reference", "/usr/share/developers-reference/*.html",
                  (r"/index\.html", r"/search\.html", r"/genindex")), 200),
    ("gnome-help", ["gnome-user-docs"], "CC-BY-SA-3.0", "manual", extract_gnome_help, 200),
    ("postgresql-doc", ["postgresql-doc-15"], "PostgreSQL licence (BSD-style)", "manual",
     extract_html("postgresql-doc", "/usr/share/doc/postgresql-doc-15/html/*.html",
                  (r"/release-", r"/bookindex", r"/index\.html", r"/legalnotice")), 200),
    ("git-doc", ["git-doc"], "GPL-2 (Git documentation)", "manual",
     extract_html("git-doc", "/usr/share/doc/git-doc/**/*.html", (r"RelNotes",)), 200),
    ("perl-doc", ["perl-doc"], "Artistic or GPL-1+ (Perl documentation)", "manual", extract_perl_doc, 200),
    ("man", MAN_PACKAGES, "per page: GPL, BSD and the Linux man-pages licences (each package in main)",
     "manual", extract_man(MAN_PACKAGES), 200),
]

# Packages needed beyond the sources' own: the tools the extractors run.
TOOL_PACKAGES = ["groff-base", "perl"]
