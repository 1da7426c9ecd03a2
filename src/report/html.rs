//! The report as one self-contained HTML page: inline CSS, charts inline as SVG, no scripts and
//! nothing fetched, so it opens the same from a file, a CI artifact or a mail attachment.

use super::document::{Block, Document};
use super::grid::escape;

const CSS: &str = "body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2rem auto;max-width:1100px;color:#222;padding:0 1rem}
h1{border-bottom:2px solid #333}h2{margin-top:2.2rem;border-bottom:1px solid #ccc}
table{border-collapse:collapse;margin:.8rem 0;font-size:.9rem}th,td{border:1px solid #ccc;padding:.25rem .55rem;text-align:left}
th{background:#f2f2f2}tr:nth-child(even) td{background:#fafafa}td.flag{color:#b00020;font-weight:600}
figure{margin:1rem 0}figcaption{color:#555;font-size:.85rem}.meta{color:#555}";

pub fn render(doc: &Document) -> String {
    let mut s = format!("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{}</title>\n<style>\n{CSS}\n</style>\n</head>\n<body>\n<h1>{}</h1>\n<p class=\"meta\">{}</p>\n", escape(&doc.title), escape(&doc.title), escape(&doc.meta));
    for sec in &doc.sections {
        s.push_str(&format!("<section>\n<h2>{}</h2>\n", escape(&sec.title)));
        for b in &sec.blocks {
            match b {
                Block::Para(p) => s.push_str(&format!("<p>{}</p>\n", escape(p))),
                Block::Grid(g) => s.push_str(&g.html()),
                Block::Chart { title, svg, .. } => s.push_str(&format!(
                    "<figure>\n{}\n<figcaption>{}</figcaption>\n</figure>\n",
                    strip_prolog(svg),
                    escape(title)
                )),
            }
        }
        s.push_str("</section>\n");
    }
    s.push_str("</body>\n</html>\n");
    s
}

/// An SVG document's text without its XML declaration, to sit inside HTML.
fn strip_prolog(svg: &str) -> &str {
    match svg.find("<svg") {
        Some(i) => &svg[i..],
        None => svg,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::document::Section;

    #[test]
    fn page_is_self_contained_with_inline_svg() {
        let doc = Document {
            title: "kiln report".into(),
            meta: "a <b>".into(),
            sections: vec![Section {
                title: "Roofline".into(),
                blocks: vec![Block::Chart {
                    name: "r".into(),
                    title: "r".into(),
                    svg: "<?xml version=\"1.0\"?>\n<svg></svg>".into(),
                }],
            }],
        };
        let h = render(&doc);
        assert!(
            h.contains("<h2>Roofline</h2>")
                && h.contains("<figure>\n<svg></svg>")
                && h.contains("a &lt;b&gt;"),
            "{h}"
        );
        assert!(
            !h.contains("<?xml") && !h.contains("<script") && !h.contains("http://")
                || h.contains("xmlns")
        );
    }
}
