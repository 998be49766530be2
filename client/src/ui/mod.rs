//! The terminal screens of `borbaman play`, kept apart the ratatui way:
//!
//! - [`View`] (here) is everything a screen shows: the latest game state,
//!   rankings, network figures, start-up progress. The network task fills it
//!   and publishes it on a watch channel; nothing else changes it.
//! - [`input`] turns key presses into [`input::Command`]s, which the UI thread
//!   sends to the network task without waiting.
//! - [`draw`] renders a `View` into a frame; it only reads, never does I/O.

pub mod draw;
pub mod input;
pub mod rankings;

use std::time::Duration;

use borbaman_proto::pb::{GameState, LiveGame, Phase, Ranking};

/// Everything the screens show.
#[derive(Clone, Debug, Default)]
pub struct View {
    /// Start-up steps done so far ("starting database…"); shown until the
    /// first game state arrives.
    pub progress: Vec<String>,
    /// A failure the player must read; shown instead of the game.
    pub error: Option<String>,
    /// The player's name and, once seated, seat.
    pub name: String,
    pub seat: Option<u32>,
    /// The game state to draw: the latest from the server (never older
    /// than one shown before), with the player's own unacknowledged inputs
    /// applied on top (predicted, see `borbaman_client::predict`).
    pub state: Option<GameState>,
    /// Rankings, fetched when a game ends or the rankings screen opens.
    pub rankings: Vec<Ranking>,
    /// The rankings screen's page while it is open (over the lobby, or as
    /// all of `borbaman rankings`).
    pub ranking_page: Option<usize>,
    pub net: NetStats,
    /// A replay's status (one line per `\n`); the game is drawn as in
    /// play, to its end.
    pub replay: Option<String>,
    /// The game is watched, not played (`borbaman watch`, or a lobby's
    /// player watching another game): the HUD says so and shows no seat.
    pub watching: bool,
    /// Live games to pick one from (`borbaman watch` without an id, or a
    /// player's lobby), newest first; `picked` is the one highlighted.
    pub live_games: Option<Vec<LiveGame>>,
    pub picked: usize,
    /// A line about the player's own game while it watches another
    /// ("Your game 12: waiting 2/4").
    pub note: Option<String>,
}

/// What the HUD says about the network.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NetStats {
    pub rtt_last: Option<Duration>,
    pub rtt_p99: Option<Duration>,
    pub server: Option<String>,
    pub live_servers: usize,
    pub failovers: u64,
    /// Calls also sent to a second server because the first was slow.
    pub hedges: u64,
    pub waiting_for_server: bool,
    pub database_unavailable: bool,
    /// The last call failure, if the latest call failed.
    pub last_error: Option<String>,
    /// The player's inputs sent and not acknowledged yet (drawn ahead of
    /// the server, predicted).
    pub unacked: usize,
    /// Times the server's state moved the player from where the
    /// prediction had drawn it.
    pub mispredictions: u64,
    /// The emulated distance to the servers (`--wan`), e.g. "100 ms ±10 ms
    /// one way"; `None` when there is none.
    pub distance: Option<String>,
}

/// Which screen a [`View`] calls for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Screen {
    Starting,
    /// The list of live games to watch one of.
    Pick,
    Lobby,
    Game,
    GameOver,
    /// The rankings, a page at a time.
    Rankings,
    Failed,
}

impl View {
    pub fn screen(&self) -> Screen {
        if self.error.is_some() {
            return Screen::Failed;
        }
        if self.ranking_page.is_some() {
            return Screen::Rankings;
        }
        match self.state.as_ref().map(|s| s.phase()) {
            None if self.live_games.is_some() => Screen::Pick,
            None => Screen::Starting,
            Some(_) if self.replay.is_some() => Screen::Game,
            // A finished game stays on its board for a spectator.
            Some(Phase::Finished) if self.watching => Screen::Game,
            Some(Phase::Playing) => Screen::Game,
            Some(Phase::Finished) => Screen::GameOver,
            Some(Phase::Waiting | Phase::Unspecified) => Screen::Lobby,
        }
    }
}

/// True when the player at `seat` is out of a running game: seated but no
/// longer alive, the game not over. Such a player may leave and start the
/// next game (`r`) instead of watching this one to its end.
pub fn out_of_game(state: &GameState, seat: u32) -> bool {
    state.phase() == Phase::Playing
        && state
            .players
            .iter()
            .any(|p| p.seat == seat && p.seated && !p.alive)
}

/// How colours are written: 24-bit where the terminal says it supports it
/// (`COLORTERM=truecolor` or `24bit`), the 256-colour palette elsewhere.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ColorMode {
    TrueColor,
    #[default]
    Indexed256,
}

impl ColorMode {
    /// From the `COLORTERM` environment variable.
    pub fn detect() -> ColorMode {
        Self::from_colorterm(std::env::var("COLORTERM").ok().as_deref())
    }

    pub fn from_colorterm(value: Option<&str>) -> ColorMode {
        match value.map(str::to_ascii_lowercase).as_deref() {
            Some("truecolor" | "24bit") => ColorMode::TrueColor,
            _ => ColorMode::Indexed256,
        }
    }
}

/// The start of the line the start-up screen shows while the servers are
/// full.
pub const SERVERS_FULL: &str = "servers full";

/// "servers full — trying again in N s", N the whole seconds left, rounded
/// up (never "in 0 s" while there is a wait left).
pub fn servers_full_line(left: std::time::Duration) -> String {
    let secs = left.as_secs_f64().ceil().max(1.0) as u64;
    format!("{SERVERS_FULL} — trying again in {secs} s")
}

#[cfg(test)]
mod tests {
    use super::*;
    use borbaman_proto::pb::Player;

    fn game(phase: Phase, alive: [bool; 2]) -> GameState {
        GameState {
            phase: phase as i32,
            players: (0..2)
                .map(|seat| Player {
                    seat,
                    seated: true,
                    alive: alive[seat as usize],
                    ..Player::default()
                })
                .collect(),
            ..GameState::default()
        }
    }

    #[test]
    fn only_a_dead_player_in_a_running_game_is_out() {
        let running = game(Phase::Playing, [false, true]);
        assert!(out_of_game(&running, 0));
        assert!(!out_of_game(&running, 1), "alive");
        assert!(!out_of_game(&running, 3), "no such seat");
        assert!(!out_of_game(&game(Phase::Finished, [false, true]), 0));
        let mut unseated = running.clone();
        unseated.players[0].seated = false;
        assert!(!out_of_game(&unseated, 0), "left the game");
    }

    #[test]
    fn servers_full_counts_whole_seconds_up() {
        use std::time::Duration;
        assert_eq!(
            servers_full_line(Duration::from_millis(2300)),
            "servers full — trying again in 3 s"
        );
        assert_eq!(
            servers_full_line(Duration::from_secs(2)),
            "servers full — trying again in 2 s"
        );
        assert!(servers_full_line(Duration::from_millis(1)).ends_with("in 1 s"));
        assert!(servers_full_line(Duration::from_millis(1)).starts_with(SERVERS_FULL));
    }
}
