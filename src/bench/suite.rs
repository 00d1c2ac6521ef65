//! The benchmark suite file (`bench/suite.toml`; the format is documented at its top): which
//! applications to launch, how, and when a launch counts as complete. Errors name the line.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use regex::Regex;
use serde::Deserialize;

#[derive(Debug, thiserror::Error)]
pub enum SuiteError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{origin}: {msg}")]
    Parse { origin: String, msg: String },
    #[error("{origin}: line {line}: app `{app}`: {msg}")]
    Invalid {
        origin: String,
        line: usize,
        app: String,
        msg: String,
    },
    #[error("no app named `{name}` in the suite; its apps: {known}")]
    NoSuchApp { name: String, known: String },
}

/// When a launch is complete.
#[derive(Clone, Debug)]
pub enum Ready {
    /// The launched process exits.
    Exit,
    /// A line of stdout or stderr matches.
    Output(Regex),
    /// A file exists.
    File(String),
    /// A mapped top-level X11 window's title matches (the app runs under Xvfb).
    Window(Regex),
}

impl Ready {
    pub fn is_gui(&self) -> bool {
        matches!(self, Ready::Window(_))
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
enum ReadyRaw {
    Keyword(String),
    Table(BTreeMap<String, String>),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AppRaw {
    name: toml::Spanned<String>,
    command: Vec<String>,
    #[serde(default)]
    packages: Vec<String>,
    #[serde(default)]
    setup: Vec<String>,
    #[serde(default)]
    ready: Option<ReadyRaw>,
    #[serde(default)]
    timeout: Option<u64>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    pip: Vec<String>,
}

/// A loading of an already running application (ClusterFetch's evaluation).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LoadingRaw {
    name: toml::Spanned<String>,
    command: Vec<String>,
    started: String,
    load: String,
    loaded: String,
    #[serde(default)]
    packages: Vec<String>,
    #[serde(default)]
    setup: Vec<String>,
    #[serde(default)]
    timeout: Option<u64>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    pip: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SuiteRaw {
    #[serde(default)]
    app: Vec<AppRaw>,
    #[serde(default)]
    loading: Vec<LoadingRaw>,
}

/// One application of the suite, with `{work}` and `{venv}` still unexpanded.
#[derive(Clone, Debug)]
pub struct AppSpec {
    pub name: String,
    pub command: Vec<String>,
    pub packages: Vec<String>,
    pub setup: Vec<String>,
    pub ready: Ready,
    pub timeout: Duration,
    pub env: BTreeMap<String, String>,
    pub pip: Vec<String>,
}

impl AppSpec {
    /// A one-off command (`warmstart bench -- CMD...`): ready when it exits.
    pub fn adhoc(command: Vec<String>) -> AppSpec {
        AppSpec {
            name: "adhoc".into(),
            command,
            packages: vec![],
            setup: vec![],
            ready: Ready::Exit,
            timeout: Duration::from_secs(120),
            env: BTreeMap::new(),
            pip: vec![],
        }
    }
}

/// One loading scenario: `command` starts an application that prints a line matching
/// `started` once it is up and waiting; the line `load` written to its stdin makes it load
/// (open the trigger file and what follows), and a line matching `loaded` says it is done.
#[derive(Clone, Debug)]
pub struct LoadingSpec {
    pub name: String,
    pub command: Vec<String>,
    pub started: Regex,
    pub load: String,
    pub loaded: Regex,
    pub packages: Vec<String>,
    pub setup: Vec<String>,
    pub timeout: Duration,
    pub env: BTreeMap<String, String>,
    pub pip: Vec<String>,
}

impl LoadingSpec {
    /// The launch-shaped part of it (name, command, setup, environment, timeout), for the
    /// harness's per-app plumbing: work directory, setup, environment.
    pub fn as_app(&self) -> AppSpec {
        AppSpec {
            name: self.name.clone(),
            command: self.command.clone(),
            packages: self.packages.clone(),
            setup: self.setup.clone(),
            ready: Ready::Output(self.loaded.clone()),
            timeout: self.timeout,
            env: self.env.clone(),
            pip: self.pip.clone(),
        }
    }
}

#[derive(Clone, Debug)]
pub struct Suite {
    pub apps: Vec<AppSpec>,
    pub loadings: Vec<LoadingSpec>,
}

/// The checks every entry shares (its name, not taken already, its command, its timeout):
/// the timeout.
fn check_entry(
    name: &str,
    taken: bool,
    command: &[String],
    timeout: Option<u64>,
    invalid: &dyn Fn(String) -> SuiteError,
) -> Result<Duration, SuiteError> {
    if name.is_empty() || name.contains(|c: char| c == ',' || c.is_whitespace()) {
        return Err(invalid(
            "a name must be non-empty, without spaces or commas".into(),
        ));
    }
    if taken {
        return Err(invalid("duplicate name".into()));
    }
    if command.first().is_none_or(|c| c.is_empty()) {
        return Err(invalid("`command` must name a program".into()));
    }
    match timeout.unwrap_or(60) {
        t @ 1..=3600 => Ok(Duration::from_secs(t)),
        _ => Err(invalid("timeout must be 1..=3600 seconds".into())),
    }
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

impl Suite {
    pub fn load(path: &Path) -> Result<Suite, SuiteError> {
        let text = std::fs::read_to_string(path).map_err(|source| SuiteError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Suite::parse(&text, &path.display().to_string())
    }

    pub fn parse(text: &str, origin: &str) -> Result<Suite, SuiteError> {
        let raw: SuiteRaw = toml::from_str(text).map_err(|e| SuiteError::Parse {
            origin: origin.to_string(),
            // toml's message already says "line N, column M".
            msg: e.to_string().trim().replace('\n', " "),
        })?;
        let mut apps: Vec<AppSpec> = Vec::new();
        for a in raw.app {
            let line = line_of(text, a.name.span().start);
            let name = a.name.into_inner();
            let invalid = |msg: String| SuiteError::Invalid {
                origin: origin.to_string(),
                line,
                app: name.clone(),
                msg,
            };
            let timeout = check_entry(
                &name,
                apps.iter().any(|x| x.name == name),
                &a.command,
                a.timeout,
                &invalid,
            )?;
            let ready = match a.ready {
                None => Ready::Exit,
                Some(ReadyRaw::Keyword(k)) if k == "exit" => Ready::Exit,
                Some(ReadyRaw::Keyword(k)) => {
                    return Err(invalid(format!(
                        "ready = \"{k}\": the only keyword is \"exit\"; use a table for output, file or window"
                    )))
                }
                Some(ReadyRaw::Table(t)) => {
                    if t.len() != 1 {
                        return Err(invalid("ready table takes exactly one of output, file, window".into()));
                    }
                    let (k, v) = t.into_iter().next().ok_or_else(|| invalid("empty ready".into()))?;
                    let re = |v: &str| Regex::new(v).map_err(|e| invalid(format!("ready.{k}: bad regex: {e}")));
                    match k.as_str() {
                        "output" => Ready::Output(re(&v)?),
                        "window" => Ready::Window(re(&v)?),
                        "file" => Ready::File(v),
                        _ => return Err(invalid(format!("unknown ready condition `{k}` (output, file, window)"))),
                    }
                }
            };
            apps.push(AppSpec {
                name,
                command: a.command,
                packages: a.packages,
                setup: a.setup,
                ready,
                timeout,
                env: a.env,
                pip: a.pip,
            });
        }
        let mut loadings: Vec<LoadingSpec> = Vec::new();
        for l in raw.loading {
            let line = line_of(text, l.name.span().start);
            let name = l.name.into_inner();
            let invalid = |msg: String| SuiteError::Invalid {
                origin: origin.to_string(),
                line,
                app: name.clone(),
                msg,
            };
            // One work directory per name: apps and loadings share the namespace.
            let timeout = check_entry(
                &name,
                apps.iter().any(|x| x.name == name) || loadings.iter().any(|x| x.name == name),
                &l.command,
                l.timeout,
                &invalid,
            )?;
            if l.load.contains('\n') {
                return Err(invalid(
                    "`load` is one line (the harness ends it with a newline)".into(),
                ));
            }
            let re = |k: &str, v: &str| {
                Regex::new(v).map_err(|e| invalid(format!("{k}: bad regex: {e}")))
            };
            loadings.push(LoadingSpec {
                started: re("started", &l.started)?,
                loaded: re("loaded", &l.loaded)?,
                name,
                command: l.command,
                load: l.load,
                packages: l.packages,
                setup: l.setup,
                timeout,
                env: l.env,
                pip: l.pip,
            });
        }
        if apps.is_empty() && loadings.is_empty() {
            return Err(SuiteError::Parse {
                origin: origin.to_string(),
                msg: "no [[app]] or [[loading]] entries".into(),
            });
        }
        Ok(Suite { apps, loadings })
    }

    /// The apps named in `names` (all when empty), in suite order.
    pub fn select(&self, names: &[String]) -> Result<Vec<AppSpec>, SuiteError> {
        self.check_names(names)?;
        Ok(self
            .apps
            .iter()
            .filter(|a| names.is_empty() || names.contains(&a.name))
            .cloned()
            .collect())
    }

    /// The loadings named in `names` (all when empty), in suite order.
    pub fn select_loadings(&self, names: &[String]) -> Result<Vec<LoadingSpec>, SuiteError> {
        self.check_names(names)?;
        Ok(self
            .loadings
            .iter()
            .filter(|l| names.is_empty() || names.contains(&l.name))
            .cloned()
            .collect())
    }

    fn check_names(&self, names: &[String]) -> Result<(), SuiteError> {
        let known: Vec<&str> = self
            .apps
            .iter()
            .map(|a| a.name.as_str())
            .chain(self.loadings.iter().map(|l| l.name.as_str()))
            .collect();
        match names.iter().find(|n| !known.contains(&n.as_str())) {
            Some(n) => Err(SuiteError::NoSuchApp {
                name: n.clone(),
                known: known.join(", "),
            }),
            None => Ok(()),
        }
    }
}

/// Replace `{work}` and `{venv}`.
pub fn expand(s: &str, work: &Path, venv: &Path) -> String {
    s.replace("{work}", &work.display().to_string())
        .replace("{venv}", &venv.display().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
# a comment
[[app]]
name = "a"
command = ["true"]

[[app]]
name = "b"
command = ["sh", "-c", "echo ready"]
ready = { output = "^ready$" }
timeout = 5
env = { X = "{work}/x" }

[[app]]
name = "c"
command = ["x"]
ready = { window = "Main Window" }
"#;

    #[test]
    fn parses_the_formats() {
        let s = Suite::parse(GOOD, "t").unwrap();
        assert_eq!(s.apps.len(), 3);
        assert!(matches!(s.apps[0].ready, Ready::Exit));
        assert!(matches!(&s.apps[1].ready, Ready::Output(r) if r.is_match("ready")));
        assert_eq!(s.apps[1].timeout, Duration::from_secs(5));
        assert!(s.apps[2].ready.is_gui());
        assert_eq!(s.select(&["b".into()]).unwrap()[0].name, "b");
        let e = s.select(&["zz".into()]).unwrap_err();
        assert!(matches!(e, SuiteError::NoSuchApp { .. }));
        // The message names the suite's apps, not an option that does not exist.
        assert!(e.to_string().contains("its apps: a, b, c"), "{e}");
    }

    #[test]
    fn the_shipped_suite_parses() {
        let s = Suite::load(Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/bench/suite.toml"
        )))
        .unwrap();
        assert!(s.apps.len() >= 10);
        for want in [
            "soffice-convert",
            "writer-gui",
            "gimp-batch",
            "gimp-gui",
            "chromium-dump-dom",
            "inkscape-export",
            "python-imports",
            "r-vanilla",
            "pdflatex",
            "java-single-file",
            "npm-version",
        ] {
            assert!(s.apps.iter().any(|a| a.name == want), "{want} missing");
        }
        for want in ["python-load", "gimp-open-pdf"] {
            assert!(s.loadings.iter().any(|l| l.name == want), "{want} missing");
        }
    }

    fn err(text: &str) -> String {
        Suite::parse(text, "suite.toml").unwrap_err().to_string()
    }

    #[test]
    fn errors_name_the_line() {
        let e = err("[[app]]\nname = \"a\"\ncommand = [\"x\"]\n\n[[app]]\nname = \"a\"\ncommand = [\"y\"]\n");
        assert!(e.contains("line 6") && e.contains("duplicate"), "{e}");
        let e = err("[[app]]\nname = \"a\"\ncommand = [\"x\"]\nready = { output = \"(\" }\n");
        assert!(e.contains("line 2") && e.contains("bad regex"), "{e}");
        let e = err("[[app]]\nname = \"a\"\ncommand = [\"x\"]\nready = \"soon\"\n");
        assert!(e.contains("line 2") && e.contains("exit"), "{e}");
        let e = err("[[app]]\nname = \"a\"\ncommand = []\n");
        assert!(e.contains("command"), "{e}");
        let e = err("[[app]]\nname = \"a\"\ncomand = [\"x\"]\n");
        assert!(e.contains("line 3") && e.contains("comand"), "{e}");
        let e = err("[[app]]\nname = \"a\"\ncommand = [\"x\"\n");
        assert!(e.contains("line"), "{e}");
        assert!(err("").contains("no [[app]] or [[loading]]"));
        let e = err("[[app]]\nname = \"a\"\ncommand = [\"x\"]\nready = { flie = \"x\" }\n");
        assert!(e.contains("unknown ready condition"), "{e}");
    }

    #[test]
    fn parses_loadings_and_checks_them() {
        let text = "[[loading]]\nname = \"l\"\ncommand = [\"py\"]\nstarted = \"^up$\"\n\
                    load = \"{work}/p\"\nloaded = \"^done$\"\ntimeout = 9\n";
        let s = Suite::parse(text, "t").unwrap();
        assert!(s.apps.is_empty());
        let l = &s.loadings[0];
        assert!(l.started.is_match("up") && l.loaded.is_match("done"));
        assert_eq!(l.load, "{work}/p");
        assert_eq!(l.timeout, Duration::from_secs(9));
        // Selected by name like an app; a name of neither is an error naming both kinds.
        assert_eq!(s.select_loadings(&["l".into()]).unwrap().len(), 1);
        assert!(s.select(&["l".into()]).unwrap().is_empty());
        let e = s.select_loadings(&["zz".into()]).unwrap_err().to_string();
        assert!(e.contains("its apps: l"), "{e}");
        let e = err(&format!("[[app]]\nname = \"l\"\ncommand = [\"x\"]\n{text}"));
        assert!(e.contains("duplicate name") && e.contains("line 5"), "{e}");
        let e = err(&text.replace("^done$", "("));
        assert!(e.contains("loaded: bad regex"), "{e}");
        let e = err(&text.replace("started = \"^up$\"\n", ""));
        assert!(e.contains("started"), "{e}");
    }

    #[test]
    fn expands_placeholders() {
        assert_eq!(
            expand("{work}/a {venv}/b", Path::new("/w"), Path::new("/v")),
            "/w/a /v/b"
        );
    }
}
