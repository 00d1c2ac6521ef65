//! A synthetic application launch, for tests and the demo: `gen` writes a tree of files;
//! `launch` starts like an application does: lists its directories, then reads some files with
//! read() and maps others with mmap(), with CPU work between the reads, in a fixed order.
//! It prints one JSON line: files, bytes, major faults (all, and the workload's files' alone),
//! elapsed milliseconds.

use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "warmstart-synth",
    about = "Synthetic launch workload for warmstart's tests"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Create the workload's files under DIR.
    Gen {
        dir: PathBuf,
        /// Number of files.
        #[arg(long, default_value_t = 60)]
        files: usize,
        /// Size of each file in KiB.
        #[arg(long, default_value_t = 256)]
        size_kb: usize,
        /// Seed of the file contents.
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// A running application that loads on demand: for each line on stdin, open TRIGGER,
    /// then read and map the files of DIR as `launch` does (a document or level loaded by
    /// an application already running: ClusterFetch's loading scenario).
    Serve {
        dir: PathBuf,
        #[arg(long)]
        trigger: PathBuf,
        #[arg(long, default_value_t = 2000)]
        cpu_us: u64,
    },
    /// Launch: read and map the files of DIR in order, computing between reads.
    Launch {
        dir: PathBuf,
        /// Microseconds of CPU work after each file.
        #[arg(long, default_value_t = 2000)]
        cpu_us: u64,
    },
}

fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

fn gen(dir: &Path, files: usize, size_kb: usize, seed: u64) -> Result<()> {
    let mut st = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut names = Vec::new();
    for sub in ["lib", "share", "plugins"] {
        fs::create_dir_all(dir.join(sub))?;
    }
    for i in 0..files {
        let sub = ["lib", "share", "plugins"][i % 3];
        let rel = format!("{sub}/part{i:04}.bin");
        let mut f = fs::File::create(dir.join(&rel)).with_context(|| format!("creating {rel}"))?;
        let mut buf = vec![0u8; size_kb * 1024];
        for chunk in buf.chunks_mut(8) {
            let v = xorshift(&mut st).to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
        f.write_all(&buf)?;
        f.sync_all()?;
        names.push(rel);
    }
    fs::write(dir.join("manifest"), names.join("\n") + "\n")?;
    Ok(())
}

/// Busy work the optimiser cannot remove.
fn spin(us: u64, acc: &mut u64) {
    let t = Instant::now();
    while t.elapsed().as_micros() < us as u128 {
        for _ in 0..1000 {
            *acc = acc
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
        }
    }
}

fn major_faults() -> u64 {
    // SAFETY: getrusage fills the struct we pass; zeroed is a valid rusage.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: ru is a live, writable rusage.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    ru.ru_majflt as u64
}

fn launch(dir: &Path, cpu_us: u64) -> Result<()> {
    let t0 = Instant::now();
    // The faults of the exec and the loader, apart: a prefetcher that learns of the launch
    // from its exec races them, while the workload's own files are what a plan can cover.
    let at_start = major_faults();
    let manifest = fs::read_to_string(dir.join("manifest"))
        .with_context(|| format!("{}/manifest: run `gen` first", dir.display()))?;
    // Like a loader scanning its search path.
    for sub in ["lib", "share", "plugins"] {
        let _ = fs::read_dir(dir.join(sub))?.count();
    }
    let mut acc = 0u64;
    let (mut files, mut bytes) = (0u64, 0u64);
    for (i, rel) in manifest.lines().filter(|l| !l.is_empty()).enumerate() {
        let p = dir.join(rel);
        let f = fs::File::open(&p).with_context(|| format!("opening {}", p.display()))?;
        let len = f.metadata()?.size() as usize;
        if i % 2 == 0 {
            // read() the first three quarters, as a parser reading a resource.
            let mut buf = vec![0u8; len * 3 / 4];
            (&f).read_exact(&mut buf)?;
            acc = acc.wrapping_add(buf.iter().step_by(512).map(|b| *b as u64).sum::<u64>());
            bytes += buf.len() as u64;
        } else {
            // mmap() and touch every page, as the dynamic loader and code execution do.
            // SAFETY: a private read-only mapping of a file we opened; the slice is only
            // read while the mapping lives, and the file is not truncated meanwhile.
            let data = unsafe {
                let p = libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ,
                    libc::MAP_PRIVATE,
                    std::os::fd::AsRawFd::as_raw_fd(&f),
                    0,
                );
                if p == libc::MAP_FAILED {
                    bail!("mmap {}: {}", rel, std::io::Error::last_os_error());
                }
                std::slice::from_raw_parts(p as *const u8, len)
            };
            for page in data.chunks(4096) {
                acc = acc.wrapping_add(page[0] as u64);
            }
            bytes += len as u64;
            // SAFETY: unmapping exactly the mapping created above; `data` is not used after.
            unsafe { libc::munmap(data.as_ptr() as *mut libc::c_void, len) };
        }
        files += 1;
        spin(cpu_us, &mut acc);
    }
    println!(
        "{{\"files\":{files},\"bytes\":{bytes},\"major_faults\":{},\"workload_major_faults\":{},\"elapsed_ms\":{:.3},\"checksum\":{}}}",
        major_faults(),
        major_faults() - at_start,
        t0.elapsed().as_secs_f64() * 1e3,
        acc % 1000
    );
    Ok(())
}

fn main() -> Result<()> {
    match Cli::parse().cmd {
        Cmd::Gen {
            dir,
            files,
            size_kb,
            seed,
        } => gen(&dir, files, size_kb, seed),
        Cmd::Launch { dir, cpu_us } => launch(&dir, cpu_us),
        Cmd::Serve {
            dir,
            trigger,
            cpu_us,
        } => {
            let mut line = String::new();
            while std::io::stdin().read_line(&mut line)? > 0 {
                let _ = fs::read(&trigger)
                    .with_context(|| format!("reading the trigger {}", trigger.display()))?;
                launch(&dir, cpu_us)?;
                std::io::Write::flush(&mut std::io::stdout())?;
                line.clear();
            }
            Ok(())
        }
    }
}
