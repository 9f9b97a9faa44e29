//! Waiting in line: a fair acquisition, in the lock's [`Turnstile`].
//!
//! [`wait_in_line`] takes a ticket, sleeps until its turn comes, and only
//! then tries the lock, waiting for it as [`wait::wait_for`] does if a
//! holder from outside the queue (a peer's tool, a `fair=0` caller) still
//! has it. One loop for the whole wait, so that one deadline, one warning
//! schedule and one cancellation (an error from the wake source's `arm`)
//! cover the time in line and the time at its head alike.
//!
//! [`wait::wait_for`]: crate::wait::wait_for

use crate::clock::MonoTime;
use crate::error::{Contention, Error, HolderSummary};
use crate::turnstile::{Ahead, Place, Ticket, Turnstile, SAFETY_SLICE, STALLED_AFTER_SLICES};
use crate::wait::{Backoff, Wake, WakeSource, Warnings};
use core::time::Duration;

/// The most slices a waiter far back in line sleeps between two looks at
/// the line: the waiter `n` places behind the head looks every `n` slices,
/// up to this many, as long as a line stands still before it is stalled.
const FARTHEST_LOOK: u32 = STALLED_AFTER_SLICES;

/// The longest a waiter in line sleeps between two rounds (each of which
/// asks its wake source's `arm`, and so its caller's cancellation).
pub const LONGEST_SLEEP_IN_LINE: Duration = SAFETY_SLICE.saturating_mul(FARTHEST_LOOK);

/// How an attempt is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Try {
    /// By the head of the line (or by a waiter with no place in it): the
    /// ordinary attempt, which may wait for the lock until its deadline.
    AsHead,
    /// By the waiter just behind a head that has not taken the lock for a
    /// whole slice, or the first that can behind a stalled line: one look,
    /// which leaves nothing behind if it fails.
    Probe,
}

/// Waits in `line` as process `pid`, then for the lock, until `deadline`
/// (`None`: as long as it takes), making attempts with `attempt`. On
/// success, also the ticket whose turn it now holds (`None` if it never
/// got one: the line was full); on failure the place is given up.
/// `holder` says who holds the lock, for a warning or a timeout that
/// finds the caller still in line, where it has made no attempt to learn it.
/// `window`: how long after a turn ends the next head leaves the lock to
/// tools that do not wait in line (`window=`; zero: not at all).
#[allow(clippy::too_many_arguments)]
pub(crate) fn wait_in_line<T>(
    line: &Turnstile,
    pid: i32,
    deadline: Option<MonoTime>,
    wake: &mut dyn WakeSource,
    mut warnings: Option<Warnings<'_>>,
    mut backoff: Backoff,
    window: Duration,
    mut attempt: impl FnMut(Try) -> Result<T, Error>,
    mut holder: impl FnMut() -> Option<HolderSummary>,
) -> Result<(T, Option<Ticket>), Error> {
    let start = MonoTime::now();
    let mut next_warning = warnings.as_ref().map(|w| w.first_due(start));
    let mut ticket = line.take(pid);
    // What the queue looked like, and since when: a wait in which it does
    // not move for a whole slice looks at who stands before it.
    let mut seen = (ticket.map(|t| line.place(t)), start);
    let mut contention = Contention::Queued { ahead: 0, holder: None };
    let leave = |ticket: Option<Ticket>| {
        if let Some(ticket) = ticket {
            line.leave(ticket);
        }
    };
    let mut window_until = None;
    loop {
        if let Err(cancelled) = wake.arm() {
            leave(ticket);
            return Err(cancelled);
        }
        let place = ticket.map(|t| line.place(t));
        let now = MonoTime::now();
        if place != seen.0 {
            seen = (place, now);
        }
        let turn_due = match (ticket, place) {
            (Some(_), Some(Place::Passed)) => {
                // Judged gone while it waited, or the file was rewritten:
                // a new place, looked at after the deadline's check.
                ticket = line.take(pid);
                seen = (ticket.map(|t| line.place(t)), now);
                Some(now)
            }
            (Some(mine), Some(Place::Behind(ahead))) => {
                contention = Contention::Queued { ahead, holder: None };
                // Only the waiter just behind the head must notice a head
                // that does not move within a slice; those further back
                // look less often, each a slice later than the one before
                // it, and wake only for their turn.
                let slice = SAFETY_SLICE * ahead.clamp(1, FARTHEST_LOOK);
                if line.tried_within(2 * SAFETY_SLICE) || line.probed_within(2 * SAFETY_SLICE, Some(mine)) {
                    // The head is at work, waiting for a holder from
                    // outside the line, or a waiter ahead is probing past a
                    // head that is not: that is progress too.
                    seen.1 = now;
                }
                if now.since(seen.1) < slice {
                    Some(seen.1.saturating_add(slice))
                } else {
                    seen.1 = now;
                    match line.unstick(mine) {
                        Ahead::Nobody => continue,
                        Ahead::Waiters(_) => Some(now.saturating_add(SAFETY_SLICE)),
                        Ahead::OnlyTheHead | Ahead::Stalled(_) => match probe(line, mine, &mut attempt) {
                            Ok(value) => {
                                line.seize(mine);
                                return Ok((value, Some(mine)));
                            }
                            Err(Error::Busy(why)) => {
                                contention = telling(contention, why);
                                Some(now.saturating_add(SAFETY_SLICE))
                            }
                            Err(e) => {
                                line.leave(mine);
                                return Err(e);
                            }
                        },
                    }
                }
            }
            // The head, while the window after the last turn is still
            // open to tools outside the line: not yet.
            _ if line.window_open_until(window).is_some_and(|until| now < until) => {
                window_until = line.window_open_until(window);
                None
            }
            // The head, or no place to be had: try the lock itself.
            _ => match try_as_head(line, &mut attempt) {
                Ok(value) => return Ok((value, ticket)),
                Err(Error::Busy(why)) => {
                    contention = telling(contention, why);
                    None
                }
                Err(e) => {
                    leave(ticket);
                    return Err(e);
                }
            },
        };
        let now = MonoTime::now();
        let warning_due = matches!((&warnings, next_warning), (Some(_), Some(due)) if now >= due);
        let timed_out = deadline.is_some_and(|deadline| now >= deadline);
        if let (true, Contention::Queued { ahead, holder: None }) = (warning_due || timed_out, contention) {
            contention = Contention::Queued { ahead, holder: holder() };
        }
        if let (Some(w), Some(due)) = (warnings.as_mut(), next_warning) {
            next_warning = Some(w.give_if_due(due, now, start, &contention));
        }
        if timed_out {
            leave(ticket);
            return Err(Error::Timeout(contention));
        }
        // Sleep until the first of: the turn (or the slice's end), the
        // deadline, the next warning.
        let mut until = match (turn_due, window_until) {
            (Some(due), _) => due,
            // A long window is slept in slices too, for the caller's
            // cancellation.
            (None, Some(due)) => due.min(now.saturating_add(LONGEST_SLEEP_IN_LINE)),
            (None, None) => now.saturating_add(backoff.delay()),
        };
        until = [deadline, next_warning].into_iter().flatten().fold(until, MonoTime::min);
        let timeout = until.remaining_from(now).max(Duration::from_micros(1));
        match (turn_due, ticket) {
            (Some(_), Some(mine)) => {
                // Woken, timed out or interrupted alike: the next round
                // looks at the queue and at the wake source.
                let _ = line.wait(mine, timeout);
            }
            _ if window_until.take().is_some() => crate::sys::sleep(timeout),
            _ => match wake.wait(timeout) {
                Wake::TimedOut => backoff.grow(),
                Wake::Woken => {}
            },
        }
        if ticket.is_none() {
            ticket = line.take(pid);
            seen = (ticket.map(|t| line.place(t)), MonoTime::now());
        }
    }
}

/// What a caller is told stood in its way: the latest, unless that is only
/// the lock's guard, held past an attempt's patience (often just the end of
/// the budget cutting the attempt short), and an earlier look named more.
fn telling(earlier: Contention, latest: Contention) -> Contention {
    match (earlier, latest) {
        (Contention::Held(_) | Contention::CoolingDown { .. }, Contention::GuardHeld) => earlier,
        (Contention::Queued { holder: Some(_), .. }, Contention::GuardHeld) => earlier,
        _ => latest,
    }
}

/// A probe by the owner of `mine`, behind the head, noted in the line first
/// (see [`Turnstile::probing`]).
fn probe<T>(line: &Turnstile, mine: Ticket, attempt: &mut impl FnMut(Try) -> Result<T, Error>) -> Result<T, Error> {
    line.probing(mine);
    attempt(Try::Probe)
}

/// The head's attempt, noted in the line first (see [`Turnstile::trying`]).
fn try_as_head<T>(line: &Turnstile, attempt: &mut impl FnMut(Try) -> Result<T, Error>) -> Result<T, Error> {
    line.trying();
    attempt(Try::AsHead)
}
