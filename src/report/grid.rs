//! A table as data (header and rows of text), rendered as a markdown table or an HTML table, so
//! that one report section can go to both the markdown file and the HTML page.

use super::Table;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Grid {
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Grid {
    pub fn new<S: ToString>(header: &[S]) -> Grid {
        Grid {
            header: header.iter().map(|s| s.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row<S: ToString>(&mut self, cells: &[S]) {
        self.rows
            .push(cells.iter().map(|s| s.to_string()).collect());
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    pub fn to_table(&self) -> Table {
        let mut t = Table::new(&self.header);
        for r in &self.rows {
            t.row(r);
        }
        t
    }

    /// The markdown table (pipes inside cells escaped).
    pub fn markdown(&self) -> String {
        let esc = |c: &String| c.replace('|', "\\|");
        let mut g = Grid::new(&self.header.iter().map(esc).collect::<Vec<_>>());
        for r in &self.rows {
            g.row(&r.iter().map(esc).collect::<Vec<_>>());
        }
        g.to_table().render()
    }

    /// An HTML `<table>`; a cell that starts with `!` is marked as a flag (`class="flag"`).
    pub fn html(&self) -> String {
        let mut s = String::from("<table>\n<thead><tr>");
        for h in &self.header {
            s.push_str(&format!("<th>{}</th>", escape(h)));
        }
        s.push_str("</tr></thead>\n<tbody>\n");
        for r in &self.rows {
            s.push_str("<tr>");
            for c in r {
                if c.contains("REGRESSION") || c.contains("ABORT") || c.starts_with("eliminated") {
                    s.push_str(&format!("<td class=\"flag\">{}</td>", escape(c)));
                } else {
                    s.push_str(&format!("<td>{}</td>", escape(c)));
                }
            }
            s.push_str("</tr>\n");
        }
        s.push_str("</tbody>\n</table>\n");
        s
    }
}

/// Escapes text for HTML element content and attribute values.
pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_both_ways_and_escapes() {
        let mut g = Grid::new(&["a", "b"]);
        g.row(&["x|y", "<b>"]);
        assert!(g.markdown().contains("x\\|y"));
        let h = g.html();
        assert!(
            h.contains("<td>&lt;b&gt;</td>") && h.contains("<th>a</th>"),
            "{h}"
        );
    }
}
