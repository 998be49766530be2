//! `borbaman rankings`: the top players of a cluster (games, wins, draws,
//! win rate) from its `Rankings` call, a page at a time, the viewer's own
//! line highlighted. In a terminal it is `play`'s rankings screen on its
//! own; piped or redirected it prints every line as text and exits.
//!
//! The parts are those of `watch`: a network task fetches the rankings
//! (again every [`REFRESH`]) and turns the keys into pages in the [`View`];
//! the main thread runs `play`'s terminal loop, which draws it.

use std::time::Duration;

use anyhow::Context;
use borbaman_client::pool::ServerPool;
use borbaman_client::session;
use tokio::sync::{mpsc, watch};

use crate::args::ServersArg;
use crate::shutdown::{self, Shutdown};
use crate::ui::View;
use crate::ui::input::Command;
use crate::ui::rankings::{FETCHED, page_of, text_table, turn};

/// How often the open screen fetches the rankings again.
const REFRESH: Duration = Duration::from_secs(10);

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Keys: ←→ (or ↑↓) turn the pages; q (or Esc, Ctrl-C) quits. Only games in \
which all four players joined with an identity are ranked (see \
docs/operating.md). Without a terminal (a pipe, a file) every line is \
printed as text.")]
pub struct RankingsArgs {
    #[command(flatten)]
    pub servers: ServersArg,
    /// The player whose line is highlighted (and whose page opens first).
    /// Defaults to your login name.
    #[arg(long)]
    pub name: Option<String>,
}

pub fn run(args: RankingsArgs) -> anyhow::Result<()> {
    use std::io::IsTerminal;
    anyhow::ensure!(
        !args.servers.servers.is_empty(),
        "borbaman rankings needs the servers to ask: give --servers host:port (or BORBAMAN_SERVERS)"
    );
    let name = args.name.unwrap_or_else(crate::play::login_name);
    let (runtime, pool) = crate::play::terminal::runtime_and_pool(&args.servers)?;
    if !std::io::stdout().is_terminal() {
        let rankings = runtime
            .block_on(session::rankings(&pool, FETCHED))
            .context("asking the servers for the rankings")?;
        print!("{}", text_table(&rankings, &name));
        return Ok(());
    }
    let (view_tx, view_rx) = watch::channel(View {
        name,
        ranking_page: Some(0),
        ..View::default()
    });
    let (command_tx, command_rx) = mpsc::channel::<Command>(64);
    let (stopper, quit) = shutdown::channel();
    runtime.spawn(network(pool, view_tx, command_rx, quit));
    crate::play::terminal::run_alone(runtime, view_rx, command_tx, stopper)
}

/// Fetches the rankings now and every [`REFRESH`], and turns the pages on
/// ←→ (↑↓), until `quit`. The first fetch opens on the viewer's page; a
/// failed one is shown on the screen and tried again.
async fn network(
    pool: ServerPool,
    view: watch::Sender<View>,
    mut commands: mpsc::Receiver<Command>,
    mut quit: Shutdown,
) {
    let mut refresh = tokio::time::interval(REFRESH);
    let mut first = true;
    loop {
        tokio::select! {
            _ = refresh.tick() => {
                match session::rankings(&pool, FETCHED).await {
                    Ok(list) => view.send_modify(|v| {
                        if first {
                            v.ranking_page = Some(page_of(&list, &v.name).unwrap_or(0));
                        }
                        v.rankings = list;
                        v.net.last_error = None;
                    }),
                    Err(e) => view.send_modify(|v| v.net.last_error = Some(e.to_string())),
                }
                first = false;
            }
            _ = quit.recv() => return,
            command = commands.recv() => {
                let delta = match command.unwrap_or(Command::Quit) {
                    Command::Quit => return,
                    Command::Left | Command::Up => -1,
                    Command::Right | Command::Down => 1,
                    _ => continue,
                };
                view.send_modify(|v| {
                    let page = v.ranking_page.unwrap_or(0);
                    v.ranking_page = Some(turn(page, delta, v.rankings.len()));
                });
            }
        }
    }
}
