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

/// The error and its causes on one line (`outer: inner: root cause`). A cause whose text its
/// outer message already quotes (a library error that prints its source) is not repeated.
pub fn one_line(err: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in err.chain() {
        let cause = cause.to_string();
        if text.contains(&cause) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&cause);
    }
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// A library error, with the exit code its kind deserves (2 for the user's configuration).
pub fn net_err(e: windrose_net::NetError) -> anyhow::Error {
    if e.is_bad_input() {
        bad_input(e.to_string())
    } else {
        anyhow::Error::new(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Quoting(std::io::Error);

    impl fmt::Display for Quoting {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "output /x/y: {}", self.0)
        }
    }

    impl std::error::Error for Quoting {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn one_line_names_each_cause_once() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let e = anyhow::Error::new(Quoting(io)).context("node 1 could not start");
        assert_eq!(
            one_line(&e),
            "node 1 could not start: output /x/y: no such file"
        );
        let e = anyhow::anyhow!("inner\nsecond line").context("outer");
        assert_eq!(one_line(&e), "outer: inner second line");
    }
}
