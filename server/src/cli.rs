//! Command-line entry point of the game server. (Placeholder.)

/// Flags of `borbaman-server` (and `borbaman server`).
#[derive(Debug, clap::Args)]
pub struct ServerArgs {}

/// Runs a server until SIGTERM or Ctrl-C.
pub fn run(_args: ServerArgs) -> anyhow::Result<()> {
    anyhow::bail!("not built yet")
}
