//! `borbaman bot`. (Placeholder.)

#[derive(Debug, clap::Args)]
pub struct BotArgs {}

pub fn run(_args: BotArgs) -> anyhow::Result<()> {
    anyhow::bail!("not built yet")
}
