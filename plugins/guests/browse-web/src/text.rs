//! Turning an HTML document into what a model should read: the title, and
//! the visible text with line breaks where the layout breaks lines.

use ego_tree::iter::Edge;
use scraper::{Html, Node, Selector};

/// Elements whose content is never shown as text (or is not text at all).
const SKIPPED: &[&str] = &[
    "script", "style", "noscript", "template", "head", "iframe", "object", "svg", "canvas",
];

/// Elements that start and end a line in a browser's layout.
const BLOCKS: &[&str] = &[
    "address",
    "article",
    "aside",
    "blockquote",
    "body",
    "caption",
    "center",
    "dd",
    "details",
    "dialog",
    "dir",
    "div",
    "dl",
    "dt",
    "fieldset",
    "figcaption",
    "figure",
    "footer",
    "form",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "header",
    "hgroup",
    "hr",
    "html",
    "legend",
    "li",
    "main",
    "menu",
    "nav",
    "ol",
    "option",
    "p",
    "pre",
    "section",
    "summary",
    "table",
    "tbody",
    "tfoot",
    "thead",
    "tr",
    "ul",
];

/// Table cells sit side by side: separate them, but do not break the line.
const CELLS: &[&str] = &["td", "th"];

/// The document's `<title>`, whitespace collapsed; empty when it has none.
pub fn title(doc: &Html) -> String {
    let selector = Selector::parse("title").expect("static selector");
    let Some(element) = doc.select(&selector).next() else {
        return String::new();
    };
    let mut writer = Writer::default();
    for piece in element.text() {
        writer.text(piece);
    }
    writer.finish()
}

/// Whether the page asks for a password: a `<form>` holding an
/// `<input type="password">`, the shape of nearly every login page.
pub fn has_password_form(doc: &Html) -> bool {
    let selector = Selector::parse(r#"form input[type="password" i]"#).expect("static selector");
    doc.select(&selector).next().is_some()
}

/// The readable text of the document's body.
pub fn readable_text(doc: &Html) -> String {
    let mut writer = Writer::default();
    // Depth inside a skipped element (0: not skipping) and inside `<pre>`.
    // An explicit walk rather than recursion: a hostile page can nest
    // elements deep enough to exhaust the wasm stack.
    let mut skipping = 0usize;
    let mut preformatted = 0usize;
    for edge in doc.tree.root().traverse() {
        match edge {
            Edge::Open(node) => match node.value() {
                Node::Element(element) => {
                    let name = element.name();
                    if skipping > 0 || SKIPPED.contains(&name) {
                        skipping += 1;
                    } else if name == "br" {
                        writer.line_break();
                    } else if BLOCKS.contains(&name) {
                        writer.line_break();
                        if name == "pre" {
                            preformatted += 1;
                        }
                    } else if CELLS.contains(&name) {
                        writer.space();
                    }
                }
                Node::Text(text) if skipping == 0 => {
                    if preformatted > 0 {
                        writer.raw(text);
                    } else {
                        writer.text(text);
                    }
                }
                _ => {}
            },
            Edge::Close(node) => {
                if let Node::Element(element) = node.value() {
                    let name = element.name();
                    if skipping > 0 {
                        skipping -= 1;
                    } else if BLOCKS.contains(&name) {
                        writer.line_break();
                        if name == "pre" {
                            preformatted = preformatted.saturating_sub(1);
                        }
                    } else if CELLS.contains(&name) {
                        writer.space();
                    }
                }
            }
        }
    }
    writer.finish()
}

/// Accumulates text, collapsing runs of whitespace to one space and runs of
/// line breaks to one newline, with nothing at either end.
#[derive(Default)]
struct Writer {
    out: String,
    pending_space: bool,
    pending_break: bool,
}

impl Writer {
    fn text(&mut self, text: &str) {
        for c in text.chars() {
            if c.is_whitespace() {
                self.pending_space = true;
            } else {
                self.push(c);
            }
        }
    }

    /// Text from `<pre>`: keeps its spaces and newlines as written.
    fn raw(&mut self, text: &str) {
        for c in text.chars() {
            match c {
                '\r' => {}
                '\n' => self.line_break(),
                c if c.is_whitespace() => {
                    self.flush_pending();
                    self.out.push(' ');
                }
                c => self.push(c),
            }
        }
    }

    fn space(&mut self) {
        self.pending_space = true;
    }

    fn line_break(&mut self) {
        self.pending_break = true;
    }

    fn push(&mut self, c: char) {
        self.flush_pending();
        self.out.push(c);
    }

    fn flush_pending(&mut self) {
        if !self.out.is_empty() {
            if self.pending_break {
                // Spaces left at the end of the line are noise.
                let kept = self.out.trim_end_matches(' ').len();
                self.out.truncate(kept);
                self.out.push('\n');
            } else if self.pending_space && !self.out.ends_with(['\n', ' ']) {
                self.out.push(' ');
            }
        }
        self.pending_space = false;
        self.pending_break = false;
    }

    fn finish(self) -> String {
        self.out.trim_end().to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text_of(html: &str) -> String {
        readable_text(&Html::parse_document(html))
    }

    #[test]
    fn blocks_break_lines_and_whitespace_collapses() {
        let html = "<html><head><title> A \n page </title><style>p{}</style></head>\
            <body><h1>Hello,\n   world</h1><p>One <b>bold</b>&nbsp;&amp; <i>two</i></p>\
            <script>var x = 1;</script><ul><li>a</li><li>b<br>c</li></ul>\
            <noscript>enable js</noscript><template><p>hidden</p></template></body></html>";
        let doc = Html::parse_document(html);
        assert_eq!(title(&doc), "A page");
        assert_eq!(readable_text(&doc), "Hello, world\nOne bold & two\na\nb\nc");
    }

    #[test]
    fn table_cells_and_pre() {
        assert_eq!(
            text_of("<table><tr><td>a</td><td>b</td></tr><tr><td>c</td></tr></table>"),
            "a b\nc"
        );
        assert_eq!(
            text_of("<p>x</p><pre>fn main() {\n    go();\n}</pre><p>y</p>"),
            "x\nfn main() {\n    go();\n}\ny"
        );
    }

    #[test]
    fn login_forms() {
        let login = Html::parse_document(
            "<form action=/login><input name=u><input TYPE=Password name=p></form>",
        );
        assert!(has_password_form(&login));
        let search = Html::parse_document("<form><input type=search></form>");
        assert!(!has_password_form(&search));
        let loose = Html::parse_document("<input type=password>");
        assert!(!has_password_form(&loose));
    }

    #[test]
    fn deep_nesting_does_not_recurse() {
        let html = format!("{}deep{}", "<div>".repeat(2_000), "</div>".repeat(2_000));
        assert_eq!(text_of(&html), "deep");
    }
}
