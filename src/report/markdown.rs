//! The report as markdown: headings, paragraphs and tables, each chart as an image link to the
//! SVG file written beside it (`charts/NAME.svg`).

use super::document::{Block, Document};

pub fn render(doc: &Document) -> String {
    let mut s = format!("# {}\n\n{}\n", doc.title, doc.meta);
    for sec in &doc.sections {
        s.push_str(&format!("\n## {}\n", sec.title));
        for b in &sec.blocks {
            s.push('\n');
            match b {
                Block::Para(p) => s.push_str(&format!("{p}\n")),
                Block::Grid(g) => s.push_str(&g.markdown()),
                Block::Chart { name, title, .. } => {
                    s.push_str(&format!("![{title}](charts/{name}.svg)\n"))
                }
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::document::Section;
    use crate::report::grid::Grid;

    #[test]
    fn sections_become_headings_and_charts_links() {
        let mut g = Grid::new(&["a"]);
        g.row(&["1"]);
        let doc = Document {
            title: "kiln report".into(),
            meta: "m".into(),
            sections: vec![Section {
                title: "Roofline".into(),
                blocks: vec![
                    Block::Para("p".into()),
                    Block::Grid(g),
                    Block::Chart {
                        name: "roofline".into(),
                        title: "roofline".into(),
                        svg: "<svg/>".into(),
                    },
                ],
            }],
        };
        let md = render(&doc);
        assert!(md.starts_with("# kiln report\n"));
        assert!(
            md.contains("## Roofline\n")
                && md.contains("| a |")
                && md.contains("![roofline](charts/roofline.svg)"),
            "{md}"
        );
    }
}
