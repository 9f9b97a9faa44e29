//! What a lock's inspection says, in words: its state, its holder, and
//! spans of time as people read them.

use std::fmt::Write;
use std::time::Duration;

use lockcore::{Holder, Inspection, Liveness, WallTime};

/// Whether the lock can be had now, and if not why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Nobody holds it.
    Free,
    /// Its holder is expired or provably dead: the next acquirer breaks it.
    Stale,
    /// Released with a cooldown that has not ended.
    CoolingDown,
    /// Someone holds it.
    Held,
}

impl State {
    pub fn of(inspection: &Inspection, now: WallTime) -> State {
        let cooling = inspection.cooldown_until.is_some_and(|until| until > now);
        match inspection.holder {
            Some(holder) if !holder.stale => State::Held,
            _ if cooling => State::CoolingDown,
            Some(_) => State::Stale,
            None => State::Free,
        }
    }

    /// Whether an acquire would get the lock now.
    pub fn available(self) -> bool {
        matches!(self, State::Free | State::Stale)
    }

    pub fn name(self) -> &'static str {
        match self {
            State::Free => "free",
            State::Stale => "stale",
            State::CoolingDown => "cooling-down",
            State::Held => "held",
        }
    }
}

pub fn liveness_name(liveness: Liveness) -> &'static str {
    match liveness {
        Liveness::Alive => "alive",
        Liveness::Dead => "dead",
        Liveness::Unknown => "unknown",
    }
}

/// The holder's host as text; `None` when its lock names none.
pub fn host(holder: &Holder) -> Option<String> {
    holder.host.map(|host| String::from_utf8_lossy(host.as_bytes()).into_owned())
}

/// The holder, by pid and host: `pid 4242 on web1`, `a process that
/// named no pid`.
pub fn who(holder: &Holder) -> String {
    let mut who = match holder.pid {
        0 => String::from("a process that named no pid"),
        pid => format!("pid {pid}"),
    };
    if let Some(host) = host(holder) {
        let _ = write!(who, " on {host}");
    }
    who
}

/// Who stands in the way, in one line: `held by pid 4242 on web1 for
/// 12s, expires in 18s`, `cooling down for 4s more`, `free`.
pub fn obstacle(inspection: &Inspection, now: WallTime) -> String {
    let mut line = String::new();
    match (State::of(inspection, now), inspection.holder) {
        (State::Held | State::Stale, Some(holder)) => {
            let _ = write!(line, "held by {}", who(&holder));
            if let Some(since) = holder.since {
                let _ = write!(line, " for {}", span(now.since(since)));
            }
            match holder.expires {
                Some(at) if at > now => {
                    let _ = write!(line, ", expires in {}", span(at.since(now)));
                }
                Some(_) => line.push_str(", expired"),
                None => {}
            }
            if holder.stale {
                line.push_str(" (stale: the next acquirer breaks it)");
            }
        }
        (State::CoolingDown, _) => {
            let until = inspection.cooldown_until.unwrap_or(now);
            let _ = write!(line, "cooling down for {} more", span(until.since(now)));
        }
        _ => line.push_str("free"),
    }
    if let Some(queued) = inspection.queue_length.filter(|&n| n > 0) {
        let _ = write!(line, "; {queued} in the queue");
    }
    line
}

/// A span as people read it: `350ms`, `12s`, `4m05s`, `2h03m`, `3d04h`.
pub fn span(d: Duration) -> String {
    let secs = d.as_secs();
    match secs {
        0 => format!("{}ms", d.subsec_millis()),
        1..=59 => format!("{secs}s"),
        60..=3599 => format!("{}m{:02}s", secs / 60, secs % 60),
        3600..=86_399 => format!("{}h{:02}m", secs / 3600, secs / 60 % 60),
        _ => format!("{}d{:02}h", secs / 86_400, secs / 3600 % 24),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_read_as_people_read_them() {
        assert_eq!(span(Duration::from_millis(350)), "350ms");
        assert_eq!(span(Duration::from_secs(12)), "12s");
        assert_eq!(span(Duration::from_secs(245)), "4m05s");
        assert_eq!(span(Duration::from_secs(2 * 3600 + 3 * 60 + 59)), "2h03m");
        assert_eq!(span(Duration::from_secs(3 * 86_400 + 4 * 3600)), "3d04h");
    }
}
