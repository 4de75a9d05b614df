//! A small valid scenario file and helpers for the tests that check how scenario files are
//! read (their errors name file, line and key).

use std::path::Path;
use windrose_sim::scenario::parse_scenario;

/// Two clusters (3 and 2 nodes), on lines 1-18 of every [`small`] file.
pub const PLATFORM: &str = r#"[platform]
[[platform.cluster]]
nodes = 3
node_uplink_bytes_s = 1e6
node_downlink_bytes_s = 1e6
access_up_bytes_s = 1e7
access_down_bytes_s = 1e7
intra_latency_s = 0.001
[[platform.cluster]]
nodes = 2
node_uplink_bytes_s = 1e6
node_downlink_bytes_s = 1e6
access_up_bytes_s = 1e7
access_down_bytes_s = 1e7
intra_latency_s = 0.001
[platform.wan]
bytes_s = [[0, 5e5], [5e5, 0]]
latency_s = [[0, 0.02], [0.02, 0]]
"#;

/// A binomial broadcast of 100 kB from node 0.
pub const WORKLOAD: &str = r#"
[workload]
protocol = "broadcast"
tree = "binomial"
root = 0
message_bytes = "100kB"
segment_bytes = "10kB"
"#;

/// A small valid scenario: [`PLATFORM`], then `extra`, then [`WORKLOAD`].
pub fn small(extra: &str) -> String {
    format!("{PLATFORM}{extra}{WORKLOAD}")
}

/// The error reading `text` as `s.toml` gives, or "no error".
pub fn err(text: &str) -> String {
    parse_scenario(text, Path::new("s.toml"))
        .map(|_| "no error".to_string())
        .unwrap_or_else(|e| e.to_string())
}

/// The 1-based line of the first occurrence of `needle` in `text`.
pub fn line_of(text: &str, needle: &str) -> usize {
    let at = text
        .find(needle)
        .unwrap_or_else(|| panic!("{needle} not in text"));
    text[..at].matches('\n').count() + 1
}
