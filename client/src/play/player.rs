//! The human player's side of the network task: joins (rejoining a saved
//! session), polls and acts while the game runs, shows the game-over screen,
//! and keeps the view's network figures (RTT, server, failovers) current.

use std::time::{Duration, Instant};

use borbaman_client::pool::{CallInfo, PoolError, ServerPool};
use borbaman_client::session::{self, GameSession, SessionEvent, new_token};
use borbaman_client::spectator::{self, Spectator};
use borbaman_client::state_dir::{SavedSession, StateDir};
use borbaman_game::codes::PRESENCE_INTERVAL_MS;
use borbaman_proto::pb::{self, Phase};
use hdrhistogram::Histogram;
use tokio::sync::{mpsc, watch};

use crate::driver::{self, JoinBackoff};
use crate::shutdown::Shutdown;
use crate::ui::input::Command;
use crate::ui::rankings;
use crate::ui::{NetStats, SERVERS_FULL, View, out_of_game, servers_full_line};

/// How often the state is polled while nothing is being sent.
const POLL_INTERVAL: Duration = Duration::from_millis(50);
/// A player who only watches still acts (idle) this often, so the others
/// see them as connected.
const PRESENCE_INTERVAL: Duration = Duration::from_millis(PRESENCE_INTERVAL_MS as u64);
/// How often a waiting player's lobby fetches the live games.
const LIST_INTERVAL: Duration = Duration::from_secs(1);

/// The human player's side of the network task.
pub(super) struct Player {
    pool: ServerPool,
    name: String,
    /// The arena asked for (empty: any).
    map: String,
    state_dir: StateDir,
    servers_key: String,
    view: watch::Sender<View>,
    commands: mpsc::Receiver<Command>,
    quit: Shutdown,
    rtt: Histogram<u64>,
    /// Tells the local bots which game the player joined, so they follow.
    leading: Option<watch::Sender<u64>>,
}

/// What the player wants once a game is over (or once out of it).
enum Next {
    PlayAgain,
    /// The session lost its seat (see [`session::seat_lost`]).
    JoinAgain,
    Quit,
}

impl Player {
    pub(super) fn new(
        pool: ServerPool,
        name: String,
        state_dir: StateDir,
        servers_key: String,
        view: watch::Sender<View>,
        commands: mpsc::Receiver<Command>,
        quit: Shutdown,
    ) -> Player {
        Player {
            pool,
            name,
            map: String::new(),
            state_dir,
            servers_key,
            view,
            commands,
            quit,
            rtt: Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid histogram bounds"),
            leading: None,
        }
    }

    /// Publishes every game the player joins on `bots`, for the local bots
    /// to follow (see [`crate::bot::BotOptions::follow`]).
    pub(super) fn leading(mut self, bots: watch::Sender<u64>) -> Player {
        self.leading = Some(bots);
        self
    }

    /// Says on the HUD how far the servers are (`--wan`, e.g. "100 ms ±10
    /// ms one way"); `None`: no emulated distance.
    pub(crate) fn at_distance(self, distance: Option<String>) -> Player {
        self.view.send_modify(|v| v.net.distance = distance);
        self
    }

    /// Joins only games on the arena `map` (empty: any).
    pub(super) fn asking_for_map(mut self, map: String) -> Player {
        self.map = map;
        self
    }

    pub(super) async fn play(mut self) {
        loop {
            let Some(mut session) = self.join().await else {
                return;
            };
            match self.play_game(&mut session).await {
                Next::PlayAgain => {
                    self.view.send_modify(|v| {
                        v.state = None;
                        v.rankings.clear();
                        v.progress = vec!["joining a new game…".into()];
                    });
                }
                Next::JoinAgain => {}
                Next::Quit => return,
            }
        }
    }

    /// Joins a game, rejoining the saved one if there is one. Retries until
    /// it works or the player quits.
    async fn join(&mut self) -> Option<GameSession> {
        let mut backoff = JoinBackoff::default();
        loop {
            let saved = self.state_dir.load(&self.name);
            let token = saved
                .as_ref()
                .and_then(SavedSession::token)
                .unwrap_or_else(new_token);
            // The player's identity owns its name and rankings; if the
            // state directory cannot keep one, play without (the token is
            // the identity, for this session only).
            let identity = self.state_dir.identity().unwrap_or_else(|e| {
                tracing::warn!(error = %e, "no player identity; playing without one");
                Vec::new()
            });
            match GameSession::join_as(&self.pool, &identity, &self.name, token, &self.map).await {
                Ok((session, info)) => {
                    self.record(&info, None);
                    let saved = SavedSession {
                        name: self.name.clone(),
                        token_hex: hex::encode(session.token()),
                        game_id: session.game_id(),
                        seat: session.seat(),
                        servers: self.servers_key.clone(),
                    };
                    if let Err(e) = self.state_dir.save(&saved) {
                        tracing::warn!(error = %e, "cannot save the session; a restart will not rejoin");
                    }
                    let state = session.latest().cloned();
                    let seat = session.seat();
                    if let Some(bots) = &self.leading {
                        bots.send_replace(session.game_id());
                    }
                    self.view.send_modify(|v| {
                        v.seat = Some(seat);
                        v.state = state;
                    });
                    return Some(session);
                }
                Err(e) if driver::refusal(&e).is_some() => {
                    // Full, not refusing this player: the saved session
                    // stays, and the join is tried again when the server
                    // said, later each time it says it again.
                    let wait = driver::refusal(&e).map_or(Duration::ZERO, |r| backoff.refused(&r));
                    if self.wait_while_full(wait).await {
                        return None;
                    }
                }
                Err(PoolError::Status(status)) if saved.is_some() => {
                    // The saved session is not usable any more: start afresh.
                    tracing::info!(%status, "saved session refused; joining with a new token");
                    self.state_dir.clear(&self.name);
                }
                Err(PoolError::Status(status))
                    if matches!(
                        status.code(),
                        tonic::Code::InvalidArgument | tonic::Code::AlreadyExists
                    ) =>
                {
                    self.view.send_modify(|v| {
                        v.error = Some(format!(
                            "the server refused to seat you: {}",
                            status.message()
                        ))
                    });
                    return None;
                }
                Err(e) => {
                    self.record_error(&e);
                    if self.wait_or_quit(Duration::from_millis(500)).await {
                        return None;
                    }
                }
            }
        }
    }

    /// Plays one game: polls, sends actions, shows the result. While the
    /// game waits for players, the lobby lists the other live games and
    /// the player may watch one (Enter) until its own starts.
    ///
    /// Nothing here waits on a call: a key's input goes out in the
    /// background (see [`GameSession::send_input`]) and is drawn at once,
    /// predicted on the newest state from the server; replies and polls
    /// are taken in as they arrive, each one reconciling the prediction.
    async fn play_game(&mut self, session: &mut GameSession) -> Next {
        let mut ticker = tokio::time::interval(POLL_INTERVAL);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut quit = self.quit.clone();
        let mut last_act = Instant::now();
        let mut lobby = Lobby::default();
        session.predict_inputs();
        loop {
            let finished = session
                .latest()
                .is_some_and(|s| s.phase() == Phase::Finished);
            if finished {
                return self.game_over(session).await;
            }
            let waiting = session.latest().is_none_or(|s| s.phase() == Phase::Waiting);
            if waiting {
                self.show_lobby(session, &mut lobby).await;
            } else if lobby.shown {
                // The player's own game started: back to it.
                lobby = Lobby::default();
                let state = session.shown_state();
                let seat = session.seat();
                self.view.send_modify(|v| {
                    v.watching = false;
                    v.live_games = None;
                    v.ranking_page = None;
                    v.note = None;
                    v.seat = Some(seat);
                    v.state = state;
                });
            }
            let wake = tokio::select! {
                _ = ticker.tick() => Wake::Tick,
                _ = quit.recv() => Wake::Command(Command::Quit),
                command = self.commands.recv() => Wake::Command(command.unwrap_or(Command::Quit)),
                Some(event) = session.next_event() => Wake::Session(Box::new(event)),
            };
            let result = match wake {
                Wake::Command(Command::Quit) => {
                    self.leave(session).await;
                    return Next::Quit;
                }
                Wake::Command(Command::PlayAgain) if is_out(session) => {
                    // Leaving forfeits, which changes nothing for a player
                    // already out; then on as from the game-over screen.
                    self.leave(session).await;
                    return Next::PlayAgain;
                }
                Wake::Command(Command::Rankings) if waiting => {
                    self.toggle_rankings().await;
                    continue;
                }
                Wake::Command(command) if waiting => {
                    self.lobby_command(command, &mut lobby);
                    continue;
                }
                Wake::Command(command) => {
                    if let Some(action) = command.action() {
                        last_act = Instant::now();
                        session.send_input(action);
                        // Drawn now, before any reply.
                        self.show(session, &lobby);
                    }
                    continue;
                }
                Wake::Tick => {
                    session.pump();
                    if session.lobby_idle_due()
                        || (last_act.elapsed() >= PRESENCE_INTERVAL && playing(session))
                    {
                        last_act = Instant::now();
                        session.send_input(pb::Action::Idle);
                    } else if session.calls_in_flight() == 0 {
                        // Replies to inputs bring the state; with none on
                        // their way, read it.
                        session.poll_state();
                    }
                    self.show(session, &lobby);
                    continue;
                }
                Wake::Session(event) => match *event {
                    SessionEvent::Input(reply) => reply.result.map(|(_, info)| info),
                    SessionEvent::State(result) => result.map(|(_, info)| info),
                },
            };
            match result {
                Ok(info) => {
                    if lobby.watching.is_some() {
                        let note = session
                            .latest()
                            .map(|s| format!("Your game {}: waiting {}/4", s.game_id, s.seated));
                        self.record(&info, None);
                        self.view.send_modify(|v| v.note = note);
                    } else {
                        self.record(&info, session.shown_state());
                    }
                }
                Err(e) if session::seat_lost(&e) => {
                    // Seated again with the same token, in a waiting game.
                    tracing::info!(error = %e, "seat lost; joining again");
                    self.record_error(&e);
                    return Next::JoinAgain;
                }
                Err(e) => self.record_error(&e),
            }
        }
    }

    /// Draws the player's game as predicted now (unless another game is
    /// being watched from the lobby); publishes only a change.
    fn show(&self, session: &GameSession, lobby: &Lobby) {
        if lobby.watching.is_some() {
            return;
        }
        let Some(state) = session.shown_state() else {
            return;
        };
        let unacked = session.unacked().len();
        let mispredicted = session.prediction_counts().map_or(0, |c| c.1);
        self.view.send_if_modified(|v| {
            let changed = v.state.as_ref() != Some(&state)
                || v.net.unacked != unacked
                || v.net.mispredictions != mispredicted;
            v.state = Some(state);
            v.net.unacked = unacked;
            v.net.mispredictions = mispredicted;
            changed
        });
    }

    /// While the player's game waits: the other live games, fetched every
    /// second, and the watched one's newest state.
    async fn show_lobby(&mut self, session: &GameSession, lobby: &mut Lobby) {
        lobby.shown = true;
        if lobby.next_list.is_none_or(|at| Instant::now() >= at) {
            lobby.next_list = Some(Instant::now() + LIST_INTERVAL);
            let own = session.game_id();
            if let Ok(games) = spectator::live_games(&self.pool, 0).await {
                let others: Vec<pb::LiveGame> =
                    games.into_iter().filter(|g| g.game_id != own).collect();
                self.view.send_modify(|v| {
                    v.picked = v.picked.min(others.len().saturating_sub(1));
                    v.live_games = Some(others);
                });
            }
        }
        if let Some(spectator) = &mut lobby.watching {
            match spectator.state().await {
                Ok((state, _)) => self.view.send_modify(|v| v.state = Some(state)),
                Err(e) => self.record_error(&e),
            }
        }
    }

    /// `k` in the lobby: the rankings screen opens (fetched afresh, on the
    /// page of the player's own line) or closes.
    async fn toggle_rankings(&mut self) {
        if self.view.borrow().ranking_page.is_some() {
            self.view.send_modify(|v| v.ranking_page = None);
            return;
        }
        match session::rankings(&self.pool, rankings::FETCHED).await {
            Ok(list) => self.view.send_modify(|v| {
                v.ranking_page = Some(rankings::page_of(&list, &v.name).unwrap_or(0));
                v.rankings = list;
            }),
            Err(e) => self.record_error(&e),
        }
    }

    /// A key pressed in the lobby: ↑↓ choose a live game, Enter watches it
    /// (its own spectator, on the player's pool); with the rankings open,
    /// ←→ turn their pages and Enter closes them.
    fn lobby_command(&mut self, command: Command, lobby: &mut Lobby) {
        let ranking_page = self.view.borrow().ranking_page;
        if let Some(page) = ranking_page {
            let delta = match command {
                Command::Left | Command::Up => -1,
                Command::Right | Command::Down => 1,
                Command::Select => {
                    self.view.send_modify(|v| v.ranking_page = None);
                    return;
                }
                _ => return,
            };
            self.view.send_modify(|v| {
                v.ranking_page = Some(rankings::turn(page, delta, v.rankings.len()));
            });
            return;
        }
        if let Some(game_id) = crate::watch::steer_pick(&self.view, command) {
            // On the player's pool, which stays on its own game's server.
            lobby.watching = Some(Spectator::sharing(self.pool.clone(), game_id));
            self.view.send_modify(|v| {
                v.watching = true;
                v.seat = None;
            });
        }
    }

    /// Shows the game-over screen with the rankings; waits for r or q.
    async fn game_over(&mut self, session: &mut GameSession) -> Next {
        self.state_dir.clear(&self.name);
        let state = session.latest().cloned();
        self.view.send_modify(|v| v.state = state);
        match session::rankings(&self.pool, 10).await {
            Ok(rankings) => self.view.send_modify(|v| v.rankings = rankings),
            Err(e) => self.record_error(&e),
        }
        let mut quit = self.quit.clone();
        loop {
            let command = tokio::select! {
                command = self.commands.recv() => command.unwrap_or(Command::Quit),
                _ = quit.recv() => Command::Quit,
            };
            match command {
                Command::PlayAgain => return Next::PlayAgain,
                Command::Quit => return Next::Quit,
                _ => {}
            }
        }
    }

    /// Leaves a running game (the player forfeits) and forgets the session.
    async fn leave(&mut self, session: &mut GameSession) {
        let running = session
            .latest()
            .is_some_and(|s| s.phase() != Phase::Finished);
        if running {
            let _ = tokio::time::timeout(Duration::from_secs(2), session.leave()).await;
        }
        self.state_dir.clear(&self.name);
    }

    fn record(&mut self, info: &CallInfo, state: Option<pb::GameState>) {
        let rtt_us = info.rtt.as_micros().max(1) as u64;
        let _ = self.rtt.record(rtt_us.min(60_000_000));
        let p99 = Duration::from_micros(self.rtt.value_at_quantile(0.99));
        self.view.send_modify(|v| {
            v.net.rtt_last = Some(info.rtt);
            v.net.rtt_p99 = Some(p99);
            v.net.server = Some(info.server.clone());
            v.net.last_error = None;
            if state.is_some() {
                v.state = state;
            }
        });
    }

    fn record_error(&mut self, error: &PoolError) {
        let message = error.to_string();
        self.view.send_modify(|v| v.net.last_error = Some(message));
    }

    /// Shows "servers full — trying again in N s", counting down, for
    /// `wait`; true if the player quit meanwhile.
    async fn wait_while_full(&mut self, wait: Duration) -> bool {
        let until = Instant::now() + wait;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            self.view.send_modify(|v| {
                v.progress.retain(|line| !line.starts_with(SERVERS_FULL));
                if !left.is_zero() {
                    v.progress.push(servers_full_line(left));
                }
            });
            if left.is_zero() {
                return false;
            }
            // Redrawn every second, on the second.
            let step =
                left - Duration::from_secs((left.as_secs_f64().ceil() as u64).saturating_sub(1));
            if self.wait_or_quit(step.min(left)).await {
                return true;
            }
        }
    }

    /// Sleeps; true if the player quit meanwhile.
    async fn wait_or_quit(&mut self, duration: Duration) -> bool {
        let mut quit = self.quit.clone();
        tokio::select! {
            _ = tokio::time::sleep(duration) => false,
            _ = quit.recv() => true,
            command = self.commands.recv() => matches!(command, None | Some(Command::Quit)),
        }
    }
}

/// What woke the player's loop.
enum Wake {
    Tick,
    Command(Command),
    Session(Box<SessionEvent>),
}

/// What the lobby shows while the player's game waits for players.
#[derive(Default)]
struct Lobby {
    /// The lobby has been shown (the player is to be taken back to its
    /// game when it starts).
    shown: bool,
    /// When the live games are to be fetched again.
    next_list: Option<Instant>,
    /// The game being watched meanwhile.
    watching: Option<Spectator>,
}

/// True when the player is out of its running game (see [`out_of_game`]).
fn is_out(session: &GameSession) -> bool {
    session
        .latest()
        .is_some_and(|s| out_of_game(s, session.seat()))
}

fn playing(session: &GameSession) -> bool {
    session
        .latest()
        .is_some_and(|s| s.phase() == Phase::Playing)
}

/// Copies the pool's status into the view.
pub(crate) async fn publish_status(
    pool: ServerPool,
    view: watch::Sender<View>,
    mut quit: Shutdown,
) {
    let mut ticker = tokio::time::interval(Duration::from_millis(100));
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = quit.recv() => return,
        }
        let status = pool.status();
        view.send_if_modified(|v| {
            let net = NetStats {
                server: status.current.clone().or(v.net.server.clone()),
                live_servers: status.live.len(),
                failovers: status.failovers,
                hedges: status.hedges,
                waiting_for_server: status.waiting_for_server,
                database_unavailable: status.database_unavailable,
                ..v.net.clone()
            };
            let changed = net != v.net;
            v.net = net;
            changed
        });
    }
}
