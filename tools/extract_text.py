#!/usr/bin/env python3
"""Extract plain English text from installed Debian documentation packages.

Standard library only. Used by tools/prepare_corpus.sh; see tools/corpus_sources.md.

    extract_text.py extract --out build/corpus      # one <source>.jsonl + <source>.txt per source
    extract_text.py split   --out build/corpus      # train.jsonl / heldout.jsonl (+ doc lists)

A "document" is one HTML page / info node group / dictionary chunk / Bible book. Long pages
are cut at h1-h3 headings into chunks of at least CHUNK_MIN characters so that documents
stay reasonably sized; paragraphs are never split. Output text is NFC-normalised UTF-8,
paragraphs separated by one blank line, no trailing whitespace.
"""
import argparse
import glob
import gzip
import hashlib
import html.parser
import json
import os
import random
import re
import subprocess
import sys
import unicodedata

SEED = 20240611
HELDOUT_PER_MILLE = 10          # ~1% of documents, chosen by a seeded hash of the doc key
CHUNK_MIN = 24_000              # characters; sections are merged until a chunk is this long
MIN_DOC_CHARS = 200             # shorter documents are dropped (index pages, stubs)
SECTION = "\x1e"                # internal marker: a heading that may start a new chunk

# ----------------------------------------------------------------------------------------
# Sources (order is the output order of the per-source files; everything is sorted).
# ----------------------------------------------------------------------------------------
SPHINX_SKIP = ["genindex*.html", "search.html", "py-modindex.html", "modindex.html",
               "_sources/**", "_static/**", "_images/**", "_downloads/**"]
SOURCES = [
    dict(name="python3.11-doc", package="python3.11-doc", kind="html",
         root="/usr/share/doc/python3.11/html", include=["**/*.html"],
         exclude=SPHINX_SKIP + ["whatsnew/changelog.html", "about.html", "bugs.html",
                                "copyright.html", "license.html", "download.html",
                                "contents.html", "index.html", "*/index.html"]),
    dict(name="debian-handbook", package="debian-handbook", kind="html",
         root="/usr/share/doc/debian-handbook/html/en-US", include=["*.html"],
         exclude=["index.html", "ix01.html"]),
    dict(name="jargon", package="jargon", kind="info",
         root="/usr/share/info", include=["jargon.info.gz"], exclude=[]),
    dict(name="dict-gcide", package="dict-gcide", kind="gcide",
         root="/usr/share/dictd", include=["gcide.dict.dz"], exclude=[]),
    dict(name="git-doc", package="git-doc", kind="html",
         root="/usr/share/doc/git-doc", include=["**/*.html"], exclude=["index.html"]),
    dict(name="maint-guide", package="maint-guide", kind="html",
         root="/usr/share/doc/maint-guide/html", include=["*.en.html"], exclude=["index.en.html"]),
    dict(name="debian-reference-en", package="debian-reference-en", kind="html",
         root="/usr/share/debian-reference", include=["*.en.html"], exclude=["index.en.html"]),
    dict(name="bash-doc", package="bash-doc", kind="html",
         root="/usr/share/doc/bash", include=["bashref.html"], exclude=[]),
    dict(name="gnu-standards", package="gnu-standards", kind="html",
         root="/usr/share/doc/gnu-standards", include=["standards.html", "maintain.html"],
         exclude=[]),
    dict(name="linux-doc-6.1", package="linux-doc-6.1", kind="html",
         root="/usr/share/doc/linux-doc-6.1/html", include=["**/*.html"],
         exclude=SPHINX_SKIP + ["translations/**", "index.html"]),
    dict(name="postgresql-doc-15", package="postgresql-doc-15", kind="html",
         root="/usr/share/doc/postgresql-doc-15/html", include=["*.html"],
         exclude=["bookindex.html", "index.html", "legalnotice.html"]),
    dict(name="bible-kjv", package="bible-kjv-text", kind="bible",
         root="/usr/lib", include=["bible.data"], exclude=[]),
    dict(name="developers-reference", package="developers-reference", kind="html",
         root="/usr/share/developers-reference", include=["*.html"],
         exclude=SPHINX_SKIP + ["index.html"]),
    dict(name="debian-policy", package="debian-policy", kind="html",
         root="/usr/share/doc/debian-policy", include=["**/*.html"],
         exclude=SPHINX_SKIP + ["policy.html/_sources/**", "policy.html/genindex.html",
                                "policy.html/search.html", "policy.html/index.html",
                                "policy.html/index-*.html"]),
    dict(name="debian-faq", package="debian-faq", kind="html",
         root="/usr/share/doc/debian/FAQ", include=["*.en.html"], exclude=["index.en.html"]),
    dict(name="python-django-doc", package="python-django-doc", kind="html",
         root="/usr/share/doc/python-django-doc/html", include=["**/*.html"],
         exclude=SPHINX_SKIP + ["index.html", "contents.html", "*/index.html"]),
    dict(name="perl-doc", package="perl-doc", kind="pod",
         root="/usr/share/perl/5.36.0/pod", include=["*.pod"], exclude=["*delta.pod"]),
    dict(name="debian-history", package="debian-history", kind="html",
         root="/usr/share/doc/debian-history/docs", include=["*.en.html"],
         exclude=["index.en.html"]),
]

# ----------------------------------------------------------------------------------------
# Text clean-up shared by all extractors
# ----------------------------------------------------------------------------------------
_CTRL = re.compile(r"[\x00-\x08\x0b-\x1d\x1f\x7f\u200b\u200c\u200d\u2060\ufeff\ufffe]")


def clean_text(text):
    text = unicodedata.normalize("NFC", text)
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\t", "    ")
    text = text.replace("\xa0", " ").replace("\u00ad", "")
    text = _CTRL.sub("", text)
    lines = [ln.rstrip() for ln in text.split("\n")]
    text = "\n".join(lines)
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip("\n")


def chunk_sections(text):
    """Split text at SECTION markers and merge consecutive sections to >= CHUNK_MIN chars."""
    parts = [p for p in text.split(SECTION)]
    chunks, cur = [], ""
    for p in parts:
        if cur and len(cur) >= CHUNK_MIN:
            chunks.append(cur)
            cur = ""
        cur += p
    if cur:
        if chunks and len(cur) < CHUNK_MIN // 6:
            chunks[-1] += cur
        else:
            chunks.append(cur)
    return [c for c in (clean_text(c) for c in chunks) if c]


# ----------------------------------------------------------------------------------------
# HTML
# ----------------------------------------------------------------------------------------
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param",
        "source", "track", "wbr", "keygen", "command"}
SKIP_TAGS = {"script", "style", "head", "nav", "noscript", "svg", "button", "form", "select",
             "textarea", "iframe", "object", "map", "template", "math"}
SKIP_CLASSES = {"navheader", "navfooter", "header", "nav-panel", "sphinxsidebar",
                "sphinxsidebarwrapper", "related", "footer", "headerlink", "toc",
                "toctree-wrapper", "section-toc", "mini-toc", "contents", "shortcontents",
                "short-toc", "summary-letter", "breadcrumbs", "navigation", "nav",
                "index-cp", "index-fn", "index-vr", "index-ky", "index-pg", "index-tp",
                "printindex", "index-entry-id", "list-of-tables", "list-of-figures",
                "list-of-examples", "clearer", "version_switcher_placeholder",
                "language_switcher_placeholder", "mobile-nav", "menu-wrapper",
                "inline-search", "searchformwrapper", "indexterm", "legalnotice",
                "copyright", "bodywrapper-footer", "menu", "sidebarbutton", "docnav",
                "viewcode-link", "viewcode-back", "rellinks"}
SKIP_IDS = {"hd", "ft", "sidebar", "banner", "searchbox", "footer", "footer-text",
            "sidebarbutton", "navigation", "breadcrumbs"}
SKIP_ROLES = {"navigation", "search", "contentinfo"}
BLOCK = {"p", "div", "section", "article", "aside", "main", "blockquote", "pre", "table",
         "tr", "ul", "ol", "dl", "li", "dt", "dd", "h1", "h2", "h3", "h4", "h5", "h6", "hr",
         "figure", "figcaption", "caption", "header", "footer", "address", "center",
         "thead", "tbody", "tfoot", "title", "body", "html", "details", "summary"}
HEADINGS = {"h1", "h2", "h3", "h4", "h5", "h6"}
SPLIT_HEADINGS = {"h1", "h2", "h3"}


class _Extractor(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack = []            # open tags
        self.skip_depth = None     # stack length at which the skipped element was opened
        self.pre = 0
        self.blocks = []           # finished text blocks
        self.buf = []              # inline text of the current block
        self.main_blocks = None    # blocks captured inside role="main" (Sphinx), if any
        self.main_depth = None
        self.cells = 0
        self.in_cell = 0           # inside <td>/<th>: rows are rendered on one line

    # -- helpers
    def _flush(self):
        if not self.buf:
            return
        raw = "".join(self.buf)
        self.buf = []
        if self.pre:
            text = raw.strip("\n")
            if text.strip():
                self.blocks.append(text)
            return
        text = re.sub(r"[ \t\r\n\f\v\xa0]+", " ", raw)
        text = "\n".join(s.strip() for s in text.split("\x0c"))   # \x0c marks <br>
        text = text.strip()
        while text.startswith("|"):     # table row whose first cells were empty (icons)
            text = text[1:].lstrip()
        if text == "-":            # list bullet whose text follows in a nested block
            self.buf = ["- "]
            return
        if text:
            self.blocks.append(text)

    def _skips(self, tag, attrs):
        if tag in SKIP_TAGS:
            return True
        a = dict(attrs)
        classes = set((a.get("class") or "").split())
        if classes & SKIP_CLASSES:
            return True
        if (a.get("id") or "") in SKIP_IDS:
            return True
        if (a.get("role") or "") in SKIP_ROLES:
            return True
        return False

    # -- parser callbacks
    def handle_starttag(self, tag, attrs):
        if self.skip_depth is not None:
            if tag not in VOID:
                self.stack.append(tag)
            return
        if tag == "p" and self.stack and self.stack[-1] == "p":
            self.handle_endtag("p")
        if tag in ("li", "dt", "dd") and self.stack and self.stack[-1] == tag:
            self.handle_endtag(tag)
        if self._skips(tag, attrs):
            if tag not in VOID:
                self.skip_depth = len(self.stack)
                self.stack.append(tag)
            return
        if self.in_cell and tag in BLOCK and tag not in ("tr", "table"):
            self.buf.append(" ")
        elif tag in BLOCK or tag == "br":
            if tag == "br":
                self.buf.append("\n" if self.pre else "\x0c")
            else:
                self._flush()
        if tag in SPLIT_HEADINGS and not self.in_cell:
            self.blocks.append(SECTION)
        if tag == "li":
            self.buf.append("- ")
        if tag in ("td", "th"):
            if self.cells:
                self.buf.append(" | ")
            self.cells += 1
            self.in_cell += 1
        if tag == "tr":
            self.cells = 0
        if tag == "pre":
            self.pre += 1
        if tag not in VOID:
            self.stack.append(tag)
            a = dict(attrs)
            if self.main_depth is None and self.main_blocks is None and (
                    a.get("role") == "main" or "body" in (a.get("class") or "").split()):
                self._flush()
                self.main_depth = len(self.stack) - 1
                self.main_start = len(self.blocks)

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        if tag not in self.stack:
            return
        while self.stack:
            top = self.stack.pop()
            depth = len(self.stack)
            if self.skip_depth is not None:
                if depth <= self.skip_depth:
                    self.skip_depth = None
            else:
                if top in ("td", "th"):
                    self.in_cell = max(0, self.in_cell - 1)
                if top in BLOCK and self.in_cell and top not in ("tr", "table"):
                    self.buf.append(" ")
                elif top in BLOCK:
                    self._flush()
                if top == "pre":
                    self.pre = max(0, self.pre - 1)
                if self.main_depth is not None and depth <= self.main_depth:
                    self._flush()
                    self.main_blocks = self.blocks[self.main_start:]
                    self.main_depth = None
            if top == tag:
                break

    def handle_data(self, data):
        if self.skip_depth is not None:
            return
        self.buf.append(data)

    def text(self):
        self._flush()
        blocks = self.main_blocks if self.main_blocks else self.blocks
        out = []
        for b in blocks:
            if b == SECTION:
                out.append(SECTION)
            else:
                out.append(b + "\n\n")
        return "".join(out)


def html_to_text(raw):
    p = _Extractor()
    p.feed(raw)
    p.close()
    return p.text()


def read_html(path):
    data = open(path, "rb").read()
    m = re.search(rb'charset=["\']?([A-Za-z0-9_-]+)', data[:2048])
    enc = m.group(1).decode("ascii") if m else "utf-8"
    try:
        return data.decode(enc, errors="replace")
    except LookupError:
        return data.decode("utf-8", errors="replace")


def extract_html(src, path):
    text = html_to_text(read_html(path))
    # Drop "Previous topic / Next topic"-style leftovers and pilcrows that survived.
    text = text.replace("\u00b6", "")
    return chunk_sections(text)


# ----------------------------------------------------------------------------------------
# Plain-text helpers (info, dictionary, pod): unwrap hard-wrapped prose paragraphs
# ----------------------------------------------------------------------------------------
def unwrap_paragraphs(text, verbatim_indent):
    """Join hard-wrapped lines of prose paragraphs; keep indented/tabular paragraphs as-is."""
    out = []
    for para in re.split(r"\n\s*\n", text):
        lines = [ln.rstrip() for ln in para.split("\n")
                 if ln.strip() and not re.fullmatch(r"\s*[-=*_]{3,}\s*", ln)]
        if not lines:
            continue
        indent = len(lines[0]) - len(lines[0].lstrip())
        tabular = any(re.search(r"\S {3,}\S", ln.strip()) for ln in lines)
        if tabular or indent >= verbatim_indent or len(lines) == 1:
            out.append("\n".join(lines))
        else:
            out.append(" ".join(ln.strip() for ln in lines))
    return "\n\n".join(out)


def extract_info(src, path):
    raw = gzip.open(path, "rb").read().decode("latin-1")
    nodes = raw.split("\x1f")[1:]
    sections = []
    for node in nodes:
        lines = node.strip("\n").split("\n")
        if not lines or not lines[0].startswith("File:"):
            continue
        body = []
        in_menu = False
        for ln in lines[1:]:
            if ln.startswith("* Menu:"):
                in_menu = True
                continue
            if in_menu and (ln.startswith("* ") or not ln.strip()):
                continue
            in_menu = False
            if ln.startswith("Tag Table:") or ln.startswith("End Tag Table"):
                break
            body.append(ln)
        text = unwrap_paragraphs("\n".join(body), 3)
        text = re.sub(r"\*[Nn]ote ([^:]+)::", r"\1", text)   # cross references
        if len(text) > 20:
            sections.append(text + "\n\n")
    return chunk_sections(SECTION.join(sections))


B64 = {c: i for i, c in enumerate("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")}


def _b64(s):
    v = 0
    for c in s:
        v = v * 64 + B64[c]
    return v


def extract_gcide(src, path):
    data = gzip.open(path, "rb").read()     # dictzip is gzip-compatible
    index = os.path.join(os.path.dirname(path), "gcide.index")
    spans = set()
    for line in open(index, encoding="utf-8", errors="replace"):
        parts = line.rstrip("\n").split("\t")
        if len(parts) < 3 or parts[0].startswith("00-database") or parts[0].startswith("00database"):
            continue
        spans.add((_b64(parts[1]), _b64(parts[2])))
    entries = []
    for off, ln in sorted(spans):
        t = data[off:off + ln].decode("utf-8", errors="replace")
        lines = []
        for line in t.split("\n"):
            s = line.strip()
            # source tags such as [1913 Webster], [PJC], [WordNet 1.5]
            if re.fullmatch(r"\[[^\[\]]{1,40}\]", s) and not re.search(r"\b(See|Obs|Colloq|R)\b", s):
                continue
            lines.append(line)
        t = "\n".join(lines)
        t = re.sub(r" ?\\[^\\\n]{1,80}\\", "", t)        # pronunciation \Af*fect"\
        t = t.replace("{", "").replace("}", "")            # cross-reference braces
        t = unwrap_paragraphs(t, 8)
        if t.strip():
            entries.append(t)
    return chunk_sections(SECTION.join(e + "\n\n" for e in entries))


def extract_bible(src, path):
    out = subprocess.run(["bible", "-l100000", "gen1:1-rev22:21"], check=True,
                         capture_output=True).stdout.decode("utf-8", errors="replace")
    docs, cur_book, cur = [], None, []
    for line in out.split("\n"):
        if not line.strip():
            continue
        m = re.fullmatch(r"(\S.*?) (\d+)", line.strip())
        if m and not line.startswith(" "):
            book = m.group(1)
            if book != cur_book:
                if cur:
                    docs.append("".join(cur))
                cur_book, cur = book, [f"{book}\n\n"]
            cur.append(f"Chapter {m.group(2)}\n\n")
            continue
        v = re.match(r"\s*\d+ (.*)", line)
        if v:
            cur.append(v.group(1).strip() + "\n")
            continue
        if cur:
            cur[-1] = cur[-1].rstrip("\n") + " " + line.strip() + "\n"
    if cur:
        docs.append("".join(cur))
    return [clean_text(d) for d in docs]


def extract_pod(src, path):
    out = subprocess.run(["pod2text", "-w", "100000", "-i", "0", path], check=True,
                         capture_output=True).stdout.decode("utf-8", errors="replace")
    # Headings are at column 0 (head1) or 2 (head2); mark head1/head2 as split points.
    lines = out.split("\n")
    res = []
    for i, ln in enumerate(lines):
        if ln and not ln.startswith(" ") and i and not lines[i - 1].strip():
            res.append(SECTION)
        res.append(ln + "\n")
    return chunk_sections("".join(res))


EXTRACTORS = dict(html=extract_html, info=extract_info, gcide=extract_gcide, bible=extract_bible,
                  pod=extract_pod)


# ----------------------------------------------------------------------------------------
def list_files(src):
    root = src["root"]
    files = set()
    for pat in src["include"]:
        for f in glob.glob(os.path.join(root, pat), recursive=True):
            if os.path.isfile(f):
                files.add(f)
    keep, seen = [], set()
    for f in sorted(files):
        rel = os.path.relpath(f, root)
        if any(glob.fnmatch.fnmatch(rel, pat) for pat in src["exclude"]):
            continue
        real = os.path.realpath(f)
        if real in seen:
            continue
        seen.add(real)
        keep.append(f)
    return keep


def cmd_extract(args):
    os.makedirs(os.path.join(args.out, "sources"), exist_ok=True)
    seen_hashes = set()
    wanted = set(args.only.split(",")) if args.only else None
    for src in SOURCES:
        if wanted and src["name"] not in wanted:
            continue
        files = list_files(src)
        if not files:
            print(f"warning: {src['name']}: no input files under {src['root']}", file=sys.stderr)
            continue
        base = os.path.join(args.out, "sources", src["name"])
        ndocs = nbytes = dropped = 0
        with open(base + ".jsonl.tmp", "w", encoding="utf-8") as fj, \
                open(base + ".txt.tmp", "w", encoding="utf-8") as ft:
            for f in files:
                rel = os.path.relpath(f, src["root"])
                for k, doc in enumerate(EXTRACTORS[src["kind"]](src, f)):
                    h = hashlib.sha1(doc.encode("utf-8")).digest()
                    if len(doc) < MIN_DOC_CHARS or h in seen_hashes:
                        dropped += 1
                        continue
                    seen_hashes.add(h)
                    fj.write(json.dumps({"source": src["name"], "id": f"{rel}#{k}", "text": doc},
                                        ensure_ascii=False) + "\n")
                    if ndocs:
                        ft.write("\n\n")
                    ft.write(doc)
                    ndocs += 1
                    nbytes += len(doc.encode("utf-8"))
            ft.write("\n")
        os.replace(base + ".jsonl.tmp", base + ".jsonl")
        os.replace(base + ".txt.tmp", base + ".txt")
        print(f"{src['name']:24s} files {len(files):5d}  docs {ndocs:6d}  dropped {dropped:5d}  "
              f"{nbytes / 1e6:8.2f} MB", flush=True)


def cmd_split(args):
    docs = []
    for src in SOURCES:
        p = os.path.join(args.out, "sources", src["name"] + ".jsonl")
        if not os.path.exists(p):
            print(f"warning: missing {p}", file=sys.stderr)
            continue
        with open(p, encoding="utf-8") as f:
            docs.extend(json.loads(line) for line in f)
    train, held = [], []
    for d in docs:
        key = f"{SEED}:{d['source']}:{d['id']}".encode("utf-8")
        bucket = int.from_bytes(hashlib.sha256(key).digest()[:8], "little") % 1000
        (held if bucket < HELDOUT_PER_MILLE else train).append(d)
    rng = random.Random(SEED)
    rng.shuffle(train)
    rng.shuffle(held)
    for name, part in (("train", train), ("heldout", held)):
        path = os.path.join(args.out, f"{name}.jsonl")
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            for d in part:
                f.write(json.dumps({"source": d["source"], "id": d["id"], "text": d["text"]},
                                   ensure_ascii=False) + "\n")
        os.replace(path + ".tmp", path)
        with open(os.path.join(args.out, f"{name}_documents.txt"), "w", encoding="utf-8") as f:
            for d in part:
                f.write(f"{d['source']}\t{d['id']}\n")
    stats = {}
    for name, part in (("train", train), ("heldout", held)):
        for d in part:
            s = stats.setdefault(d["source"], [0, 0, 0, 0])
            i = 0 if name == "train" else 2
            s[i] += 1
            s[i + 1] += len(d["text"].encode("utf-8"))
    print(f"{'source':24s} {'train docs':>10s} {'train MB':>9s} {'held docs':>9s} {'held MB':>8s}")
    for src in SOURCES:
        if src["name"] in stats:
            a = stats[src["name"]]
            print(f"{src['name']:24s} {a[0]:10d} {a[1] / 1e6:9.2f} {a[2]:9d} {a[3] / 1e6:8.3f}")
    tb = sum(len(d["text"].encode("utf-8")) for d in train)
    hb = sum(len(d["text"].encode("utf-8")) for d in held)
    print(f"{'TOTAL':24s} {len(train):10d} {tb / 1e6:9.2f} {len(held):9d} {hb / 1e6:8.3f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["extract", "split", "list"])
    ap.add_argument("--out", default="build/corpus")
    ap.add_argument("--only", help="comma-separated source names (extract)")
    args = ap.parse_args()
    if args.command == "extract":
        cmd_extract(args)
    elif args.command == "split":
        cmd_split(args)
    else:
        for s in SOURCES:
            print(s["name"], s["package"])


if __name__ == "__main__":
    main()
