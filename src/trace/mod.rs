//! Stage 1, trace: record one launch of a command from stock kernel tracepoints (tracefs) and
//! fanotify, in private tracefs instances that follow the launched process tree. Produces a
//! [`session::TracedLaunch`]: decoded events plus the paths of what the tree opened.

pub mod event;
pub mod format;
pub mod knobs;
pub mod mapped;
pub mod opens;
pub mod ringbuf;
pub mod session;
pub mod tracefs;

use std::path::{Path, PathBuf};

pub use event::{BlockRq, Event, EventKind};
pub use session::{trace_explained, trace_launch, EndReason, TraceConfig, TracedLaunch};

#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("tracefs is not mounted and mounting it at /sys/kernel/tracing failed: {0} (run as root, or mount it: mount -t tracefs nodev /sys/kernel/tracing)")]
    Mount(#[source] std::io::Error),
    #[error("the kernel has no tracepoint {0} (needed to learn launches; check CONFIG_TRACEPOINTS and that tracefs lists it under events/)")]
    MissingEvent(String),
    #[error("tracepoint {event} has no field `{field}` on this kernel")]
    MissingField { event: String, field: String },
    #[error("malformed trace data: {0}")]
    Format(String),
    #[error("the trace lost {lost} events (ring buffer too small for this launch); record again with a larger --buffer-kb (now {buffer_kb})")]
    LostEvents { lost: u64, buffer_kb: u32 },
    #[error("fanotify: {0}")]
    Fanotify(String),
    #[error(transparent)]
    Launch(#[from] crate::launch::LaunchError),
    #[error("this process holds its cap of {0} tracefs instances (`max_instances`); the launch is not traced this time")]
    InstanceCap(usize),
    #[error("interrupted by signal {0}")]
    Interrupted(i32),
}

impl TraceError {
    pub fn io(path: &Path, source: std::io::Error) -> TraceError {
        TraceError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}
