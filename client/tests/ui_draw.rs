//! The screens, drawn from known states into ratatui's `TestBackend`: the
//! grid's glyphs at the right cells, the HUD's fields, the lobby, game over,
//! and the too-small message.

use std::time::Duration;

use borbaman::ui::draw::{self, GLYPH_BLAST, GLYPH_PILLAR, GLYPH_POWER_RANGE, GLYPH_SOFT};
use borbaman::ui::{ColorMode, NetStats, View};
use borbaman_proto::pb::{Blast, Bomb, Cell, GameState, Phase, Player, Ranking};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::buffer::Buffer;
use ratatui::style::Color;

const W: u32 = 15;
const H: u32 = 13;

/// A 15x13 arena: pillar ring and grid, a soft block at (3,1), a range
/// power-up at (5,1), a bomb at (1,3), a blast at (2,1).
fn state(phase: Phase) -> GameState {
    let mut cells = vec![Cell::Floor as u8; (W * H) as usize];
    for y in 0..H {
        for x in 0..W {
            let ring = x == 0 || y == 0 || x == W - 1 || y == H - 1;
            if ring || (x % 2 == 0 && y % 2 == 0) {
                cells[(y * W + x) as usize] = Cell::Pillar as u8;
            }
        }
    }
    cells[(W + 3) as usize] = Cell::Soft as u8;
    cells[(W + 5) as usize] = Cell::PowerRange as u8;
    let player = |seat: u32, name: &str, x: u32, y: u32, alive: bool| Player {
        seat,
        name: name.into(),
        x,
        y,
        alive,
        bombs_max: 2,
        bombs_placed: 1,
        range: 3,
        speed: 1,
        connected: true,
        seated: true,
        ..Player::default()
    };
    GameState {
        game_id: 7,
        version: 42,
        width: W,
        height: H,
        cells,
        players: vec![
            player(0, "ann", 1, 1, true),
            player(1, "bob", 13, 1, true),
            player(2, "cy", 1, 11, false),
            player(3, "dee", 13, 11, true),
        ],
        bombs: vec![Bomb {
            x: 1,
            y: 3,
            owner: 0,
            range: 3,
            fuse_ticks: 45,
            ..Bomb::default()
        }],
        blasts: vec![Blast {
            x: 2,
            y: 1,
            ticks_left: 5,
        }],
        tick: 300,
        tick_ms: 50,
        phase: phase as i32,
        round_ticks_left: 2_500, // 125 s = 2:05
        seated: 4,
        ..GameState::default()
    }
}

fn view(state: GameState) -> View {
    View {
        name: "ann".into(),
        seat: Some(0),
        state: Some(state),
        net: NetStats {
            rtt_last: Some(Duration::from_micros(1_200)),
            rtt_p99: Some(Duration::from_micros(3_400)),
            server: Some("127.0.0.1:4001".into()),
            live_servers: 3,
            failovers: 2,
            hedges: 5,
            ..NetStats::default()
        },
        ..View::default()
    }
}

fn render(view: &View, width: u16, height: u16, colors: ColorMode) -> Buffer {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
    terminal
        .draw(|frame| draw::draw(frame, view, colors))
        .unwrap();
    terminal.backend().buffer().clone()
}

fn text(buffer: &Buffer) -> String {
    let area = buffer.area;
    (0..area.height)
        .map(|y| {
            (0..area.width)
                .map(|x| buffer[(x, y)].symbol())
                .collect::<String>()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The two symbols drawn for grid cell (x, y): the board's border is at
/// column 0 / row 0, and each cell is two columns wide.
fn cell(buffer: &Buffer, x: u16, y: u16) -> String {
    let (col, row) = (1 + 2 * x, 1 + y);
    format!(
        "{}{}",
        buffer[(col, row)].symbol(),
        buffer[(col + 1, row)].symbol()
    )
}

#[test]
fn the_grid_shows_every_kind_of_cell_at_its_place() {
    let buffer = render(&view(state(Phase::Playing)), 80, 24, ColorMode::TrueColor);
    assert_eq!(cell(&buffer, 0, 0), GLYPH_PILLAR);
    assert_eq!(cell(&buffer, 2, 2), GLYPH_PILLAR);
    assert_eq!(cell(&buffer, 3, 1), GLYPH_SOFT);
    assert_eq!(cell(&buffer, 5, 1), GLYPH_POWER_RANGE);
    assert_eq!(cell(&buffer, 2, 1), GLYPH_BLAST);
    assert_eq!(cell(&buffer, 4, 1), "  ", "floor");
    assert_eq!(cell(&buffer, 1, 3), "●3", "bomb with its fuse in seconds");
    // Players: initial and seat number, on the seat's colour; the dead are
    // not drawn.
    assert_eq!(cell(&buffer, 1, 1), "A1");
    assert_eq!(cell(&buffer, 13, 1), "B2");
    assert_eq!(cell(&buffer, 13, 11), "D4");
    assert_eq!(cell(&buffer, 1, 11), "  ");
    let ann = buffer[(3, 2)].bg;
    let bob = buffer[(27, 2)].bg;
    assert!(matches!(ann, Color::Rgb(..)), "truecolor: {ann:?}");
    assert_ne!(ann, bob, "a colour per player");
}

#[test]
fn the_hud_shows_the_player_the_clock_and_the_network() {
    let screen = text(&render(
        &view(state(Phase::Playing)),
        80,
        24,
        ColorMode::TrueColor,
    ));
    for expected in [
        "game 7",
        "ann",
        "Bombs  1/2  Range 3  Speed 1",
        "Alive  3/4",
        "Time   2:05",
        "RTT    1.2 ms  p99 3.4 ms",
        "Server 127.0.0.1:4001",
        "Failovers 2  hedges 5  live 3",
    ] {
        assert!(
            screen.contains(expected),
            "HUD lacks {expected:?}:\n{screen}"
        );
    }
    assert!(!screen.contains("waiting"), "no warning when all is well");

    let mut waiting = view(state(Phase::Playing));
    waiting.net.waiting_for_server = true;
    waiting.state.as_mut().unwrap().sudden_death = true;
    let screen = text(&render(&waiting, 80, 24, ColorMode::TrueColor));
    assert!(screen.contains("no server reachable — waiting"), "{screen}");
    assert!(screen.contains("SUDDEN DEATH"), "{screen}");
}

#[test]
fn without_truecolor_the_256_colour_palette_is_used() {
    assert_eq!(
        ColorMode::from_colorterm(Some("truecolor")),
        ColorMode::TrueColor
    );
    assert_eq!(
        ColorMode::from_colorterm(Some("24bit")),
        ColorMode::TrueColor
    );
    assert_eq!(ColorMode::from_colorterm(None), ColorMode::Indexed256);
    let buffer = render(&view(state(Phase::Playing)), 80, 24, ColorMode::Indexed256);
    assert!(matches!(buffer[(3, 2)].bg, Color::Indexed(_)));
    let buffer = render(&view(state(Phase::Playing)), 80, 24, ColorMode::TrueColor);
    assert!(matches!(buffer[(3, 2)].bg, Color::Rgb(..)));
}

#[test]
fn players_sharing_a_cell_are_all_shown() {
    let mut shared = view(state(Phase::Playing));
    let players = &mut shared.state.as_mut().unwrap().players;
    (players[1].x, players[1].y) = (5, 5);
    (players[3].x, players[3].y) = (5, 5);
    let buffer = render(&shared, 80, 24, ColorMode::TrueColor);
    assert_eq!(cell(&buffer, 5, 5), "24", "seats 2 and 4");
    // With the player at this terminal among them, its colour is on top.
    let players = &mut shared.state.as_mut().unwrap().players;
    (players[0].x, players[0].y) = (5, 5);
    let buffer = render(&shared, 80, 24, ColorMode::TrueColor);
    assert_eq!(cell(&buffer, 5, 5), "1+", "three players");
    let ann = render(&view(state(Phase::Playing)), 80, 24, ColorMode::TrueColor);
    assert_eq!(buffer[(11, 6)].bg, ann[(3, 2)].bg, "drawn in ann's colour");
}

#[test]
fn a_player_who_is_out_is_told_so_and_how_to_move_on() {
    let mut playing = view(state(Phase::Playing));
    let screen = text(&render(&playing, 80, 24, ColorMode::TrueColor));
    assert!(screen.contains("space bomb"), "{screen}");
    assert!(!screen.contains("You are out"), "{screen}");
    playing.state.as_mut().unwrap().players[0].alive = false;
    let screen = text(&render(&playing, 80, 24, ColorMode::TrueColor));
    assert!(screen.contains("You are out: watching the end"), "{screen}");
    assert!(screen.contains("r next game · q quits"), "{screen}");
    assert!(!screen.contains("space bomb"), "{screen}");
    // Another player being out changes nothing for this one.
    let mut other_out = view(state(Phase::Playing));
    other_out.seat = Some(1);
    other_out.state.as_mut().unwrap().players[0].alive = false;
    let screen = text(&render(&other_out, 80, 24, ColorMode::TrueColor));
    assert!(!screen.contains("You are out"), "{screen}");
    assert!(!screen.contains("r next game"), "{screen}");
}

#[test]
fn the_lobby_counts_and_names_the_seated() {
    let mut lobby = state(Phase::Waiting);
    lobby.seated = 2;
    for p in &mut lobby.players[2..] {
        p.seated = false;
    }
    let screen = text(&render(&view(lobby), 80, 24, ColorMode::Indexed256));
    assert!(screen.contains("Waiting for players 2/4"), "{screen}");
    assert!(screen.contains("ann  (you)"), "{screen}");
    assert!(screen.contains("bob"), "{screen}");
    assert!(!screen.contains("dee"), "{screen}");
}

#[test]
fn game_over_names_the_winner_ranks_players_and_offers_another_game() {
    let mut over = state(Phase::Finished);
    over.winner = Some(1);
    let mut v = view(over);
    v.rankings = vec![
        Ranking {
            name: "bob".into(),
            games: 3,
            wins: 2,
            draws: 0,
        },
        Ranking {
            name: "ann".into(),
            games: 3,
            wins: 1,
            draws: 1,
        },
    ];
    v.state.as_mut().unwrap().players[1].score = 2;
    v.state.as_mut().unwrap().players[0].score = 1;
    let screen = text(&render(&v, 80, 24, ColorMode::TrueColor));
    assert!(screen.contains("Winner: bob"), "{screen}");
    let line = |name: &str| {
        screen
            .lines()
            .find(|l| l.contains(&format!(" {name} ")) && l.contains("kill"))
            .unwrap_or_default()
            .to_string()
    };
    assert!(line("bob").contains("survived  2 kills"), "{screen}");
    assert!(line("ann").contains("1 kill"), "{screen}");
    assert!(
        line("cy").contains("out") && line("cy").contains("0 kills"),
        "{screen}"
    );
    assert!(screen.contains("Rankings"), "{screen}");
    let bob_row = screen
        .lines()
        .find(|l| l.contains("1") && l.contains("bob") && l.contains("3"))
        .is_some();
    assert!(bob_row, "{screen}");
    assert!(screen.contains("r plays again"), "{screen}");

    let mut draw = state(Phase::Finished);
    draw.draw = true;
    let screen = text(&render(&view(draw), 80, 24, ColorMode::TrueColor));
    assert!(screen.contains("Draw"), "{screen}");
}

#[test]
fn a_small_terminal_gets_a_clear_message() {
    let screen = text(&render(
        &view(state(Phase::Playing)),
        40,
        10,
        ColorMode::TrueColor,
    ));
    assert!(screen.contains("Terminal too small"), "{screen}");
}

#[test]
fn start_up_progress_and_errors_are_shown() {
    let starting = View {
        progress: vec!["starting database…".into(), "starting 3 servers…".into()],
        ..View::default()
    };
    let screen = text(&render(&starting, 80, 24, ColorMode::TrueColor));
    assert!(
        screen.contains("starting database…") && screen.contains("starting 3 servers…"),
        "{screen}"
    );
    let failed = View {
        error: Some("cannot start PostgreSQL: install it with apt-get install postgresql".into()),
        ..View::default()
    };
    let screen = text(&render(&failed, 80, 24, ColorMode::TrueColor));
    assert!(screen.contains("apt-get install postgresql"), "{screen}");
}

/// Names as a server of another version, or a hand-edited database, might
/// send them: escapes, bidi overrides, tags, far too wide.
#[test]
fn hostile_names_never_reach_the_terminal_as_sent() {
    let hostile = [
        "\u{1b}]0;pwned\u{7}\u{1b}[2J",
        "rtl\u{202e}\u{2066}evil",
        "tag\u{e0041}\u{e0042}\u{200b}\u{feff}",
        "ボンバーマン大将様はとても強い",
    ];
    let named = |phase: Phase| {
        let mut s = state(phase);
        for (p, name) in s.players.iter_mut().zip(hostile) {
            p.name = name.into();
        }
        s
    };
    let mut over = named(Phase::Finished);
    over.winner = Some(0);
    let mut over = view(over);
    over.rankings = hostile
        .iter()
        .map(|name| Ranking {
            name: name.to_string(),
            games: 1,
            wins: 0,
            draws: 0,
        })
        .collect();
    let mut lobby = named(Phase::Waiting);
    lobby.seated = 4;
    let mut no_seat = view(named(Phase::Playing));
    no_seat.seat = None;
    no_seat.name = hostile[0].into();
    for v in [view(lobby), view(named(Phase::Playing)), over, no_seat] {
        let screen = text(&render(&v, 100, 30, ColorMode::TrueColor));
        let bad: Vec<char> = screen
            .chars()
            .filter(|&c| {
                c != '\n'
                    && (c.is_control()
                        || matches!(c, '\u{200b}' | '\u{202e}' | '\u{2066}' | '\u{feff}')
                        || ('\u{e0000}'..='\u{e007f}').contains(&c))
            })
            .collect();
        assert!(bad.is_empty(), "{bad:?} drawn:\n{screen}");
        assert!(screen.contains("\u{fffd}]0;pwned"), "{screen}");
        assert!(screen.contains("rtl\u{fffd}\u{fffd}evil"), "{screen}");
        // The wide name is cut at 16 columns, not drawn whole (the buffer
        // holds a blank after each wide character).
        assert!(screen.contains("ボ ン バ ー マ ン 大 将 "), "{screen}");
        assert!(!screen.contains("様"), "{screen}");
    }
}

#[test]
fn the_watch_list_shows_each_game_and_highlights_the_picked_one() {
    use borbaman_proto::pb::LiveGame;
    let game = |game_id, phase: Phase, seated, alive, left_ticks| LiveGame {
        game_id,
        map: "open".into(),
        phase: phase as i32,
        seated,
        alive,
        names: vec!["ann".into(), "bob".into()],
        round_ticks_left: left_ticks,
        tick_ms: 50,
        ..LiveGame::default()
    };
    let view = View {
        live_games: Some(vec![
            game(12, Phase::Playing, 4, 2, 1_300),
            game(11, Phase::Waiting, 2, 2, 3_600),
        ]),
        picked: 1,
        watching: true,
        ..View::default()
    };
    let screen = text(&render(&view, 100, 24, ColorMode::Indexed256));
    let row = |id: &str| {
        screen
            .lines()
            .find(|l| l.contains(id))
            .unwrap_or_else(|| panic!("no {id} in\n{screen}"))
            .to_string()
    };
    let running = row("game 12");
    for part in ["open", "2 alive of 4", "1:05 left", "ann, bob"] {
        assert!(running.contains(part), "{part:?} in {running:?}");
    }
    assert!(!running.contains('▶'), "{running}");
    let waiting = row("game 11");
    assert!(waiting.contains("waiting 2/4"), "{waiting}");
    assert!(waiting.contains("▶"), "the picked one: {waiting}");
    assert!(screen.contains("Enter watch"), "{screen}");
}

#[test]
fn a_watched_game_says_watching_and_shows_no_seat() {
    let mut view = view(state(Phase::Playing));
    view.watching = true;
    view.seat = None;
    let screen = text(&render(&view, 100, 30, ColorMode::Indexed256));
    assert!(screen.contains("Watching (no seat)"), "{screen}");
    assert!(screen.contains("Tick   300"), "{screen}");
    assert!(!screen.contains("You "), "{screen}");
    assert!(!screen.contains("space bomb"), "{screen}");
}

/// The HUD names the kick and the remote control, and its legend shows
/// their keys, only once the player holds them; their power-ups have glyphs
/// of their own.
#[test]
fn the_legend_shows_the_kick_and_detonate_keys_only_when_held() {
    use borbaman::ui::draw::{GLYPH_POWER_KICK, GLYPH_POWER_REMOTE};
    let mut plain = state(Phase::Playing);
    plain.cells[(W + 7) as usize] = Cell::PowerKick as u8;
    plain.cells[(W + 9) as usize] = Cell::PowerRemote as u8;
    let buffer = render(&view(plain.clone()), 80, 30, ColorMode::TrueColor);
    assert_eq!(cell(&buffer, 7, 1), GLYPH_POWER_KICK);
    assert_eq!(cell(&buffer, 9, 1), GLYPH_POWER_REMOTE);
    let screen = text(&buffer);
    assert!(screen.contains("space bomb"), "{screen}");
    assert!(
        !screen.contains("detonate") && !screen.contains("kick"),
        "{screen}"
    );

    let mut remote = plain.clone();
    remote.players[0].remote = true;
    let screen = text(&render(&view(remote), 80, 30, ColorMode::TrueColor));
    assert!(screen.contains("e/Enter detonate"), "{screen}");
    assert!(screen.contains("Holds  remote"), "{screen}");
    assert!(!screen.contains("kick"), "{screen}");

    let mut both = plain;
    both.players[0].kick = true;
    both.players[0].remote = true;
    let screen = text(&render(&view(both), 80, 30, ColorMode::TrueColor));
    assert!(screen.contains("Holds  kick + remote"), "{screen}");
    assert!(screen.contains("walk into a bomb: kick"), "{screen}");
    assert!(screen.contains("e/Enter detonate"), "{screen}");
}

/// The rankings screen: 15 players a page with games, wins, draws and win
/// rate, the viewer's own line highlighted (reversed) and marked, the page
/// and its count in the title; over a lobby it says how to go back. The
/// capture is printed (`--nocapture`) for the docs.
#[test]
fn the_rankings_screen_pages_the_players_and_highlights_your_line() {
    use ratatui::style::Modifier;
    let rankings: Vec<Ranking> = (0..20u32)
        .map(|i| Ranking {
            name: format!("player{:02}", i + 1),
            games: 40 - i,
            wins: 20 - i,
            draws: i % 3,
        })
        .collect();
    let mut v = View {
        name: "player17".into(),
        rankings,
        ranking_page: Some(1),
        ..View::default()
    };
    let buffer = render(&v, 80, 24, ColorMode::TrueColor);
    let screen = text(&buffer);
    println!("{screen}");
    assert!(
        screen.contains("rankings · page 2/2 · 20 players"),
        "{screen}"
    );
    assert!(
        !screen.contains("player15 "),
        "page 1's players are not on page 2"
    );
    let (row, line) = screen
        .lines()
        .enumerate()
        .find(|(_, l)| l.contains("player17"))
        .expect("player17 on page 2");
    // #17: 24 games, 4 wins, 1 draw, 17% (4/24 rounded), marked as yours.
    let fields: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(
        fields[..8],
        ["│17", "player17", "24", "4", "1", "17%", "◀", "you"],
        "{line}"
    );
    let name_col = line.find("player17").unwrap();
    let col = line[..name_col].chars().count() as u16;
    assert!(
        buffer[(col, row as u16)]
            .modifier
            .contains(Modifier::REVERSED),
        "your line is highlighted"
    );
    let other = screen.lines().position(|l| l.contains("player18")).unwrap();
    assert!(
        !buffer[(col, other as u16)]
            .modifier
            .contains(Modifier::REVERSED)
    );
    assert!(screen.contains("←→ page · q quits"), "{screen}");

    // Page 1 has the first 15; over a lobby the screen says how back.
    v.ranking_page = Some(0);
    v.state = Some(state(Phase::Waiting));
    let screen = text(&render(&v, 80, 24, ColorMode::TrueColor));
    assert!(screen.contains("page 1/2"), "{screen}");
    assert!(
        screen.contains("player01") && screen.contains("player15"),
        "{screen}"
    );
    assert!(!screen.contains("player16"), "{screen}");
    assert!(screen.contains("50%"), "player01: 20 of 40: {screen}");
    assert!(screen.contains("k back to the lobby"), "{screen}");
}
