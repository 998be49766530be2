//! Client-side prediction: the player's own inputs drawn at once, before
//! the server has applied them.
//!
//! The server's state is the truth. A [`Predictor`] keeps the newest one
//! (the base) and, to draw, rebuilds it in the game core
//! ([`GameState::from_seen`]) and applies on top the inputs the server has
//! not acknowledged yet, each at the tick the server will likely apply it
//! (the base's tick, plus the time since the base arrived and one round
//! trip), with the same rules the server will use. Only the player's own
//! seat comes from the prediction (its position, cooldown and bombs, and,
//! while it holds the kick, every bomb, so a kick slides its bomb at once);
//! everything else is drawn as the server last sent it.
//!
//! When a newer state arrives it becomes the base, and the inputs still
//! unacknowledged are applied again on top of it (reconciliation): an
//! input the server has applied is in the base and no longer replayed, so
//! nothing is applied twice, and the drawn position moves only if the
//! server disagreed with the prediction (another player's bomb blocked the
//! way, a power-up was hidden under a block). Such a correction is a
//! misprediction, counted by comparing, at the same instant, the position
//! drawn from the old base with the one drawn from the new.

use std::time::{Duration, Instant};

use borbaman_game::{
    Action, Arena, Blast, Bomb, CELLS, Cell, Dir, GameState, Phase, Player, PowerUp, SEATS, Seen,
    TICK_MS, Tick,
};
use borbaman_proto::pb;

use crate::inputs::{Acked, Input};

/// An input to predict: its action, and when its key was pressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pressed {
    pub action: pb::Action,
    pub at: Instant,
}

impl From<&Input> for Pressed {
    fn from(input: &Input) -> Pressed {
        Pressed {
            action: input.action,
            at: input.pressed,
        }
    }
}

/// The player's prediction of its own seat over the server's newest state.
#[derive(Clone, Debug)]
pub struct Predictor {
    seat: u32,
    /// The newest state from the server, and when it arrived.
    base: Option<(pb::GameState, Instant)>,
    /// Smoothed round trip (TCP's SRTT, 1/8 gain): how far ahead of the
    /// base's tick an input pressed now will be applied.
    srtt: Option<Duration>,
    reconciled: u64,
    mispredicted: u64,
}

impl Predictor {
    pub fn new(seat: u32) -> Predictor {
        Predictor {
            seat,
            base: None,
            srtt: None,
            reconciled: 0,
            mispredicted: 0,
        }
    }

    /// A call's round trip, for the lead.
    pub fn observe_rtt(&mut self, rtt: Duration) {
        self.srtt = Some(match self.srtt {
            None => rtt,
            Some(srtt) => (srtt * 7 + rtt) / 8,
        });
    }

    /// The smoothed round trip, if any call answered yet.
    pub fn srtt(&self) -> Option<Duration> {
        self.srtt
    }

    /// A state newer than the base arrived (with the inputs its reply
    /// acknowledged; `pending`: those still not): it becomes the base. If
    /// the player's drawn position now differs from the one the old base
    /// gave at this instant, the prediction was wrong.
    pub fn reconcile(
        &mut self,
        state: &pb::GameState,
        acked: &[Acked],
        pending: &[Pressed],
        now: Instant,
    ) {
        if let Some(old) = &self.base {
            let before: Vec<Pressed> = acked
                .iter()
                .map(|a| Pressed {
                    action: a.action,
                    at: now.checked_sub(a.latency).unwrap_or(now),
                })
                .chain(pending.iter().copied())
                .collect();
            let was = self.own_position(&old.0, old.1, &before, now);
            let is = self.own_position(state, now, pending, now);
            if let (Some(was), Some(is)) = (was, is) {
                self.reconciled += 1;
                if was != is {
                    self.mispredicted += 1;
                }
            }
        }
        self.base = Some((state.clone(), now));
    }

    /// The state to draw at `now`: the base, with the player's own seat as
    /// `pending` (unacknowledged inputs, oldest first) will leave it. `None`
    /// before the first state.
    pub fn shown(&self, pending: &[Pressed], now: Instant) -> Option<pb::GameState> {
        let (base, received) = self.base.as_ref()?;
        let mut shown = base.clone();
        if let Some(predicted) = self.predict(base, *received, pending, now) {
            overlay_own_seat(&mut shown, &predicted, self.seat);
        }
        Some(shown)
    }

    /// (reconciliations, of them mispredicted).
    pub fn counts(&self) -> (u64, u64) {
        (self.reconciled, self.mispredicted)
    }

    fn own_position(
        &self,
        base: &pb::GameState,
        received: Instant,
        pending: &[Pressed],
        now: Instant,
    ) -> Option<(u8, u8)> {
        let predicted = self.predict(base, received, pending, now)?;
        let p = predicted.player(u8::try_from(self.seat).ok()?)?;
        Some((p.x, p.y))
    }

    /// The core's state for `base` with `pending` applied for the seat,
    /// run to the tick an input pressed `now` would be applied at. `None`
    /// when there is nothing to predict (the game is not running).
    fn predict(
        &self,
        base: &pb::GameState,
        received: Instant,
        pending: &[Pressed],
        now: Instant,
    ) -> Option<GameState> {
        if base.phase() != pb::Phase::Playing {
            return None;
        }
        let seat = u8::try_from(self.seat).ok()?;
        let mut state = GameState::from_seen(&seen_from_wire(base)?);
        let lead = self.srtt.unwrap_or_default();
        let tick_at = |at: Instant| -> Tick {
            let ahead = at.saturating_duration_since(received) + lead;
            base.tick + (ahead.as_millis() / u128::from(TICK_MS)) as Tick
        };
        for input in pending {
            if let Some(action) = Action::from_code(input.action as i16) {
                let tick = tick_at(input.at).max(state.tick());
                state.apply(seat, action, tick);
            }
        }
        state.advance(tick_at(now).max(state.tick()));
        Some(state)
    }
}

/// The player's own seat in `shown` as `predicted` has it: position,
/// cooldown and bombs; with the kick, every bomb (a kicked bomb may be
/// anyone's). Alive or dead, and everyone else, stay as the server sent
/// them: only the server decides a death.
fn overlay_own_seat(shown: &mut pb::GameState, predicted: &GameState, seat: u32) {
    let Some(own) = predicted.player(seat as u8) else {
        return;
    };
    if let Some(p) = shown.players.iter_mut().find(|p| p.seat == seat) {
        if !p.alive {
            return;
        }
        p.x = u32::from(own.x);
        p.y = u32::from(own.y);
        p.move_cooldown = u32::from(own.move_cooldown);
        p.bombs_placed = u32::from(predicted.bombs_placed(seat as u8));
    }
    let all = own.kick;
    shown.bombs.retain(|b| !all && b.owner != seat);
    shown.bombs.extend(
        predicted
            .bombs()
            .filter(|b| all || u32::from(b.owner) == seat)
            .map(|b| pb::Bomb {
                x: u32::from(b.x),
                y: u32::from(b.y),
                owner: u32::from(b.owner),
                range: u32::from(b.range),
                fuse_ticks: u32::from(b.fuse_ticks),
                slide: b.slide.map_or(0, |d| i32::from(Action::Move(d).code())),
            }),
    );
}

/// What the client was shown, as the core's [`Seen`]; `None` for a state
/// that does not fit the board (one [`crate::wire_check::check_state`]
/// would refuse).
pub fn seen_from_wire(state: &pb::GameState) -> Option<Seen> {
    if state.cells.len() != CELLS || state.players.len() != SEATS {
        return None;
    }
    let mut cells = [Cell::Floor; CELLS];
    for (cell, &code) in cells.iter_mut().zip(&state.cells) {
        *cell = match pb::Cell::try_from(i32::from(code)).ok()? {
            pb::Cell::Floor => Cell::Floor,
            pb::Cell::Pillar => Cell::Pillar,
            pb::Cell::Soft => Cell::Soft { hidden: None },
            pb::Cell::PowerBomb => Cell::PowerUp(PowerUp::Bomb),
            pb::Cell::PowerRange => Cell::PowerUp(PowerUp::Range),
            pb::Cell::PowerSpeed => Cell::PowerUp(PowerUp::Speed),
            pb::Cell::PowerKick => Cell::PowerUp(PowerUp::Kick),
            pb::Cell::PowerRemote => Cell::PowerUp(PowerUp::Remote),
            pb::Cell::Closed => Cell::Closed,
        };
    }
    let byte = |v: u32| u8::try_from(v).ok();
    let mut players = [Player {
        x: 0,
        y: 0,
        seated: false,
        alive: false,
        bombs_max: 1,
        range: 1,
        speed: 0,
        kills: 0,
        move_cooldown: 0,
        buffered_move: None,
        kick: false,
        remote: false,
    }; SEATS];
    for p in &state.players {
        let slot = players.get_mut(usize::try_from(p.seat).ok()?)?;
        *slot = Player {
            x: byte(p.x)?,
            y: byte(p.y)?,
            seated: p.seated,
            alive: p.alive,
            bombs_max: byte(p.bombs_max)?,
            range: byte(p.range)?,
            speed: byte(p.speed)?,
            kills: byte(p.score).unwrap_or(u8::MAX),
            move_cooldown: byte(p.move_cooldown)?,
            buffered_move: None,
            kick: p.kick,
            remote: p.remote,
        };
    }
    let bombs = state
        .bombs
        .iter()
        .map(|b| {
            Some(Bomb {
                x: byte(b.x)?,
                y: byte(b.y)?,
                owner: byte(b.owner)?,
                range: byte(b.range)?,
                fuse_ticks: byte(b.fuse_ticks)?,
                slide: match b.slide() {
                    pb::Action::Up => Some(Dir::Up),
                    pb::Action::Down => Some(Dir::Down),
                    pb::Action::Left => Some(Dir::Left),
                    pb::Action::Right => Some(Dir::Right),
                    _ => None,
                },
            })
        })
        .collect::<Option<Vec<_>>>()?;
    let blasts = state
        .blasts
        .iter()
        .map(|b| {
            Some(Blast {
                x: byte(b.x)?,
                y: byte(b.y)?,
                ticks_left: byte(b.ticks_left)?,
            })
        })
        .collect::<Option<Vec<_>>>()?;
    Some(Seen {
        arena: Arena::from_name(&state.map).unwrap_or_default(),
        tick: state.tick,
        phase: match state.phase() {
            pb::Phase::Playing => Phase::Playing,
            pb::Phase::Finished => Phase::Finished,
            _ => Phase::Waiting,
        },
        round_ticks_left: state.round_ticks_left,
        sudden_death: state.sudden_death,
        cells,
        players,
        bombs,
        blasts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A running game as the server sends it (the wire mapping is the
    /// server's; here by hand: classic arena, seat 0 in its corner).
    fn running() -> pb::GameState {
        let mut g = GameState::new(3, 0);
        for t in 0..4 {
            g.seat_player(t);
        }
        g.advance(20);
        let cells = g
            .cells()
            .iter()
            .map(|c| match c {
                Cell::Floor => pb::Cell::Floor,
                Cell::Pillar => pb::Cell::Pillar,
                Cell::Soft { .. } => pb::Cell::Soft,
                Cell::PowerUp(PowerUp::Bomb) => pb::Cell::PowerBomb,
                Cell::PowerUp(PowerUp::Range) => pb::Cell::PowerRange,
                Cell::PowerUp(PowerUp::Speed) => pb::Cell::PowerSpeed,
                Cell::PowerUp(PowerUp::Kick) => pb::Cell::PowerKick,
                Cell::PowerUp(PowerUp::Remote) => pb::Cell::PowerRemote,
                Cell::Closed => pb::Cell::Closed,
            } as u8)
            .collect();
        let players = g
            .players()
            .iter()
            .enumerate()
            .map(|(seat, p)| pb::Player {
                seat: seat as u32,
                x: u32::from(p.x),
                y: u32::from(p.y),
                alive: p.alive,
                seated: p.seated,
                bombs_max: u32::from(p.bombs_max),
                range: u32::from(p.range),
                ..Default::default()
            })
            .collect();
        pb::GameState {
            version: 10,
            width: 15,
            height: 13,
            cells,
            players,
            tick: g.tick(),
            tick_ms: TICK_MS,
            phase: pb::Phase::Playing as i32,
            round_ticks_left: 1000,
            map: "classic".into(),
            ..Default::default()
        }
    }

    fn own(state: &pb::GameState) -> (u32, u32) {
        (state.players[0].x, state.players[0].y)
    }

    /// Seat 0 starts at (1, 1) with (2, 1) and (1, 2) open.
    #[test]
    fn an_unacknowledged_move_is_drawn_at_once() {
        let now = Instant::now();
        let mut p = Predictor::new(0);
        let base = running();
        assert_eq!(own(&base), (1, 1));
        p.reconcile(&base, &[], &[], now);
        let right = [Pressed {
            action: pb::Action::Right,
            at: now,
        }];
        let shown = p.shown(&right, now).unwrap();
        assert_eq!(own(&shown), (2, 1), "the move is drawn before any reply");
        let bomb = [
            Pressed {
                action: pb::Action::Bomb,
                at: now,
            },
            right[0],
        ];
        let shown = p.shown(&bomb, now).unwrap();
        assert_eq!(shown.bombs.len(), 1, "the bomb too");
        assert_eq!((shown.bombs[0].x, shown.bombs[0].y), (1, 1));
        assert_eq!(shown.players[1], base.players[1], "others as sent");
    }

    /// The server's state with the move applied replaces the base; the
    /// move is not applied again on it, and the view does not jump.
    #[test]
    fn a_confirmed_move_is_not_applied_twice() {
        let now = Instant::now();
        let mut p = Predictor::new(0);
        p.reconcile(&running(), &[], &[], now);
        let mut moved = running();
        moved.version += 1;
        moved.players[0].x = 2;
        moved.players[0].move_cooldown = 3;
        let acked = [Acked {
            seq: 1,
            action: pb::Action::Right,
            latency: Duration::ZERO,
        }];
        p.reconcile(&moved, &acked, &[], now);
        assert_eq!(own(&p.shown(&[], now).unwrap()), (2, 1));
        assert_eq!(p.counts(), (1, 0), "no misprediction");

        // The server says the move did not happen (something blocked it).
        let mut blocked = running();
        blocked.version += 2;
        p.reconcile(&blocked, &[], &[], now);
        assert_eq!(own(&p.shown(&[], now).unwrap()), (1, 1), "corrected");
        assert_eq!(p.counts(), (2, 1), "one misprediction");
    }

    /// With the kick, walking into a bomb draws it sliding away at once,
    /// before the server has answered, whoever's bomb it is.
    #[test]
    fn an_unacknowledged_kick_is_drawn_at_once() {
        let now = Instant::now();
        let mut p = Predictor::new(0);
        let mut base = running();
        base.players[0].kick = true;
        base.bombs.push(pb::Bomb {
            x: 2,
            y: 1,
            owner: 1,
            range: 2,
            fuse_ticks: 40,
            slide: 0,
        });
        // Clear the lane the bomb slides along.
        for x in 3..6 {
            base.cells[borbaman_game::index(x, 1)] = pb::Cell::Floor as u8;
        }
        p.reconcile(&base, &[], &[], now);
        let kick = [Pressed {
            action: pb::Action::Right,
            at: now,
        }];
        let shown = p.shown(&kick, now).unwrap();
        assert_eq!(own(&shown), (1, 1), "the kicker stays");
        assert_eq!(shown.bombs.len(), 1);
        assert_eq!(shown.bombs[0].slide(), pb::Action::Right, "sliding at once");
        let later = p
            .shown(&kick, now + Duration::from_millis(3 * u64::from(TICK_MS)))
            .unwrap();
        assert!(
            later.bombs[0].x > 2,
            "and drawn moving: {:?}",
            later.bombs[0]
        );
        assert_eq!(later.bombs[0].owner, 1, "still the other player's bomb");
    }
}
