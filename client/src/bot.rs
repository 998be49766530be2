//! `borbaman bot`: headless AI players.
//!
//! Each bot is a [`GameSession`] on its own [`ServerPool`] (so bots spread
//! over the servers like separate clients would) driven by a [`Driver`],
//! the same decision loop the bench clients run: every tick it acts on the
//! brain's choice while the game runs and keeps its seat in a lobby. When a
//! game ends it reports the outcome and joins the next one. `borbaman play` runs the same
//! loop in-process to fill a local game; those bots keep their sessions in
//! the state directory, like the player, so that a `play` restarted after a
//! crash brings them back into their running game too.

use std::time::Duration;

use anyhow::Context;
use borbaman_client::pool::{PoolConfig, PoolError, ServerPool};
use borbaman_client::session::{GameSession, new_token};
use borbaman_client::state_dir::{SavedSession, StateDir};
use borbaman_cluster::local::{ClusterConfig, LocalCluster};
use borbaman_proto::pb::GameState;

use crate::args::ServersArg;
use crate::brain::Level;
use crate::driver::{self, Driver, JoinBackoff, Step};
use crate::shutdown::{self, Shutdown};
use tokio::sync::watch;

#[derive(Debug, clap::Args)]
pub struct BotArgs {
    /// Number of bots to run.
    #[arg(long, default_value_t = 4)]
    pub count: usize,
    #[command(flatten)]
    pub servers: ServersArg,
    /// Bots are named <prefix>-1, <prefix>-2, …
    #[arg(long, default_value = "bot")]
    pub name_prefix: String,
    /// Stop after each bot has finished this many games (default: run until
    /// Ctrl-C). One line is printed per finished game.
    #[arg(long)]
    pub games: Option<u32>,
    /// The arena to play on: classic, open or corridors (default: any).
    #[arg(long, value_name = "NAME", value_parser = crate::args::map_name)]
    pub map: Option<String>,
    /// How well the bots play: easy (wanders, bombs rarely), normal, or
    /// hard (hunts, kicks bombs and holds remote bombs for its opponents).
    #[arg(long, value_name = "LEVEL", default_value = "normal")]
    pub bots: Level,
}

/// How one bot plays.
#[derive(Clone, Debug)]
pub struct BotOptions {
    pub name: String,
    /// Stop after this many finished games (`None`: until stopped).
    pub games: Option<u32>,
    /// Time between two calls.
    pub interval: Duration,
    /// Seeds the brain's random choices.
    pub seed: u64,
    /// Where the bot keeps its session while a game runs, to rejoin it after
    /// a crash (`None`: every game starts afresh).
    pub sessions: Option<StateDir>,
    /// The arena to play on (empty: any).
    pub map: String,
    /// How well it plays.
    pub level: Level,
    /// The game a leader (the local player) has just joined, 0 for none
    /// yet: when it changes to another game than the bot's, the bot leaves
    /// its game (forfeiting it if it runs) and joins again, which seats it
    /// in the leader's waiting game (the oldest one). Each change is
    /// followed once.
    pub follow: Option<watch::Receiver<u64>>,
}

impl BotOptions {
    pub fn named(name: impl Into<String>) -> BotOptions {
        BotOptions {
            name: name.into(),
            games: None,
            interval: Duration::from_millis(50),
            seed: rand::random(),
            sessions: None,
            map: String::new(),
            level: Level::Normal,
            follow: None,
        }
    }
}

/// How a game ended, seen by one bot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GameOutcome {
    pub bot: String,
    pub game_id: u64,
    pub seat: u32,
    /// Name of the winner, `None` on a draw.
    pub winner: Option<String>,
    pub draw: bool,
    /// Game ticks from start to end.
    pub ticks: u32,
    /// States older than one already seen (should be 0).
    pub regressions: u64,
}

impl GameOutcome {
    fn from_state(bot: &str, session: &GameSession, state: &GameState) -> GameOutcome {
        let winner = state.winner.and_then(|seat| {
            state
                .players
                .iter()
                .find(|p| p.seat == seat)
                .map(|p| p.name.clone())
        });
        GameOutcome {
            bot: bot.to_string(),
            game_id: state.game_id,
            seat: session.seat(),
            winner,
            draw: state.draw,
            ticks: state.tick,
            regressions: session.regressions(),
        }
    }
}

impl GameOutcome {
    /// The game's result, the same whichever of its players tells it:
    /// `game 7 finished at tick 2523 (2:06): bot-3 won`.
    pub fn game_line(&self) -> String {
        let seconds = u64::from(self.ticks) * u64::from(borbaman_game::TICK_MS) / 1000;
        let result = match &self.winner {
            Some(winner) => format!("{winner} won"),
            None => "draw".to_string(),
        };
        format!(
            "game {} finished at tick {} ({}:{:02}): {result}",
            self.game_id,
            self.ticks,
            seconds / 60,
            seconds % 60
        )
    }
}

impl std::fmt::Display for GameOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let result = match (&self.winner, self.draw) {
            (Some(winner), _) if *winner == self.bot => "won".to_string(),
            (Some(winner), _) => format!("lost, winner {winner}"),
            (None, _) => "draw".to_string(),
        };
        write!(
            f,
            "{}: game {} (seat {}) finished at tick {}: {result}",
            self.bot,
            self.game_id,
            self.seat + 1,
            self.ticks
        )
    }
}

/// Prints one line per finished game, however many of our bots played it.
#[derive(Default)]
struct GameLines {
    printed: std::collections::HashSet<u64>,
}

impl GameLines {
    fn add(&mut self, outcome: &GameOutcome) {
        if self.printed.insert(outcome.game_id) {
            println!("{}", outcome.game_line());
        }
    }
}

/// Plays games until `options.games` are done or `stop` turns true; calls
/// `on_game` after each. Call failures are retried after a pause (the pool
/// already failed over); a session the servers no longer accept is replaced
/// by a fresh join.
pub async fn play_games(
    pool: ServerPool,
    options: BotOptions,
    mut stop: Shutdown,
    mut on_game: impl FnMut(GameOutcome),
) {
    let mut driver = Driver::at_level(options.seed, options.level);
    let mut finished = 0u32;
    let sessions = options.sessions.as_ref();
    let mut follow = options.follow.clone();
    // A bot that keeps its sessions (the bots beside `play`'s local
    // cluster) plays as an identity of its own, kept beside them, so its
    // games with the player are ranked (only games between identified
    // players are) and its name stays its own. Others play without one.
    let identity = sessions
        .and_then(|dir| {
            let own = StateDir::at(
                dir.path()
                    .join(format!("bot-{}", hex::encode(&options.name))),
            );
            own.identity()
                .inspect_err(|e| tracing::warn!(bot = options.name, error = %e, "no identity"))
                .ok()
        })
        .unwrap_or_default();
    // The leader's last game followed: each of its moves is followed once.
    let mut followed = 0u64;
    // Joins refused in a row wait longer each time.
    let mut backoff = JoinBackoff::default();
    while options.games.is_none_or(|games| finished < games) && !stop.is_shutdown() {
        let saved = sessions.and_then(|dir| dir.load(&options.name));
        let token = saved
            .as_ref()
            .and_then(SavedSession::token)
            .unwrap_or_else(new_token);
        let mut session = match GameSession::join_as(
            &pool,
            &identity,
            &options.name,
            token,
            &options.map,
        )
        .await
        {
            Ok((session, _)) => {
                backoff.seated();
                session
            }
            Err(e) => {
                let wait = match driver::refusal(&e) {
                    // Full, not refusing this bot: keep its session and
                    // come back when the server said, later each time it
                    // says it again.
                    Some(refused) => {
                        let wait = backoff.refused(&refused);
                        tracing::info!(
                            bot = options.name,
                            reason = %refused.reason,
                            "servers full; trying again in {} ms",
                            wait.as_millis()
                        );
                        wait
                    }
                    None => {
                        tracing::warn!(bot = options.name, error = %e, "join failed");
                        if let (Some(dir), Some(_), PoolError::Status(_)) = (sessions, &saved, &e) {
                            // The servers refuse the saved session: start
                            // afresh.
                            dir.clear(&options.name);
                        }
                        Duration::from_millis(500)
                    }
                };
                if stop.sleep(wait).await {
                    return;
                }
                continue;
            }
        };
        if let Some(dir) = sessions {
            let saved = SavedSession {
                name: options.name.clone(),
                token_hex: hex::encode(session.token()),
                game_id: session.game_id(),
                seat: session.seat(),
                servers: String::new(),
            };
            if let Err(e) = dir.save(&saved) {
                tracing::warn!(bot = options.name, error = %e, "cannot save the bot's session");
            }
        }
        let played = play_one(
            &mut session,
            &options,
            &mut driver,
            &mut stop,
            (&mut follow, &mut followed),
        )
        .await;
        match played {
            Some(state) => {
                finished += 1;
                on_game(GameOutcome::from_state(&options.name, &session, &state));
            }
            None if stop.is_shutdown() => {
                let _ = session.leave().await;
            }
            None => {}
        }
        if let Some(dir) = sessions {
            dir.clear(&options.name);
        }
        if stop.is_shutdown() {
            return;
        }
    }
}

/// Plays one game to its end; `None` when stopped, when the session was
/// lost, or when it left to follow its leader into another game.
async fn play_one(
    session: &mut GameSession,
    options: &BotOptions,
    driver: &mut Driver,
    stop: &mut Shutdown,
    (follow, followed): (&mut Option<watch::Receiver<u64>>, &mut u64),
) -> Option<GameState> {
    let mut ticker = tokio::time::interval(options.interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        if let Some(leader) = follow.as_mut() {
            let game = *leader.borrow_and_update();
            if game != 0 && game != session.game_id() && game != *followed {
                *followed = game;
                tracing::info!(bot = options.name, game, "following the player to its game");
                let _ = tokio::time::timeout(Duration::from_secs(2), session.leave()).await;
                return None;
            }
        }
        // Inputs go out without waiting for replies; a reply is taken in
        // as soon as it comes (its state is the newest the brain sees).
        let result = tokio::select! {
            _ = ticker.tick() => match driver.next(session) {
                Step::GameOver => {
                    // The inputs still on their way land before the bot
                    // reports the game over (they change nothing in a
                    // finished game but its clock).
                    session.flush(Duration::from_secs(5)).await;
                    return session.latest().cloned();
                }
                Step::Act(action) => {
                    session.send_input(action);
                    Ok(())
                }
                Step::Poll => {
                    session.pump();
                    session.state().await.map(|_| ())
                }
            },
            _ = stop.recv() => return None,
            () = changed(follow) => continue,
            Some(reply) = session.next_reply() => reply.result.map(|_| ()),
        };
        match result {
            Ok(()) => {}
            Err(e) if driver::must_rejoin(&e) => {
                tracing::warn!(error = %e, "session no longer accepted; joining again");
                return None;
            }
            Err(e) => {
                // A refusal for load says how long to wait; another failure
                // (the pool already failed over) gets a short pause.
                let wait = match driver::refusal(&e) {
                    Some(refused) => {
                        tracing::debug!(reason = %refused.reason, "call refused");
                        refused.wait()
                    }
                    None => {
                        tracing::debug!(error = %e, "call failed");
                        Duration::from_millis(200)
                    }
                };
                if stop.sleep(wait).await {
                    return None;
                }
            }
        }
    }
}

/// Resolves when the leader's game changes; never without a leader (or
/// once it is gone).
async fn changed(follow: &mut Option<watch::Receiver<u64>>) {
    let gone = match follow {
        Some(leader) => leader.changed().await.is_err(),
        None => true,
    };
    if gone {
        std::future::pending::<()>().await;
    }
}

/// A group of bots started together.
#[derive(Clone, Debug)]
pub struct BotTeam {
    pub count: usize,
    /// Bots are named `<prefix>-1`, `<prefix>-2`, …
    pub prefix: String,
    /// Games each bot plays before it stops (`None`: until stopped).
    pub games: Option<u32>,
    /// Where the bots keep their sessions (see [`BotOptions::sessions`]).
    pub sessions: Option<StateDir>,
    /// The arena the bots play on (empty: any).
    pub map: String,
    /// How well they play.
    pub level: Level,
    /// The leader's game (see [`BotOptions::follow`]).
    pub follow: Option<watch::Receiver<u64>>,
}

impl BotTeam {
    /// `count` bots named `bot-<n>` that play until stopped.
    pub fn new(count: usize) -> BotTeam {
        BotTeam {
            count,
            prefix: "bot".into(),
            games: None,
            sessions: None,
            map: String::new(),
            level: Level::Normal,
            follow: None,
        }
    }
}

/// Starts the `team`'s bots, each on its own pool, as tasks; they stop when
/// `stop` turns true. Outcomes go to `outcomes`.
pub async fn spawn_bots(
    servers: &[String],
    config: PoolConfig,
    team: &BotTeam,
    stop: Shutdown,
    outcomes: tokio::sync::mpsc::UnboundedSender<GameOutcome>,
) -> Result<tokio::task::JoinSet<()>, PoolError> {
    let mut bots = tokio::task::JoinSet::new();
    for n in 1..=team.count {
        let pool = ServerPool::connect(servers, config.clone()).await?;
        let mut options = BotOptions::named(format!("{}-{n}", team.prefix));
        options.games = team.games;
        options.sessions = team.sessions.clone();
        options.map = team.map.clone();
        options.level = team.level;
        options.follow = team.follow.clone();
        let outcomes = outcomes.clone();
        let stop = stop.clone();
        bots.spawn(async move {
            play_games(pool, options, stop, |outcome| {
                let _ = outcomes.send(outcome);
            })
            .await
        });
    }
    Ok(bots)
}

pub fn run(args: BotArgs) -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    anyhow::ensure!(args.count > 0, "--count must be at least 1");
    anyhow::ensure!(
        !args.name_prefix.is_empty() && args.name_prefix.chars().count() <= 10,
        "--name-prefix must be 1-10 characters (names are at most 16)"
    );
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    let cluster = if args.servers.servers.is_empty() {
        eprintln!("no --servers given: starting a local cluster (PostgreSQL and 3 servers)…");
        let config = ClusterConfig::temporary(3);
        Some(
            LocalCluster::start(config, |step| eprintln!("{step}"))
                .context("starting a local cluster")?,
        )
    } else {
        None
    };
    let servers = match &cluster {
        Some(cluster) => cluster.addresses(),
        None => args.servers.servers.clone(),
    };
    let result = runtime.block_on(async {
        let (stopper, stop) = shutdown::channel();
        let (outcome_tx, mut outcome_rx) = tokio::sync::mpsc::unbounded_channel();
        let mut report = GameLines::default();
        let team = BotTeam {
            count: args.count,
            prefix: args.name_prefix.clone(),
            games: args.games,
            sessions: None,
            map: args.map.clone().unwrap_or_default(),
            level: args.bots,
            follow: None,
        };
        let pool_config = args.servers.pool_config()?;
        let mut bots = spawn_bots(&servers, pool_config, &team, stop, outcome_tx)
            .await
            .context("connecting to the servers")?;
        loop {
            tokio::select! {
                Some(outcome) = outcome_rx.recv() => report.add(&outcome),
                joined = bots.join_next() => if joined.is_none() { break },
                _ = shutdown::signal() => {
                    eprintln!("stopping: the bots leave their games…");
                    stopper.stop();
                    let _ = tokio::time::timeout(Duration::from_secs(5), bots.join_all()).await;
                    break;
                }
            }
        }
        while let Ok(outcome) = outcome_rx.try_recv() {
            report.add(&outcome);
        }
        anyhow::Ok(())
    });
    drop(cluster);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(bot: &str, winner: Option<&str>) -> GameOutcome {
        GameOutcome {
            bot: bot.into(),
            game_id: 7,
            seat: 0,
            winner: winner.map(String::from),
            draw: winner.is_none(),
            ticks: 2523,
            regressions: 0,
        }
    }

    #[test]
    fn a_game_reads_the_same_from_every_bot_in_it() {
        let line = outcome("bot-1", Some("bot-3")).game_line();
        assert_eq!(line, "game 7 finished at tick 2523 (2:06): bot-3 won");
        assert_eq!(outcome("bot-3", Some("bot-3")).game_line(), line);
        assert_eq!(
            outcome("bot-2", None).game_line(),
            "game 7 finished at tick 2523 (2:06): draw"
        );
        assert_eq!(
            outcome("bot-1", Some("bot-3")).to_string(),
            "bot-1: game 7 (seat 1) finished at tick 2523: lost, winner bot-3"
        );
    }
}
