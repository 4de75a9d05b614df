//! How the binary reports failures: bad input (a file that does not parse, an unknown node, a bad
//! argument value) exits with code 2, anything else with code 1. Either way the user sees one
//! line on stderr, `error: <what and where>`, never a panic.

use std::fmt;

/// A problem with what the user gave us: a file, an argument, a node id. Exit code 2.
#[derive(Debug)]
pub struct BadInput(pub String);

impl fmt::Display for BadInput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadInput {}

/// An `anyhow` error that exits with code 2.
pub fn bad_input(message: impl Into<String>) -> anyhow::Error {
    BadInput(message.into()).into()
}

/// Marks a library error as caused by the user's input.
pub trait OrBadInput<T> {
    /// The error's own message is already complete (e.g. a [`windrose_model::ModelError`] that
    /// names its file, line and column).
    fn or_bad_input(self) -> anyhow::Result<T>;
    /// Prefixes the error with what it is about, e.g. `--root 9`.
    fn or_bad_input_about(self, what: impl fmt::Display) -> anyhow::Result<T>;
}

impl<T, E: fmt::Display> OrBadInput<T> for Result<T, E> {
    fn or_bad_input(self) -> anyhow::Result<T> {
        self.map_err(|e| bad_input(e.to_string()))
    }

    fn or_bad_input_about(self, what: impl fmt::Display) -> anyhow::Result<T> {
        self.map_err(|e| bad_input(format!("{what}: {e}")))
    }
}

/// The exit code for an error: 2 when any cause in its chain is bad input, else 1.
pub fn exit_code(err: &anyhow::Error) -> u8 {
    if err.chain().any(|c| c.is::<BadInput>()) {
        2
    } else {
        1
    }
}

/// The error and its causes on one line (`outer: inner: root cause`).
pub fn one_line(err: &anyhow::Error) -> String {
    format!("{err:#}")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}
