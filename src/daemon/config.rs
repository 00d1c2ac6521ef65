//! The daemon's configuration, /etc/warmstart/config.toml. A missing file means the defaults
//! below; a bad file is an error that names the line. `DEFAULT_TOML` is the documented file
//! `warmstart install` writes.

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

pub const DEFAULT_PATH: &str = "/etc/warmstart/config.toml";

/// The shipped configuration file: every key with its default and meaning.
pub const DEFAULT_TOML: &str = r#"# warmstart daemon configuration (defaults shown; delete a line to use its default).
# Reload with `systemctl reload warmstart` (SIGHUP).

# Learning launches before a plan is built (FAST's N_rawseq).
n_rawseq = 2
# Every n_chk-th prefetched launch is traced to check the plan (FAST's N_chk).
n_chk = 5
# Miss ratio above which an app goes back to learning (FAST's R_miss): pages the app still
# read from disk that the plan did not cover, over the plan's pages.
r_miss = 0.1
# Share of the plan's pages a checked launch used from disk outside it above which, with no
# planned file changed, that launch joins the runs the plans are built from (widening: the
# plan in use serves on). Lower than r_miss: a plan learned from one way of launching an app
# (LibreOffice's conversions) lacked 9.6% of what its second way (its window) reads.
w_miss = 0.02
# Synchronous readaheads above this share of the plan's entries also send it back
# (Paralfetch 4.3).
sync_readahead_share = 0.1
# A traced launch ends after this long without file access (T_idle), or at t_timeout.
t_idle_secs = 2.0
t_timeout_secs = 30.0
# Plans reading less than this are not worth prefetching (FAST measured `uname` 5% slower
# with a prefetcher); such apps are left alone.
min_launch_kb = 2048
# Most MiB one launch may prefetch; 0 means half of MemAvailable.
memory_cap_mb = 0
# Prefetch worker threads per launch.
jobs = 4
# Per-CPU trace buffer of a learning or checking launch, KiB.
buffer_kb = 8192
# Launches traced at once (learning or checking; each a tracefs instance with buffer_kb per
# CPU): a launch beyond it is not traced, and a later one learns or checks instead.
max_traces = 4
# tracefs instances the daemon holds at most: its exec watch, the burst miner, one per
# launch traced and one ready for the next, and one per burst check and one ready for the
# next. A burst check never takes the last free one (a launch's trace may need it). With 6:
# one traced launch and one burst check at a time, each with the next one ready.
max_instances = 6
# Launches handled at once (a thread each, prefetching or tracing): beyond it, a launch runs
# without the daemon, so an exec storm costs neither threads nor memory.
max_workers = 32
# An app is learned from its second launch within this many hours: a command run once (a
# script's one-off `sh -c`, a `mktemp`) is neither traced nor stored.
learn_window_hours = 24.0
# After building an app's plans, rank them by replaying its cold learning launch on the
# device (O_DIRECT, nothing enters the page cache): `auto` starts with the best and times
# only the best two on real launches. false: strategies are tried in the device class's order.
rank_by_emulation = true
# Apps not launched for this many days are forgotten (plans, runs, history); 0 keeps them.
prune_after_days = 90
# ClusterFetch: mine the read bursts of running applications system-wide and prefetch each
# when the file whose opening started it (its trigger) is opened again.
bursts = true
# Bursts reading less than this are not kept.
burst_min_kb = 256
# Seconds after a burst prefetch its use is checked; under burst_used_share of its pages
# read by then, it is deactivated (ClusterFetch 2.4: 10 s, 90%).
burst_check_secs = 10.0
burst_used_share = 0.9
# Share of the disk's measured sequential bandwidth a burst's prefetch may use (ClusterFetch
# 3.3: the running applications keep the rest); 1.0, the default, is no cap (a cap has not
# been measured against the loadings it would slow).
burst_bandwidth_share = 1.0
# The miner's log (entries), and what a burst must reach: log entries per second (0: 2% of
# the measured device's depth-1 IOPS, at least 100) and entries (ClusterFetch: 6000, 100, 100).
burst_queue_size = 6000
burst_iops_threshold = 0.0
burst_length_threshold = 100
# Paths under these directories (an entry starting with '/'), or containing these words
# (any other entry), never trigger a burst (beyond pseudo files, icons, fonts, desktop entries
# and shared libraries): transient files are opened once.
burst_exclude = ["/tmp/", "/var/tmp/", "/run/", "/var/log/", "/var/lib/warmstart/"]
# Files under these directories are never learned by the daemon: their paths are not stored
# and their pages not prefetched, at launches (an app's own executable and the script it runs
# still are) and in bursts (neither as a trigger nor as part of one). Remove "/home/" to let
# it learn what apps read there (documents, profiles); `warmstart record` learns whatever you
# point it at.
exclude_paths = ["/home/"]
# If not empty, only these executables are managed (full paths or names).
include = []
# Never managed: commands whose reads depend on their arguments, and short-lived tools.
exclude = ["cp", "mv", "rm", "ln", "find", "ls", "cat", "grep", "sed", "awk", "gawk", "mawk",
  "sort", "head", "tail", "wc", "tar", "gzip", "gunzip", "xz", "zstd", "bzip2", "rsync", "dd",
  "du", "df", "chmod", "chown", "touch", "mkdir", "rmdir", "stat", "readlink", "basename",
  "dirname", "env", "sleep", "true", "false", "test", "[", "tee", "xargs", "cut", "tr", "uniq",
  "diff", "cmp", "md5sum", "sha1sum", "sha256sum", "file", "which", "id", "date", "uname", "ps",
  "kill", "pgrep", "systemctl", "journalctl", "mount", "umount", "sudo", "su", "ssh", "scp",
  "curl", "wget", "git", "make", "cc", "gcc", "g++", "ld", "as", "cargo", "rustc", "strace",
  "gdb", "dpkg", "apt", "apt-get", "warmstart", "warmstart-cli",
  "warmstart-bench", "warmstart-synth"]
"#;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {msg}")]
    Parse { path: String, msg: String },
    #[error("{path}: line {line}: {msg}")]
    Value {
        path: String,
        line: usize,
        msg: String,
    },
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub n_rawseq: u32,
    pub n_chk: u32,
    pub r_miss: f64,
    pub w_miss: f64,
    pub sync_readahead_share: f64,
    pub t_idle_secs: f64,
    pub t_timeout_secs: f64,
    pub min_launch_kb: u64,
    pub memory_cap_mb: u64,
    pub jobs: usize,
    pub buffer_kb: u32,
    pub max_traces: usize,
    pub max_instances: usize,
    pub max_workers: usize,
    pub learn_window_hours: f64,
    pub rank_by_emulation: bool,
    pub prune_after_days: u32,
    pub bursts: bool,
    pub burst_min_kb: u64,
    pub burst_check_secs: f64,
    pub burst_used_share: f64,
    pub burst_bandwidth_share: f64,
    pub burst_queue_size: usize,
    pub burst_iops_threshold: f64,
    pub burst_length_threshold: usize,
    pub burst_exclude: Vec<String>,
    pub exclude_paths: Vec<String>,
    pub include: Vec<String>,
    pub exclude: Vec<String>,
}

impl Default for Config {
    /// Must match `DEFAULT_TOML` (a test checks that the documented file parses to this).
    fn default() -> Self {
        Config {
            n_rawseq: 2,
            n_chk: 5,
            r_miss: 0.1,
            w_miss: 0.02,
            sync_readahead_share: 0.1,
            t_idle_secs: 2.0,
            t_timeout_secs: 30.0,
            min_launch_kb: 2048,
            memory_cap_mb: 0,
            jobs: 4,
            buffer_kb: 8192,
            max_traces: 4,
            max_instances: 6,
            max_workers: 32,
            learn_window_hours: 24.0,
            rank_by_emulation: true,
            prune_after_days: 90,
            bursts: true,
            burst_min_kb: 256,
            burst_check_secs: 10.0,
            burst_used_share: 0.9,
            burst_bandwidth_share: 1.0,
            burst_queue_size: 6000,
            burst_iops_threshold: 0.0,
            burst_length_threshold: 100,
            burst_exclude: [
                "/tmp/",
                "/var/tmp/",
                "/run/",
                "/var/log/",
                "/var/lib/warmstart/",
            ]
            .map(String::from)
            .to_vec(),
            exclude_paths: vec!["/home/".to_string()],
            include: vec![],
            exclude: DEFAULT_EXCLUDE.iter().map(|s| s.to_string()).collect(),
        }
    }
}

const DEFAULT_EXCLUDE: &[&str] = &[
    "cp",
    "mv",
    "rm",
    "ln",
    "find",
    "ls",
    "cat",
    "grep",
    "sed",
    "awk",
    "gawk",
    "mawk",
    "sort",
    "head",
    "tail",
    "wc",
    "tar",
    "gzip",
    "gunzip",
    "xz",
    "zstd",
    "bzip2",
    "rsync",
    "dd",
    "du",
    "df",
    "chmod",
    "chown",
    "touch",
    "mkdir",
    "rmdir",
    "stat",
    "readlink",
    "basename",
    "dirname",
    "env",
    "sleep",
    "true",
    "false",
    "test",
    "[",
    "tee",
    "xargs",
    "cut",
    "tr",
    "uniq",
    "diff",
    "cmp",
    "md5sum",
    "sha1sum",
    "sha256sum",
    "file",
    "which",
    "id",
    "date",
    "uname",
    "ps",
    "kill",
    "pgrep",
    "systemctl",
    "journalctl",
    "mount",
    "umount",
    "sudo",
    "su",
    "ssh",
    "scp",
    "curl",
    "wget",
    "git",
    "make",
    "cc",
    "gcc",
    "g++",
    "ld",
    "as",
    "cargo",
    "rustc",
    "strace",
    "gdb",
    "dpkg",
    "apt",
    "apt-get",
    "warmstart",
    "warmstart-cli",
    "warmstart-bench",
    "warmstart-synth",
];

fn line_of_key(text: &str, key: &str) -> usize {
    text.lines()
        .position(|l| {
            let t = l.trim_start();
            t.strip_prefix(key)
                .is_some_and(|r| r.trim_start().starts_with('='))
        })
        .map(|i| i + 1)
        .unwrap_or(1)
}

impl Config {
    /// Load `path`; a missing file gives the defaults.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        match std::fs::read_to_string(path) {
            Ok(text) => Config::parse(&text, &path.display().to_string()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Config::default()),
            Err(source) => Err(ConfigError::Io {
                path: path.display().to_string(),
                source,
            }),
        }
    }

    pub fn parse(text: &str, path: &str) -> Result<Config, ConfigError> {
        let c: Config = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_string(),
            msg: e.to_string().trim().replace('\n', " "),
        })?;
        let bad = |key: &str, msg: &str| ConfigError::Value {
            path: path.to_string(),
            line: line_of_key(text, key),
            msg: format!("{key}: {msg}"),
        };
        if c.n_rawseq == 0 || c.n_rawseq > 20 {
            return Err(bad("n_rawseq", "must be 1..=20"));
        }
        if c.n_chk == 0 {
            return Err(bad("n_chk", "must be at least 1"));
        }
        if !(0.0..=1.0).contains(&c.r_miss) {
            return Err(bad("r_miss", "must be between 0 and 1"));
        }
        if !(0.0..=1.0).contains(&c.w_miss) {
            return Err(bad("w_miss", "must be between 0 and 1"));
        }
        if !(0.0..=1.0).contains(&c.sync_readahead_share) {
            return Err(bad("sync_readahead_share", "must be between 0 and 1"));
        }
        if !(c.t_idle_secs > 0.0 && c.t_idle_secs <= 3600.0) {
            return Err(bad("t_idle_secs", "must be in (0, 3600]"));
        }
        if !(c.t_timeout_secs > 0.0 && c.t_timeout_secs <= 3600.0) {
            return Err(bad("t_timeout_secs", "must be in (0, 3600]"));
        }
        if c.jobs == 0 || c.jobs > 64 {
            return Err(bad("jobs", "must be 1..=64"));
        }
        if !(c.burst_bandwidth_share > 0.0 && c.burst_bandwidth_share <= 1.0) {
            return Err(bad("burst_bandwidth_share", "must be in (0, 1]"));
        }
        if c.buffer_kb < 256 {
            return Err(bad("buffer_kb", "must be at least 256"));
        }
        if c.max_traces == 0 || c.max_traces > 64 {
            return Err(bad("max_traces", "must be 1..=64"));
        }
        // The miner and a burst check's watch, and one launch's trace.
        if c.max_instances < 3 || c.max_instances > 64 {
            return Err(bad("max_instances", "must be 3..=64"));
        }
        if c.max_workers < 2 || c.max_workers > 1024 {
            return Err(bad("max_workers", "must be 2..=1024"));
        }
        if !(c.learn_window_hours > 0.0 && c.learn_window_hours <= 24.0 * 366.0) {
            return Err(bad("learn_window_hours", "must be in (0, 8784]"));
        }
        if !(c.burst_check_secs > 0.0 && c.burst_check_secs <= 3600.0) {
            return Err(bad("burst_check_secs", "must be in (0, 3600]"));
        }
        if !(0.0..=1.0).contains(&c.burst_used_share) {
            return Err(bad("burst_used_share", "must be between 0 and 1"));
        }
        if !(2..=1_000_000).contains(&c.burst_queue_size) {
            return Err(bad("burst_queue_size", "must be 2..=1000000"));
        }
        if !(c.burst_iops_threshold >= 0.0 && c.burst_iops_threshold.is_finite()) {
            return Err(bad(
                "burst_iops_threshold",
                "must be 0 (from the device) or positive",
            ));
        }
        if c.burst_length_threshold == 0 {
            return Err(bad("burst_length_threshold", "must be at least 1"));
        }
        Ok(c)
    }

    /// How long a first launch is remembered, waiting for a second one to learn from.
    pub fn learn_window(&self) -> Duration {
        Duration::from_secs_f64(self.learn_window_hours * 3600.0)
    }

    /// The burst service's settings, for a device of `iops_qd1` depth-1 IOPS.
    /// The burst service's settings on a device of these measured facts.
    pub fn burst_settings(
        &self,
        iops_qd1: f64,
        seq_mib_s: f64,
    ) -> crate::cluster::service::Settings {
        let mut miner = crate::cluster::miner::MinerConfig::for_device(iops_qd1);
        miner.queue_size = self.burst_queue_size;
        miner.length_threshold = self.burst_length_threshold;
        miner.exclude = self.burst_exclude.clone();
        // Private directories are never learned: no trigger there either.
        miner.exclude.extend(
            self.exclude_paths
                .iter()
                .filter(|p| p.starts_with('/'))
                .cloned(),
        );
        if self.burst_iops_threshold > 0.0 {
            miner.iops_threshold = self.burst_iops_threshold;
        }
        crate::cluster::service::Settings {
            miner,
            min_kb: self.burst_min_kb,
            check_after: Duration::from_secs_f64(self.burst_check_secs),
            used_share: self.burst_used_share,
            jobs: self.jobs,
            private: self.exclude_paths.clone(),
            max_rate: (self.burst_bandwidth_share < 1.0 && seq_mib_s > 0.0)
                .then_some((self.burst_bandwidth_share * seq_mib_s * 1024.0 * 1024.0) as u64),
        }
    }

    pub fn idle(&self) -> Duration {
        Duration::from_secs_f64(self.t_idle_secs)
    }

    pub fn timeout(&self) -> Duration {
        Duration::from_secs_f64(self.t_timeout_secs)
    }

    /// Whether the daemon manages launches of `exe` running `program` (the script of an
    /// interpreter, if any). Entries match a full path or a file name of either.
    pub fn manages(&self, exe: &Path, program: &[String]) -> bool {
        let mut names: Vec<String> = Vec::new();
        for p in std::iter::once(exe.display().to_string()).chain(program.iter().cloned()) {
            if let Some(n) = Path::new(&p).file_name() {
                names.push(n.to_string_lossy().into_owned());
            }
            names.push(p);
        }
        let listed = |l: &[String]| l.iter().any(|x| names.contains(x));
        if !self.include.is_empty() {
            return listed(&self.include);
        }
        // Excluded tools are excluded as executables, not as scripts they happen to run.
        let exe_name = exe
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        !self
            .exclude
            .iter()
            .any(|x| *x == exe_name || *x == exe.display().to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_bandwidth_share_caps_their_prefetch_rate() {
        let c = Config::parse("burst_bandwidth_share = 0.5\n", "c.toml").unwrap();
        assert_eq!(
            c.burst_settings(1000.0, 100.0).max_rate,
            Some(50 * 1024 * 1024)
        );
        assert_eq!(
            Config::default().burst_settings(1000.0, 100.0).max_rate,
            None
        );
        assert!(Config::parse("burst_bandwidth_share = 0\n", "c.toml").is_err());
        // exclude_paths keeps bursts out of /home too: no trigger, no file there.
        let st = Config::default().burst_settings(1000.0, 100.0);
        assert!(st.miner.exclude.contains(&"/home/".to_string()));
        assert_eq!(st.private, ["/home/"]);
    }

    #[test]
    fn defaults_come_from_the_documented_file() {
        let c = Config::default();
        assert_eq!((c.n_rawseq, c.n_chk, c.r_miss), (2, 5, 0.1));
        assert_eq!(c.idle(), Duration::from_secs(2));
        assert!(c.exclude.iter().any(|x| x == "cp") && c.exclude.iter().any(|x| x == "find"));
        assert_eq!(Config::parse(DEFAULT_TOML, "x").unwrap(), c);
        assert_eq!(
            Config::parse("", "x").unwrap(),
            c,
            "an empty file is all defaults"
        );
    }

    #[test]
    fn missing_file_is_defaults() {
        assert_eq!(
            Config::load(Path::new("/nonexistent/warmstart.toml")).unwrap(),
            Config::default()
        );
    }

    #[test]
    fn errors_name_the_line() {
        let e = Config::parse("n_chk = 3\nr_miss = 7\n", "c.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 2") && e.contains("r_miss"), "{e}");
        let e = Config::parse("n_chk = 3\nbogus = 1\n", "c.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("bogus") && e.contains("line 2"), "{e}");
        let e = Config::parse("n_chk = \"three\"\n", "c.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 1"), "{e}");
    }

    #[test]
    fn include_and_exclude() {
        let c = Config::default();
        assert!(!c.manages(Path::new("/usr/bin/cp"), &[]));
        assert!(c.manages(Path::new("/usr/bin/gimp"), &[]));
        let c = Config::parse(
            "include = [\"/opt/app/bin/app\", \"gimp\", \"soffice\"]\n",
            "x",
        )
        .unwrap();
        assert!(c.manages(Path::new("/opt/app/bin/app"), &[]));
        assert!(c.manages(Path::new("/usr/bin/gimp"), &[]));
        assert!(!c.manages(Path::new("/usr/bin/inkscape"), &[]));
        // A script run by an interpreter matches by the script.
        assert!(c.manages(
            Path::new("/usr/bin/dash"),
            &["/usr/lib/libreoffice/program/soffice".into()]
        ));
        assert!(!c.manages(Path::new("/usr/bin/dash"), &["/tmp/other.sh".into()]));
    }
}
