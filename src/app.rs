//! What an "app" is: its resolved executable plus the arguments that select the program it
//! runs. For interpreters (python, perl, ruby, node, shells, java) that is the script, module,
//! inline code or jar; other programs are keyed by their executable alone, so the same
//! application launched on different documents shares one plan.

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

fn selector(i: Interp, args: &[String]) -> Vec<String> {
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if program_option(i, a) {
            let v = it.next().cloned().unwrap_or_default();
            let v = if a == "-jar" { canonical_arg(&v) } else { v };
            return vec![a.clone(), v];
        }
        if takes_value(i, a) {
            it.next();
            continue;
        }
        if a == "--" {
            return it
                .next()
                .map(|s| vec![canonical_arg(s)])
                .unwrap_or_default();
        }
        if a.starts_with('-') && a.len() > 1 {
            continue;
        }
        return vec![canonical_arg(a)];
    }
    Vec::new()
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
        let sel = interpreter(&canon)
            .or_else(|| interpreter(&invoked))
            .map(|i| selector(i, &args))
            .unwrap_or_default();
        let mut key = lossless(exe.as_os_str());
        for s in &sel {
            key.push(' ');
            key.push_str(&quote(s));
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
        if !rest.starts_with('/') {
            return None;
        }
        let exe = Path::new(exe);
        // Only the key an exec of this script would get: quoting, options and other forms
        // of the selector never match.
        let again = AppKey::for_command(exe, &[exe.as_os_str().to_owned(), rest.into()]);
        (again.key == key).then(|| PathBuf::from(rest))
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
    fn plain_programs_are_keyed_by_executable() {
        assert_eq!(
            key(
                "/nonexistent/soffice",
                &["--headless", "--convert-to", "pdf", "a.txt"]
            ),
            "/nonexistent/soffice"
        );
        assert_eq!(
            key("/nonexistent/pythonic-tool", &["x"]),
            "/nonexistent/pythonic-tool"
        );
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
