//! State: one SQLite database (WAL, foreign keys, transactions) holding apps, their raw
//! learning runs, their plans and their launch history. Plans and runs are stored as codec
//! blobs; a blob that fails to decode reads as an error for that app, never a crash.

use std::path::{Path, PathBuf};

use rusqlite::{params, Connection, OptionalExtension};
use serde::{Deserialize, Serialize};

use crate::app::AppKey;
use crate::codec::{self, CodecError};
use crate::plan::{Look, Plan};
use crate::sequence::RawRun;

pub const DEFAULT_DB: &str = "/var/lib/warmstart/warmstart.db";
const RUN_MAGIC: [u8; 4] = *b"WSRR";
const RUN_VERSION: u16 = 3;
const SCHEMA_VERSION: i64 = 7;

/// The history's names for how a launch ran (`LaunchRecord::mode`). Only `RUN` launches are
/// compared by `auto` and Paralfetch's dynamic scheduling: the others are slowed by tracing.
pub mod mode {
    /// Launched by `run` (prefetched, or plainly on `auto`'s word), or timed plainly by `record`.
    pub const RUN: &str = "run";
    /// `run --traced`, `explain`'s prefetched launch.
    pub const TRACED: &str = "traced";
    /// A learning launch of `record`.
    pub const RECORD: &str = "record";
    /// A launch the daemon served.
    pub const DAEMON: &str = "daemon";
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database {path}: {source}")]
    Sql {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    #[error("the filesystem holding {path} is full ({avail_kib} KiB free): free some space; warmstart does not open its database then (SQLite could crash on its shared-memory file)")]
    Full { path: PathBuf, avail_kib: u64 },
    #[error("cannot create {path}: {source}")]
    Dir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("no app matches `{0}` (see `warmstart plan list`)")]
    NoSuchApp(String),
    #[error("`{query}` matches several apps; use the full key:\n  {}", candidates.join("\n  "))]
    Ambiguous {
        query: String,
        candidates: Vec<String>,
    },
    #[error("the plan of `{app}` is corrupt ({source}); relearn it with `warmstart record`, or remove it with `warmstart plan rm`")]
    CorruptPlan {
        app: String,
        #[source]
        source: CodecError,
    },
    #[error(
        "database {path} was written by a newer warmstart (schema {found}, this one knows {known})"
    )]
    Schema {
        path: PathBuf,
        found: i64,
        known: i64,
    },
    #[error("encoding: {0}")]
    Codec(#[from] CodecError),
}

/// A stored learning run: (id, recorded at, the run or why it does not decode).
pub type StoredRun = (i64, i64, Result<RawRun, CodecError>);

/// A stored learning run's blob.
pub fn decode_raw_run(blob: &[u8]) -> Result<RawRun, CodecError> {
    codec::decode(RUN_MAGIC, RUN_VERSION, blob)
}

/// A burst plan to store (ClusterFetch), keyed by its trigger file.
pub struct NewBurst {
    pub dev: crate::sys::Dev,
    pub ino: u64,
    pub path: PathBuf,
    pub created_at: i64,
    pub plan: Plan,
    pub alternatives: Vec<PathBuf>,
    /// The program (`comm`) that opened the trigger when the burst was mined.
    pub opener: Option<String>,
}

/// A stored burst, as `bursts list` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BurstRow {
    pub id: i64,
    pub dev: String,
    pub ino: u64,
    pub path: PathBuf,
    pub created_at: i64,
    pub bytes: u64,
    pub alternatives: Vec<PathBuf>,
    /// The program whose opening of the trigger prefetches the burst; None (mined before
    /// openers were kept, schema 5): any program's.
    pub opener: Option<String>,
    pub hits: u64,
    pub failures: u64,
    pub last_used: Option<i64>,
    pub last_check: Option<String>,
    /// Prefetched when its trigger opens (a failed check deactivates it until re-mined).
    pub active: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AppRow {
    pub id: i64,
    pub key: String,
    pub exe: String,
    pub strategy: Option<String>,
    pub enabled: bool,
}

/// Launches kept per app: `auto` reads the last 200, and a daemon launching an app many times
/// a day for years must not grow the database without bound (each is ~220 bytes).
pub const LAUNCHES_KEPT: usize = 1000;

/// One line of `plan list`.
#[derive(Clone, Debug, Serialize)]
pub struct AppListRow {
    pub app: String,
    pub has_plan: bool,
    pub entries: Option<i64>,
    pub bytes: Option<i64>,
    pub runs: i64,
    pub launches: i64,
    pub planned_at: Option<i64>,
}

/// One launch in the history.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LaunchRecord {
    pub at_unix: i64,
    /// How the launch ran: one of `mode`'s names.
    pub mode: String,
    pub wall_ms: f64,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub major_faults: u64,
    pub prefetched_bytes: u64,
    pub stale_files: u32,
    pub prefetch_ms: f64,
    /// The strategy whose plan was prefetched.
    #[serde(default)]
    pub strategy: Option<String>,
    /// Voluntary context switches of the application's process tree while it was prefetched
    /// (how often it had to wait; Paralfetch's dynamic-scheduling signal).
    #[serde(default)]
    pub waits: Option<u64>,
    /// Of the prefetched data, what was already in the page cache when it was requested.
    #[serde(default)]
    pub resident_bytes: Option<u64>,
    /// `auto` chose the strategy (or the plain launch), not the user or the app's default.
    #[serde(default)]
    pub auto: bool,
}

/// `auto`'s choice for an app's next launch, as kept (`Store::auto_choice`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StoredChoice {
    /// The strategy's name; None for a plain launch.
    pub strategy: Option<String>,
    /// Why, as `auto` said it.
    pub why: String,
}

/// Per-app settings kept between launches.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AppSettings {
    /// Paralfetch thresholds, raised by dynamic scheduling.
    #[serde(default)]
    pub paralfetch: Option<crate::schedule::ParalfetchSettings>,
    /// How many times dynamic scheduling raised them.
    #[serde(default)]
    pub paralfetch_raises: u32,
    /// The daemon's view of the app (phase and counters).
    #[serde(default)]
    pub lifecycle: Option<crate::daemon::Lifecycle>,
    /// How the last learning saw the launch, when less than everything: the kernel's missing
    /// access events (`plan show` says what that costs).
    #[serde(default)]
    pub learned_without: Vec<String>,
    /// The plans ranked by emulation after the last learning (`auto` times only the best two).
    #[serde(default)]
    pub emulated: Option<crate::emulate::Ranking>,
}

pub struct Store {
    conn: Connection,
    path: PathBuf,
}

fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

/// How long a statement on a launch's path waits for a lock held elsewhere. Reading the
/// plan takes ~1 ms; a writer (the daemon, a `record`) holds the lock for milliseconds.
pub const LAUNCH_BUSY: std::time::Duration = std::time::Duration::from_millis(25);

/// Plans and launch histories list every path an app reads: the database and its WAL files
/// are read and written by their owner only (SQLite creates them with the umask's 0644), and
/// so is the default state directory (an install from before this was created 0755). Another
/// directory given with `--db` is the user's and is left as it is. Best effort: a database
/// someone else owns (read by a non-root `run`) is not ours to change.
fn make_private(path: &Path) {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let uid = nix::unistd::geteuid().as_raw();
    let tighten = |p: &Path, mode: u32| {
        if let Ok(m) = std::fs::symlink_metadata(p) {
            if m.uid() == uid && !m.file_type().is_symlink() && m.mode() & 0o077 != 0 {
                let _ = std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode));
            }
        }
    };
    let mut name = path.as_os_str().to_os_string();
    tighten(path, 0o600);
    for suffix in ["-wal", "-shm"] {
        name.push(suffix);
        tighten(Path::new(&name), 0o600);
        name = path.as_os_str().to_os_string();
    }
    if path == Path::new(DEFAULT_DB) {
        if let Some(dir) = path.parent() {
            tighten(dir, 0o700);
        }
    }
}

/// Least free space beside the database for warmstart to open it. SQLite maps its `-shm`
/// file and writes into it even to read: on a full filesystem whose blocks are smaller than a
/// page, a write to a hole of that file is a SIGBUS (every command on a full 16 MiB ext4
/// image died of it, and each `run`'s prefetcher left the inode readahead setting changed;
/// issue #30). One statvfs, a few µs, also on a launch's path.
const MIN_FREE: u64 = 1 << 20;

/// The directory holding a database file: `.` for a bare name (`--db x.db`), whose
/// `parent()` is the empty path, which no system call takes.
pub fn dir_of(db: &Path) -> &Path {
    db.parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// `Full` when the filesystem holding `path` (writable) has less than `MIN_FREE` left for
/// this process.
fn check_room(path: &Path) -> Result<(), StoreError> {
    let dir = dir_of(path);
    let Ok(st) = nix::sys::statvfs::statvfs(dir) else {
        return Ok(()); // not there yet: created on open, or the open reports it
    };
    if st.flags().contains(nix::sys::statvfs::FsFlags::ST_RDONLY) {
        return Ok(());
    }
    // Root may use the blocks reserved for it.
    let blocks = if nix::unistd::geteuid().is_root() {
        st.blocks_free()
    } else {
        st.blocks_available()
    };
    let avail = blocks as u64 * st.fragment_size();
    if avail < MIN_FREE {
        return Err(StoreError::Full {
            path: path.to_path_buf(),
            avail_kib: avail >> 10,
        });
    }
    Ok(())
}

/// An SQLite error of the database at `path`, for `map_err`.
fn sql_error(path: &Path) -> impl Fn(rusqlite::Error) -> StoreError + Copy + '_ {
    move |source| StoreError::Sql {
        path: path.to_path_buf(),
        source,
    }
}

impl Store {
    /// Open (creating if needed) the database at `path`, waiting up to 10 s for a lock.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        Self::open_with(path, std::time::Duration::from_secs(10), 100, true)
    }

    /// Open for reading only: nothing is created, converted or migrated, so a user who may
    /// only read the database (or a read-only filesystem) can list and show. A database of an
    /// older schema is opened for writing instead (it needs migrating first).
    pub fn open_read_only(path: &Path) -> Result<Store, StoreError> {
        use rusqlite::OpenFlags;
        let sql = sql_error(path);
        check_room(path)?;
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(sql)?;
        crate::sys::note_locked_database(path);
        conn.busy_timeout(std::time::Duration::from_secs(10))
            .map_err(sql)?;
        let v: i64 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .map_err(sql)?;
        if v > SCHEMA_VERSION {
            return Err(StoreError::Schema {
                path: path.to_path_buf(),
                found: v,
                known: SCHEMA_VERSION,
            });
        }
        if v < SCHEMA_VERSION {
            drop(conn);
            return Self::open(path);
        }
        Ok(Store {
            conn,
            path: path.to_path_buf(),
        })
    }

    /// Open on a launch's path: a lock held elsewhere (a writer, an exclusive connection)
    /// makes this fail within ~`LAUNCH_BUSY` per statement instead of delaying the launch,
    /// which then runs without prefetching.
    pub fn open_for_launch(path: &Path) -> Result<Store, StoreError> {
        Self::open_with(path, LAUNCH_BUSY, 0, false)
    }

    fn open_with(
        path: &Path,
        busy: std::time::Duration,
        wal_tries: u32,
        fix_modes: bool,
    ) -> Result<Store, StoreError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            if !dir.exists() {
                std::fs::create_dir_all(dir).map_err(|source| StoreError::Dir {
                    path: dir.to_path_buf(),
                    source,
                })?;
                // State is private: plans list what an app reads.
                use std::os::unix::fs::PermissionsExt;
                let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
            }
        }
        let sql = sql_error(path);
        check_room(path)?;
        let conn = Connection::open(path).map_err(sql)?;
        crate::sys::note_locked_database(path);
        // Not on a launch's path (three stats more before the app starts): any other command,
        // the daemon's start among them, fixes an old install's modes.
        if fix_modes {
            make_private(path);
        }
        conn.busy_timeout(busy).map_err(sql)?;
        // Switching to WAL needs a moment alone with the file and reports BUSY without waiting
        // when another process is opening it too; WAL is persistent, so only switch once.
        let mut tries = 0;
        loop {
            let mode: rusqlite::Result<String> =
                conn.pragma_query_value(None, "journal_mode", |r| r.get(0));
            match mode {
                Ok(m) if m.eq_ignore_ascii_case("wal") => break,
                Ok(_) => match conn.pragma_update(None, "journal_mode", "WAL") {
                    Ok(()) => break,
                    Err(e) if tries < wal_tries && is_busy(&e) => {}
                    Err(e) => return Err(sql(e)),
                },
                Err(e) if tries < wal_tries && is_busy(&e) => {}
                Err(e) => return Err(sql(e)),
            }
            tries += 1;
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        // Keep the -wal and -shm files when the last connection closes. SQLite deletes both
        // by default, so each launch's front (the last, often only, connection) unlinked
        // them and the prefetcher created them again, on the launch's critical path; one
        // traced front blocked 5.1 ms in close() releasing the unlinked -shm
        // (docs/measurements.md). The WAL is still checkpointed and, with the size limit 0,
        // truncated to empty at that close, so the next first connection has no frames to
        // replay (a WAL kept full made the front 4 ms slower).
        conn.file_control(
            Some(rusqlite::MAIN_DB),
            rusqlite::FileControl::PersistWal(&mut 1),
        )
        .map_err(sql)?;
        conn.pragma_update(None, "journal_size_limit", 0)
            .map_err(sql)?;
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(sql)?;
        conn.pragma_update(None, "foreign_keys", "ON")
            .map_err(sql)?;
        let mut s = Store {
            conn,
            path: path.to_path_buf(),
        };
        s.migrate()?;
        Ok(s)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn sql(&self, source: rusqlite::Error) -> StoreError {
        StoreError::Sql {
            path: self.path.clone(),
            source,
        }
    }

    fn migrate(&mut self) -> Result<(), StoreError> {
        let version = |c: &Connection| -> rusqlite::Result<i64> {
            c.pragma_query_value(None, "user_version", |r| r.get(0))
        };
        let v = version(&self.conn).map_err(|e| self.sql(e))?;
        if v > SCHEMA_VERSION {
            return Err(StoreError::Schema {
                path: self.path.clone(),
                found: v,
                known: SCHEMA_VERSION,
            });
        }
        if v == SCHEMA_VERSION {
            return Ok(());
        }
        // Another process may be migrating the same file: take the write lock, then look
        // again at the version before changing anything.
        let sql = sql_error(&self.path);
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(sql)?;
        let v = version(&tx).map_err(sql)?;
        if v < 1 {
            tx.execute_batch(
                "CREATE TABLE IF NOT EXISTS apps(
                        id INTEGER PRIMARY KEY,
                        key TEXT NOT NULL UNIQUE,
                        exe TEXT NOT NULL,
                        strategy TEXT,
                        enabled INTEGER NOT NULL DEFAULT 1,
                        created_at INTEGER NOT NULL);
                     CREATE TABLE IF NOT EXISTS runs(
                        id INTEGER PRIMARY KEY,
                        app_id INTEGER NOT NULL REFERENCES apps(id) ON DELETE CASCADE,
                        recorded_at INTEGER NOT NULL,
                        data BLOB NOT NULL);
                     CREATE INDEX IF NOT EXISTS runs_app ON runs(app_id);
                     CREATE TABLE IF NOT EXISTS plans(
                        app_id INTEGER PRIMARY KEY REFERENCES apps(id) ON DELETE CASCADE,
                        created_at INTEGER NOT NULL,
                        entries INTEGER NOT NULL,
                        bytes INTEGER NOT NULL,
                        data BLOB NOT NULL);
                     CREATE TABLE IF NOT EXISTS launches(
                        id INTEGER PRIMARY KEY,
                        app_id INTEGER NOT NULL REFERENCES apps(id) ON DELETE CASCADE,
                        at INTEGER NOT NULL,
                        mode TEXT NOT NULL,
                        data TEXT NOT NULL);
                     CREATE INDEX IF NOT EXISTS launches_app ON launches(app_id);",
            )
            .map_err(sql)?;
        }
        if v < 2 {
            // One plan per (app, strategy); version-1 plans are of an older format anyway.
            tx.execute_batch(
                "DROP TABLE IF EXISTS plans;
                     CREATE TABLE plans(
                        app_id INTEGER NOT NULL REFERENCES apps(id) ON DELETE CASCADE,
                        strategy TEXT NOT NULL,
                        created_at INTEGER NOT NULL,
                        entries INTEGER NOT NULL,
                        bytes INTEGER NOT NULL,
                        data BLOB NOT NULL,
                        PRIMARY KEY(app_id, strategy));
                     ALTER TABLE apps ADD COLUMN settings TEXT;
                     CREATE TABLE IF NOT EXISTS devices(
                        dev TEXT PRIMARY KEY,
                        facts TEXT NOT NULL,
                        measured_at INTEGER NOT NULL);",
            )
            .map_err(sql)?;
        }
        if v < 3 {
            // ClusterFetch's burst plans, one per trigger file (device, inode).
            tx.execute_batch(
                "CREATE TABLE IF NOT EXISTS bursts(
                        id INTEGER PRIMARY KEY,
                        dev TEXT NOT NULL,
                        ino INTEGER NOT NULL,
                        path BLOB NOT NULL,
                        created_at INTEGER NOT NULL,
                        bytes INTEGER NOT NULL,
                        plan BLOB NOT NULL,
                        alternatives TEXT NOT NULL,
                        hits INTEGER NOT NULL DEFAULT 0,
                        failures INTEGER NOT NULL DEFAULT 0,
                        last_used INTEGER,
                        last_check TEXT,
                        active INTEGER NOT NULL DEFAULT 1,
                        UNIQUE(dev, ino));",
            )
            .map_err(sql)?;
        }
        if v < 4 {
            // An app's recent launches (`launches`, auto's history, read before every
            // prefetched launch) in an index that holds them in the app's order. The table
            // interleaves every app's launches, so the history of one cost a page read per
            // launch: 3.5-6 ms of a cold launch's start, against 1.4-3.6 ms from the index
            // (docs/measurements.md, 2026-11-27, third entry). It replaces the app_id index.
            tx.execute_batch(
                "CREATE INDEX IF NOT EXISTS launches_recent ON launches(app_id, id, data);
                 DROP INDEX IF EXISTS launches_app;",
            )
            .map_err(sql)?;
        }
        if v < 5 {
            // `auto`'s choice for an app's next launch, made once its last launch is
            // recorded, so that a launch's front reads one row instead of the history (see
            // `auto_choice`). Any change to what the choice depends on deletes it.
            tx.execute_batch(
                "CREATE TABLE IF NOT EXISTS auto_choices(
                        app_id INTEGER PRIMARY KEY REFERENCES apps(id) ON DELETE CASCADE,
                        data TEXT NOT NULL);",
            )
            .map_err(sql)?;
        }
        if v < 6 {
            // A burst's trigger fires for the program that opened it when it was mined:
            // files such as /etc/locale.alias are opened by every program, and a burst of
            // one application's start prefetched at every `date` and `sleep`
            // (docs/measurements.md, 2026-11-27, eighth entry).
            tx.execute_batch("ALTER TABLE bursts ADD COLUMN opener TEXT;")
                .map_err(sql)?;
        }
        if v < 7 {
            // Each plan's `Look` beside it, so that a launch tells warm from cold without
            // decoding the whole plan (`plan_look`). Made here for the plans there are; a
            // plan that does not decode keeps none, and its launch decodes it and fails as
            // before.
            // (A database set back to an older version by hand may have it already.)
            let has_look: bool = tx
                .query_row(
                    "SELECT COUNT(*) > 0 FROM pragma_table_info('plans') WHERE name = 'look'",
                    [],
                    |r| r.get(0),
                )
                .map_err(sql)?;
            if !has_look {
                tx.execute_batch("ALTER TABLE plans ADD COLUMN look BLOB;")
                    .map_err(sql)?;
            }
            let plans: Vec<(i64, String, Vec<u8>)> = {
                let mut stmt = tx
                    .prepare("SELECT app_id, strategy, data FROM plans")
                    .map_err(sql)?;
                let rows = stmt
                    .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                    .map_err(sql)?;
                rows.collect::<rusqlite::Result<_>>().map_err(sql)?
            };
            for (app_id, strategy, data) in plans {
                let Ok(look) = Plan::decode(&data).and_then(|p| p.look().encode()) else {
                    continue;
                };
                tx.execute(
                    "UPDATE plans SET look = ?1 WHERE app_id = ?2 AND strategy = ?3",
                    params![look, app_id, strategy],
                )
                .map_err(sql)?;
            }
        }
        tx.pragma_update(None, "user_version", SCHEMA_VERSION)
            .map_err(sql)?;
        tx.commit().map_err(sql)
    }

    fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<AppRow> {
        Ok(AppRow {
            id: r.get(0)?,
            key: r.get(1)?,
            exe: r.get(2)?,
            strategy: r.get(3)?,
            enabled: r.get::<_, i64>(4)? != 0,
        })
    }

    pub fn app_by_key(&self, key: &str) -> Result<Option<AppRow>, StoreError> {
        self.conn
            .query_row(
                "SELECT id, key, exe, strategy, enabled FROM apps WHERE key = ?1",
                [key],
                Self::row,
            )
            .optional()
            .map_err(|e| self.sql(e))
    }

    /// Find an app by its exact key, else by a unique substring of its key.
    pub fn find_app(&self, query: &str) -> Result<AppRow, StoreError> {
        if let Some(a) = self.app_by_key(query)? {
            return Ok(a);
        }
        let mut stmt = self
            .conn
            .prepare("SELECT id, key, exe, strategy, enabled FROM apps ORDER BY key")
            .map_err(|e| self.sql(e))?;
        let all: Vec<AppRow> = stmt
            .query_map([], Self::row)
            .map_err(|e| self.sql(e))?
            .collect::<Result<_, _>>()
            .map_err(|e| self.sql(e))?;
        let hits: Vec<AppRow> = all.into_iter().filter(|a| a.key.contains(query)).collect();
        match hits.len() {
            0 => Err(StoreError::NoSuchApp(query.to_string())),
            1 => Ok(hits
                .into_iter()
                .next()
                .ok_or_else(|| StoreError::NoSuchApp(query.into()))?),
            _ => Err(StoreError::Ambiguous {
                query: query.to_string(),
                candidates: hits.into_iter().map(|a| a.key).collect(),
            }),
        }
    }

    /// Forget every app neither created nor launched since `before` (unix seconds), with its
    /// plans, runs and history; returns their keys.
    pub fn prune_apps(&mut self, before: i64) -> Result<Vec<String>, StoreError> {
        let stale: Vec<(i64, String)> = {
            let mut stmt = self
                .conn
                .prepare(
                    "SELECT a.id, a.key FROM apps a WHERE a.created_at < ?1
                       AND NOT EXISTS (SELECT 1 FROM launches l WHERE l.app_id = a.id AND l.at >= ?1)",
                )
                .map_err(|e| self.sql(e))?;
            let rows = stmt
                .query_map(params![before], |r| Ok((r.get(0)?, r.get(1)?)))
                .map_err(|e| self.sql(e))?;
            rows.collect::<Result<_, _>>().map_err(|e| self.sql(e))?
        };
        for (id, _) in &stale {
            self.remove_app(*id)?;
        }
        Ok(stale.into_iter().map(|(_, k)| k).collect())
    }

    pub fn upsert_app(&mut self, key: &AppKey) -> Result<i64, StoreError> {
        self.conn
            .execute(
                "INSERT INTO apps(key, exe, created_at) VALUES(?1, ?2, ?3)
                 ON CONFLICT(key) DO UPDATE SET exe = excluded.exe",
                params![
                    key.key,
                    key.exe.display().to_string(),
                    crate::sys::now_unix()
                ],
            )
            .map_err(|e| self.sql(e))?;
        self.app_by_key(&key.key)?
            .map(|a| a.id)
            .ok_or_else(|| StoreError::NoSuchApp(key.key.clone()))
    }

    /// Replace an app's runs and plans (one per strategy) in one transaction; returns the new
    /// run ids. The plans' provenance is filled with those ids before they are stored.
    pub fn save_learning(
        &mut self,
        app_id: i64,
        runs: &[RawRun],
        plans: &mut [Plan],
    ) -> Result<Vec<i64>, StoreError> {
        let sql = sql_error(&self.path);
        let tx = self.conn.transaction().map_err(sql)?;
        tx.execute("DELETE FROM runs WHERE app_id = ?1", [app_id])
            .map_err(sql)?;
        let mut ids = Vec::new();
        for r in runs {
            let blob = codec::encode(RUN_MAGIC, RUN_VERSION, r)?;
            tx.execute(
                "INSERT INTO runs(app_id, recorded_at, data) VALUES(?1, ?2, ?3)",
                params![app_id, crate::sys::now_unix(), blob],
            )
            .map_err(sql)?;
            ids.push(tx.last_insert_rowid());
        }
        tx.execute("DELETE FROM plans WHERE app_id = ?1", [app_id])
            .map_err(sql)?;
        for plan in plans.iter_mut() {
            plan.provenance.runs = ids.clone();
            Self::put_plan_tx(&tx, app_id, plan)?.map_err(sql)?;
        }
        tx.commit().map_err(sql)?;
        Ok(ids)
    }

    /// Append one learning run (the daemon learns launch by launch); returns how many runs
    /// the app has now.
    pub fn add_run(&mut self, app_id: i64, run: &RawRun) -> Result<usize, StoreError> {
        let blob = codec::encode(RUN_MAGIC, RUN_VERSION, run)?;
        self.conn
            .execute(
                "INSERT INTO runs(app_id, recorded_at, data) VALUES(?1, ?2, ?3)",
                params![app_id, crate::sys::now_unix(), blob],
            )
            .map_err(|e| self.sql(e))?;
        let n: i64 = self
            .conn
            .query_row(
                "SELECT COUNT(*) FROM runs WHERE app_id = ?1",
                [app_id],
                |r| r.get(0),
            )
            .map_err(|e| self.sql(e))?;
        Ok(n as usize)
    }

    /// Drop an app's learning runs, keeping its plans (they serve while it learns again).
    pub fn forget_runs(&mut self, app_id: i64) -> Result<(), StoreError> {
        self.conn
            .execute("DELETE FROM runs WHERE app_id = ?1", [app_id])
            .map(|_| ())
            .map_err(|e| self.sql(e))
    }

    /// Keep an app's `n` most recent runs, dropping the older ones.
    pub fn keep_last_runs(&mut self, app_id: i64, n: usize) -> Result<(), StoreError> {
        self.conn
            .execute(
                "DELETE FROM runs WHERE app_id = ?1 AND id NOT IN \
                 (SELECT id FROM runs WHERE app_id = ?1 ORDER BY id DESC LIMIT ?2)",
                params![app_id, n as i64],
            )
            .map(|_| ())
            .map_err(|e| self.sql(e))
    }

    /// Drop an app's runs and plans (back to learning); its history and settings stay.
    pub fn forget_learning(&mut self, app_id: i64) -> Result<(), StoreError> {
        self.conn
            .execute_batch(&format!(
                "BEGIN IMMEDIATE; DELETE FROM plans WHERE app_id = {app_id}; DELETE FROM runs WHERE app_id = {app_id}; COMMIT;"
            ))
            .map_err(|e| self.sql(e))
    }

    /// Replace all of an app's plans, keeping its runs; fills the plans' run ids.
    pub fn replace_plans(&mut self, app_id: i64, plans: &mut [Plan]) -> Result<(), StoreError> {
        let ids: Vec<i64> = self
            .runs(app_id)?
            .into_iter()
            .map(|(id, _, _)| id)
            .collect();
        let sql = sql_error(&self.path);
        let tx = self.conn.transaction().map_err(sql)?;
        tx.execute("DELETE FROM plans WHERE app_id = ?1", [app_id])
            .map_err(sql)?;
        for p in plans.iter_mut() {
            p.provenance.runs = ids.clone();
            Self::put_plan_tx(&tx, app_id, p)?.map_err(sql)?;
        }
        tx.commit().map_err(sql)
    }

    /// Facts of any measured device (machines usually have one).
    pub fn device_facts_any(&self) -> Result<Option<crate::device::DeviceFacts>, StoreError> {
        let s: Option<String> = self
            .conn
            .query_row(
                "SELECT facts FROM devices ORDER BY measured_at DESC LIMIT 1",
                [],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| self.sql(e))?;
        Ok(s.and_then(|s| serde_json::from_str(&s).ok()))
    }

    /// Enable or disable an app (a disabled app is never prefetched or learned).
    pub fn set_app_enabled(&mut self, app_id: i64, enabled: bool) -> Result<(), StoreError> {
        self.conn
            .execute(
                "UPDATE apps SET enabled = ?1 WHERE id = ?2",
                params![enabled as i64, app_id],
            )
            .map_err(|e| self.sql(e))?;
        Ok(())
    }

    /// All apps.
    pub fn apps(&self) -> Result<Vec<AppRow>, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT id, key, exe, strategy, enabled FROM apps ORDER BY key")
            .map_err(|e| self.sql(e))?;
        let v = stmt
            .query_map([], Self::row)
            .map_err(|e| self.sql(e))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.sql(e))?;
        Ok(v)
    }

    /// Insert or replace one plan (re-planning without re-learning).
    pub fn put_plan(&mut self, app_id: i64, plan: &Plan) -> Result<(), StoreError> {
        let sql = sql_error(&self.path);
        let tx = self.conn.transaction().map_err(sql)?;
        Self::put_plan_tx(&tx, app_id, plan)?.map_err(sql)?;
        tx.commit().map_err(sql)
    }

    /// The SQL result is returned inside so callers can name their database in errors.
    fn put_plan_tx(
        tx: &rusqlite::Transaction<'_>,
        app_id: i64,
        plan: &Plan,
    ) -> Result<rusqlite::Result<()>, StoreError> {
        let blob = plan.encode()?;
        let look = plan.look().encode()?;
        let s = plan.summary();
        Ok(tx
            .execute(
                "INSERT INTO plans(app_id, strategy, created_at, entries, bytes, data, look)
                 VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7)
                 ON CONFLICT(app_id, strategy) DO UPDATE SET created_at = excluded.created_at,
                    entries = excluded.entries, bytes = excluded.bytes, data = excluded.data,
                    look = excluded.look",
                params![
                    app_id,
                    plan.strategy,
                    crate::sys::now_unix(),
                    s.entries as i64,
                    s.bytes as i64,
                    blob,
                    look
                ],
            )
            .map(|_| ()))
    }

    /// Strategies the app has plans for.
    pub fn plan_strategies(&self, app_id: i64) -> Result<Vec<String>, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT strategy FROM plans WHERE app_id = ?1 ORDER BY strategy")
            .map_err(|e| self.sql(e))?;
        let v = stmt
            .query_map([app_id], |r| r.get::<_, String>(0))
            .map_err(|e| self.sql(e))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.sql(e))?;
        Ok(v)
    }

    /// The app's launch-order (`trace`) plan: Ok(None) if it has none; a corrupt blob is
    /// `CorruptPlan`.
    pub fn plan(&self, app: &AppRow) -> Result<Option<Plan>, StoreError> {
        self.plan_for(app, "trace")
    }

    /// What a launch of the app with its plan for `strategy` looks at first: None without
    /// such a plan, Some(None) when the plan has no `Look` stored or it does not decode (the
    /// caller then decodes the plan, which says what is wrong with it).
    pub fn plan_look(
        &self,
        app: &AppRow,
        strategy: &str,
    ) -> Result<Option<Option<Look>>, StoreError> {
        let blob: Option<Option<Vec<u8>>> = self
            .conn
            .query_row(
                "SELECT look FROM plans WHERE app_id = ?1 AND strategy = ?2",
                params![app.id, strategy],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| self.sql(e))?;
        Ok(blob.map(|b| b.and_then(|b| Look::decode(&b).ok())))
    }

    /// The app's plan for `strategy`.
    pub fn plan_for(&self, app: &AppRow, strategy: &str) -> Result<Option<Plan>, StoreError> {
        let blob: Option<Vec<u8>> = self
            .conn
            .query_row(
                "SELECT data FROM plans WHERE app_id = ?1 AND strategy = ?2",
                params![app.id, strategy],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| self.sql(e))?;
        match blob {
            None => Ok(None),
            Some(b) => Plan::decode(&b)
                .map(Some)
                .map_err(|source| StoreError::CorruptPlan {
                    app: app.key.clone(),
                    source,
                }),
        }
    }

    /// Store a burst plan for its trigger, replacing the trigger's previous one (its hit and
    /// failure counts are kept) and making it active again, unless the trigger failed its
    /// check `blacklist_after` times: then nothing is stored (None).
    pub fn put_burst(
        &mut self,
        b: &NewBurst,
        blacklist_after: u64,
    ) -> Result<Option<i64>, StoreError> {
        let failures: Option<i64> = self
            .conn
            .query_row(
                "SELECT failures FROM bursts WHERE dev = ?1 AND ino = ?2",
                params![b.dev.to_string(), b.ino as i64],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| self.sql(e))?;
        if failures.is_some_and(|f| f as u64 >= blacklist_after) {
            return Ok(None);
        }
        let blob = b.plan.encode().map_err(|source| StoreError::CorruptPlan {
            app: b.path.display().to_string(),
            source,
        })?;
        let bytes = b.plan.summary().bytes as i64;
        let alts = serde_json::to_string(&b.alternatives).unwrap_or_else(|_| "[]".into());
        self.conn
            .query_row(
                "INSERT INTO bursts(dev, ino, path, created_at, bytes, plan, alternatives, opener)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
                 ON CONFLICT(dev, ino) DO UPDATE SET path = excluded.path,
                    created_at = excluded.created_at, bytes = excluded.bytes,
                    plan = excluded.plan, alternatives = excluded.alternatives,
                    opener = excluded.opener, active = 1
                 RETURNING id",
                params![
                    b.dev.to_string(),
                    b.ino as i64,
                    b.path.as_os_str().as_encoded_bytes(),
                    b.created_at,
                    bytes,
                    blob,
                    alts,
                    b.opener
                ],
                |r| r.get(0),
            )
            .map(Some)
            .map_err(|e| self.sql(e))
    }

    /// Replace a burst's plan (trimmed after a check).
    pub fn replace_burst_plan(&mut self, id: i64, plan: &Plan) -> Result<(), StoreError> {
        let blob = plan.encode().map_err(|source| StoreError::CorruptPlan {
            app: plan.app.clone(),
            source,
        })?;
        self.conn
            .execute(
                "UPDATE bursts SET plan = ?2, bytes = ?3 WHERE id = ?1",
                params![id, blob, plan.summary().bytes as i64],
            )
            .map(|_| ())
            .map_err(|e| self.sql(e))
    }

    /// A burst's trigger was opened and its plan prefetched.
    pub fn burst_hit(&mut self, id: i64, now: i64) -> Result<(), StoreError> {
        self.conn
            .execute(
                "UPDATE bursts SET hits = hits + 1, last_used = ?2 WHERE id = ?1",
                params![id, now],
            )
            .map(|_| ())
            .map_err(|e| self.sql(e))
    }

    /// The check after a burst prefetch: a failed one counts a failure and deactivates it.
    pub fn burst_checked(&mut self, id: i64, ok: bool, what: &str) -> Result<(), StoreError> {
        let sql = if ok {
            "UPDATE bursts SET last_check = ?2 WHERE id = ?1"
        } else {
            "UPDATE bursts SET last_check = ?2, failures = failures + 1, active = 0 WHERE id = ?1"
        };
        self.conn
            .execute(sql, params![id, what])
            .map(|_| ())
            .map_err(|e| self.sql(e))
    }

    /// Every stored burst (plans not decoded), newest first.
    pub fn bursts(&self) -> Result<Vec<BurstRow>, StoreError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT id, dev, ino, path, created_at, bytes, alternatives, hits, failures,
                        last_used, last_check, active, opener
                 FROM bursts ORDER BY created_at DESC, id DESC",
            )
            .map_err(|e| self.sql(e))?;
        let rows = stmt
            .query_map([], |r| {
                let path: Vec<u8> = r.get(3)?;
                let alts: String = r.get(6)?;
                Ok(BurstRow {
                    id: r.get(0)?,
                    dev: r.get(1)?,
                    ino: r.get::<_, i64>(2)? as u64,
                    path: PathBuf::from(String::from_utf8_lossy(&path).into_owned()),
                    created_at: r.get(4)?,
                    bytes: r.get::<_, i64>(5)? as u64,
                    alternatives: serde_json::from_str(&alts).unwrap_or_default(),
                    hits: r.get::<_, i64>(7)? as u64,
                    failures: r.get::<_, i64>(8)? as u64,
                    last_used: r.get(9)?,
                    last_check: r.get(10)?,
                    active: r.get::<_, i64>(11)? != 0,
                    opener: r.get(12)?,
                })
            })
            .map_err(|e| self.sql(e))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.sql(e))?;
        Ok(rows)
    }

    /// A burst's plan.
    pub fn burst_plan(&self, b: &BurstRow) -> Result<Plan, StoreError> {
        let blob: Vec<u8> = self
            .conn
            .query_row("SELECT plan FROM bursts WHERE id = ?1", [b.id], |r| {
                r.get(0)
            })
            .map_err(|e| self.sql(e))?;
        Plan::decode(&blob).map_err(|source| StoreError::CorruptPlan {
            app: b.path.display().to_string(),
            source,
        })
    }

    /// Remove a burst; false if there was none with that id.
    pub fn remove_burst(&mut self, id: i64) -> Result<bool, StoreError> {
        let n = self
            .conn
            .execute("DELETE FROM bursts WHERE id = ?1", [id])
            .map_err(|e| self.sql(e))?;
        Ok(n > 0)
    }

    /// The app's stored learning runs, each decoded or its decode error.
    pub fn runs(&self, app_id: i64) -> Result<Vec<StoredRun>, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT id, recorded_at, data FROM runs WHERE app_id = ?1 ORDER BY id")
            .map_err(|e| self.sql(e))?;
        let rows = stmt
            .query_map([app_id], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, Vec<u8>>(2)?,
                ))
            })
            .map_err(|e| self.sql(e))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.sql(e))?;
        Ok(rows
            .into_iter()
            .map(|(id, at, blob)| (id, at, decode_raw_run(&blob)))
            .collect())
    }

    pub fn list(&self) -> Result<Vec<AppListRow>, StoreError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT a.key, p.entries, p.bytes, p.created_at,
                    (SELECT COUNT(*) FROM runs r WHERE r.app_id = a.id),
                    (SELECT COUNT(*) FROM launches l WHERE l.app_id = a.id)
                 FROM apps a LEFT JOIN plans p ON p.app_id = a.id AND p.strategy = 'trace' ORDER BY a.key",
            )
            .map_err(|e| self.sql(e))?;
        let rows = stmt
            .query_map([], |r| {
                let entries: Option<i64> = r.get(1)?;
                Ok(AppListRow {
                    app: r.get(0)?,
                    has_plan: entries.is_some(),
                    entries,
                    bytes: r.get(2)?,
                    planned_at: r.get(3)?,
                    runs: r.get(4)?,
                    launches: r.get(5)?,
                })
            })
            .map_err(|e| self.sql(e))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.sql(e))?;
        Ok(rows)
    }

    pub fn app_settings(&self, app_id: i64) -> Result<AppSettings, StoreError> {
        let s: Option<String> = self
            .conn
            .query_row("SELECT settings FROM apps WHERE id = ?1", [app_id], |r| {
                r.get(0)
            })
            .optional()
            .map_err(|e| self.sql(e))?
            .flatten();
        // Unreadable settings are as good as none: they only tune performance.
        Ok(s.and_then(|s| serde_json::from_str(&s).ok())
            .unwrap_or_default())
    }

    pub fn set_app_settings(
        &mut self,
        app_id: i64,
        settings: &AppSettings,
    ) -> Result<(), StoreError> {
        let j = serde_json::to_string(settings).unwrap_or_else(|_| "{}".into());
        let sql = sql_error(&self.path);
        let tx = self.conn.transaction().map_err(sql)?;
        tx.execute(
            "UPDATE apps SET settings = ?1 WHERE id = ?2",
            params![j, app_id],
        )
        // The settings hold auto's emulated ranking: a choice made before is stale.
        .and_then(|_| tx.execute("DELETE FROM auto_choices WHERE app_id = ?1", [app_id]))
        .and_then(|_| tx.commit())
        .map_err(sql)?;
        Ok(())
    }

    /// The app's default strategy (None: auto).
    pub fn set_app_strategy(
        &mut self,
        app_id: i64,
        strategy: Option<&str>,
    ) -> Result<(), StoreError> {
        self.conn
            .execute(
                "UPDATE apps SET strategy = ?1 WHERE id = ?2",
                params![strategy, app_id],
            )
            .map_err(|e| self.sql(e))?;
        Ok(())
    }

    pub fn device_facts(
        &self,
        dev: &str,
    ) -> Result<Option<crate::device::DeviceFacts>, StoreError> {
        let s: Option<String> = self
            .conn
            .query_row("SELECT facts FROM devices WHERE dev = ?1", [dev], |r| {
                r.get(0)
            })
            .optional()
            .map_err(|e| self.sql(e))?;
        Ok(s.and_then(|s| serde_json::from_str(&s).ok()))
    }

    pub fn put_device_facts(
        &mut self,
        dev: &str,
        facts: &crate::device::DeviceFacts,
    ) -> Result<(), StoreError> {
        let j = serde_json::to_string(facts).unwrap_or_else(|_| "{}".into());
        let sql = sql_error(&self.path);
        let tx = self.conn.transaction().map_err(sql)?;
        tx.execute(
            "INSERT INTO devices(dev, facts, measured_at) VALUES(?1, ?2, ?3)
                 ON CONFLICT(dev) DO UPDATE SET facts = excluded.facts, measured_at = excluded.measured_at",
            params![dev, j, crate::sys::now_unix()],
        )
        // The device class orders auto's contenders: every choice made before is stale.
        .and_then(|_| tx.execute("DELETE FROM auto_choices", []))
        .and_then(|_| tx.commit())
        .map_err(sql)?;
        Ok(())
    }

    pub fn remove_app(&mut self, app_id: i64) -> Result<(), StoreError> {
        self.conn
            .execute("DELETE FROM apps WHERE id = ?1", [app_id])
            .map_err(|e| self.sql(e))?;
        Ok(())
    }

    /// Append a launch to the app's history, which keeps the most recent `LAUNCHES_KEPT`.
    pub fn add_launch(&mut self, app_id: i64, l: &LaunchRecord) -> Result<(), StoreError> {
        self.add_launch_keeping(app_id, l, LAUNCHES_KEPT)
    }

    fn add_launch_keeping(
        &mut self,
        app_id: i64,
        l: &LaunchRecord,
        keep: usize,
    ) -> Result<(), StoreError> {
        let data = serde_json::to_string(l).unwrap_or_else(|_| "{}".into());
        let sql = sql_error(&self.path);
        let tx = self.conn.transaction().map_err(sql)?;
        tx.execute(
            "INSERT INTO launches(app_id, at, mode, data) VALUES(?1, ?2, ?3, ?4)",
            params![app_id, l.at_unix, l.mode, data],
        )
        .and_then(|_| {
            tx.execute(
                "DELETE FROM launches WHERE app_id = ?1 AND id <= (SELECT id FROM launches
                 WHERE app_id = ?1 ORDER BY id DESC LIMIT 1 OFFSET ?2)",
                params![app_id, keep as i64],
            )
        })
        // A choice made from the history before this launch is stale.
        .and_then(|_| tx.execute("DELETE FROM auto_choices WHERE app_id = ?1", [app_id]))
        .and_then(|_| tx.commit())
        .map_err(sql)
    }

    /// `auto`'s choice for the app's next launch, if one was made (`put_auto_choice`) since
    /// its history, settings or the device facts last changed (each deletes it).
    pub fn auto_choice(&self, app_id: i64) -> Result<Option<StoredChoice>, StoreError> {
        let s: Option<String> = self
            .conn
            .query_row(
                "SELECT data FROM auto_choices WHERE app_id = ?1",
                [app_id],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| self.sql(e))?;
        // An unreadable one is as good as none: the history is still there.
        Ok(s.and_then(|s| serde_json::from_str(&s).ok()))
    }

    /// Make and keep `auto`'s choice for the app's next launch: `choose` reads what it needs
    /// from this store inside one write transaction, so no launch recorded meanwhile can
    /// leave a choice that does not count it.
    pub fn put_auto_choice(
        &mut self,
        app_id: i64,
        choose: impl FnOnce(&Store) -> Result<StoredChoice, StoreError>,
    ) -> Result<StoredChoice, StoreError> {
        self.conn
            .execute_batch("BEGIN IMMEDIATE")
            .map_err(|e| self.sql(e))?;
        let done = choose(self).and_then(|c| {
            let j = serde_json::to_string(&c).unwrap_or_else(|_| "{}".into());
            self.conn
                .execute(
                    "INSERT INTO auto_choices(app_id, data) VALUES(?1, ?2)
                     ON CONFLICT(app_id) DO UPDATE SET data = excluded.data",
                    params![app_id, j],
                )
                .and_then(|_| self.conn.execute_batch("COMMIT"))
                .map_err(|e| self.sql(e))?;
            Ok(c)
        });
        if done.is_err() {
            let _ = self.conn.execute_batch("ROLLBACK");
        }
        done
    }

    /// Most recent launches first.
    pub fn launches(&self, app_id: i64, limit: usize) -> Result<Vec<LaunchRecord>, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT data FROM launches WHERE app_id = ?1 ORDER BY id DESC LIMIT ?2")
            .map_err(|e| self.sql(e))?;
        let rows = stmt
            .query_map(params![app_id, limit as i64], |r| r.get::<_, String>(0))
            .map_err(|e| self.sql(e))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.sql(e))?;
        Ok(rows
            .iter()
            .filter_map(|s| serde_json::from_str(s).ok())
            .collect())
    }

    /// Test hook: overwrite an app's plan blob with arbitrary bytes.
    #[doc(hidden)]
    pub fn corrupt_plan_for_test(&mut self, app_id: i64, bytes: &[u8]) -> Result<(), StoreError> {
        self.conn
            .execute(
                "UPDATE plans SET data = ?1, look = NULL WHERE app_id = ?2",
                params![bytes, app_id],
            )
            .map_err(|e| self.sql(e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::tests::sample_plan;
    use crate::sys::Usage;
    use crate::trace::EndReason;

    fn raw_run() -> RawRun {
        RawRun {
            page_size: 4096,
            accesses: vec![],
            inode_loads: vec![],
            opens: vec![],
            execs: vec!["/usr/bin/x".into()],
            block: vec![],
            sync_readaheads: 3,
            duration_ns: 5,
            ended: EndReason::Idle,
            exit_code: Some(0),
            exit_signal: None,
            usage: Usage::default(),
            started_unix_ms: 0,
        }
    }

    fn key(k: &str) -> AppKey {
        AppKey::named(k, Path::new("/usr/bin/x"))
    }

    #[test]
    fn a_bare_database_name_lies_in_the_working_directory() {
        assert_eq!(dir_of(Path::new("x.db")), Path::new("."));
        assert_eq!(dir_of(Path::new("a/x.db")), Path::new("a"));
        assert_eq!(dir_of(Path::new("/var/x.db")), Path::new("/var"));
    }

    /// The database and its WAL files are private, a new one and one an older version left
    /// world-readable alike; a directory given with `--db` keeps its own mode.
    #[test]
    fn the_database_is_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let db = dir.path().join("ws.db");
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        let s = Store::open(&db).unwrap();
        s.apps().unwrap();
        for f in ["ws.db", "ws.db-wal", "ws.db-shm"] {
            assert_eq!(mode(&dir.path().join(f)), 0o600, "{f}");
        }
        drop(s);
        for f in ["ws.db", "ws.db-wal", "ws.db-shm"] {
            let p = dir.path().join(f);
            if p.exists() {
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
            }
        }
        let _s = Store::open(&db).unwrap();
        assert_eq!(mode(&db), 0o600, "an old world-readable database is fixed");
        assert_eq!(
            mode(dir.path()),
            0o755,
            "not the default state directory: as it was"
        );
        // A directory warmstart creates is private.
        let nested = dir.path().join("state/ws.db");
        let _n = Store::open(&nested).unwrap();
        assert_eq!(mode(&dir.path().join("state")), 0o700);
    }

    #[test]
    fn keeps_the_last_runs_of_one_app() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open(&dir.path().join("ws.db")).unwrap();
        let (a, b) = (
            s.upsert_app(&key("a")).unwrap(),
            s.upsert_app(&key("b")).unwrap(),
        );
        for i in 0..5u64 {
            let mut r = raw_run();
            r.duration_ns = i;
            s.add_run(a, &r).unwrap();
        }
        s.add_run(b, &raw_run()).unwrap();
        s.keep_last_runs(a, 2).unwrap();
        let left: Vec<u64> = s
            .runs(a)
            .unwrap()
            .into_iter()
            .map(|(_, _, r)| r.unwrap().duration_ns)
            .collect();
        assert_eq!(left, vec![3, 4]);
        assert_eq!(s.runs(b).unwrap().len(), 1, "another app's runs stay");
    }

    /// A reading open creates, converts and writes nothing.
    #[test]
    fn a_read_only_open_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("ws.db");
        assert!(Store::open_read_only(&db).is_err());
        assert!(!db.exists(), "nothing created");
        let mut w = Store::open(&db).unwrap();
        w.upsert_app(&key("a")).unwrap();
        drop(w);
        let mut r = Store::open_read_only(&db).unwrap();
        assert_eq!(r.apps().unwrap().len(), 1);
        assert!(r.upsert_app(&key("b")).is_err(), "read-only");
    }

    /// A plan's look is stored beside it, and a database from before looks gets one for each
    /// plan that decodes when it is migrated; a plan without one (or with a broken one) says
    /// so, and a missing plan is None.
    #[test]
    fn a_plans_look_is_kept_beside_it_and_made_for_older_plans() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("ws.db");
        let mut s = Store::open(&db).unwrap();
        let id = s.upsert_app(&key("/usr/bin/x")).unwrap();
        let plan = sample_plan();
        s.put_plan(id, &plan).unwrap();
        let app = s.app_by_key("/usr/bin/x").unwrap().unwrap();
        assert_eq!(s.plan_look(&app, "trace").unwrap(), Some(Some(plan.look())));
        assert_eq!(s.plan_look(&app, "fast").unwrap(), None, "no such plan");
        // As version 6 left it: no look column.
        s.conn
            .execute_batch("ALTER TABLE plans DROP COLUMN look; PRAGMA user_version = 6;")
            .unwrap();
        drop(s);
        let mut s = Store::open(&db).unwrap();
        assert_eq!(s.plan_look(&app, "trace").unwrap(), Some(Some(plan.look())));
        s.corrupt_plan_for_test(id, b"WSPL\x05\x00garbage").unwrap();
        assert_eq!(s.plan_look(&app, "trace").unwrap(), Some(None));
        s.conn.execute("UPDATE plans SET look = x'00'", []).unwrap();
        assert_eq!(
            s.plan_look(&app, "trace").unwrap(),
            Some(None),
            "a broken look"
        );
    }

    #[test]
    fn apps_not_launched_since_a_date_are_pruned() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open(&dir.path().join("ws.db")).unwrap();
        let old = s.upsert_app(&key("/usr/bin/old")).unwrap();
        let used = s.upsert_app(&key("/usr/bin/used")).unwrap();
        let mut plan = sample_plan();
        s.save_learning(old, &[raw_run()], std::slice::from_mut(&mut plan))
            .unwrap();
        let now = crate::sys::now_unix();
        s.add_launch(
            used,
            &LaunchRecord {
                at_unix: now,
                mode: crate::store::mode::RUN.into(),
                ..LaunchRecord::default()
            },
        )
        .unwrap();
        // Created now: nothing is older than an hour ago.
        assert!(s.prune_apps(now - 3600).unwrap().is_empty());
        // A cut a day ahead: `old` was neither created nor launched since and goes; `used`
        // has a launch after the cut and stays.
        s.add_launch(
            used,
            &LaunchRecord {
                at_unix: now + 2 * 86_400,
                mode: crate::store::mode::RUN.into(),
                ..LaunchRecord::default()
            },
        )
        .unwrap();
        let gone = s.prune_apps(now + 86_400).unwrap();
        assert_eq!(gone, vec!["/usr/bin/old".to_string()]);
        assert!(s.app_by_key("/usr/bin/old").unwrap().is_none());
        assert!(s.app_by_key("/usr/bin/used").unwrap().is_some());
        // Its runs and plans went with it.
        assert!(s.runs(old).unwrap().is_empty());
    }

    #[test]
    fn round_trip_apps_runs_plans_launches() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("sub/ws.db");
        let mut s = Store::open(&db).unwrap();
        let id = s.upsert_app(&key("/usr/bin/x -c a")).unwrap();
        assert_eq!(s.upsert_app(&key("/usr/bin/x -c a")).unwrap(), id);
        let mut plan = sample_plan();
        let ids = s
            .save_learning(id, &[raw_run(), raw_run()], std::slice::from_mut(&mut plan))
            .unwrap();
        assert_eq!(ids.len(), 2);
        assert_eq!(plan.provenance.runs, ids);
        drop(s);

        let s = Store::open(&db).unwrap();
        let app = s.find_app("/usr/bin/x -c a").unwrap();
        assert_eq!(s.plan(&app).unwrap().unwrap(), plan);
        let runs = s.runs(app.id).unwrap();
        assert_eq!(runs.len(), 2);
        assert_eq!(runs[0].2.as_ref().unwrap(), &raw_run());
        let list = s.list().unwrap();
        assert_eq!(list.len(), 1);
        assert_eq!(list[0].entries, Some(5));
        assert_eq!(list[0].runs, 2);
    }

    /// The last connection's close keeps the WAL and its index (no unlink and re-create per
    /// launch) but checkpoints and empties the WAL, so what was written is in the database
    /// file and the next first connection has nothing to replay.
    #[test]
    fn closing_keeps_an_empty_wal() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("ws.db");
        let wal = dir.path().join("ws.db-wal");
        let mut s = Store::open(&db).unwrap();
        let id = s.upsert_app(&key("/usr/bin/x")).unwrap();
        assert!(
            std::fs::metadata(&wal).unwrap().len() > 0,
            "writes go to the WAL"
        );
        drop(s);
        assert_eq!(std::fs::metadata(&wal).unwrap().len(), 0);
        assert!(dir.path().join("ws.db-shm").exists());
        let s = Store::open(&db).unwrap();
        assert_eq!(s.find_app("/usr/bin/x").unwrap().id, id);
    }

    #[test]
    fn relearning_replaces_runs_and_plan() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open(&dir.path().join("ws.db")).unwrap();
        let id = s.upsert_app(&key("a")).unwrap();
        s.save_learning(id, &[raw_run(), raw_run()], &mut [sample_plan()])
            .unwrap();
        let mut p2 = sample_plan();
        p2.entries.truncate(1);
        let mut p3 = sample_plan();
        p3.strategy = "fast".into();
        s.save_learning(id, &[raw_run()], &mut [p2, p3]).unwrap();
        assert_eq!(s.runs(id).unwrap().len(), 1);
        let app = s.find_app("a").unwrap();
        assert_eq!(s.plan(&app).unwrap().unwrap().entries.len(), 1);
        assert_eq!(s.plan_for(&app, "fast").unwrap().unwrap().strategy, "fast");
        assert_eq!(
            s.plan_strategies(id).unwrap(),
            vec!["fast".to_string(), "trace".to_string()]
        );
        let st = AppSettings {
            paralfetch_raises: 2,
            ..AppSettings::default()
        };
        s.set_app_settings(id, &st).unwrap();
        assert_eq!(s.app_settings(id).unwrap(), st);
        let f = crate::device::DeviceFacts {
            qd1_latency_us: 60.0,
            iops_qd1: 16000.0,
            iops_qd32: 75000.0,
            seq_mib_s: 1000.0,
        };
        s.put_device_facts("254:0", &f).unwrap();
        assert_eq!(s.device_facts("254:0").unwrap(), Some(f));
        assert_eq!(s.device_facts("8:0").unwrap(), None);
    }

    #[test]
    fn lookup_by_substring_and_errors() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open(&dir.path().join("ws.db")).unwrap();
        s.upsert_app(&key("/usr/bin/python3.11 -c 'import json'"))
            .unwrap();
        s.upsert_app(&key("/usr/bin/python3.11 /srv/app.py"))
            .unwrap();
        s.upsert_app(&key("/usr/lib/libreoffice/program/soffice.bin"))
            .unwrap();
        assert!(s.find_app("soffice").is_ok());
        assert!(matches!(
            s.find_app("python3.11"),
            Err(StoreError::Ambiguous { .. })
        ));
        assert!(matches!(s.find_app("gimp"), Err(StoreError::NoSuchApp(_))));
    }

    #[test]
    fn corrupt_plan_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open(&dir.path().join("ws.db")).unwrap();
        let id = s.upsert_app(&key("a")).unwrap();
        s.save_learning(id, &[raw_run()], &mut [sample_plan()])
            .unwrap();
        let mut blob = sample_plan().encode().unwrap();
        blob[20] ^= 0xff;
        s.corrupt_plan_for_test(id, &blob).unwrap();
        let app = s.find_app("a").unwrap();
        assert!(matches!(s.plan(&app), Err(StoreError::CorruptPlan { .. })));
    }

    #[test]
    fn launches_and_removal_cascade() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open(&dir.path().join("ws.db")).unwrap();
        let id = s.upsert_app(&key("a")).unwrap();
        s.save_learning(id, &[raw_run()], &mut [sample_plan()])
            .unwrap();
        let l = LaunchRecord {
            at_unix: 1,
            mode: crate::store::mode::RUN.into(),
            wall_ms: 12.5,
            exit_code: Some(0),
            ..LaunchRecord::default()
        };
        s.add_launch(id, &l).unwrap();
        assert_eq!(s.launches(id, 10).unwrap(), vec![l]);
        s.remove_app(id).unwrap();
        assert!(s.list().unwrap().is_empty());
        assert!(s.runs(id).unwrap().is_empty());
        assert!(s.launches(id, 10).unwrap().is_empty());
    }

    #[test]
    fn launch_history_keeps_the_most_recent_of_each_app() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open(&dir.path().join("ws.db")).unwrap();
        let a = s.upsert_app(&key("a")).unwrap();
        let b = s.upsert_app(&key("b")).unwrap();
        let at = |i: i64| LaunchRecord {
            at_unix: i,
            ..LaunchRecord::default()
        };
        s.add_launch_keeping(b, &at(-1), 5).unwrap();
        for i in 0..12 {
            s.add_launch_keeping(a, &at(i), 5).unwrap();
        }
        let kept: Vec<i64> = s
            .launches(a, 100)
            .unwrap()
            .iter()
            .map(|l| l.at_unix)
            .collect();
        assert_eq!(kept, vec![11, 10, 9, 8, 7]);
        // Another app's history is not touched.
        assert_eq!(s.launches(b, 100).unwrap(), vec![at(-1)]);
    }
}

#[cfg(test)]
mod migration_tests {
    use super::*;

    #[test]
    fn an_apps_history_is_read_from_its_index_alone() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(&dir.path().join("ws.db")).unwrap();
        let plan: String = s
            .conn
            .query_row(
                "EXPLAIN QUERY PLAN SELECT data FROM launches WHERE app_id = ?1 \
                 ORDER BY id DESC LIMIT ?2",
                params![1, 200],
                |r| r.get(3),
            )
            .unwrap();
        assert!(plan.contains("COVERING INDEX launches_recent"), "{plan}");
    }

    #[test]
    fn a_version_3_database_gets_the_history_index() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("ws.db");
        let mut s = Store::open(&db).unwrap();
        let id = s
            .upsert_app(&AppKey::named("a", Path::new("/usr/bin/x")))
            .unwrap();
        s.add_launch(id, &LaunchRecord::default()).unwrap();
        s.conn
            .execute_batch(
                "DROP INDEX launches_recent; CREATE INDEX launches_app ON launches(app_id);
                 ALTER TABLE bursts DROP COLUMN opener; PRAGMA user_version = 3;",
            )
            .unwrap();
        drop(s);
        let s = Store::open(&db).unwrap();
        let indexes: Vec<String> = s
            .conn
            .prepare(
                "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'launches'",
            )
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(indexes, ["launches_recent"]);
        assert_eq!(s.launches(id, 200).unwrap().len(), 1);
        // And version 5's kept choices.
        assert_eq!(s.auto_choice(id).unwrap(), None);
    }

    /// A burst keeps the program that opened its trigger; one stored before version 6 has
    /// none (it fires for any program, as it did), and a re-mined one gets its opener.
    #[test]
    fn a_burst_keeps_its_opener_and_a_version_5_one_has_none() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("ws.db");
        let burst = |ino: u64, opener: Option<&str>| NewBurst {
            dev: crate::sys::Dev { major: 8, minor: 1 },
            ino,
            path: format!("/data/{ino}.map").into(),
            created_at: 1,
            plan: crate::plan::tests::sample_plan(),
            alternatives: vec![],
            opener: opener.map(str::to_string),
        };
        let mut s = Store::open(&db).unwrap();
        s.put_burst(&burst(1, Some("game")), 3).unwrap().unwrap();
        s.conn
            .execute_batch("ALTER TABLE bursts DROP COLUMN opener; PRAGMA user_version = 5;")
            .unwrap();
        drop(s);
        let mut s = Store::open(&db).unwrap();
        let openers = |s: &Store| -> Vec<(u64, Option<String>)> {
            let mut v: Vec<_> = s
                .bursts()
                .unwrap()
                .into_iter()
                .map(|b| (b.ino, b.opener))
                .collect();
            v.sort();
            v
        };
        assert_eq!(openers(&s), [(1, None)]);
        s.put_burst(&burst(2, Some("gimp")), 3).unwrap().unwrap();
        s.put_burst(&burst(1, Some("game")), 3).unwrap().unwrap();
        assert_eq!(
            openers(&s),
            [(1, Some("game".to_string())), (2, Some("gimp".to_string()))]
        );
    }

    #[test]
    fn a_kept_auto_choice_goes_with_what_it_was_made_from() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open(&dir.path().join("ws.db")).unwrap();
        let a = s
            .upsert_app(&AppKey::named("a", Path::new("/usr/bin/x")))
            .unwrap();
        let b = s
            .upsert_app(&AppKey::named("b", Path::new("/usr/bin/y")))
            .unwrap();
        let choice = |n: &str| StoredChoice {
            strategy: Some(n.into()),
            why: format!("{n} is best"),
        };
        let keep = |s: &mut Store, app: i64, n: &str| {
            s.put_auto_choice(app, |_| Ok(choice(n))).unwrap();
        };
        keep(&mut s, a, "fast");
        keep(&mut s, b, "trace");
        assert_eq!(s.auto_choice(a).unwrap(), Some(choice("fast")));
        // A launch recorded: the app's choice is gone, the other app's stays.
        s.add_launch(a, &LaunchRecord::default()).unwrap();
        assert_eq!(s.auto_choice(a).unwrap(), None);
        assert_eq!(s.auto_choice(b).unwrap(), Some(choice("trace")));
        // Made inside the write transaction: what `choose` reads is what it sees.
        let made = s
            .put_auto_choice(a, |st| {
                Ok(choice(&format!("n{}", st.launches(a, 200)?.len())))
            })
            .unwrap();
        assert_eq!(made, choice("n1"));
        assert_eq!(s.auto_choice(a).unwrap(), Some(choice("n1")));
        // New settings (auto's emulated ranking among them).
        s.set_app_settings(a, &AppSettings::default()).unwrap();
        assert_eq!(s.auto_choice(a).unwrap(), None);
        assert_eq!(s.auto_choice(b).unwrap(), Some(choice("trace")));
        // New device facts: every app's.
        keep(&mut s, a, "fast");
        s.put_device_facts("254:0", &crate::device::DeviceFacts::unmeasured())
            .unwrap();
        assert_eq!(s.auto_choice(a).unwrap(), None);
        assert_eq!(s.auto_choice(b).unwrap(), None);
        // A failed choice keeps nothing and leaves the store usable.
        let e = s.put_auto_choice(a, |_| Err(StoreError::NoSuchApp("x".into())));
        assert!(e.is_err());
        assert_eq!(s.auto_choice(a).unwrap(), None);
        keep(&mut s, a, "fast");
        assert_eq!(s.auto_choice(a).unwrap(), Some(choice("fast")));
        // A removed app's goes with it.
        s.remove_app(a).unwrap();
        assert_eq!(s.auto_choice(a).unwrap(), None);
    }

    #[test]
    fn concurrent_first_opens_migrate_once() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("ws.db");
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let db = db.clone();
                std::thread::spawn(move || Store::open(&db).map(|_| ()))
            })
            .collect();
        for h in handles {
            h.join().unwrap().unwrap();
        }
        let s = Store::open(&db).unwrap();
        let v: i64 = s
            .conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!(v, SCHEMA_VERSION);
    }
}
