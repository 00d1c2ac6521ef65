//! `install`, `uninstall`, `man` and `completions`: warmstart's own files on a machine (the
//! binaries, the systemd unit, the configuration, man pages, shell completions), put in place
//! and taken away again, optionally under a staging root (`--destdir`, for packages).

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::CommandFactory;

use super::{code, require_root, Cli, InstallArgs, UninstallArgs};
use crate::daemon::config;

/// The binaries, in install order: the full command line before the front that execs it
/// (a front installed alone would fail every command), the benchmark last (optional).
const BINARIES: [&str; 3] = [super::front::FULL, "warmstart", "warmstart-bench"];

/// `path` under the staging root, if any (`/usr/bin/x` under `/tmp/d` is `/tmp/d/usr/bin/x`).
fn staged(destdir: Option<&Path>, path: &Path) -> PathBuf {
    match destdir {
        Some(d) => d.join(path.strip_prefix("/").unwrap_or(path)),
        None => path.to_path_buf(),
    }
}

/// Where each shell looks for completions under a `share` directory, and the file's name.
fn completion_paths(share: &Path) -> [(clap_complete::Shell, PathBuf); 3] {
    use clap_complete::Shell;
    [
        (
            Shell::Bash,
            share.join("bash-completion/completions/warmstart"),
        ),
        (Shell::Zsh, share.join("zsh/site-functions/_warmstart")),
        (
            Shell::Fish,
            share.join("fish/vendor_completions.d/warmstart.fish"),
        ),
    ]
}

/// The unit, naming the installed binary and, when not the default, the configuration.
pub fn unit_text(bin: &Path, config_path: &Path) -> String {
    let mut exec = format!("{} daemon", bin.display());
    if config_path != Path::new(config::DEFAULT_PATH) {
        exec.push_str(&format!(" --config {}", config_path.display()));
    }
    include_str!("../../packaging/warmstart.service")
        .replace("/usr/local/bin/warmstart daemon", &exec)
}

fn systemd_running() -> bool {
    Path::new("/run/systemd/system").exists()
}

fn create_dir(d: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))
}

pub fn install(a: InstallArgs) -> anyhow::Result<i32> {
    let dest = a.destdir.as_deref();
    if dest.is_none() {
        require_root("install")?;
    }
    let me = std::env::current_exe().context("locating this binary")?;
    let bin_dir = staged(dest, &a.bin_dir);
    create_dir(&bin_dir)?;
    for name in BINARIES {
        let from = me.with_file_name(name);
        if !from.exists() {
            anyhow::ensure!(
                name == "warmstart-bench",
                "{} is missing; build the binaries with `cargo build --release`, then install \
                 again",
                from.display()
            );
            println!(
                "skipped warmstart-bench (not built next to {}): `warmstart bench` needs it",
                me.display()
            );
            continue;
        }
        let to = bin_dir.join(name);
        // Copy to a temporary name and rename: a running daemon keeps its old binary intact.
        let tmp = bin_dir.join(format!(".{name}.new"));
        std::fs::copy(&from, &tmp).with_context(|| format!("copying to {}", tmp.display()))?;
        std::fs::rename(&tmp, &to).with_context(|| format!("installing {}", to.display()))?;
        println!("installed {}", to.display());
    }
    let unit_dir = staged(dest, &a.unit_dir);
    create_dir(&unit_dir)?;
    let unit_path = unit_dir.join("warmstart.service");
    std::fs::write(
        &unit_path,
        unit_text(&a.bin_dir.join("warmstart"), &a.config),
    )
    .with_context(|| format!("writing {}", unit_path.display()))?;
    println!("installed {}", unit_path.display());
    let config_path = staged(dest, &a.config);
    if config_path.exists() {
        println!("kept {}", config_path.display());
    } else {
        if let Some(d) = config_path.parent() {
            create_dir(d)?;
        }
        std::fs::write(&config_path, config::DEFAULT_TOML)
            .with_context(|| format!("writing {}", config_path.display()))?;
        println!("installed {}", config_path.display());
    }
    let share = staged(dest, &a.share_dir);
    let man_dir = share.join("man/man1");
    create_dir(&man_dir)?;
    clap_mangen::generate_to(Cli::command(), &man_dir)
        .with_context(|| format!("writing man pages into {}", man_dir.display()))?;
    println!("installed man pages in {}", man_dir.display());
    for (shell, path) in completion_paths(&share) {
        if let Some(d) = path.parent() {
            create_dir(d)?;
        }
        let mut f =
            std::fs::File::create(&path).with_context(|| format!("writing {}", path.display()))?;
        clap_complete::generate(shell, &mut Cli::command(), "warmstart", &mut f);
        println!("installed {}", path.display());
    }
    if dest.is_some() {
        return Ok(code::OK);
    }
    if systemd_running() {
        let _ = std::process::Command::new("systemctl")
            .arg("daemon-reload")
            .status();
        println!("next: systemctl enable --now warmstart");
    } else {
        println!(
            "systemd is not running here; start the daemon with: {} daemon",
            a.bin_dir.join("warmstart").display()
        );
    }
    Ok(code::OK)
}

/// Remove what `install` put in place (same options). The configuration and the database
/// stay unless `--purge`.
pub fn uninstall(a: UninstallArgs) -> anyhow::Result<i32> {
    let dest = a.destdir.as_deref();
    if dest.is_none() {
        require_root("uninstall")?;
        if systemd_running() {
            // Stopped first: the daemon restores every kernel setting it holds as it exits.
            let _ = std::process::Command::new("systemctl")
                .args(["disable", "--now", "warmstart"])
                .status();
        }
    }
    let mut removed = Vec::new();
    let mut remove = |p: PathBuf| -> anyhow::Result<()> {
        match std::fs::remove_file(&p) {
            Ok(()) => {
                removed.push(p);
                Ok(())
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e).with_context(|| format!("removing {}", p.display())),
        }
    };
    let bin_dir = staged(dest, &a.bin_dir);
    for name in BINARIES {
        remove(bin_dir.join(name))?;
    }
    remove(staged(dest, &a.unit_dir).join("warmstart.service"))?;
    let share = staged(dest, &a.share_dir);
    let man_dir = share.join("man/man1");
    if let Ok(rd) = std::fs::read_dir(&man_dir) {
        for e in rd.flatten() {
            let name = e.file_name();
            let name = name.to_string_lossy();
            if name == "warmstart.1" || (name.starts_with("warmstart-") && name.ends_with(".1")) {
                remove(e.path())?;
            }
        }
    }
    for (_, p) in completion_paths(&share) {
        remove(p)?;
    }
    let config_path = staged(dest, &a.config);
    let state = staged(dest, &a.state_dir);
    if a.purge {
        remove(config_path.clone())?;
        if let Some(d) = config_path.parent() {
            // The directory only if nothing else is in it.
            let _ = std::fs::remove_dir(d);
        }
        match std::fs::remove_dir_all(&state) {
            Ok(()) => removed.push(state.clone()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("removing {}", state.display())),
        }
    }
    for p in &removed {
        println!("removed {}", p.display());
    }
    if dest.is_none() && systemd_running() {
        let _ = std::process::Command::new("systemctl")
            .arg("daemon-reload")
            .status();
    }
    if !a.purge {
        let kept: Vec<String> = [&config_path, &state]
            .iter()
            .filter(|p| p.exists())
            .map(|p| p.display().to_string())
            .collect();
        if !kept.is_empty() {
            println!("kept {} (remove them too with --purge)", kept.join(" and "));
        }
    }
    Ok(code::OK)
}

/// Man pages, one per command, into `dir`.
pub fn man(dir: &Path) -> anyhow::Result<i32> {
    create_dir(dir)?;
    clap_mangen::generate_to(Cli::command(), dir)
        .with_context(|| format!("writing man pages into {}", dir.display()))?;
    Ok(code::OK)
}

/// A shell's completion script, on stdout.
pub fn completions(shell: clap_complete::Shell) -> anyhow::Result<i32> {
    clap_complete::generate(
        shell,
        &mut Cli::command(),
        "warmstart",
        &mut std::io::stdout(),
    );
    Ok(code::OK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_custom_config_is_named_in_the_units_exec_start() {
        let bin = Path::new("/opt/ws/bin/warmstart");
        let u = unit_text(bin, Path::new(config::DEFAULT_PATH));
        assert!(
            u.contains("\nExecStart=/opt/ws/bin/warmstart daemon\n"),
            "{u}"
        );
        let u = unit_text(bin, Path::new("/srv/ws.toml"));
        assert!(
            u.contains("\nExecStart=/opt/ws/bin/warmstart daemon --config /srv/ws.toml\n"),
            "{u}"
        );
        assert!(u.contains("Type=notify"));
    }

    #[test]
    fn staging_keeps_the_absolute_layout() {
        assert_eq!(
            staged(Some(Path::new("/tmp/d")), Path::new("/usr/bin/x")),
            Path::new("/tmp/d/usr/bin/x")
        );
        assert_eq!(
            staged(None, Path::new("/usr/bin/x")),
            Path::new("/usr/bin/x")
        );
    }
}
