//! The text table the comparison is laid out in: a label column, then one
//! right-aligned column per mode.

use crate::result::ModeResult;

/// A text table: a label column, then one right-aligned column per mode.
pub(super) struct Table {
    header: Vec<String>,
    rows: Vec<(String, Vec<String>)>,
}

impl Table {
    pub(super) fn new(columns: impl Iterator<Item = String>) -> Self {
        Table {
            header: columns.collect(),
            rows: Vec::new(),
        }
    }

    pub(super) fn add_row(
        &mut self,
        label: &str,
        results: &[ModeResult],
        cell: impl Fn(&ModeResult) -> String,
    ) {
        self.rows
            .push((label.to_string(), results.iter().map(cell).collect()));
    }

    pub(super) fn render(&self) -> String {
        let label_width = self
            .rows
            .iter()
            .map(|(label, _)| label.chars().count())
            .max()
            .unwrap_or(0);
        let column_widths: Vec<usize> = (0..self.header.len())
            .map(|column| self.column_width(column))
            .collect();
        let mut out = render_line("", label_width, &self.header, &column_widths);
        for (label, cells) in &self.rows {
            out.push_str(&render_line(label, label_width, cells, &column_widths));
        }
        out
    }

    fn column_width(&self, column: usize) -> usize {
        let cells = self.rows.iter().map(|(_, cells)| &cells[column]);
        std::iter::once(&self.header[column])
            .chain(cells)
            .map(|cell| cell.chars().count())
            .max()
            .unwrap_or(0)
    }
}

fn render_line(label: &str, label_width: usize, cells: &[String], widths: &[usize]) -> String {
    let mut line = format!("{label:<label_width$}");
    for (cell, &width) in cells.iter().zip(widths) {
        line.push_str(&format!("  {cell:>width$}"));
    }
    line.truncate(line.trim_end().len());
    line.push('\n');
    line
}
