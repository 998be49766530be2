//! The invariants checked after every bench and chaos run, from the
//! database's action log and games and from the clients' own logs:
//!
//! 1. every acknowledged action was applied exactly once: each `(token,
//!    seq)` a server acknowledged is in the action log (none lost), and the
//!    log holds each at most once and nothing a client never sent (none
//!    duplicated);
//! 2. every game's version only grew (the log's versions rise with each
//!    session's seq, no two commits of a game claim one version, no game is
//!    behind an action it acknowledged);
//! 3. no client ever saw its game's state go backwards;
//! 4. every game finished with a winner or a draw, or is still consistent
//!    (its stored state decodes and agrees with its row);
//! 5. every input a client sent was applied: each sequence number its
//!    sessions gave an input is in the action log (by (1), once; by (2), in
//!    the order sent), acknowledged or not (a reply the end of the run cut
//!    short), but for sessions the servers stopped taking calls from (a
//!    seat given away), whose queued inputs cannot be.
//!
//! With games partitioned over several database clusters, every read of
//! game rows (the action log, the games, their versions and replays) is
//! made on each cluster and the answers put together: each game is on
//! exactly one, so the union is the one database's answer.

use std::collections::{HashMap, HashSet};

use borbaman_server::store::audit::{self, AppliedAction, GameVerdict, VersionAudit};
use borbaman_server::store::replay::{self, ReplayAudit};
use serde::Serialize;
use sqlx::PgPool;

use super::workload::ClientLog;

/// One invariant and whether it held.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Check {
    pub name: &'static str,
    pub ok: bool,
    pub detail: String,
}

/// How the acknowledged actions compare with the action log.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ActionAudit {
    pub acknowledged: u64,
    pub applied: u64,
    /// Acknowledged but not in the log.
    pub lost: u64,
    /// Log rows beyond the first for one `(token, seq)`, plus rows with a
    /// sequence number the client never sent.
    pub duplicated: u64,
    /// In the log but never acknowledged: calls that failed (or were cut by
    /// the end of the run) after the server committed them. Allowed.
    pub unacknowledged_applied: u64,
}

/// Compares what clients saw acknowledged with what the log says was applied.
pub fn compare_actions(logs: &[ClientLog], applied: &[AppliedAction]) -> ActionAudit {
    let acknowledged: HashSet<(&[u8], u64)> = logs
        .iter()
        .flat_map(|l| &l.acknowledged)
        .map(|a| (a.token.as_slice(), a.seq))
        .collect();
    let last_sent: HashMap<&[u8], u64> = logs
        .iter()
        .flat_map(|l| &l.sessions)
        .map(|s| (s.token.as_slice(), s.last_seq_sent))
        .collect();
    let mut in_log: HashMap<(&[u8], u64), u64> = HashMap::new();
    for row in applied {
        *in_log
            .entry((row.token.as_slice(), row.seq as u64))
            .or_default() += 1;
    }
    let mut audit = ActionAudit {
        acknowledged: acknowledged.len() as u64,
        applied: applied.len() as u64,
        ..ActionAudit::default()
    };
    audit.lost = acknowledged
        .iter()
        .filter(|k| !in_log.contains_key(*k))
        .count() as u64;
    for (&(token, seq), &count) in &in_log {
        audit.duplicated += count - 1;
        let never_sent = last_sent
            .get(token)
            .is_none_or(|&last| seq > last || seq == 0);
        if never_sent {
            audit.duplicated += 1;
        } else if !acknowledged.contains(&(token, seq)) {
            audit.unacknowledged_applied += 1;
        }
    }
    audit
}

/// How the inputs the clients sent compare with the action log.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct InputAudit {
    /// Sent by sessions that kept their seat, of them in the action log,
    /// and of them acknowledged to the client before the run ended.
    pub sent: u64,
    pub applied: u64,
    pub acknowledged: u64,
    /// Sessions the servers stopped taking calls from, and the inputs they
    /// sent that are not in the log.
    pub sessions_lost: u64,
    pub unapplied_in_lost_sessions: u64,
}

impl InputAudit {
    /// Every input a session sent has a sequence number between its first
    /// and newest input's; each must be in the action log (`applied`).
    pub fn of(logs: &[ClientLog], applied: &[AppliedAction]) -> InputAudit {
        let mut logged: HashMap<&[u8], Vec<u64>> = HashMap::new();
        for row in applied {
            logged
                .entry(row.token.as_slice())
                .or_default()
                .push(row.seq as u64);
        }
        let mut audit = InputAudit::default();
        for session in logs.iter().flat_map(|l| &l.sessions) {
            let in_log = session.input_seqs.map_or(0, |(first, newest)| {
                logged.get(session.token.as_slice()).map_or(0, |seqs| {
                    seqs.iter().filter(|&&s| s >= first && s <= newest).count() as u64
                })
            });
            if session.lost {
                audit.sessions_lost += 1;
                audit.unapplied_in_lost_sessions += session.inputs_sent.saturating_sub(in_log);
            } else {
                audit.sent += session.inputs_sent;
                audit.applied += in_log;
                audit.acknowledged += session.inputs_applied;
            }
        }
        audit
    }

    fn check(&self) -> Check {
        Check {
            name: "every input sent was applied",
            ok: self.applied == self.sent,
            detail: format!(
                "{} inputs sent, {} in the action log ({} never), {} of them acknowledged \
                 before the run ended; {} sessions lost their seat with {} inputs unapplied",
                self.sent,
                self.applied,
                self.sent.saturating_sub(self.applied),
                self.acknowledged,
                self.sessions_lost,
                self.unapplied_in_lost_sessions
            ),
        }
    }
}

/// All invariants of a run.
#[derive(Clone, Debug, Default, Serialize)]
pub struct InvariantReport {
    pub actions: ActionAudit,
    pub inputs: InputAudit,
    pub version_out_of_order: i64,
    pub version_shared: i64,
    pub version_ahead_of_game: i64,
    pub state_regressions: u64,
    pub games: u64,
    pub games_finished: u64,
    pub games_consistent: u64,
    pub games_inconsistent: Vec<String>,
    /// Games the clients played that retention deleted before the check,
    /// left out of every other figure.
    pub games_deleted_by_retention: u64,
    /// Finished games re-simulated from their logs and compared with their
    /// stored state.
    pub replays_checked: u64,
    /// Finished games whose replay differs, with why.
    pub replays_differing: Vec<String>,
    /// Finished games created before joins were logged (not replayable).
    pub replays_not_logged: u64,
    /// CPU time the re-simulations took, ms.
    pub replay_verify_cpu_ms: f64,
    pub checks: Vec<Check>,
}

impl InvariantReport {
    /// The names of the invariants that failed.
    pub fn failed(&self) -> Vec<&'static str> {
        self.checks
            .iter()
            .filter(|c| !c.ok)
            .map(|c| c.name)
            .collect()
    }
}

/// Checks every invariant against the database at `db` (one cluster).
pub async fn check(db: &PgPool, logs: &[ClientLog]) -> Result<InvariantReport, sqlx::Error> {
    check_clusters(std::slice::from_ref(db), logs).await
}

/// Checks every invariant against the database clusters at `dbs` (home
/// first), each game's rows read where they are.
pub async fn check_clusters(
    dbs: &[PgPool],
    logs: &[ClientLog],
) -> Result<InvariantReport, sqlx::Error> {
    let tokens: Vec<Vec<u8>> = logs
        .iter()
        .flat_map(|l| &l.sessions)
        .map(|s| s.token.clone())
        .collect();
    let mut game_ids: Vec<i64> = logs
        .iter()
        .flat_map(|l| &l.sessions)
        .map(|s| s.game_id as i64)
        .collect();
    game_ids.sort_unstable();
    game_ids.dedup();

    let mut applied = Vec::new();
    for db in dbs {
        applied.extend(audit::applied_actions(db, &tokens).await?);
    }
    // Read after the log: a game still here had its whole log when the log
    // was read (retention deletes a game's row before its log). A game
    // that is gone was deleted by retention (`--retention`), with its log:
    // its actions are not lost, and it is not missing.
    let mut rows = Vec::new();
    for db in dbs {
        rows.extend(audit::games(db, &game_ids).await?);
    }
    let present: HashSet<i64> = rows.iter().map(|r| r.id).collect();
    let deleted = game_ids.len() - present.len();
    let kept: Vec<ClientLog> = logs
        .iter()
        .map(|l| ClientLog {
            sessions: l
                .sessions
                .iter()
                .filter(|s| present.contains(&(s.game_id as i64)))
                .cloned()
                .collect(),
            acknowledged: l
                .acknowledged
                .iter()
                .filter(|a| present.contains(&(a.game_id as i64)))
                .cloned()
                .collect(),
            ..l.clone()
        })
        .collect();
    let applied: Vec<_> = applied
        .into_iter()
        .filter(|a| present.contains(&a.game_id))
        .collect();
    let game_ids: Vec<i64> = game_ids
        .into_iter()
        .filter(|id| present.contains(id))
        .collect();
    let actions = compare_actions(&kept, &applied);
    let mut versions = VersionAudit::default();
    let mut logged = Vec::new();
    for db in dbs {
        let on = audit::version_audit(db, &game_ids).await?;
        versions.out_of_order += on.out_of_order;
        versions.shared += on.shared;
        versions.ahead_of_game += on.ahead_of_game;
        logged.extend(replay::finished_games(db, Some(&game_ids)).await?);
    }
    let cpu_before = super::cpu_time_ms();
    let replays = ReplayAudit::of(&logged);
    let replay_cpu_ms = super::cpu_time_ms() - cpu_before;
    let state_regressions = logs
        .iter()
        .flat_map(|l| &l.sessions)
        .map(|s| s.regressions)
        .sum();
    let mut report = assemble(actions, versions, &rows, game_ids.len(), state_regressions);
    report.inputs = InputAudit::of(&kept, &applied);
    report.checks.push(report.inputs.check());
    report.games_deleted_by_retention = deleted as u64;
    report.add_replays(&replays, replay_cpu_ms);
    Ok(report)
}

impl InvariantReport {
    /// Records the replay verification of the run's finished games as one
    /// more check.
    pub fn add_replays(&mut self, replays: &ReplayAudit, cpu_ms: f64) {
        self.replays_checked = replays.checked as u64;
        self.replays_not_logged = replays.not_logged as u64;
        self.replay_verify_cpu_ms = cpu_ms;
        self.replays_differing = replays
            .differing
            .iter()
            .map(|(id, why)| format!("game {id}: {why}"))
            .collect();
        self.checks.push(Check {
            name: "every finished game replays to its stored state",
            ok: replays.differing.is_empty() && replays.not_logged == 0,
            detail: if replays.differing.is_empty() {
                format!(
                    "{} finished games re-simulated from their logs in {cpu_ms:.1} ms of CPU, \
                     all equal byte for byte; {} not logged",
                    replays.checked, replays.not_logged
                )
            } else {
                self.replays_differing.join("; ")
            },
        });
    }
}

fn assemble(
    actions: ActionAudit,
    versions: VersionAudit,
    rows: &[audit::GameRow],
    games_expected: usize,
    state_regressions: u64,
) -> InvariantReport {
    let mut report = InvariantReport {
        version_out_of_order: versions.out_of_order,
        version_shared: versions.shared,
        version_ahead_of_game: versions.ahead_of_game,
        state_regressions,
        games: rows.len() as u64,
        ..InvariantReport::default()
    };
    for row in rows {
        match audit::check_game(row) {
            GameVerdict::Finished => report.games_finished += 1,
            GameVerdict::Consistent => report.games_consistent += 1,
            GameVerdict::Inconsistent(why) => report.games_inconsistent.push(why),
        }
    }
    if rows.len() < games_expected {
        report.games_inconsistent.push(format!(
            "{} of the {games_expected} games clients joined are missing",
            games_expected - rows.len()
        ));
    }
    report.checks = vec![
        Check {
            name: "acknowledged actions applied exactly once",
            ok: actions.lost == 0 && actions.duplicated == 0,
            detail: format!(
                "{} acknowledged, {} applied: {} lost, {} duplicated, {} applied without acknowledgement",
                actions.acknowledged,
                actions.applied,
                actions.lost,
                actions.duplicated,
                actions.unacknowledged_applied
            ),
        },
        Check {
            name: "game versions only grew",
            ok: versions.is_clean(),
            detail: format!(
                "{} out of order, {} claimed by two commits, {} ahead of their game",
                versions.out_of_order, versions.shared, versions.ahead_of_game
            ),
        },
        Check {
            name: "no client saw its game go backwards",
            ok: state_regressions == 0,
            detail: format!("{state_regressions} replies older than a state already seen"),
        },
        Check {
            name: "every game finished or is consistent",
            ok: report.games_inconsistent.is_empty(),
            detail: if report.games_inconsistent.is_empty() {
                format!(
                    "{} games: {} finished with a winner or draw, {} consistent",
                    report.games, report.games_finished, report.games_consistent
                )
            } else {
                report.games_inconsistent.join("; ")
            },
        },
    ];
    report.actions = actions;
    report
}

#[cfg(test)]
mod tests {
    use super::super::workload::{Ack, SessionLog};
    use super::*;

    fn token(n: u8) -> Vec<u8> {
        vec![n; 16]
    }

    fn row(t: u8, seq: i64, version: i64) -> AppliedAction {
        AppliedAction {
            token: token(t),
            seq,
            game_id: 1,
            seat: 0,
            action: 6,
            version,
        }
    }

    fn client(t: u8, acked: &[u64], last_sent: u64) -> ClientLog {
        ClientLog {
            client: u32::from(t),
            sessions: vec![SessionLog {
                token: token(t),
                game_id: 1,
                seat: 0,
                last_seq_sent: last_sent,
                regressions: 0,
                finished: false,
                ..SessionLog::default()
            }],
            acknowledged: acked
                .iter()
                .map(|&seq| Ack {
                    token: token(t),
                    seq,
                    game_id: 1,
                })
                .collect(),
            ..ClientLog::default()
        }
    }

    #[test]
    fn a_clean_run_has_nothing_lost_or_duplicated() {
        // Seq 3 failed on the client after the server committed it.
        let logs = [client(1, &[1, 2, 4], 4), client(2, &[1], 1)];
        let applied = [
            row(1, 1, 2),
            row(1, 2, 3),
            row(1, 3, 5),
            row(1, 4, 6),
            row(2, 1, 4),
        ];
        let audit = compare_actions(&logs, &applied);
        assert_eq!(
            audit,
            ActionAudit {
                acknowledged: 4,
                applied: 5,
                lost: 0,
                duplicated: 0,
                unacknowledged_applied: 1,
            }
        );
    }

    #[test]
    fn lost_and_duplicated_actions_are_counted() {
        let logs = [client(1, &[1, 2, 3], 3)];
        // Seq 2 missing (lost), seq 3 twice, seq 9 never sent.
        let applied = [row(1, 1, 2), row(1, 3, 3), row(1, 3, 4), row(1, 9, 5)];
        let audit = compare_actions(&logs, &applied);
        assert_eq!(audit.lost, 1);
        assert_eq!(audit.duplicated, 2);
        // Another client's rows are not this client's acknowledgements.
        let applied = [row(7, 1, 2)];
        assert_eq!(compare_actions(&logs, &applied).lost, 3);
        assert_eq!(compare_actions(&logs, &applied).duplicated, 1);
    }

    /// Inputs of a session that kept its seat must all be applied; a
    /// session whose seat was given away is counted apart.
    #[test]
    fn unapplied_inputs_are_named() {
        let mut logs = [client(1, &[1, 2], 6), client(2, &[1], 3)];
        // Client 1 sent inputs 1-5 (then a leave, 6), acknowledged 1-2;
        // the log has all five. Client 2 sent 1-3, only 1 is logged.
        logs[0].sessions[0].inputs_sent = 5;
        logs[0].sessions[0].inputs_applied = 2;
        logs[0].sessions[0].input_seqs = Some((1, 5));
        logs[1].sessions[0].inputs_sent = 3;
        logs[1].sessions[0].inputs_applied = 1;
        logs[1].sessions[0].input_seqs = Some((1, 3));
        logs[1].sessions[0].lost = true;
        let applied: Vec<_> = (1..=6)
            .map(|seq| row(1, seq, seq + 1))
            .chain([row(2, 1, 9)])
            .collect();
        let audit = InputAudit::of(&logs, &applied);
        assert_eq!((audit.sent, audit.applied, audit.acknowledged), (5, 5, 2));
        assert_eq!(audit.unapplied_in_lost_sessions, 2);
        assert!(audit.check().ok, "{}", audit.check().detail);
        logs[1].sessions[0].lost = false;
        let check = InputAudit::of(&logs, &applied).check();
        assert!(!check.ok);
        assert!(
            check
                .detail
                .contains("8 inputs sent, 6 in the action log (2 never)"),
            "{}",
            check.detail
        );
    }

    #[test]
    fn failed_invariants_are_named() {
        let lost = ActionAudit {
            lost: 1,
            ..ActionAudit::default()
        };
        let report = assemble(lost, VersionAudit::default(), &[], 0, 2);
        assert_eq!(
            report.failed(),
            [
                "acknowledged actions applied exactly once",
                "no client saw its game go backwards"
            ]
        );
        let missing = assemble(ActionAudit::default(), VersionAudit::default(), &[], 1, 0);
        assert_eq!(missing.failed(), ["every game finished or is consistent"]);
        let clean = assemble(ActionAudit::default(), VersionAudit::default(), &[], 0, 0);
        assert!(clean.failed().is_empty());
    }
}
