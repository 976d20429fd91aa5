//! Aligned columns the way kubectl prints them (three spaces apart, no borders).

/// A table of string cells under a header.
pub struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with this header row.
    pub fn new<const N: usize>(header: [&str; N]) -> Self {
        Self {
            rows: vec![header.iter().map(ToString::to_string).collect()],
        }
    }

    /// Appends a row.
    pub fn row<const N: usize>(&mut self, cells: [String; N]) {
        self.rows.push(cells.into());
    }

    /// The rows, each column as wide as its widest cell; no trailing spaces.
    pub fn render(&self) -> String {
        let columns = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let widths: Vec<usize> = (0..columns)
            .map(|i| {
                self.rows
                    .iter()
                    .filter_map(|r| r.get(i))
                    .map(|c| c.chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        for row in &self.rows {
            let mut line = String::new();
            for (cell, width) in row.iter().zip(&widths) {
                line.push_str(cell);
                let pad = width.saturating_sub(cell.chars().count()) + 3;
                line.extend(std::iter::repeat_n(' ', pad));
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn columns_line_up_three_spaces_apart() {
        let mut t = super::Table::new(["NAME", "READY"]);
        t.row(["queue-0".to_string(), "true".to_string()]);
        t.row(["q".to_string(), String::new()]);
        assert_eq!(t.render(), "NAME      READY\nqueue-0   true\nq\n");
    }
}
