//! lockrun's own diagnostics: `tracing` events, written to stderr as
//! `lockrun: warning: …` lines, each one line ([`crate::shown`]).
//!
//! Warnings and errors are always shown (a cleanup that failed must be seen).
//! `LOCKRUN_LOG` asks for more, as a `tracing` filter (`debug`,
//! `lockrun::bpf=trace`, …); then each line also carries the time since
//! lockrun started, which is how the steps of a run's start-up are timed.

use std::fmt;
use std::time::Instant;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The environment variable that widens the log.
pub const ENV: &str = "LOCKRUN_LOG";

/// Install the stderr subscriber. A bad `LOCKRUN_LOG` is reported and the
/// default (warnings) kept: logging never stops a run.
pub fn init() {
    let started = Instant::now();
    let mut refused = None;
    let filter = std::env::var_os(ENV).and_then(|directives| {
        let directives = directives.to_string_lossy().into_owned();
        tracing_subscriber::EnvFilter::try_new(&directives)
            .map_err(|e| refused = Some((directives, e)))
            .ok()
    });
    let builder = tracing_subscriber::fmt().with_writer(std::io::stderr);
    let _ = match filter {
        Some(filter) => builder
            .with_env_filter(filter)
            .event_format(Line {
                since: Some(started),
            })
            .try_init(),
        None => builder
            .with_max_level(Level::WARN)
            .event_format(Line { since: None })
            .try_init(),
    };
    if let Some((directives, e)) = refused {
        tracing::warn!("{ENV}={directives:?} is not a log filter ({e}); showing warnings only");
    }
}

/// `lockrun: warning: message`, or with `LOCKRUN_LOG`
/// `lockrun: debug +1.234 ms: message`.
struct Line {
    since: Option<Instant>,
}

impl<S, N> FormatEvent<S, N> for Line
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut w: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let level = match *event.metadata().level() {
            Level::ERROR => "error",
            Level::WARN => "warning",
            Level::INFO => "info",
            Level::DEBUG => "debug",
            Level::TRACE => "trace",
        };
        match self.since {
            Some(t) => write!(
                w,
                "lockrun: {level} +{:.3} ms: ",
                t.elapsed().as_secs_f64() * 1e3
            )?,
            None => write!(w, "lockrun: {level}: ")?,
        }
        // The fields may name what the run chose: one line, made inert.
        let mut fields = String::new();
        ctx.field_format()
            .format_fields(Writer::new(&mut fields), event)?;
        writeln!(w, "{}", crate::shown::escaped(&fields))
    }
}
