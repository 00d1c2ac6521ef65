//! What an "app" is: its resolved executable plus the arguments that select the program it
//! runs. For interpreters (python, perl, ruby, node, shells, java) that is the script, module,
//! inline code or jar; other programs by their executable. Then the names of the options it
//! is given, its mode: a batch conversion and the editor's window are two apps, since they
//! read different files (`gimp -i -b` needed 82% of the plan learned from both of GIMP's
//! modes, docs/measurements.md, 2026-11-29, tenth entry). The documents and the options'
//! values are not part of it: the same application on different documents shares one plan.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppKey {
    /// The key as stored and shown.
    pub key: String,
    pub exe: PathBuf,
    /// The program-selecting arguments (empty for plain executables).
    pub selector: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Interp {
    Python,
    Perl,
    Ruby,
    Node,
    Shell,
    Java,
}

fn interpreter(name: &str) -> Option<Interp> {
    let base = name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    Some(match base {
        "python" | "pypy" => Interp::Python,
        "perl" => Interp::Perl,
        "ruby" => Interp::Ruby,
        "node" | "nodejs" => Interp::Node,
        "sh" | "bash" | "dash" | "zsh" | "ksh" | "mksh" => Interp::Shell,
        "java" => Interp::Java,
        _ => return None,
    })
}

/// Options that consume the next argument, per interpreter.
fn takes_value(i: Interp, opt: &str) -> bool {
    match i {
        Interp::Python => matches!(opt, "-W" | "-X" | "--check-hash-based-pycs"),
        Interp::Perl | Interp::Ruby => matches!(opt, "-I" | "-M" | "-r"),
        Interp::Node => matches!(opt, "-r" | "--require" | "--import" | "--loader"),
        Interp::Shell => matches!(opt, "-o" | "+o" | "-O" | "+O"),
        Interp::Java => matches!(
            opt,
            "-cp"
                | "-classpath"
                | "--class-path"
                | "-p"
                | "--module-path"
                | "--add-modules"
                | "--add-opens"
                | "--add-exports"
                | "--enable-native-access"
                | "--source"
        ),
    }
}

/// Options whose value is the program itself.
fn program_option(i: Interp, opt: &str) -> bool {
    match i {
        Interp::Python => matches!(opt, "-c" | "-m"),
        Interp::Perl | Interp::Ruby => matches!(opt, "-e" | "-E"),
        Interp::Node => matches!(opt, "-e" | "--eval" | "-p" | "--print"),
        Interp::Shell => opt == "-c",
        Interp::Java => matches!(opt, "-jar" | "-m" | "--module"),
    }
}

fn canonical_arg(a: &str) -> String {
    std::fs::canonicalize(a)
        .map(|p| lossless(p.as_os_str()))
        .unwrap_or_else(|_| a.to_string())
}

/// `s` as text without losing a byte: valid UTF-8 without a backslash as it is; otherwise
/// each invalid byte as `\xNN` and `\` as `\\`, so that two names differing only in
/// non-UTF-8 bytes stay two apps (with a lossy conversion, scripts `c-\xff.sh` and
/// `c-\xfe.sh` were one), and a name spelling `\xff` out is not the one holding the byte
/// (found by fuzzing, `fuzz::app_key`).
pub fn lossless(s: &std::ffi::OsStr) -> String {
    use std::os::unix::ffi::OsStrExt;
    let b = s.as_bytes();
    if let Ok(t) = std::str::from_utf8(b) {
        if !t.contains('\\') {
            return t.to_string();
        }
    }
    let mut out = String::new();
    for chunk in b.utf8_chunks() {
        out.push_str(&chunk.valid().replace('\\', "\\\\"));
        for x in chunk.invalid() {
            out.push_str(&format!("\\x{x:02x}"));
        }
    }
    out
}

/// The program-selecting arguments of `args` and where the program's own arguments start.
fn selector(i: Interp, args: &[String]) -> (Vec<String>, usize) {
    let mut k = 0;
    while k < args.len() {
        let a = &args[k];
        if program_option(i, a) {
            let v = args.get(k + 1).cloned().unwrap_or_default();
            let v = if a == "-jar" { canonical_arg(&v) } else { v };
            return (vec![a.clone(), v], k + 2);
        }
        if takes_value(i, a) {
            k += 2;
            continue;
        }
        if a == "--" {
            return match args.get(k + 1) {
                Some(s) => (vec![canonical_arg(s)], k + 2),
                None => (Vec::new(), args.len()),
            };
        }
        if a.starts_with('-') && a.len() > 1 {
            k += 1;
            continue;
        }
        return (vec![canonical_arg(a)], k + 1);
    }
    (Vec::new(), args.len())
}

/// The mode of a program given `args`: the names of its options (`--export-type=png` is
/// `--export-type`), sorted, each once, up to a `--`. Values and documents are left out, and
/// so is a value that looks like an option only when it is glued to its name; a lone `-`
/// (standard input) is a document.
fn mode_of(args: &[String]) -> Vec<String> {
    let mut names = std::collections::BTreeSet::new();
    for a in args {
        if a == "--" {
            break;
        }
        if a.starts_with('-') && a.len() > 1 {
            names.insert(a.split('=').next().unwrap_or(a).to_string());
        }
    }
    names.into_iter().collect()
}

/// `key` without the mode `for_command` appends (` [--a -b]`).
pub fn without_mode(key: &str) -> &str {
    match key.strip_suffix(']').and_then(|k| k.rsplit_once(" [")) {
        Some((base, names))
            if names
                .split(' ')
                .all(|n| n.starts_with('-') || n.starts_with("'-")) =>
        {
            base
        }
        _ => key,
    }
}

fn quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+=:,@%".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

impl AppKey {
    /// The key of `argv` (argv[0] already resolved to `exe`).
    pub fn for_command(exe: &Path, argv: &[OsString]) -> AppKey {
        let exe = std::fs::canonicalize(exe).unwrap_or_else(|_| exe.to_path_buf());
        let args: Vec<String> = argv.iter().skip(1).map(|a| lossless(a)).collect();
        // A symlink named like an interpreter (python3 -> python3.11) counts too.
        let invoked = argv
            .first()
            .map(|a| {
                Path::new(a)
                    .file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned()
            })
            .unwrap_or_default();
        let canon = exe
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        // An interpreter without a program (`python3 -q`) has no mode: its options are the
        // interpreter's own, as are those before the program (`python3 -u a.py`).
        let (sel, mode) = match interpreter(&canon).or_else(|| interpreter(&invoked)) {
            Some(i) => match selector(i, &args) {
                (sel, _) if sel.is_empty() => (sel, Vec::new()),
                (sel, rest) => (sel, mode_of(args.get(rest..).unwrap_or_default())),
            },
            None => (Vec::new(), mode_of(&args)),
        };
        let mut key = lossless(exe.as_os_str());
        for s in &sel {
            key.push(' ');
            key.push_str(&quote(s));
        }
        if !mode.is_empty() {
            let names: Vec<String> = mode.iter().map(|m| quote(m)).collect();
            key.push_str(&format!(" [{}]", names.join(" ")));
        }
        AppKey {
            key,
            exe,
            selector: sel,
        }
    }

    /// Whether an executable named `name` is an interpreter, whose app depends on its
    /// arguments (so it cannot be keyed from the executable alone).
    pub fn is_interpreter(name: &str) -> bool {
        interpreter(name).is_some()
    }

    /// The script an interpreter's key names (`/usr/bin/dash /usr/bin/script`): the file the
    /// kernel opens for exec before the interpreter, when the script is run by its `#!` line.
    /// None for any other key (a program, `python -c ...`, `java -jar ...`, a chosen name).
    pub fn script_of(key: &str, exe: &str) -> Option<PathBuf> {
        let rest = key.strip_prefix(exe)?.strip_prefix(' ')?;
        let rest = without_mode(rest);
        if !rest.starts_with('/') {
            return None;
        }
        // Only the key an exec of this script would get: quoting, options and other forms
        // of the selector never match.
        let path = Path::new(exe);
        let again = AppKey::for_command(path, &[path.as_os_str().to_owned(), rest.into()]);
        (again.key == format!("{exe} {rest}")).then(|| PathBuf::from(rest))
    }

    /// The file whose open for exec starts a launch of the app `key` of `exe`, before its
    /// arguments can be read: the executable of a program, the script of an interpreter's
    /// app run by its `#!` line; None for any other interpreter's app.
    pub fn opened_for_exec(key: &str, exe: &str) -> Option<PathBuf> {
        let name = Path::new(exe).file_name()?.to_string_lossy();
        if !AppKey::is_interpreter(&name) {
            return Some(PathBuf::from(exe));
        }
        AppKey::script_of(key, exe)
    }

    /// A user-chosen name instead of the derived key.
    pub fn named(name: &str, exe: &Path) -> AppKey {
        AppKey {
            key: name.to_string(),
            exe: exe.to_path_buf(),
            selector: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Scripts whose names differ only in non-UTF-8 bytes are two apps (issue #30, item 9);
    /// UTF-8 names keep the keys they had.
    #[test]
    fn non_utf8_names_do_not_collide() {
        use std::os::unix::ffi::OsStringExt;
        let sh = Path::new("/bin/sh");
        let key =
            |name: Vec<u8>| AppKey::for_command(sh, &["sh".into(), OsString::from_vec(name)]).key;
        let a = key(b"/nonexistent/c-\xff.sh".to_vec());
        let b = key(b"/nonexistent/c-\xfe.sh".to_vec());
        assert_ne!(a, b);
        assert!(a.contains("c-\\xff.sh"), "{a}");
        assert!(key(b"/nonexistent/caf\xc3\xa9.sh".to_vec()).contains("café.sh"));
    }

    fn key(exe: &str, args: &[&str]) -> String {
        let argv: Vec<OsString> = std::iter::once(exe)
            .chain(args.iter().copied())
            .map(Into::into)
            .collect();
        AppKey::for_command(Path::new(exe), &argv).key
    }

    #[test]
    fn a_script_is_found_in_its_interpreters_key() {
        let k = key("/nonexistent/dash", &["/nonexistent/front.sh", "--x"]);
        assert_eq!(
            AppKey::script_of(&k, "/nonexistent/dash"),
            Some(PathBuf::from("/nonexistent/front.sh"))
        );
        let py = key("/nonexistent/python3", &["-c", "import json"]);
        assert_eq!(AppKey::script_of(&py, "/nonexistent/python3"), None);
        let quoted = key("/nonexistent/dash", &["/nonexistent/a b.sh"]);
        assert_eq!(AppKey::script_of(&quoted, "/nonexistent/dash"), None);
        let program = key("/nonexistent/gimp", &["/nonexistent/x.png"]);
        assert_eq!(AppKey::script_of(&program, "/nonexistent/gimp"), None);
        assert_eq!(AppKey::script_of("chosen name", "/nonexistent/dash"), None);
    }

    #[test]
    fn interpreters_are_keyed_by_their_program() {
        assert_eq!(
            key("/nonexistent/python3", &["-X", "dev", "-c", "import json"]),
            "/nonexistent/python3 -c 'import json'"
        );
        assert_eq!(
            key("/nonexistent/python3.11", &["-m", "http.server", "8000"]),
            "/nonexistent/python3.11 -m http.server"
        );
        assert_eq!(
            key("/nonexistent/python3", &["-u", "/nonexistent/a.py", "x"]),
            "/nonexistent/python3 /nonexistent/a.py"
        );
        assert_ne!(
            key("/nonexistent/python3", &["/x/a.py"]),
            key("/nonexistent/python3", &["/x/b.py"])
        );
        assert_eq!(
            key("/nonexistent/bash", &["-c", "echo hi"]),
            "/nonexistent/bash -c 'echo hi'"
        );
        assert_eq!(
            key(
                "/nonexistent/java",
                &["-cp", "lib", "-jar", "/nonexistent/app.jar", "arg"]
            ),
            "/nonexistent/java -jar /nonexistent/app.jar"
        );
        assert_eq!(
            key("/nonexistent/java", &["Hello.java"]),
            "/nonexistent/java Hello.java"
        );
        assert_eq!(
            key("/nonexistent/node", &["--inspect", "srv.js"]),
            "/nonexistent/node srv.js"
        );
        assert_eq!(
            key("/nonexistent/perl", &["-e", "print 1"]),
            "/nonexistent/perl -e 'print 1'"
        );
    }

    #[test]
    fn plain_programs_are_keyed_by_executable_and_mode() {
        assert_eq!(
            key("/nonexistent/soffice", &["a.txt"]),
            "/nonexistent/soffice",
            "a document is not a mode"
        );
        assert_eq!(
            key(
                "/nonexistent/soffice",
                &[
                    "--headless",
                    "--convert-to",
                    "pdf",
                    "--outdir",
                    "/x",
                    "a.txt"
                ]
            ),
            "/nonexistent/soffice [--convert-to --headless --outdir]"
        );
        // Values, documents and the options' order do not make another app.
        assert_eq!(
            key("/nonexistent/gimp", &["-i", "-b", "(gimp-quit 0)"]),
            key("/nonexistent/gimp", &["-b", "-", "-i"]),
        );
        assert_eq!(
            key(
                "/nonexistent/inkscape",
                &[
                    "--export-type=png",
                    "--export-filename=/w/a.png",
                    "/w/a.svg"
                ]
            ),
            "/nonexistent/inkscape [--export-filename --export-type]"
        );
        assert_ne!(
            key("/nonexistent/gimp", &["-i", "-b", "x"]),
            key("/nonexistent/gimp", &["--no-splash"]),
        );
        assert_eq!(
            key("/nonexistent/tool", &["--", "-x"]),
            "/nonexistent/tool",
            "after `--`, only documents"
        );
        assert_eq!(
            key("/nonexistent/pythonic-tool", &["x"]),
            "/nonexistent/pythonic-tool"
        );
    }

    /// A script's options are its mode; the interpreter's own options are not.
    #[test]
    fn a_programs_options_after_an_interpreter_are_its_mode() {
        assert_eq!(
            key(
                "/nonexistent/python3",
                &["-u", "/nonexistent/a.py", "-v", "x"]
            ),
            "/nonexistent/python3 /nonexistent/a.py [-v]"
        );
        assert_eq!(
            key("/nonexistent/dash", &["/nonexistent/soffice", "--writer"]),
            "/nonexistent/dash /nonexistent/soffice [--writer]"
        );
        let k = key(
            "/nonexistent/dash",
            &["/nonexistent/soffice", "--writer", "'a b'"],
        );
        assert_eq!(
            AppKey::script_of(&k, "/nonexistent/dash"),
            Some(PathBuf::from("/nonexistent/soffice"))
        );
        let odd = key("/nonexistent/dash", &["/nonexistent/s", "--x y"]);
        assert_eq!(odd, "/nonexistent/dash /nonexistent/s ['--x y']");
        assert_eq!(
            AppKey::opened_for_exec(&k, "/nonexistent/dash"),
            Some(PathBuf::from("/nonexistent/soffice"))
        );
        let gimp = key("/nonexistent/gimp", &["-i"]);
        assert_eq!(
            AppKey::opened_for_exec(&gimp, "/nonexistent/gimp"),
            Some(PathBuf::from("/nonexistent/gimp"))
        );
        let py = key("/nonexistent/python3", &["-c", "import json", "-v"]);
        assert_eq!(py, "/nonexistent/python3 -c 'import json' [-v]");
        assert_eq!(AppKey::opened_for_exec(&py, "/nonexistent/python3"), None);
    }

    #[test]
    fn interpreter_without_program_is_the_bare_interpreter() {
        assert_eq!(key("/nonexistent/python3", &[]), "/nonexistent/python3");
        assert_eq!(key("/nonexistent/python3", &["-q"]), "/nonexistent/python3");
    }

    #[test]
    fn quoting() {
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("it's"), r"'it'\''s'");
        assert_eq!(quote("/usr/lib/x.py"), "/usr/lib/x.py");
        assert_eq!(quote(""), "''");
    }
}
