//! A finished game played back: the state the game was created as, and
//! its logged changes re-applied tick by tick by the game core. Pure state:
//! keys become [`Control`]s, a control updates the playback, and the
//! screen is drawn from [`Playback::view`].

use borbaman_game::{Event, GameState, Phase, ReplayError, SEATS, Tick};
use borbaman_server::wire::ToProto;

use crate::ui::View;

/// Playback speeds, in game ticks per real tick.
const SPEEDS: [f64; 7] = [0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0];
/// Index of 1× in [`SPEEDS`].
const NORMAL_SPEED: usize = 2;

/// What the viewer asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Control {
    TogglePause,
    /// One tick forward (and pause).
    Step,
    Faster,
    Slower,
    JumpToEnd,
    Quit,
}

pub struct Playback {
    game_id: u64,
    names: [String; SEATS],
    events: Vec<Event>,
    /// The next event to apply.
    next: usize,
    state: GameState,
    /// The stored final state.
    end: GameState,
    paused: bool,
    speed: usize,
    /// Ticks owed at a fractional speed.
    owed: f64,
}

impl Playback {
    /// A playback of game `game_id` that ended as `end` after `events`,
    /// positioned where play started (the lobby is skipped).
    pub fn new(
        game_id: u64,
        end: GameState,
        events: Vec<Event>,
        names: [String; SEATS],
    ) -> Result<Playback, ReplayError> {
        let mut playback = Playback {
            game_id,
            names,
            events,
            next: 0,
            state: end.initial(),
            end,
            paused: false,
            speed: NORMAL_SPEED,
            owed: 0.0,
        };
        while playback.next < playback.events.len() && playback.state.phase() == Phase::Waiting {
            playback.apply_next()?;
        }
        Ok(playback)
    }

    pub fn state(&self) -> &GameState {
        &self.state
    }

    pub fn paused(&self) -> bool {
        self.paused
    }

    pub fn speed(&self) -> f64 {
        SPEEDS[self.speed]
    }

    /// Every logged change applied and the game over (or at its stored tick).
    pub fn at_end(&self) -> bool {
        self.next == self.events.len()
            && (self.state.phase() == Phase::Finished || self.state.tick() >= self.end.tick())
    }

    fn apply_next(&mut self) -> Result<(), ReplayError> {
        self.state.replay_event(self.events[self.next], self.next)?;
        self.next += 1;
        Ok(())
    }

    /// One tick forward: the changes logged up to it, then the clock.
    pub fn step(&mut self) -> Result<(), ReplayError> {
        if self.at_end() {
            return Ok(());
        }
        let target: Tick = self.state.tick() + 1;
        while self.next < self.events.len()
            && self.events[self.next].tick().is_none_or(|t| t <= target)
        {
            self.apply_next()?;
        }
        self.state.advance(target);
        if self.at_end() {
            // Frozen from here on: only the clock moves, to the stored tick.
            self.state.advance(self.end.tick());
        }
        Ok(())
    }

    /// Applies a viewer's control; `false` once they quit.
    pub fn control(&mut self, control: Control) -> Result<bool, ReplayError> {
        match control {
            Control::TogglePause => self.paused = !self.paused,
            Control::Step => {
                self.paused = true;
                self.step()?;
            }
            Control::Faster => self.speed = (self.speed + 1).min(SPEEDS.len() - 1),
            Control::Slower => self.speed = self.speed.saturating_sub(1),
            Control::JumpToEnd => {
                while !self.at_end() {
                    self.step()?;
                }
            }
            Control::Quit => return Ok(false),
        }
        Ok(true)
    }

    /// One real tick passed: plays on at the current speed unless paused.
    pub fn frame(&mut self) -> Result<(), ReplayError> {
        if self.paused || self.at_end() {
            return Ok(());
        }
        self.owed += self.speed();
        while self.owed >= 1.0 {
            self.owed -= 1.0;
            self.step()?;
        }
        Ok(())
    }

    /// The screen's view: the game as play draws it, with the replay's
    /// status in the HUD.
    pub fn view(&self) -> View {
        let status = if self.at_end() {
            "end"
        } else if self.paused {
            "paused"
        } else {
            "playing"
        };
        View {
            name: "replay".into(),
            state: Some(
                self.state
                    .to_proto(self.game_id, 0, &self.names, [true; SEATS]),
            ),
            replay: Some(format!(
                "REPLAY {status}  x{}\nTick   {}/{}",
                self.speed(),
                self.state.tick().saturating_sub(self.state.start_tick()),
                self.end.tick().saturating_sub(self.end.start_tick()),
            )),
            ..View::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use borbaman_game::{Action, Arena, Dir, resimulate};

    /// A corridors game with a short round, logged as the servers log it.
    fn logged_game() -> (GameState, Vec<Event>) {
        let mut g = GameState::on_arena(Arena::Corridors, 9, 0, 20);
        let mut log = Vec::new();
        for tick in [0, 4, 9, 12] {
            let seat = g.seat_player(tick).unwrap();
            log.push(Event::Seated { seat, tick });
        }
        for (tick, seat, action) in [
            (14, 0, Action::Bomb),
            (15, 0, Action::Move(Dir::Right)),
            (15, 3, Action::Move(Dir::Up)),
            (30, 1, Action::Bomb),
        ] {
            g.apply(seat, action, tick);
            log.push(Event::Acted { seat, action, tick });
        }
        g.forfeit(2, 40);
        log.push(Event::Left { seat: 2, tick: 40 });
        g.advance(5000);
        assert_eq!(g.phase(), Phase::Finished);
        (g, log)
    }

    #[test]
    fn stepping_tick_by_tick_ends_on_the_stored_state() {
        let (end, log) = logged_game();
        let mut playback = Playback::new(1, end.clone(), log.clone(), Default::default()).unwrap();
        assert_eq!(playback.state().phase(), Phase::Playing);
        assert_eq!(playback.state().tick(), 12, "starts where play started");
        let mut steps = 0;
        while !playback.at_end() {
            playback.control(Control::Step).unwrap();
            steps += 1;
        }
        assert!(playback.paused());
        assert!(steps > 40, "{steps}");
        assert_eq!(playback.state().encode(), end.encode());
        assert_eq!(
            resimulate(end.initial(), log, end.tick()).unwrap(),
            *playback.state()
        );
    }

    #[test]
    fn speed_pause_and_jump_to_the_end() {
        let (end, log) = logged_game();
        let mut playback = Playback::new(1, end.clone(), log, Default::default()).unwrap();
        playback.frame().unwrap();
        assert_eq!(playback.state().tick(), 13, "one tick a frame at 1x");
        for _ in 0..10 {
            playback.control(Control::Faster).unwrap();
        }
        assert_eq!(playback.speed(), 16.0);
        playback.frame().unwrap();
        assert_eq!(playback.state().tick(), 29);
        playback.control(Control::TogglePause).unwrap();
        playback.frame().unwrap();
        assert_eq!(playback.state().tick(), 29, "paused");
        for _ in 0..10 {
            playback.control(Control::Slower).unwrap();
        }
        assert_eq!(playback.speed(), 0.25);
        playback.control(Control::JumpToEnd).unwrap();
        assert!(playback.at_end());
        assert_eq!(playback.state().encode(), end.encode());
        assert!(playback.view().replay.unwrap().starts_with("REPLAY end"));
    }
}
