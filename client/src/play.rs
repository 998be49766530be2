//! `borbaman play`. (Placeholder.)

#[derive(Debug, clap::Args)]
pub struct PlayArgs {}

pub fn run(_args: PlayArgs) -> anyhow::Result<()> {
    anyhow::bail!("not built yet")
}
