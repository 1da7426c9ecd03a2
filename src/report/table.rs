//! A minimal aligned text table (markdown-compatible pipes), for every command's summary.

/// A number in a table cell: `{:.2e}`, or "-" for NaN (nothing was measured).
pub fn sci(x: f64) -> String {
    if x.is_nan() {
        "-".into()
    } else {
        format!("{x:.2e}")
    }
}

#[derive(Debug, Clone, Default)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new<S: ToString>(header: &[S]) -> Table {
        Table {
            header: header.iter().map(|s| s.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row<S: ToString>(&mut self, cells: &[S]) {
        self.rows
            .push(cells.iter().map(|s| s.to_string()).collect());
    }

    /// Adds the column `head` on the right, its `cells` one per row in order ("" for a row
    /// past their end).
    pub fn column(&mut self, head: &str, cells: impl IntoIterator<Item = String>) {
        self.header.push(head.into());
        let mut cells = cells.into_iter();
        for r in &mut self.rows {
            r.push(cells.next().unwrap_or_default());
        }
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Renders as a markdown table with padded columns.
    pub fn render(&self) -> String {
        let cols = self.header.len();
        let mut w: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for r in &self.rows {
            for (i, c) in r.iter().enumerate().take(cols) {
                w[i] = w[i].max(c.chars().count());
            }
        }
        let line = |cells: &[String]| {
            let parts: Vec<String> = (0..cols)
                .map(|i| {
                    let c = cells.get(i).map(String::as_str).unwrap_or("");
                    format!("{c:<width$}", width = w[i])
                })
                .collect();
            format!("| {} |", parts.join(" | "))
        };
        let mut out = line(&self.header);
        out.push('\n');
        let sep: Vec<String> = w.iter().map(|n| "-".repeat(*n)).collect();
        out.push_str(&format!("|-{}-|\n", sep.join("-|-")));
        for r in &self.rows {
            out.push_str(&line(r));
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_aligned_markdown() {
        let mut t = Table::new(&["a", "long"]);
        t.row(&["xyz", "1"]);
        assert_eq!(
            t.render(),
            "| a   | long |\n|-----|------|\n| xyz | 1    |\n"
        );
    }
}
