use clap::Parser;

/// mimalloc rather than glibc's malloc: a game call allocates and frees
/// many small buffers (HTTP/2 frames, protobuf messages, sqlx rows) across
/// threads, and with glibc's allocator 10–16 % of the servers' and the
/// bench's CPU went to malloc and free (docs/results.md, "Closed loop:
/// the floor, measured steadily").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
