//! The saved session: what a restarted `borbaman play` needs to rejoin.
//!
//! After every join the client writes its session token (the one the
//! servers issued, never the join's nonce), game and seat to
//! `<state dir>/borbaman/session-<name in hex>.json` (the state dir is
//! `dirs::state_dir()`, else `dirs::data_local_dir()`). A client that crashed
//! or lost its network reads it back and joins with the same token: the
//! server puts it back in its running game (`rejoined = true`). The file is
//! private to the user (mode 0600): the token is the player's credential.
//!
//! The player's identity (see [`StateDir::identity`]) lives beside them in
//! `<state dir>/borbaman/identity`, created on first use, mode 0600: it owns
//! the player's name and rankings across games and sessions.
//!
//! The bots `borbaman play` runs beside a local cluster keep theirs in a
//! subdirectory ([`StateDir::local_bots`]), so they come back too.

use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// What is kept between runs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedSession {
    pub name: String,
    /// The session token, hex.
    pub token_hex: String,
    pub game_id: u64,
    pub seat: u32,
    /// The servers the game was played on, comma-separated (`local` for a
    /// local cluster started by `borbaman play`, `""` for its bots).
    pub servers: String,
}

impl SavedSession {
    pub fn token(&self) -> Option<Vec<u8>> {
        hex::decode(&self.token_hex).ok().filter(|t| !t.is_empty())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StateDirError {
    #[error("no state or data directory for this user (is HOME set?)")]
    NoDirectory,
    #[error("{context} {path}: {source}")]
    Io {
        context: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Where saved sessions live.
#[derive(Clone, Debug)]
pub struct StateDir {
    dir: PathBuf,
}

impl StateDir {
    /// The user's `borbaman/` state directory.
    pub fn for_user() -> Result<StateDir, StateDirError> {
        let base = dirs::state_dir()
            .or_else(dirs::data_local_dir)
            .ok_or(StateDirError::NoDirectory)?;
        Ok(StateDir::at(base.join("borbaman")))
    }

    /// A state directory at `dir` (tests use a temporary one).
    pub fn at(dir: impl Into<PathBuf>) -> StateDir {
        StateDir { dir: dir.into() }
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Where the bots of `play`'s local cluster keep their sessions (apart
    /// from the player's, whose name may be a bot's).
    pub fn local_bots(&self) -> StateDir {
        StateDir::at(self.dir.join("local-bots"))
    }

    fn file(&self, name: &str) -> PathBuf {
        // Names are printable but may hold '/' or spaces: hex keeps the file
        // name safe and unique per player name.
        self.dir.join(format!("session-{}.json", hex::encode(name)))
    }

    /// The session saved for `name`, if any (a corrupt file counts as none).
    pub fn load(&self, name: &str) -> Option<SavedSession> {
        let text = fs::read_to_string(self.file(name)).ok()?;
        let saved: SavedSession = serde_json::from_str(&text).ok()?;
        (saved.name == name && saved.token().is_some()).then_some(saved)
    }

    /// Saves `session` atomically (write a temporary file, then rename).
    pub fn save(&self, session: &SavedSession) -> Result<(), StateDirError> {
        let io = |context, path: &Path| {
            let path = path.to_path_buf();
            move |source| StateDirError::Io {
                context,
                path,
                source,
            }
        };
        fs::create_dir_all(&self.dir).map_err(io("creating", &self.dir))?;
        let path = self.file(&session.name);
        let temp = path.with_extension("json.tmp");
        let json = serde_json::to_string_pretty(session).expect("a SavedSession serializes");
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&temp)
            .map_err(io("writing", &temp))?;
        file.write_all(json.as_bytes())
            .map_err(io("writing", &temp))?;
        file.sync_all().map_err(io("writing", &temp))?;
        fs::rename(&temp, &path).map_err(io("renaming", &temp))?;
        Ok(())
    }

    /// The player's identity secret: read from `identity` (hex), or, on
    /// first use, drawn and written there (mode 0600, never replaced: a
    /// racing first run that wrote it first wins, and both read its).
    pub fn identity(&self) -> Result<Vec<u8>, StateDirError> {
        let io = |context, path: &Path| {
            let path = path.to_path_buf();
            move |source| StateDirError::Io {
                context,
                path,
                source,
            }
        };
        let path = self.dir.join("identity");
        let read = |path: &Path| -> Option<Vec<u8>> {
            let text = fs::read_to_string(path).ok()?;
            hex::decode(text.trim())
                .ok()
                .filter(|id| id.len() == crate::session::IDENTITY_BYTES)
        };
        if let Some(identity) = read(&path) {
            return Ok(identity);
        }
        fs::create_dir_all(&self.dir).map_err(io("creating", &self.dir))?;
        let identity = crate::session::new_identity();
        let temp = self
            .dir
            .join(format!("identity.{}.tmp", std::process::id()));
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&temp)
            .map_err(io("writing", &temp))?;
        file.write_all(hex::encode(&identity).as_bytes())
            .and_then(|()| file.sync_all())
            .map_err(io("writing", &temp))?;
        // A hard link fails if the file exists: an identity is never
        // replaced, even by a racing first run.
        let linked = fs::hard_link(&temp, &path);
        let _ = fs::remove_file(&temp);
        match linked {
            Ok(()) => Ok(identity),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                read(&path).ok_or_else(|| StateDirError::Io {
                    context: "reading",
                    path: path.clone(),
                    source: std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        "not a player identity; move it away to draw a new one",
                    ),
                })
            }
            Err(e) => Err(io("writing", &path)(e)),
        }
    }

    /// Forgets the session saved for `name` (its game is over).
    pub fn clear(&self, name: &str) {
        let _ = fs::remove_file(self.file(name));
    }

    /// Every session saved here.
    pub fn load_all(&self) -> Vec<SavedSession> {
        let Ok(entries) = fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut all: Vec<SavedSession> = entries
            .flatten()
            .filter_map(|e| fs::read_to_string(e.path()).ok())
            .filter_map(|text| serde_json::from_str::<SavedSession>(&text).ok())
            .filter(|s| s.token().is_some())
            .collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }

    /// Forgets every session saved here.
    pub fn clear_all(&self) {
        for saved in self.load_all() {
            self.clear(&saved.name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_saved_session_comes_back_per_name_and_is_private() {
        let temp = tempfile::tempdir().unwrap();
        let dir = StateDir::at(temp.path().join("borbaman"));
        assert_eq!(dir.load("ann"), None);
        let saved = SavedSession {
            name: "ann/b c".into(),
            token_hex: hex::encode([7u8; 16]),
            game_id: 42,
            seat: 3,
            servers: "127.0.0.1:1".into(),
        };
        dir.save(&saved).unwrap();
        assert_eq!(dir.load("ann/b c"), Some(saved.clone()));
        assert_eq!(dir.load("ann"), None);
        assert_eq!(dir.load("ann/b c").unwrap().token(), Some(vec![7u8; 16]));
        let mode = fs::metadata(dir.file("ann/b c")).unwrap().permissions();
        assert_eq!(std::os::unix::fs::PermissionsExt::mode(&mode) & 0o077, 0);
        dir.clear("ann/b c");
        assert_eq!(dir.load("ann/b c"), None);
    }

    #[test]
    fn local_bots_keep_their_sessions_apart() {
        let temp = tempfile::tempdir().unwrap();
        let dir = StateDir::at(temp.path());
        let bots = dir.local_bots();
        let session = |name: &str| SavedSession {
            name: name.into(),
            token_hex: hex::encode([1u8; 16]),
            game_id: 7,
            seat: 1,
            servers: String::new(),
        };
        dir.save(&session("bot-1")).unwrap();
        bots.save(&session("bot-2")).unwrap();
        bots.save(&session("bot-1")).unwrap();
        let names: Vec<String> = bots.load_all().into_iter().map(|s| s.name).collect();
        assert_eq!(names, ["bot-1", "bot-2"]);
        bots.clear_all();
        assert!(bots.load_all().is_empty());
        assert_eq!(
            dir.load("bot-1"),
            Some(session("bot-1")),
            "the player's is kept"
        );
    }

    #[test]
    fn a_corrupt_file_counts_as_no_session() {
        let temp = tempfile::tempdir().unwrap();
        let dir = StateDir::at(temp.path());
        fs::write(dir.file("bob"), "{not json").unwrap();
        assert_eq!(dir.load("bob"), None);
    }

    #[test]
    fn the_identity_is_created_once_private_and_kept() {
        use std::os::unix::fs::PermissionsExt;
        let home = tempfile::tempdir().unwrap();
        let dir = StateDir::at(home.path().join("borbaman"));
        let first = dir.identity().unwrap();
        assert_eq!(first.len(), crate::session::IDENTITY_BYTES);
        let mode = fs::metadata(dir.path().join("identity"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(dir.identity().unwrap(), first);
        let other = StateDir::at(home.path().join("other")).identity().unwrap();
        assert_ne!(other, first);
    }
}
