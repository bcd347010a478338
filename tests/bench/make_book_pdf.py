#!/usr/bin/env python3
"""Writes a plain book-like PDF for timing `spillway-cli ingest`: N pages (default 350) of
justified-looking prose in Helvetica, 46 lines a page, words hyphenated across some line ends,
a running header and a page number. Usage: make_book_pdf.py OUT.pdf [N_PAGES]"""
import random
import sys

WORDS = ("the agreement party parties shall notice termination payment invoice within days "
         "confidential information receiving disclosing purpose written consent law court "
         "liability damages indemnify obligation performance breach remedy government state "
         "climate negotiation alternative determining reasonable commercial efforts annual "
         "report committee budget fiscal year approved reviewed section article schedule").split()


def page_stream(rng, page_no):
    lines = ["BT /F1 9 Tf 72 760 Td (Chapter %d - A Book For Timing) Tj ET" % (page_no // 20 + 1)]
    y = 730
    for _ in range(46):
        words, length = [], 0
        while length < 80:
            w = rng.choice(WORDS)
            words.append(w)
            length += len(w) + 1
        text = " ".join(words)
        if rng.random() < 0.1:
            text = text[: text.rfind(" ") + 4] + "-"
        lines.append("BT /F1 10 Tf 72 %d Td (%s) Tj ET" % (y, text))
        y -= 14
    lines.append("BT /F1 9 Tf 300 40 Td (%d) Tj ET" % page_no)
    return "\n".join(lines).encode()


def main():
    out = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 350
    rng = random.Random(42)
    objs = {1: b"<< /Type /Catalog /Pages 2 0 R >>",
            3: b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>"}
    kids = []
    for p in range(n):
        page_id, content_id = 4 + 2 * p, 5 + 2 * p
        data = page_stream(rng, p + 1)
        objs[content_id] = b"<< /Length %d >>\nstream\n" % len(data) + data + b"\nendstream"
        objs[page_id] = (b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
                         b"/Resources << /Font << /F1 3 0 R >> >> /Contents %d 0 R >>" % content_id)
        kids.append(b"%d 0 R" % page_id)
    objs[2] = b"<< /Type /Pages /Kids [" + b" ".join(kids) + b"] /Count %d >>" % n
    body, offsets = bytearray(b"%PDF-1.4\n"), {}
    for i in sorted(objs):
        offsets[i] = len(body)
        body += b"%d 0 obj\n" % i + objs[i] + b"\nendobj\n"
    xref = len(body)
    size = max(objs) + 1
    body += b"xref\n0 %d\n0000000000 65535 f \n" % size
    for i in range(1, size):
        body += b"%010d 00000 n \n" % offsets[i]
    body += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (size, xref)
    with open(out, "wb") as f:
        f.write(body)


if __name__ == "__main__":
    main()
