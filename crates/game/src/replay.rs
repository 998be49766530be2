//! Re-simulation: a game replayed from the state it was created as and the
//! ordered log of everything that changed it.
//!
//! The servers log every change a call makes to a game: seats taken and
//! freed in the lobby, actions and leaves, each with the tick it took
//! effect at. The clock's own advances (fuses, fire, sudden death) need no
//! entry: they follow from the ticks. So a finished game's log, applied in
//! order to [`GameState::initial`], gives back the stored final state byte
//! for byte; anything else means a change that was not logged, or a state
//! or log altered after the fact.

use super::{Action, GameState, Phase, Tick};

/// One logged change to a game, in the order the game's commits made them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// A join seated a player in `seat` (the lowest free one) at `tick`.
    Seated { seat: u8, tick: Tick },
    /// A lobby seat was freed because its player went silent; it takes no
    /// tick (a waiting game's board does not change with time).
    SeatFreed { seat: u8 },
    /// `seat` applied `action` at `tick`.
    Acted {
        seat: u8,
        action: Action,
        tick: Tick,
    },
    /// `seat` left at `tick`: its seat is freed while the game waits, it
    /// forfeits while the game runs.
    Left { seat: u8, tick: Tick },
}

impl Event {
    /// The tick the event took effect at (none for a freed seat).
    pub fn tick(&self) -> Option<Tick> {
        match *self {
            Event::Seated { tick, .. } | Event::Acted { tick, .. } | Event::Left { tick, .. } => {
                Some(tick)
            }
            Event::SeatFreed { .. } => None,
        }
    }
}

/// Why a log cannot be replayed as recorded.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ReplayError {
    #[error("event {index}: a join seated nobody (the game was full or had started)")]
    NoSeat { index: usize },
    #[error("event {index}: a join took seat {got}, the log says seat {logged}")]
    WrongSeat { index: usize, got: u8, logged: u8 },
}

impl GameState {
    /// The state this game was created as: its seed, round length and arena,
    /// nobody seated, at tick 0 (servers create every game at tick 0).
    pub fn initial(&self) -> GameState {
        GameState::on_arena(self.arena, self.seed, 0, self.round_ticks)
    }

    /// Applies one logged event, exactly as the server applied it.
    pub fn replay_event(&mut self, event: Event, index: usize) -> Result<(), ReplayError> {
        match event {
            Event::Seated { seat, tick } => match self.seat_player(tick) {
                Some(got) if got == seat => {}
                Some(got) => {
                    return Err(ReplayError::WrongSeat {
                        index,
                        got,
                        logged: seat,
                    });
                }
                None => return Err(ReplayError::NoSeat { index }),
            },
            Event::SeatFreed { seat } => self.unseat_player(seat),
            Event::Acted { seat, action, tick } => {
                self.apply(seat, action, tick);
            }
            Event::Left { seat, tick } => {
                self.advance(tick);
                match self.phase {
                    Phase::Waiting => self.unseat_player(seat),
                    Phase::Playing => self.forfeit(seat, tick),
                    Phase::Finished => {}
                }
            }
        }
        Ok(())
    }
}

/// Re-simulates a game: `initial` (see [`GameState::initial`]), then every
/// event in order, then the clock up to `to_tick` (the stored state's tick).
/// Pure and deterministic: equal inputs give equal bytes on any machine.
pub fn resimulate(
    initial: GameState,
    events: impl IntoIterator<Item = Event>,
    to_tick: Tick,
) -> Result<GameState, ReplayError> {
    let mut state = initial;
    for (index, event) in events.into_iter().enumerate() {
        state.replay_event(event, index)?;
    }
    state.advance(to_tick);
    Ok(state)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Arena, Dir, Ending, SEATS};

    /// A game played the way the servers play one, logging as they log.
    fn played(arena: Arena, seed: u64) -> (GameState, Vec<Event>) {
        let mut g = GameState::on_arena(arena, seed, 0, 40);
        let mut log = Vec::new();
        let mut tick = 0;
        for _ in 0..SEATS {
            tick += 3;
            let seat = g.seat_player(tick).unwrap();
            log.push(Event::Seated { seat, tick });
        }
        // A lobby seat freed and taken again does not happen once play has
        // started; players bomb, move and one leaves.
        let script = [
            (0, Action::Bomb),
            (0, Action::Move(Dir::Right)),
            (1, Action::Move(Dir::Left)),
            (2, Action::Move(Dir::Up)),
            (0, Action::Move(Dir::Left)),
            (0, Action::Move(Dir::Down)),
            (3, Action::Bomb),
        ];
        for (k, (seat, action)) in script.into_iter().enumerate() {
            tick += 2 + k as Tick;
            g.apply(seat, action, tick);
            log.push(Event::Acted { seat, action, tick });
        }
        tick += 70;
        g.forfeit(3, tick);
        log.push(Event::Left { seat: 3, tick });
        // Sudden death finishes it on the clock alone.
        g.advance(tick + 2000);
        assert_eq!(g.phase(), Phase::Finished);
        (g, log)
    }

    #[test]
    fn a_logged_game_replays_to_the_same_bytes_on_every_arena() {
        for arena in Arena::ALL {
            for seed in 0..20 {
                let (stored, log) = played(arena, seed);
                let again = resimulate(stored.initial(), log, stored.tick()).unwrap();
                assert_eq!(again.encode(), stored.encode(), "{arena} seed {seed}");
            }
        }
    }

    #[test]
    fn a_missing_or_changed_event_gives_a_different_game() {
        let (stored, log) = played(Arena::Classic, 3);
        // Without the leave, the forfeit does not happen.
        let mut short = log.clone();
        short.pop();
        let mut lost = GameState::initial(&stored);
        for (i, e) in short.into_iter().enumerate() {
            lost.replay_event(e, i).unwrap();
        }
        lost.advance(stored.tick() - 2000 + 1);
        let mut with_leave = stored.initial();
        for (i, e) in log.iter().copied().enumerate() {
            with_leave.replay_event(e, i).unwrap();
        }
        assert_ne!(lost.encode(), with_leave.encode());
        // A join logged in the wrong seat is refused.
        let mut wrong = log.clone();
        wrong[1] = Event::Seated { seat: 3, tick: 6 };
        assert_eq!(
            resimulate(stored.initial(), wrong, stored.tick()),
            Err(ReplayError::WrongSeat {
                index: 1,
                got: 1,
                logged: 3
            })
        );
    }

    #[test]
    fn freed_lobby_seats_are_replayed() {
        let mut g = GameState::new(5, 0);
        let log = [
            Event::Seated { seat: 0, tick: 0 },
            Event::Seated { seat: 1, tick: 10 },
            Event::SeatFreed { seat: 0 },
            Event::Seated { seat: 0, tick: 90 },
            Event::Seated { seat: 2, tick: 95 },
            Event::Seated { seat: 3, tick: 99 },
            Event::Acted {
                seat: 1,
                action: Action::Bomb,
                tick: 100,
            },
        ];
        g.seat_player(0);
        g.seat_player(10);
        g.unseat_player(0);
        for t in [90, 95, 99] {
            g.seat_player(t);
        }
        g.apply(1, Action::Bomb, 100);
        let again = resimulate(g.initial(), log, 100).unwrap();
        assert_eq!(again, g);
        assert_eq!(again.start_tick(), 99);
        assert_eq!(again.ending(), None::<Ending>);
    }
}
