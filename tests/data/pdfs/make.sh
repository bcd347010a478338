#!/usr/bin/env bash
# Regenerates the script fixtures of app/ingest/scripts_test.cpp with pango (HarfBuzz shaping,
# cairo's PDF output with ToUnicode maps). The PDFs are kept in the repository so the tests need
# neither pango nor the fonts; the tests assert the text a correct extraction gives.
#   apt-get install pango1.0-tools fonts-dejavu-core fonts-wqy-microhei
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
view() { pango-view --no-display --margin=20 "$@"; }

# Right-to-left: Hebrew, a mixed Hebrew/number/Latin line, Arabic with digits and Latin, an
# Arabic sentence (shaped: contextual forms, glyphs placed one by one). One paragraph per line.
printf '%s\n\n' 'שלום עולם' 'מחיר 120 שקלים ל-Jane Example' 'محمد21 habibi' \
  'هذا مثال على النص العربي' >"$tmp/rtl.txt"
view --font='DejaVu Sans 14' -o rtl.pdf "$tmp/rtl.txt"

# Chinese and Japanese, horizontal, unsegmented.
printf '%s\n\n' '东北电气发展股份有限公司2023年主要财务指标' '東京都の人口は増えている。' \
  >"$tmp/cjk.txt"
view --font='WenQuanYi Micro Hei 14' -o cjk.pdf "$tmp/cjk.txt"

# Vertical (tategaki): upright glyphs in columns, read top to bottom, right to left; the second
# column has the vertical presentation forms of the brackets.
printf '%s\n' '東京都の人口は増えている。' '東北電気発展︵主要︶指標' >"$tmp/vertical.txt"
view --font='WenQuanYi Micro Hei 14' --gravity=east --rotate=-90 -o vertical.pdf \
  "$tmp/vertical.txt"
