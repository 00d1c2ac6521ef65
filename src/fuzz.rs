//! Entry points for coverage-guided fuzzing (`fuzz/`, cargo-fuzz on nightly) and for the short
//! fuzz run the unit tests make on stable: each decoder of bytes warmstart did not write itself
//! (stored blobs, an exported trace from another machine, tracefs formats and ring-buffer
//! pages, the daemon's configuration, command lines turned into app keys) is fed anything and
//! must return a value or an error. A function here panics only when a property it checks
//! fails; a crash the fuzzer finds becomes a file in `fuzz/regressions/<target>/`, which the
//! unit tests replay.

use crate::app::{lossless, AppKey};
use crate::codec::HEADER_LEN;
use crate::plan::Plan;
use crate::trace::event::Decoder;
use crate::trace::format::{EventFormat, PageHeader};
use crate::trace::ringbuf::parse_page;
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::Path;
use std::sync::OnceLock;

/// A fuzz target's body.
pub type Target = fn(&[u8]);

/// The fuzz targets, by name: the names of `fuzz/fuzz_targets/*.rs` and of the corpus folders.
pub const TARGETS: &[(&str, Target)] = &[
    ("blob", blob),
    ("event_format", event_format),
    ("ring_page", ring_page),
    ("config", config),
    ("app_key", app_key),
];

/// `payload` behind a valid blob header (magic, version, flags, length, checksum), so that
/// the fuzzer reaches inflating, postcard and validation past the checksum.
fn framed(magic: [u8; 4], version: u16, flags: u16, payload: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(HEADER_LEN + payload.len());
    b.extend_from_slice(&magic);
    b.extend_from_slice(&version.to_le_bytes());
    b.extend_from_slice(&flags.to_le_bytes());
    b.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    b.extend_from_slice(&crc32c::crc32c(payload).to_le_bytes());
    b.extend_from_slice(payload);
    b
}

/// A stored plan, a raw run or an exported launch (`emulate --trace FILE`). The first byte
/// chooses: the bytes as they are, or as the payload of a valid plan or export header
/// (deflated or not). A plan that decodes must encode and decode to itself.
pub fn blob(data: &[u8]) {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let flags = u16::from(sel & 1);
    let bytes = match sel >> 1 & 3 {
        0 => rest.to_vec(),
        1 => framed(crate::plan::MAGIC, crate::plan::VERSION, flags, rest),
        2 => framed(*b"WSRR", 3, flags, rest),
        _ => framed(*b"WSEM", 1, flags, rest),
    };
    if let Ok(p) = Plan::decode(&bytes) {
        let _ = p.summary();
        let again = Plan::decode(&p.encode().expect("a decoded plan encodes"));
        assert_eq!(again.as_ref(), Ok(&p), "a plan survives encode and decode");
    }
    let _ = crate::emulate::Export::decode(&bytes);
    let _ = crate::store::decode_raw_run(&bytes);
}

/// The fixtures of this kernel's event formats, parsed once.
fn fixture_formats() -> &'static (Vec<EventFormat>, PageHeader) {
    static F: OnceLock<(Vec<EventFormat>, PageHeader)> = OnceLock::new();
    F.get_or_init(|| {
        macro_rules! fixture {
            ($p:literal) => {
                include_str!(concat!("../tests/fixtures/linux-6.18/", $p))
            };
        }
        let texts = [
            fixture!("formats/filemap/mm_filemap_add_to_page_cache"),
            fixture!("formats/filemap/mm_filemap_fault"),
            fixture!("formats/filemap/mm_filemap_get_pages"),
            fixture!("formats/filemap/mm_filemap_map_pages"),
            fixture!("formats/readahead/page_cache_sync_ra"),
            fixture!("formats/ext4/ext4_load_inode"),
            fixture!("formats/ext4/ext4_ext_load_extent"),
            fixture!("formats/block/block_rq_issue"),
            fixture!("formats/block/block_rq_complete"),
            fixture!("formats/sched/sched_process_exec"),
            fixture!("formats/sched/sched_process_exit"),
            fixture!("formats/sched/sched_process_fork"),
        ];
        let formats = texts
            .iter()
            .map(|t| EventFormat::parse(t).expect("fixture format parses"))
            .collect();
        let hdr = PageHeader::parse(fixture!("header_page")).expect("fixture header parses");
        (formats, hdr)
    })
}

/// An event `format` file and a `header_page` file as tracefs might show them; a format that
/// parses is used to read its fields from the same bytes, and to build a decoder.
pub fn event_format(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(f) = EventFormat::parse(&text) {
        for field in &f.fields {
            let r = crate::trace::format::FieldRef::from(field);
            let _ = (r.uint(data), r.int(data), r.string(data));
        }
        let _ = Decoder::new(std::slice::from_ref(&f));
        // Beside this kernel's formats: a clash of ids or names must be an error, not a panic.
        let mut all = fixture_formats().0.clone();
        all.push(f);
        let _ = Decoder::new(&all);
    }
    let _ = PageHeader::parse(&text);
}

/// A ring-buffer page as `trace_pipe_raw` gives it, decoded with this kernel's header and
/// formats: every record either decodes or is an error.
pub fn ring_page(data: &[u8]) {
    let (formats, hdr) = fixture_formats();
    static DEC: OnceLock<Decoder> = OnceLock::new();
    let dec = DEC.get_or_init(|| Decoder::new(formats).expect("fixture decoder"));
    let _ = parse_page(data, hdr, |ts, rec| {
        if let Ok(Some(e)) = dec.decode(ts, rec) {
            let _ = e.kind.used_pages();
        }
    });
}

/// The daemon's configuration file.
pub fn config(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(c) = crate::daemon::config::Config::parse(&text, "fuzz.toml") {
        let _ = (c.learn_window(), c.idle(), c.timeout());
        let _ = c.manages(Path::new("/usr/bin/true"), &["true".into()]);
    }
}

/// A command line, NUL-separated, turned into an app key; and two names, split at the first
/// NUL, that must keep distinct keys (`lossless` loses no byte).
pub fn app_key(data: &[u8]) {
    let mut parts = data.split(|&b| b == 0);
    let (a, b) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    let (la, lb) = (
        lossless(OsString::from_vec(a.to_vec()).as_os_str()),
        lossless(OsString::from_vec(b.to_vec()).as_os_str()),
    );
    assert!(a == b || la != lb, "{a:?} and {b:?} share the key {la:?}");
    // The executable under a directory that does not exist, so nothing resolves on this
    // machine's files and the key depends on the input only.
    let argv: Vec<OsString> = data
        .split(|&b| b == 0)
        .take(16)
        .map(|s| OsString::from_vec(s.to_vec()))
        .collect();
    let mut exe = OsString::from("/nonexistent-fuzz/");
    exe.push(argv.first().cloned().unwrap_or_default());
    let key = AppKey::for_command(Path::new(&exe), &argv);
    assert!(!key.key.is_empty());
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The short fuzz run on stable: each target over its seed corpus and any regression the
    /// fuzzer found, then over random mutations of the seeds (a fixed seed, so a failure
    /// repeats). The long runs are cargo-fuzz's (`fuzz/README.md`).
    #[test]
    fn every_fuzz_target_survives_its_corpus_and_mutations() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
        let mut rng = fastrand::Rng::with_seed(0x5752_4d53);
        for &(name, target) in TARGETS {
            let mut seeds = Vec::new();
            for dir in ["seeds", "regressions"] {
                let Ok(rd) = std::fs::read_dir(root.join(dir).join(name)) else {
                    continue;
                };
                for e in rd {
                    seeds.push(std::fs::read(e.unwrap().path()).unwrap());
                }
            }
            assert!(!seeds.is_empty(), "no seeds for the fuzz target {name}");
            for s in &seeds {
                target(s);
            }
            for _ in 0..3000 {
                let mut s = seeds[rng.usize(..seeds.len())].clone();
                for _ in 0..rng.usize(1..8) {
                    match rng.u8(..4) {
                        0 if !s.is_empty() => {
                            let i = rng.usize(..s.len());
                            s[i] = rng.u8(..);
                        }
                        1 if !s.is_empty() => {
                            let i = rng.usize(..s.len());
                            s.truncate(i);
                        }
                        2 => {
                            let i = rng.usize(..=s.len());
                            s.insert(i, rng.u8(..));
                        }
                        _ if !s.is_empty() => {
                            let i = rng.usize(..s.len());
                            s[i] ^= 1 << rng.u8(..8);
                        }
                        _ => s.push(rng.u8(..)),
                    }
                }
                target(&s);
            }
        }
    }

    #[test]
    fn lossless_keeps_a_literal_backslash_apart_from_an_escaped_byte() {
        // `c-\xff.sh` spelled out in UTF-8, and the same name with the byte 0xff.
        app_key(b"c-\\xff.sh\0c-\xff.sh");
    }
}
