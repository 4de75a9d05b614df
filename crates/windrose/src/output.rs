//! Plain-text output: numbers without noise, horizontal tables in the style of the paper's
//! (`Leaf 5 4 2 1` over `Cost 3 3 2 2`), wrapped to a terminal-friendly width.

use std::fmt::Write as _;
use std::io::Write as _;

/// Widest line a wrapped table produces (labels included).
const TABLE_WIDTH: usize = 100;

/// A cost or time for people: integers without a decimal point, others with at most six
/// decimals and no trailing zeros (`3`, `13.5`, `0.3`).
pub fn num(v: f64) -> String {
    if !v.is_finite() {
        return v.to_string();
    }
    let s = format!("{v:.6}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".to_string()
    } else {
        s.to_string()
    }
}

/// Renders rows of equal length as a table whose columns read top to bottom, e.g.
///
/// ```text
/// Leaf  5  4  2  1
/// Cost  3  3  2  2
/// ```
///
/// Columns share one width; long tables continue in further blocks separated by a blank line.
pub fn htable(rows: &[(&str, Vec<String>)]) -> String {
    let label_w = rows.iter().map(|(l, _)| l.len()).max().unwrap_or(0);
    let col_w = rows
        .iter()
        .flat_map(|(_, cells)| cells.iter().map(String::len))
        .max()
        .unwrap_or(1);
    let columns = rows.iter().map(|(_, c)| c.len()).max().unwrap_or(0);
    let per_block = ((TABLE_WIDTH.saturating_sub(label_w)) / (col_w + 2)).max(1);
    let mut out = String::new();
    let mut start = 0;
    loop {
        let end = (start + per_block).min(columns);
        if start > 0 {
            out.push('\n');
        }
        for (label, cells) in rows {
            let _ = write!(out, "{label:<label_w$}");
            for cell in cells.get(start..end.min(cells.len())).unwrap_or(&[]) {
                let _ = write!(out, "  {cell:>col_w$}");
            }
            out.push('\n');
        }
        start = end;
        if start >= columns {
            return out;
        }
    }
}

/// Renders a table with a header row and one line per row, columns right-aligned; returns its
/// lines (header first) so callers can annotate them.
pub fn vtable(header: &[&str], rows: &[Vec<String>]) -> Vec<String> {
    let widths: Vec<usize> = (0..header.len())
        .map(|c| {
            rows.iter()
                .filter_map(|row| row.get(c).map(String::len))
                .chain([header[c].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut l = String::new();
        for (cell, w) in cells.zip(&widths) {
            let _ = write!(l, "  {cell:>w$}");
        }
        l
    };
    std::iter::once(line(&mut header.iter().copied()))
        .chain(
            rows.iter()
                .map(|row| line(&mut row.iter().map(String::as_str))),
        )
        .collect()
}

/// Writes `text` to stdout. A closed pipe (`windrose … | head`) is not an error.
pub fn print(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

/// Writes formatted output to stdout ([`outln!`] and [`out!`]). A closed pipe ends nothing:
/// the output is dropped. Any other failure to write is reported once on stderr.
pub fn stdout_fmt(args: std::fmt::Arguments<'_>) {
    use std::sync::atomic::{AtomicBool, Ordering};
    static REPORTED: AtomicBool = AtomicBool::new(false);
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(args) {
        if e.kind() != std::io::ErrorKind::BrokenPipe && !REPORTED.swap(true, Ordering::Relaxed) {
            eprintln!("windrose: writing to stdout failed: {e}");
        }
    }
}

/// Serialises `value` as pretty JSON followed by a newline, and prints it.
pub fn print_json(value: &impl serde::Serialize) -> anyhow::Result<()> {
    let mut text = serde_json::to_string_pretty(value)?;
    text.push('\n');
    print(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_plain() {
        assert_eq!(num(3.0), "3");
        assert_eq!(num(13.5), "13.5");
        assert_eq!(num(0.1 + 0.2), "0.3");
        assert_eq!(num(-0.0), "0");
        assert_eq!(num(1e-9), "0");
    }

    #[test]
    fn tables_align_and_wrap() {
        let t = htable(&[
            ("Leaf", vec!["5".into(), "4".into()]),
            ("Cost", vec!["3".into(), "10".into()]),
        ]);
        assert_eq!(t, "Leaf   5   4\nCost   3  10\n");
        let many: Vec<String> = (0..100).map(|i| i.to_string()).collect();
        let t = htable(&[("Node", many.clone()), ("Parent", many)]);
        assert!(t.lines().all(|l| l.len() <= TABLE_WIDTH));
        assert!(t.contains("\n\n"));
    }
}
