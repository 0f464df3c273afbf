"""results/report.html: results/report.md as a page a browser shows (banners, styled tables, figures inline),
and the page shell the entry page (results/index.html) shares with it.

The Markdown is rendered by markdown-it-py (CommonMark with GitHub's tables), with raw HTML off: the report's
names are escaped once, as Markdown text, by `multitab.markup.md_text`, and an HTML tag in a name stays text.
The style sheet is inline and the page loads nothing: it opens offline from the file system, and its images
are the report's own relative paths (the page sits beside report.md).
"""

from __future__ import annotations

from markdown_it import MarkdownIt

from multitab.markup import html_text

# One sheet for the report and the entry page: readable width, tables that scroll sideways instead of
# overflowing, banners (the report's blockquotes) that stand out, figures scaled to the column.
STYLE = """
body { font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: #1f2328;
       margin: 0; background: #fff; }
main { max-width: 1200px; margin: 0 auto; padding: 16px 24px 48px; }
h1 { font-size: 1.7em; border-bottom: 1px solid #d0d7de; padding-bottom: .3em; }
h2 { font-size: 1.35em; border-bottom: 1px solid #d0d7de; padding-bottom: .2em; margin-top: 1.6em; }
h3 { font-size: 1.1em; margin-top: 1.3em; }
code { font: 13px ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; background: #f3f4f6;
       padding: .1em .3em; border-radius: 4px; }
table { display: block; overflow-x: auto; max-width: 100%; border-collapse: collapse; margin: .8em 0;
        font-size: 13px; font-variant-numeric: tabular-nums; }
th, td { border: 1px solid #d0d7de; padding: 4px 8px; vertical-align: top; }
th { background: #f3f4f6; text-align: left; }
tbody tr:nth-child(even) { background: #f8f9fb; }
blockquote { margin: .8em 0; padding: .6em 1em; background: #fff8e1; border-left: 5px solid #d4a017;
             border-radius: 4px; }
blockquote p { margin: .3em 0; }
img { max-width: 100%; height: auto; border: 1px solid #eaeef2; }
figure { margin: 1em 0; }
figcaption { font-size: 13px; color: #57606a; }
.figures { display: grid; grid-template-columns: repeat(auto-fit, minmax(520px, 1fr)); gap: 16px; }
a { color: #0969da; }
"""


def markdown_html(text: str) -> str:
    """CommonMark with tables and strikethrough as HTML; raw HTML in `text` is shown as text."""
    return MarkdownIt("commonmark", {"html": False}).enable(["table", "strikethrough"]).render(text)


def html_page(title: str, body: str) -> str:
    """A whole page: charset, title, the inline style sheet, `body` (HTML) in a centred column."""
    return "\n".join(["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
                      '<meta name="viewport" content="width=device-width, initial-scale=1">',
                      f"<title>{html_text(title)}</title>", f"<style>{STYLE}</style>", "</head>", "<body>",
                      "<main>", body.rstrip("\n"), "</main>", "</body>", "</html>", ""])


def report_page(markdown: str, title: str = "MultiTab: the study's tables and figures, regenerated") -> str:
    """results/report.html from results/report.md's text (both in results/, so image paths carry over)."""
    return html_page(title, markdown_html(markdown))
