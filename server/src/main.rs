use clap::Parser;

#[derive(Parser)]
#[command(
    name = "borbaman-server",
    version,
    about = "Stateless Borbaman game server"
)]
struct Cli {
    #[command(flatten)]
    args: borbaman_server::cli::ServerArgs,
}

fn main() -> anyhow::Result<()> {
    borbaman_server::cli::run(Cli::parse().args)
}
