//! The rankings screen: the top players (games, wins, draws, win rate) from
//! the servers' `Rankings` call, [`PAGE_ROWS`] a page, the viewer's own
//! line highlighted. `borbaman rankings` shows it on its own, and `k` shows
//! it from the lobby while a game waits for players.

use borbaman_proto::pb::Ranking;
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style, Stylize};
use ratatui::text::Line;
use ratatui::widgets::{Block, Paragraph, Row, Table};

use super::View;
use super::draw::shown_name;

/// Players on one page.
pub const PAGE_ROWS: usize = 15;
/// Players fetched: the most the servers hand out in one call.
pub const FETCHED: u32 = 100;

/// Pages `count` players fill (at least one, which may be empty).
pub fn pages(count: usize) -> usize {
    count.div_ceil(PAGE_ROWS).max(1)
}

/// The page after `page` one step of `delta` (−1 back, +1 on), kept in
/// range.
pub fn turn(page: usize, delta: isize, count: usize) -> usize {
    page.saturating_add_signed(delta).min(pages(count) - 1)
}

/// The win rate shown: wins over games, in whole percent ("–" without a
/// game).
pub fn win_rate(r: &Ranking) -> String {
    match r.games {
        0 => "–".to_string(),
        games => format!(
            "{}%",
            (u64::from(r.wins) * 100 + u64::from(games) / 2) / u64::from(games)
        ),
    }
}

/// The page of the first line named `name`, if any: a viewer opens the
/// screen on its own line.
pub fn page_of(rankings: &[Ranking], name: &str) -> Option<usize> {
    rankings
        .iter()
        .position(|r| r.name == name)
        .map(|i| i / PAGE_ROWS)
}

/// Draws page `page` of `view.rankings`; `back` is what the last line says
/// leaves the screen.
pub fn draw_rankings(frame: &mut Frame, view: &View, page: usize, back: &str, area: Rect) {
    let rankings = &view.rankings;
    let page = page.min(pages(rankings.len()) - 1);
    let [table_area, foot] =
        Layout::vertical([Constraint::Min(5), Constraint::Length(3)]).areas(area);
    let own = Style::new().add_modifier(Modifier::REVERSED | Modifier::BOLD);
    let first = page * PAGE_ROWS;
    let rows = rankings
        .iter()
        .enumerate()
        .skip(first)
        .take(PAGE_ROWS)
        .map(|(i, r)| {
            let mine = !view.name.is_empty() && r.name == view.name;
            let row = Row::new(vec![
                format!("{}", i + 1),
                shown_name(&r.name),
                r.games.to_string(),
                r.wins.to_string(),
                r.draws.to_string(),
                win_rate(r),
                if mine {
                    "◀ you".into()
                } else {
                    String::new()
                },
            ]);
            if mine { row.style(own) } else { row }
        });
    let title = format!(
        " Borbaman · rankings · page {}/{} · {} players ",
        page + 1,
        pages(rankings.len()),
        rankings.len()
    );
    let table = Table::new(
        rows,
        [
            Constraint::Length(4),
            Constraint::Length(18),
            Constraint::Length(7),
            Constraint::Length(6),
            Constraint::Length(6),
            Constraint::Length(9),
            Constraint::Length(6),
        ],
    )
    .header(
        Row::new(vec![
            "#", "player", "games", "wins", "draws", "win rate", "",
        ])
        .bold(),
    )
    .block(Block::bordered().title(title));
    frame.render_widget(table, table_area);
    let mut help = vec![format!("←→ page · {back}")];
    if rankings.is_empty() {
        help.insert(
            0,
            "No ranked games yet: only games of four identified players count.".into(),
        );
    }
    let help = Paragraph::new(help.into_iter().map(Line::from).collect::<Vec<_>>())
        .block(Block::bordered());
    frame.render_widget(help, foot);
}

/// The rankings as plain text, one player a line, for a terminal-less
/// `borbaman rankings` (a pipe, a file); `name`'s line is marked.
pub fn text_table(rankings: &[Ranking], name: &str) -> String {
    let mut out = format!(
        "{:>4}  {:<16}  {:>5}  {:>4}  {:>5}  {:>8}\n",
        "#", "player", "games", "wins", "draws", "win rate"
    );
    for (i, r) in rankings.iter().enumerate() {
        let mine = if !name.is_empty() && r.name == name {
            "  <- you"
        } else {
            ""
        };
        out.push_str(&format!(
            "{:>4}  {:<16}  {:>5}  {:>4}  {:>5}  {:>8}{mine}\n",
            i + 1,
            shown_name(&r.name),
            r.games,
            r.wins,
            r.draws,
            win_rate(r)
        ));
    }
    if rankings.is_empty() {
        out.push_str("no ranked games yet: only games of four identified players count\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ranking(name: &str, games: u32, wins: u32) -> Ranking {
        Ranking {
            name: name.into(),
            games,
            wins,
            draws: 0,
        }
    }

    #[test]
    fn pages_turn_within_range_and_open_on_the_viewers_line() {
        assert_eq!(pages(0), 1);
        assert_eq!(pages(15), 1);
        assert_eq!(pages(16), 2);
        assert_eq!(turn(0, -1, 40), 0);
        assert_eq!(turn(0, 1, 40), 1);
        assert_eq!(turn(2, 1, 40), 2, "the last page stays");
        let many: Vec<Ranking> = (0..40).map(|i| ranking(&format!("p{i}"), 9, 1)).collect();
        assert_eq!(page_of(&many, "p3"), Some(0));
        assert_eq!(page_of(&many, "p31"), Some(2));
        assert_eq!(page_of(&many, "nobody"), None);
    }

    #[test]
    fn the_win_rate_rounds_to_whole_percent() {
        assert_eq!(win_rate(&ranking("a", 3, 2)), "67%");
        assert_eq!(win_rate(&ranking("a", 8, 1)), "13%");
        assert_eq!(win_rate(&ranking("a", 0, 0)), "–");
    }

    #[test]
    fn the_text_table_marks_the_viewers_line() {
        let text = text_table(&[ranking("ann", 4, 3), ranking("bob", 4, 1)], "bob");
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].contains("win rate"));
        assert!(lines[1].contains("ann") && lines[1].contains("75%") && !lines[1].contains("you"));
        assert!(lines[2].contains("bob") && lines[2].ends_with("<- you"));
    }
}
