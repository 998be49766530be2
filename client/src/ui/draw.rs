//! Renders a [`View`]: lobby, game (grid and HUD), game over, start-up
//! progress and errors. Reads the view, writes the frame, nothing else.
//!
//! The grid takes two terminal columns per cell, drawn with single-codepoint
//! glyphs only (no emoji or combining sequences, whose width terminals
//! disagree on). Each player has a colour; players are drawn as their
//! initial and seat number on that colour (players sharing a cell as their
//! seat numbers).
//!
//! Every name is drawn through [`shown_name`], whoever sent it: a server of
//! another version, or a database edited by hand, cannot reach the terminal
//! with escapes, invisible characters or a name wider than its column.

use std::time::Duration;

use borbaman_game::names;
use borbaman_proto::pb::{Cell, GameState, LiveGame, Phase, Player};
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style, Stylize};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph, Row, Table, Wrap};
use unicode_width::UnicodeWidthStr;

use super::{ColorMode, NetStats, Screen, View, out_of_game};

/// Smallest terminal the game screen fits in.
pub const MIN_WIDTH: u16 = 66;
pub const MIN_HEIGHT: u16 = 20;
/// Width of the HUD panel, borders included.
const HUD_WIDTH: u16 = 32;

pub const GLYPH_FLOOR: &str = "  ";
pub const GLYPH_PILLAR: &str = "██";
pub const GLYPH_SOFT: &str = "▒▒";
pub const GLYPH_CLOSED: &str = "▓▓";
pub const GLYPH_BLAST: &str = "░░";
pub const GLYPH_POWER_BOMB: &str = "+b";
pub const GLYPH_POWER_RANGE: &str = "+r";
pub const GLYPH_POWER_SPEED: &str = "+s";
pub const GLYPH_POWER_KICK: &str = "+k";
pub const GLYPH_POWER_REMOTE: &str = "+e";
/// A bomb is this glyph followed by its fuse in whole seconds.
pub const GLYPH_BOMB: char = '●';

/// Draws `view` into the whole frame.
pub fn draw(frame: &mut Frame, view: &View, colors: ColorMode) {
    let area = frame.area();
    if area.width < MIN_WIDTH || area.height < MIN_HEIGHT {
        let text = format!(
            "Terminal too small: {}×{}.\nBorbaman needs at least {MIN_WIDTH}×{MIN_HEIGHT}; \
             enlarge the window (q quits).",
            area.width, area.height
        );
        frame.render_widget(Paragraph::new(text).wrap(Wrap { trim: true }), area);
        return;
    }
    let palette = Palette::new(colors);
    match view.screen() {
        Screen::Starting => draw_starting(frame, view, area),
        Screen::Pick => draw_pick(frame, view, area),
        Screen::Failed => draw_failed(frame, view, area),
        Screen::Lobby => draw_lobby(frame, view, area, &palette),
        Screen::Game => draw_game(frame, view, area, &palette),
        Screen::GameOver => draw_game_over(frame, view, area, &palette),
        Screen::Rankings => {
            // Over a lobby, the screen goes back to it; on its own, it is
            // the whole program.
            let back = if view.state.is_some() {
                "k back to the lobby · q quits"
            } else {
                "q quits"
            };
            let page = view.ranking_page.unwrap_or(0);
            super::rankings::draw_rankings(frame, view, page, back, area);
        }
    }
}

fn draw_starting(frame: &mut Frame, view: &View, area: Rect) {
    let mut lines: Vec<Line> = vec![Line::from("Borbaman").bold(), Line::from("")];
    lines.extend(view.progress.iter().map(|step| Line::from(step.as_str())));
    lines.extend(net_warning(&view.net));
    lines.push(Line::from(""));
    lines.push(Line::from("q quits").dim());
    let block = Block::bordered().title(" Borbaman ");
    frame.render_widget(Paragraph::new(lines).block(block), area);
}

/// The live games, one a line, the picked one highlighted.
fn draw_pick(frame: &mut Frame, view: &View, area: Rect) {
    let games = view.live_games.as_deref().unwrap_or_default();
    let mut lines = vec![Line::from("Live games").bold(), Line::from("")];
    lines.extend(live_game_lines(games, Some(view.picked)));
    if games.is_empty() {
        lines.push(Line::from("No game is running or waiting for players.").dim());
    }
    lines.extend(net_lines(&view.net));
    lines.push(Line::from(""));
    lines.push(Line::from("↑↓ choose · Enter watch · q quits").dim());
    let block = Block::bordered().title(" Borbaman · watch ");
    frame.render_widget(Paragraph::new(lines).block(block), area);
}

/// One line per live game: id, map, players, time left; `picked` (if any)
/// highlighted.
pub fn live_game_lines(games: &[LiveGame], picked: Option<usize>) -> Vec<Line<'static>> {
    games
        .iter()
        .enumerate()
        .map(|(i, game)| {
            let players = match game.phase() {
                Phase::Playing => format!("{} alive of {}", game.alive, game.seated),
                _ => format!("waiting {}/4", game.seated),
            };
            let left = if game.sudden_death {
                "sudden death".to_string()
            } else {
                let tick_ms = if game.tick_ms == 0 { 50 } else { game.tick_ms };
                let secs = u64::from(game.round_ticks_left) * u64::from(tick_ms) / 1000;
                format!("{}:{:02} left", secs / 60, secs % 60)
            };
            let map = if game.map.is_empty() {
                "classic"
            } else {
                &game.map
            };
            let names: Vec<String> = game.names.iter().map(|n| shown_name(n)).collect();
            let text = format!(
                "game {:<6} {map:<10} {players:<15} {left:<13} {}",
                game.game_id,
                names.join(", ")
            );
            if picked == Some(i) {
                Line::from(format!("▶ {text}")).reversed()
            } else {
                Line::from(format!("  {text}"))
            }
        })
        .collect()
}

fn draw_failed(frame: &mut Frame, view: &View, area: Rect) {
    let message = view.error.as_deref().unwrap_or_default();
    let lines = vec![
        Line::from("Something went wrong").bold().fg(Color::Red),
        Line::from(""),
        Line::from(message),
        Line::from(""),
        Line::from("q quits").dim(),
    ];
    let block = Block::bordered().title(" Borbaman ");
    frame.render_widget(
        Paragraph::new(lines)
            .block(block)
            .wrap(Wrap { trim: false }),
        area,
    );
}

fn draw_lobby(frame: &mut Frame, view: &View, area: Rect, palette: &Palette) {
    let state = view.state.as_ref().expect("lobby has a state");
    let mut lines = vec![
        Line::from(format!("Waiting for players {}/4", state.seated)).bold(),
        Line::from(format!("Map: {}", map_label(state))),
        Line::from(""),
    ];
    for player in state.players.iter().filter(|p| p.seated) {
        let you = if Some(player.seat) == view.seat {
            "  (you)"
        } else {
            ""
        };
        lines.push(Line::from(vec![
            player_span(player, palette),
            Span::raw(format!(" {}{you}", shown_name(&player.name))),
        ]));
    }
    lines.push(Line::from(""));
    lines.push(Line::from(format!("game {}", state.game_id)).dim());
    if let Some(note) = view.note.as_ref().filter(|_| view.watching) {
        lines.push(Line::from(note.clone()).bold());
    }
    let others = view.live_games.as_deref().unwrap_or_default();
    if !view.watching && !others.is_empty() {
        lines.push(Line::from(""));
        lines.push(Line::from("Live games: Enter watches one until yours starts").bold());
        lines.extend(live_game_lines(others, Some(view.picked)));
    }
    lines.extend(net_lines(&view.net));
    lines.push(Line::from(""));
    if view.watching {
        lines.push(Line::from("q quits").dim());
    } else {
        lines.push(Line::from("k rankings · q quits").dim());
    }
    let title = if view.watching {
        " Borbaman · watching a lobby "
    } else {
        " Borbaman · lobby "
    };
    let block = Block::bordered().title(title);
    frame.render_widget(Paragraph::new(lines).block(block), area);
}

fn draw_game(frame: &mut Frame, view: &View, area: Rect, palette: &Palette) {
    let state = view.state.as_ref().expect("game has a state");
    let board_width = (state.width as u16) * 2 + 2;
    let [board_area, hud_area] = Layout::horizontal([
        Constraint::Length(board_width),
        Constraint::Length(HUD_WIDTH),
    ])
    .areas(area);
    let board_area = Rect {
        height: board_area.height.min(state.height as u16 + 2),
        ..board_area
    };
    let block = Block::bordered().title(format!(" game {} ", state.game_id));
    frame.render_widget(
        Paragraph::new(grid_lines(state, view.seat, palette)).block(block),
        board_area,
    );
    let hud = hud_lines(view, state, palette);
    let hud_area = Rect {
        height: hud_area.height.min(hud.len() as u16 + 2),
        ..hud_area
    };
    frame.render_widget(
        Paragraph::new(hud).block(Block::bordered().title(" HUD ")),
        hud_area,
    );
}

fn draw_game_over(frame: &mut Frame, view: &View, area: Rect, palette: &Palette) {
    let state = view.state.as_ref().expect("game over has a state");
    let [head, table_area, foot] = Layout::vertical([
        Constraint::Length(state.players.len() as u16 + 4),
        Constraint::Min(3),
        Constraint::Length(3),
    ])
    .areas(area);
    let verdict = match state.winner {
        _ if state.draw => Line::from("Draw: nobody survived").bold(),
        Some(seat) => {
            let name = state
                .players
                .iter()
                .find(|p| p.seat == seat)
                .map_or("?".to_string(), |p| shown_name(&p.name));
            let you = if Some(seat) == view.seat {
                " (you!)"
            } else {
                ""
            };
            Line::from(format!("Winner: {name}{you}")).bold()
        }
        None => Line::from("Game over").bold(),
    };
    let mut lines = vec![verdict, Line::from("")];
    for player in state.players.iter().filter(|p| p.seated) {
        let fate = if player.alive { "survived" } else { "out" };
        let kills = match player.score {
            1 => "1 kill".to_string(),
            n => format!("{n} kills"),
        };
        lines.push(Line::from(vec![
            player_span(player, palette),
            Span::raw(format!(" {} {fate:<9} {kills}", padded_name(&player.name))),
        ]));
    }
    let block = Block::bordered().title(" Borbaman · game over ");
    frame.render_widget(Paragraph::new(lines).block(block), head);

    let rows = view.rankings.iter().enumerate().map(|(i, r)| {
        Row::new(vec![
            format!("{}", i + 1),
            shown_name(&r.name),
            r.games.to_string(),
            r.wins.to_string(),
            r.draws.to_string(),
        ])
    });
    let table = Table::new(
        rows,
        [
            Constraint::Length(4),
            Constraint::Length(18),
            Constraint::Length(7),
            Constraint::Length(6),
            Constraint::Length(6),
        ],
    )
    .header(Row::new(vec!["#", "player", "games", "wins", "draws"]).bold())
    .block(Block::bordered().title(" Rankings "));
    frame.render_widget(table, table_area);
    let help = Paragraph::new("r plays again · q quits").block(Block::bordered());
    frame.render_widget(help, foot);
}

/// The grid, two columns per cell. What is drawn on a cell, most visible
/// first: a blast, a player, a bomb, the cell itself.
pub fn grid_lines(state: &GameState, me: Option<u32>, palette: &Palette) -> Vec<Line<'static>> {
    let (width, height) = (state.width as usize, state.height as usize);
    let mut cells: Vec<Span<'static>> = (0..width * height)
        .map(|i| {
            let cell = state.cells.get(i).copied().unwrap_or(Cell::Pillar as u8);
            palette.cell(Cell::try_from(cell as i32).unwrap_or(Cell::Pillar))
        })
        .collect();
    let index = |x: u32, y: u32| {
        let (x, y) = (x as usize, y as usize);
        (x < width && y < height).then_some(y * width + x)
    };
    let tick_ms = if state.tick_ms == 0 {
        50
    } else {
        state.tick_ms
    };
    for bomb in &state.bombs {
        if let Some(i) = index(bomb.x, bomb.y) {
            let seconds = (bomb.fuse_ticks * tick_ms).div_ceil(1000).min(9);
            cells[i] = Span::styled(format!("{GLYPH_BOMB}{seconds}"), palette.bomb);
        }
    }
    // Players may share a cell: a lone player shows as itself; two or more
    // show their seat numbers ("24"; "2+" for three or more), on the
    // colour of the player at this terminal if it is one of them.
    let mut here: Vec<Vec<&Player>> = vec![Vec::new(); width * height];
    for player in state.players.iter().filter(|p| p.alive && p.seated) {
        if let Some(i) = index(player.x, player.y) {
            here[i].push(player);
        }
    }
    for (i, players) in here.iter().enumerate() {
        let Some(&first) = players.first() else {
            continue;
        };
        let top = players
            .iter()
            .copied()
            .find(|p| Some(p.seat) == me)
            .unwrap_or(first);
        let mut span = match players.as_slice() {
            [one] => player_span(one, palette),
            [a, b] => Span::styled(
                format!("{}{}", a.seat + 1, b.seat + 1),
                palette.player(top.seat),
            ),
            _ => Span::styled(format!("{}+", first.seat + 1), palette.player(top.seat)),
        };
        if Some(top.seat) == me {
            span = span.add_modifier(Modifier::UNDERLINED);
        }
        cells[i] = span;
    }
    for blast in state.blasts.iter().filter(|b| b.ticks_left > 0) {
        if let Some(i) = index(blast.x, blast.y) {
            cells[i] = Span::styled(GLYPH_BLAST, palette.blast);
        }
    }
    let mut rows = Vec::with_capacity(height);
    let mut cells = cells.into_iter();
    for _ in 0..height {
        rows.push(Line::from(cells.by_ref().take(width).collect::<Vec<_>>()));
    }
    rows
}

/// The arena's name as the server sent it (older servers send none: their
/// games are all classic).
fn map_label(state: &GameState) -> &str {
    if state.map.is_empty() {
        "classic"
    } else {
        &state.map
    }
}

fn hud_lines(view: &View, state: &GameState, palette: &Palette) -> Vec<Line<'static>> {
    let alive = state.players.iter().filter(|p| p.alive && p.seated).count();
    let me = view
        .seat
        .and_then(|seat| state.players.iter().find(|p| p.seat == seat));
    let mut lines = vec![];
    if let Some(replay) = &view.replay {
        lines.extend(replay.lines().map(|l| Line::from(l.to_string()).bold()));
        lines.push(Line::from("space pause  → step").dim());
        lines.push(Line::from("+/- speed  e end  q quit").dim());
    }
    if view.watching {
        let on = Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD);
        lines.push(Line::styled("Watching (no seat)", on));
        if let Some(note) = &view.note {
            lines.push(Line::from(note.clone()).bold());
        }
        lines.push(Line::from(format!("Tick   {}", state.tick)));
    }
    match me {
        _ if view.watching => {}
        Some(me) => {
            lines.push(Line::from(vec![
                Span::raw("You    "),
                player_span(me, palette),
                Span::raw(format!(" {}", shown_name(&me.name))),
                Span::raw(if me.alive { "" } else { "  (out)" }),
            ]));
            lines.push(Line::from(format!(
                "Bombs  {}/{}  Range {}  Speed {}",
                me.bombs_max.saturating_sub(me.bombs_placed),
                me.bombs_max,
                me.range,
                me.speed
            )));
            if me.kick || me.remote {
                let held: Vec<&str> = [(me.kick, "kick"), (me.remote, "remote")]
                    .into_iter()
                    .filter_map(|(held, name)| held.then_some(name))
                    .collect();
                lines.push(Line::from(format!("Holds  {}", held.join(" + "))));
            }
        }
        None => lines.push(Line::from(format!("You    {}", shown_name(&view.name)))),
    }
    lines.push(Line::from(format!(
        "Alive  {alive}/{}",
        state.seated.max(alive as u32)
    )));
    lines.push(Line::from(format!("Map    {}", map_label(state))));
    let tick_ms = if state.tick_ms == 0 {
        50
    } else {
        state.tick_ms
    };
    let time = if state.sudden_death {
        Line::from("Time   SUDDEN DEATH").bold().fg(Color::Red)
    } else {
        let left = Duration::from_millis(state.round_ticks_left as u64 * tick_ms as u64);
        Line::from(format!(
            "Time   {}:{:02}",
            left.as_secs() / 60,
            left.as_secs() % 60
        ))
    };
    lines.push(time);
    lines.push(Line::from(""));
    for player in state.players.iter().filter(|p| p.seated) {
        let status = match (player.alive, player.connected) {
            (false, _) => "out",
            (true, false) => "away",
            (true, true) => "",
        };
        lines.push(Line::from(vec![
            player_span(player, palette),
            Span::raw(format!(" {} {status}", padded_name(&player.name))),
        ]));
    }
    lines.push(Line::from(""));
    lines.extend(net_lines(&view.net));
    lines.push(Line::from(""));
    if view.watching {
        if state.phase() == Phase::Finished {
            lines.push(Line::from("Game over").bold());
        }
        lines.push(Line::from("q quits").dim());
    } else if view.seat.is_some_and(|seat| out_of_game(state, seat)) {
        let out = Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD);
        lines.push(Line::styled("You are out: watching the end", out));
        lines.push(Line::from("r next game · q quits").dim());
    } else {
        lines.push(Line::from("←↑↓→/WASD move").dim());
        // The keys of the kick and the remote only once they are held.
        if me.is_some_and(|p| p.kick) {
            lines.push(Line::from("walk into a bomb: kick").dim());
        }
        if me.is_some_and(|p| p.remote) {
            lines.push(Line::from("e/Enter detonate").dim());
        }
        lines.push(Line::from("space bomb · q quit").dim());
    }
    lines
}

/// RTT, server and failover lines, plus any warning.
fn net_lines(net: &NetStats) -> Vec<Line<'static>> {
    let ms = |d: Option<Duration>| {
        d.map_or("-".to_string(), |d| format!("{:.1}", d.as_secs_f64() * 1e3))
    };
    let mut lines = vec![
        Line::from(format!(
            "RTT    {} ms  p99 {} ms",
            ms(net.rtt_last),
            ms(net.rtt_p99)
        )),
        Line::from(format!(
            "Inputs {} ahead  corrected {}",
            net.unacked, net.mispredictions
        )),
        Line::from(format!("Server {}", net.server.as_deref().unwrap_or("-"))),
        Line::from(format!(
            "Failovers {}  hedges {}  live {}",
            net.failovers, net.hedges, net.live_servers
        )),
    ];
    if let Some(distance) = &net.distance {
        lines.insert(1, Line::from(format!("Distance {distance}")));
    }
    lines.extend(net_warning(net));
    lines
}

fn net_warning(net: &NetStats) -> Option<Line<'static>> {
    let warn = Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD);
    if net.waiting_for_server {
        Some(Line::styled("no server reachable — waiting", warn))
    } else if net.database_unavailable {
        Some(Line::styled("database unavailable — retrying", warn))
    } else {
        net.last_error
            .as_ref()
            .map(|e| Line::styled(e.clone(), warn))
    }
}

/// A name as it may be drawn: what the name rules refuse replaced, cut
/// to the widest name.
pub fn shown_name(name: &str) -> String {
    names::for_display(name)
}

/// [`shown_name`] padded with spaces to the widest name's columns.
fn padded_name(name: &str) -> String {
    let mut shown = shown_name(name);
    let pad = names::MAX_NAME_COLUMNS.saturating_sub(shown.width());
    shown.extend(std::iter::repeat_n(' ', pad));
    shown
}

/// A player's two-column glyph: initial and seat number on its colour.
fn player_span(player: &Player, palette: &Palette) -> Span<'static> {
    let initial = player
        .name
        .chars()
        .find(|c| c.is_alphanumeric())
        .map_or('?', |c| c.to_ascii_uppercase());
    let initial = if initial.is_ascii() { initial } else { '?' };
    Span::styled(
        format!("{initial}{}", player.seat + 1),
        palette.player(player.seat),
    )
}

/// Colours and styles, in the terminal's colour mode.
pub struct Palette {
    mode: ColorMode,
    bomb: Style,
    blast: Style,
}

impl Palette {
    pub fn new(mode: ColorMode) -> Palette {
        let mut palette = Palette {
            mode,
            bomb: Style::new(),
            blast: Style::new(),
        };
        palette.bomb = Style::new()
            .fg(palette.color((255, 255, 255), 15))
            .bg(palette.color((60, 60, 60), 237))
            .add_modifier(Modifier::BOLD);
        palette.blast = Style::new()
            .fg(palette.color((255, 220, 60), 220))
            .bg(palette.color((200, 40, 20), 160));
        palette
    }

    fn color(&self, rgb: (u8, u8, u8), indexed: u8) -> Color {
        match self.mode {
            ColorMode::TrueColor => Color::Rgb(rgb.0, rgb.1, rgb.2),
            ColorMode::Indexed256 => Color::Indexed(indexed),
        }
    }

    /// The colour of a seat.
    pub fn seat_color(&self, seat: u32) -> Color {
        match seat % 4 {
            0 => self.color((230, 70, 70), 203),
            1 => self.color((70, 140, 240), 75),
            2 => self.color((80, 200, 100), 78),
            _ => self.color((235, 200, 60), 221),
        }
    }

    fn player(&self, seat: u32) -> Style {
        Style::new()
            .fg(Color::Black)
            .bg(self.seat_color(seat))
            .add_modifier(Modifier::BOLD)
    }

    fn cell(&self, cell: Cell) -> Span<'static> {
        let power = Style::new()
            .fg(self.color((80, 220, 230), 80))
            .add_modifier(Modifier::BOLD);
        match cell {
            Cell::Floor => Span::raw(GLYPH_FLOOR),
            Cell::Pillar => Span::styled(
                GLYPH_PILLAR,
                Style::new().fg(self.color((150, 150, 150), 246)),
            ),
            Cell::Soft => {
                Span::styled(GLYPH_SOFT, Style::new().fg(self.color((170, 115, 60), 137)))
            }
            Cell::Closed => {
                Span::styled(GLYPH_CLOSED, Style::new().fg(self.color((120, 40, 40), 88)))
            }
            Cell::PowerBomb => Span::styled(GLYPH_POWER_BOMB, power),
            Cell::PowerRange => Span::styled(GLYPH_POWER_RANGE, power),
            Cell::PowerSpeed => Span::styled(GLYPH_POWER_SPEED, power),
            Cell::PowerKick => Span::styled(GLYPH_POWER_KICK, power),
            Cell::PowerRemote => Span::styled(GLYPH_POWER_REMOTE, power),
        }
    }
}
