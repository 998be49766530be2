//! Key presses to commands. Arrows or WASD move, space plants a bomb, `e`
//! or Enter sets off remote-controlled bombs, `r` plays again after a game
//! (or once out of a running one), Enter picks a game to watch from a list
//! in the lobby, `k` shows the rankings there, `q`, Esc or Ctrl-C quits.

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

/// What the player asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    Up,
    Down,
    Left,
    Right,
    Bomb,
    /// `e`: set off the player's remote-controlled bombs.
    Detonate,
    PlayAgain,
    /// Enter: watch the highlighted game of a list; in a game, detonate.
    Select,
    /// `k`: show the rankings (in the lobby).
    Rankings,
    Quit,
}

impl Command {
    /// The wire action of an in-game command.
    pub fn action(self) -> Option<borbaman_proto::pb::Action> {
        use borbaman_proto::pb::Action;
        Some(match self {
            Command::Up => Action::Up,
            Command::Down => Action::Down,
            Command::Left => Action::Left,
            Command::Right => Action::Right,
            Command::Bomb => Action::Bomb,
            Command::Detonate | Command::Select => Action::Detonate,
            Command::PlayAgain | Command::Rankings | Command::Quit => return None,
        })
    }
}

/// The command a key press stands for, if any. Key releases are ignored.
pub fn command_for(key: KeyEvent) -> Option<Command> {
    if key.kind == KeyEventKind::Release {
        return None;
    }
    if key.modifiers.contains(KeyModifiers::CONTROL) {
        return matches!(key.code, KeyCode::Char('c' | 'C')).then_some(Command::Quit);
    }
    Some(match key.code {
        KeyCode::Up | KeyCode::Char('w' | 'W') => Command::Up,
        KeyCode::Down | KeyCode::Char('s' | 'S') => Command::Down,
        KeyCode::Left | KeyCode::Char('a' | 'A') => Command::Left,
        KeyCode::Right | KeyCode::Char('d' | 'D') => Command::Right,
        KeyCode::Char(' ') => Command::Bomb,
        KeyCode::Char('e' | 'E') => Command::Detonate,
        KeyCode::Char('k' | 'K') => Command::Rankings,
        KeyCode::Char('r' | 'R') => Command::PlayAgain,
        KeyCode::Enter => Command::Select,
        KeyCode::Char('q' | 'Q') | KeyCode::Esc => Command::Quit,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn press(code: KeyCode) -> KeyEvent {
        KeyEvent::new(code, KeyModifiers::NONE)
    }

    #[test]
    fn arrows_and_wasd_move_space_bombs_q_and_ctrl_c_quit() {
        assert_eq!(command_for(press(KeyCode::Up)), Some(Command::Up));
        assert_eq!(command_for(press(KeyCode::Char('a'))), Some(Command::Left));
        assert_eq!(command_for(press(KeyCode::Char('D'))), Some(Command::Right));
        assert_eq!(command_for(press(KeyCode::Char(' '))), Some(Command::Bomb));
        assert_eq!(command_for(press(KeyCode::Char('q'))), Some(Command::Quit));
        let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
        assert_eq!(command_for(ctrl_c), Some(Command::Quit));
        assert_eq!(command_for(press(KeyCode::Char('x'))), None);
        // e and Enter set off remote bombs in a game.
        let e = command_for(press(KeyCode::Char('e'))).unwrap();
        let enter = command_for(press(KeyCode::Enter)).unwrap();
        assert_eq!(e.action(), Some(borbaman_proto::pb::Action::Detonate));
        assert_eq!(enter.action(), Some(borbaman_proto::pb::Action::Detonate));
        assert_eq!(
            command_for(press(KeyCode::Char('k'))),
            Some(Command::Rankings)
        );
        let mut release = press(KeyCode::Up);
        release.kind = KeyEventKind::Release;
        assert_eq!(command_for(release), None);
    }
}
