//! Join admission by whole games, against a real server: when the running
//! games are at the server's limit (`--max-games 1` here, the cap the
//! learned limit never passes), a join that would open another game is
//! told `server-full` with a pushback at once, while the running game's
//! players keep being served; a game waiting for players is always filled
//! (four seats, never one refused in the middle); and once the running
//! game ends, the next join opens a game again. Rate limits are off, so
//! every refusal here is the limit's. And a limit learned from refusals
//! (`--seat-refused-percent`): seated players refused by one server's
//! admission teach it a limit on games, which another server, never
//! refused anything itself, holds its joins to.

mod common;

use std::time::{Duration, Instant};

use borbaman::driver;
use borbaman_client::pool::{PoolConfig, PoolError, ServerPool};
use borbaman_client::session::{GameSession, new_token};
use borbaman_cluster::wait;
use borbaman_proto::Reason;
use borbaman_proto::pb::game_client::GameClient;
use borbaman_proto::pb::{Action, JoinRequest, Phase};
use tokio::sync::watch;

/// How soon a join must be answered, seated or refused (the bound
/// for a join storm).
const ANSWERED_WITHIN: Duration = Duration::from_secs(2);
/// How long a seat may take to free up once the running game ended.
const SEATED_AGAIN_WITHIN: Duration = Duration::from_secs(20);

/// A join's refusal for load, with its pushback; panics on anything else.
fn server_full(
    result: Result<(GameSession, borbaman_client::pool::CallInfo), PoolError>,
) -> Duration {
    match result {
        Ok((session, _)) => panic!(
            "a join past the limit was seated in game {} seat {}",
            session.game_id(),
            session.seat()
        ),
        Err(e) => match driver::refusal(&e) {
            Some(r) if r.reason == Reason::ServerFull => r
                .pushback
                .expect("a server-full refusal says when to try again"),
            _ => panic!("a join past the limit failed instead of being told server-full: {e}"),
        },
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_server_refuses_new_games_quickly_while_running_games_play_and_seats_games_whole() {
    let cluster = common::cluster_with(
        1,
        &[
            "--max-games",
            "1",
            "--max-joins-per-ip-per-min",
            "0",
            "--max-acts-per-s",
            "0",
        ],
    );
    let servers = cluster.addresses();
    let pool = ServerPool::connect(&servers, PoolConfig::default())
        .await
        .unwrap();

    // The first game fills whole although it is the limit's one game: the
    // second to fourth joins fill the game waiting, they open none.
    let mut players = common::seat_four(&pool, "first").await;
    let game = players[0].game_id();

    // A fifth player would open a second game: told server-full, at once,
    // with a pushback; and again while the first verdict stands.
    for n in 0..3 {
        let started = Instant::now();
        let pushback =
            server_full(GameSession::join(&pool, &format!("late{n}"), new_token()).await);
        let took = started.elapsed();
        assert!(took <= ANSWERED_WITHIN, "a refused join took {took:?}");
        assert!(
            (Duration::from_millis(100)..=Duration::from_secs(10)).contains(&pushback),
            "pushback {pushback:?}"
        );
        // The running game is served meanwhile, every player.
        for player in &mut players {
            let (reply, _) = player
                .act(Action::Idle)
                .await
                .unwrap_or_else(|e| panic!("the running game's player was not served: {e}"));
            assert_eq!(
                reply.state.expect("a state").phase(),
                Phase::Playing,
                "the running game plays on"
            );
        }
    }

    // A seated player asking to join again is put back in its game, not
    // refused: the limit is on new games only.
    let (back, _) = GameSession::join(&pool, "first1", players[0].token().to_vec())
        .await
        .expect("a rejoin while full");
    assert_eq!(back.game_id(), game, "rejoined its own game");

    // The game ends (everyone leaves); the next joins open a game again,
    // and fill it whole.
    for player in &mut players {
        player.leave().await.expect("leave");
    }
    let deadline = Instant::now() + SEATED_AGAIN_WITHIN;
    let first = loop {
        match GameSession::join(&pool, "second1", new_token()).await {
            Ok((session, _)) => break session,
            Err(e) => {
                let refusal = driver::refusal(&e)
                    .unwrap_or_else(|| panic!("a join after the game ended failed: {e}"));
                assert!(
                    Instant::now() < deadline,
                    "no join was seated within {SEATED_AGAIN_WITHIN:?} of the running game's end"
                );
                tokio::time::sleep(refusal.wait()).await;
            }
        }
    };
    assert_ne!(first.game_id(), game, "a new game");
    for n in 2..=4 {
        let (session, _) = GameSession::join(&pool, &format!("second{n}"), new_token())
            .await
            .unwrap_or_else(|e| panic!("join {n} of a waiting game was refused: {e}"));
        assert_eq!(
            session.game_id(),
            first.game_id(),
            "the waiting game is filled"
        );
    }
    server_full(GameSession::join(&pool, "late-again", new_token()).await);
}

/// How long the seated players may act before a limit must be learned and
/// shared (at least four half-second windows of refusals, then a
/// heartbeat).
const LEARNED_WITHIN: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn refusals_teach_a_limit_that_the_other_servers_hold_new_games_to() {
    // One call at a time in the database and 1 ms in line: twenty players
    // acting at once are refused by admission, window after window.
    let mut cluster = common::cluster_with(
        2,
        &[
            "--seat-refused-percent",
            "1",
            "--max-db-concurrency",
            "1",
            "--admission-queue-ms",
            "1",
            "--max-joins-per-ip-per-min",
            "0",
            "--max-acts-per-s",
            "0",
        ],
    );
    let servers = cluster.addresses();
    // The second server is stopped (it leaves the registry) while the
    // first learns, so every seated player's call is the first's.
    common::blocking(|| cluster.terminate(1)).unwrap();
    let first = ServerPool::connect(&servers[..1], PoolConfig::default())
        .await
        .unwrap();
    let db = common::database(&cluster).await;

    // Five games, one more than the learned limit's floor, through the
    // first server.
    let mut players = Vec::new();
    for g in 0..5 {
        players.extend(common::seat_four(&first, &format!("g{g}p")).await);
    }

    // Every player acts at once, over and over, until the first server's
    // heartbeat carries a limit.
    let (stop, stopped) = watch::channel(false);
    let actors: Vec<_> = players
        .into_iter()
        .map(|mut player| {
            let stopped = stopped.clone();
            tokio::spawn(async move {
                while !*stopped.borrow() {
                    // Refused or answered, either is what the server counts.
                    let _ = player.act(Action::Idle).await;
                }
                player
            })
        })
        .collect();
    let limit: i32 = wait::until(
        "a limit learned from refused acts",
        LEARNED_WITHIN,
        || async {
            sqlx::query_scalar("SELECT min(game_limit) FROM servers WHERE game_limit IS NOT NULL")
                .fetch_one(&db)
                .await
                .expect("read the servers' limits")
        },
    )
    .await;
    stop.send(true).unwrap();
    let mut players = Vec::new();
    for actor in actors {
        players.push(actor.await.expect("a player's task"));
    }
    assert_eq!(limit, 4, "0.9 of the five games running, at least four");

    // The second server, started again, learned nothing, but holds its
    // joins to the first's limit: a join sent to it that would open a
    // sixth game is told server-full, quickly.
    common::blocking(|| cluster.restart(1)).unwrap();
    let mut second = GameClient::connect(format!("http://{}", servers[1]))
        .await
        .expect("connecting to the second server");
    let started = Instant::now();
    let refused = second
        .join(JoinRequest {
            name: "late".into(),
            token: new_token(),
            map: String::new(),
            identity: Vec::new(),
        })
        .await
        .map(|reply| reply.into_inner().game_id)
        .expect_err("a join past the first server's limit was seated by the second");
    let took = started.elapsed();
    assert_eq!(Reason::of(&refused), Some(Reason::ServerFull), "{refused}");
    assert!(took <= ANSWERED_WITHIN, "a refused join took {took:?}");
    // Every row of the second address (its stopped process's too, if it
    // had no time to leave the registry) says it learned nothing.
    let learned: Vec<(String, Option<i32>)> =
        sqlx::query_as("SELECT address, game_limit FROM servers")
            .fetch_all(&db)
            .await
            .unwrap();
    for (address, limit) in &learned {
        let expected = if *address == servers[0] {
            Some(4)
        } else {
            None
        };
        assert_eq!(*limit, expected, "{address} learned {limit:?}: {learned:?}");
    }

    // The running games are still served, every player, one at a time
    // (the one place in the database's line may still be taken by a copy
    // of an earlier call: a refusal is waited out as a client does).
    for player in &mut players {
        let deadline = Instant::now() + ANSWERED_WITHIN;
        let reply = loop {
            match player.act(Action::Idle).await {
                Ok((reply, _)) => break reply,
                Err(e) => match driver::refusal(&e) {
                    Some(refusal) if Instant::now() < deadline => {
                        tokio::time::sleep(refusal.wait()).await
                    }
                    _ => panic!("a running game's player was not served: {e}"),
                },
            }
        };
        assert_eq!(reply.state.expect("a state").phase(), Phase::Playing);
    }
}
