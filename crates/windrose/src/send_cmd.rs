//! `windrose send`: a file to every member of a running group, the protocol chosen by the
//! member that sends it ([`windrose_proto::choice`]): the tree broadcast, MOB or Balanced
//! Multicasting, whichever it predicts fastest for this file on the group's live view. The
//! request goes to the member's control socket (it must be serving: `windrose group serve`),
//! which roots the collective; every member's copy is checked against the file's BLAKE3, as
//! `group start` checks it.

use crate::group_cmd::{start_explained, ControlRequest, Via};
use anyhow::Context;
use clap::Args;
use std::path::PathBuf;

/// `windrose send`.
#[derive(Debug, Args)]
pub struct SendArgs {
    #[command(flatten)]
    via: Via,
    /// The file to send (the member must be able to read it).
    #[arg(long, value_name = "FILE")]
    file: PathBuf,
    /// Print why: every candidate's predicted completion and the deciding factor.
    #[arg(long)]
    explain: bool,
    /// Print the result as JSON (with the protocol and the predictions).
    #[arg(long)]
    json: bool,
}

/// Runs `windrose send`.
pub fn run(a: SendArgs) -> anyhow::Result<()> {
    let socket = a.via.socket()?;
    let file = crate::group_cmd::absolute(&a.file, "--file")?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    rt.block_on(start_explained(
        &socket,
        &ControlRequest::Auto { file },
        a.json,
        a.explain,
    ))
}
